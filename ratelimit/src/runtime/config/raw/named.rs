//! Naming the field of a value's error when a configuration is embedded.
//!
//! Read from its own text, a configuration's errors name their field from
//! the parser's spans (`super::spans`). Embedded in another document, the
//! outer deserializer locates a value's error (`toml` gives the value's
//! line and column) but does not name the field. [`Named`] wraps the outer
//! deserializer and keeps the path of the value being read; when a field
//! deserializer of `super::fields` refuses a value (it marks its error with
//! [`fresh`]), the error is renamed `path: message` right there, before the
//! outer deserializer attaches the value's position. Errors of the outer
//! deserializer itself (an unknown field, a wrong type) pass unchanged, with
//! the position it gave them.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::spans::FieldPath;

thread_local! {
    /// A field deserializer has just refused a value, and its error has not
    /// been named yet.
    static FRESH: Cell<bool> = const { Cell::new(false) };
}

/// The error a field deserializer returns for a value it refuses.
pub(super) fn fresh<E: de::Error>(message: impl fmt::Display) -> E {
    FRESH.with(|f| f.set(true));
    E::custom(message)
}

/// Forgets a mark left by an earlier read (one without [`Named`]).
pub(super) fn reset() {
    FRESH.with(|f| f.set(false));
}

/// A fresh error, named `path: message`; any other error as it is.
fn name<E: de::Error>(e: E, path: &FieldPath) -> E {
    if FRESH.with(|f| f.replace(false)) {
        let message = e.to_string();
        E::custom(format!("{path}: {}", message.trim_end()))
    } else {
        e
    }
}

/// Where a map's key is written while it is read.
type KeySlot = Rc<RefCell<Option<String>>>;

/// A deserializer that tracks the path of what it reads.
pub(super) struct Named<D> {
    de: D,
    path: FieldPath,
    key: Option<KeySlot>,
}

impl<D> Named<D> {
    /// The document's root.
    pub(super) fn root(de: D) -> Named<D> {
        Named {
            de,
            path: FieldPath::default(),
            key: None,
        }
    }
}

struct Wrap<V> {
    inner: V,
    path: FieldPath,
    key: Option<KeySlot>,
}

impl<V> Wrap<V> {
    fn record(&self, key: &str) {
        if let Some(slot) = &self.key {
            *slot.borrow_mut() = Some(key.to_owned());
        }
    }
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                let visitor = Wrap { inner: visitor, path: self.path, key: self.key };
                self.de.$method($($arg,)* visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Named<D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! pass {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    pass! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.record(v);
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.record(v);
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.record(&v);
        self.inner.visit_string(v)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.inner.visit_some(Named {
            de: d,
            path: self.path,
            key: None,
        })
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.inner.visit_newtype_struct(Named {
            de: d,
            path: self.path,
            key: None,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(NamedSeq {
            seq,
            path: self.path,
            index: 0,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(NamedMap {
            map,
            path: self.path,
            key: Rc::default(),
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A value's seed: reads it at `path`, naming a fresh error.
struct Seed<S> {
    seed: S,
    path: FieldPath,
    key: Option<KeySlot>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let path = self.path.clone();
        let named = Named {
            de: d,
            path: self.path,
            key: self.key,
        };
        self.seed.deserialize(named).map_err(|e| name(e, &path))
    }
}

struct NamedSeq<A> {
    seq: A,
    path: FieldPath,
    index: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for NamedSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        let path = self.path.index(self.index);
        self.index += 1;
        self.seq.next_element_seed(Seed { seed, path, key: None })
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

struct NamedMap<A> {
    map: A,
    path: FieldPath,
    key: KeySlot,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for NamedMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        *self.key.borrow_mut() = None;
        self.map.next_key_seed(Seed {
            seed,
            path: self.path.clone(),
            key: Some(Rc::clone(&self.key)),
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        let path = match self.key.borrow_mut().take() {
            Some(key) => self.path.key(&key),
            None => self.path.clone(),
        };
        self.map.next_value_seed(Seed { seed, path, key: None })
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}
