//! Source positions, from the TOML parser's spans: where each key and value
//! of the document is, so that an error found after parsing (an unknown
//! profile, a bad rule path) points at the real place, whether the key is
//! under a `[table]` header, in an inline table, a dotted key or a
//! `[[rules]]` entry.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml_parser::parser::{Event, EventKind};

/// One step of a field's path: a key, or an index in an array of tables.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The path of a field in the document, as errors name it:
/// `routes.users.get.profile`, `rules[1].key`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct FieldPath(Vec<Seg>);

impl FieldPath {
    /// The path of `key` inside this one.
    pub(super) fn key(&self, key: &str) -> FieldPath {
        let mut path = self.clone();
        path.0.push(Seg::Key(key.to_owned()));
        path
    }

    /// The path of the `index`-th entry of this array.
    pub(super) fn index(&self, index: usize) -> FieldPath {
        let mut path = self.clone();
        path.0.push(Seg::Index(index));
        path
    }
}

/// `FieldPath::default().key("a")`, shorter.
pub(super) fn field(key: &str) -> FieldPath {
    FieldPath::default().key(key)
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if i == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Where one field is: its key (none for an entry of an array) and its value
/// (for a `[table]`, the header; for an entry of `[[array]]`, its header).
#[derive(Debug)]
struct Entry {
    path: FieldPath,
    key: Option<Range<usize>>,
    value: Range<usize>,
}

/// The spans of every key and table of a parsed document.
#[derive(Debug, Default)]
pub(super) struct Spans {
    entries: Vec<Entry>,
}

impl Spans {
    /// Indexes the document's spans.
    pub(super) fn new(doc: &DeTable<'_>) -> Spans {
        let mut spans = Spans::default();
        spans.walk_table(doc, &FieldPath::default());
        spans
    }

    fn walk_table(&mut self, table: &DeTable<'_>, at: &FieldPath) {
        for (key, value) in table.iter() {
            let path = at.key(key.get_ref());
            self.entries.push(Entry {
                path: path.clone(),
                key: Some(key.span()),
                value: value.span(),
            });
            self.walk_value(value.get_ref(), &path);
        }
    }

    fn walk_value(&mut self, value: &DeValue<'_>, path: &FieldPath) {
        match value {
            DeValue::Table(t) => self.walk_table(t, path),
            // Only tables in arrays get an entry of their own: an error on a
            // plain array (`trusted_proxies`) names the array.
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let DeValue::Table(t) = item.get_ref() {
                        let path = path.index(i);
                        self.entries.push(Entry {
                            path: path.clone(),
                            key: None,
                            value: item.span(),
                        });
                        self.walk_table(t, &path);
                    }
                }
            }
            _ => {}
        }
    }

    /// Where the field starts: its key, or for an entry of an array of
    /// tables, its header. `None` for a field not in the document (a
    /// default, or one an environment override added).
    pub(super) fn start_of(&self, path: &FieldPath) -> Option<usize> {
        let entry = self.entries.iter().find(|e| &e.path == path)?;
        Some(entry.key.as_ref().unwrap_or(&entry.value).start)
    }

    /// The innermost field whose key or value holds byte `offset`: the field
    /// a deserialization error at `offset` is about.
    pub(super) fn field_at(&self, offset: usize) -> Option<&FieldPath> {
        self.entries
            .iter()
            .filter(|e| e.key.as_ref().is_some_and(|k| holds(k, offset)) || holds(&e.value, offset))
            .max_by_key(|e| e.path.0.len())
            .map(|e| &e.path)
    }
}

/// `offset` is inside `span`, or at an empty span.
fn holds(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// The field a syntax error at byte `offset` is in, from the parser's event
/// stream (the document did not parse, so there is no tree to ask): the
/// table header being read, or the key of the key/value pair, inside the
/// table and inline tables around it.
pub(super) fn syntax_field(text: &str, offset: usize) -> Option<String> {
    let source = toml_parser::Source::new(text);
    let tokens = source.lex().into_vec();
    let mut events: Vec<Event> = Vec::new();
    toml_parser::parser::parse_document(&tokens, &mut events, &mut ());

    let decode = |event: &Event| -> String {
        let mut key: Cow<'_, str> = Cow::Borrowed("");
        if let Some(raw) = source.get(event) {
            raw.decode_key(&mut key, &mut ());
        }
        key.into_owned()
    };
    // The current `[table]` (with its index for `[[array]]` entries), the
    // header being read, the keys of the pair being read, and the tables of
    // the inline tables open around it.
    let mut table = FieldPath::default();
    let mut header: Option<(bool, Vec<String>)> = None;
    let mut keys: Vec<String> = Vec::new();
    let mut pair: Option<FieldPath> = None;
    let mut inline: Vec<FieldPath> = Vec::new();
    let mut array_entries: HashMap<String, usize> = HashMap::new();
    // The events before the error, and a key starting at it (a duplicate
    // key is reported at the key).
    let before = |e: &&Event| {
        let start = e.span().start();
        start < offset || (start == offset && e.kind() == EventKind::SimpleKey)
    };
    for event in events.iter().take_while(before) {
        let base = || inline.last().unwrap_or(&table).clone();
        match event.kind() {
            EventKind::StdTableOpen | EventKind::ArrayTableOpen => {
                header = Some((event.kind() == EventKind::ArrayTableOpen, Vec::new()));
                (keys, pair, inline) = (Vec::new(), None, Vec::new());
            }
            EventKind::SimpleKey => match &mut header {
                Some((_, segments)) => segments.push(decode(event)),
                None => keys.push(decode(event)),
            },
            EventKind::StdTableClose | EventKind::ArrayTableClose => {
                if let Some((is_array, segments)) = header.take() {
                    table = segments.iter().fold(FieldPath::default(), |p, k| p.key(k));
                    if is_array {
                        let seen = array_entries.entry(table.to_string()).or_default();
                        table = table.index(*seen);
                        *seen += 1;
                    }
                }
            }
            EventKind::KeyValSep => {
                pair = Some(keys.drain(..).fold(base(), |p, k| p.key(&k)));
            }
            EventKind::InlineTableOpen => inline.push(pair.clone().unwrap_or_else(base)),
            EventKind::InlineTableClose => pair = inline.pop(),
            EventKind::ValueSep if !inline.is_empty() => (keys, pair) = (Vec::new(), None),
            EventKind::Newline if inline.is_empty() => (keys, pair) = (Vec::new(), None),
            _ => {}
        }
    }
    let path = match (header, pair) {
        (Some((_, segments)), _) => segments.iter().fold(FieldPath::default(), |p, k| p.key(k)),
        (None, Some(pair)) => pair,
        (None, None) => keys
            .iter()
            .fold(inline.last().unwrap_or(&table).clone(), |p, k| p.key(k)),
    };
    let path = path.to_string();
    (!path.is_empty()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(text: &str) -> Spans {
        Spans::new(DeTable::parse(text).expect("valid TOML").get_ref())
    }

    #[test]
    fn fields_and_positions_under_headers() {
        let text = "a = 1\n[profiles.std]\nrate = \"x\"\n[routes.\"users.get\"]\nprofile = \"p\"\n";
        let s = spans(text);
        let at = |offset| s.field_at(offset).map(ToString::to_string);
        assert_eq!(at(0).as_deref(), Some("a"));
        assert_eq!(at(text.find("\"x\"").unwrap()).as_deref(), Some("profiles.std.rate"));
        assert_eq!(
            at(text.find("\"p\"").unwrap()).as_deref(),
            Some("routes.users.get.profile")
        );
        let profile = field("routes").key("users.get").key("profile");
        assert_eq!(s.start_of(&profile), text.find("profile ="));
        assert_eq!(s.start_of(&field("nope")), None);
    }

    #[test]
    fn inline_tables_dotted_keys_and_arrays_of_tables() {
        let text = "profiles = { a = { rate = \"x\" } }\nroutes.r.cost = 2\n[[rules]]\nname = \"a\"\n[[rules]]\nname = \"b\"\n";
        let s = spans(text);
        let rate = field("profiles").key("a").key("rate");
        assert_eq!(s.start_of(&rate), text.find("rate"));
        assert_eq!(s.start_of(&field("routes").key("r").key("cost")), text.find("cost"));
        let second = field("rules").index(1);
        assert_eq!(s.start_of(&second.key("name")), text.rfind("name"));
        assert_eq!(s.start_of(&second), text.rfind("[[rules]]"));
        assert_eq!(
            s.field_at(text.rfind("\"b\"").unwrap())
                .map(ToString::to_string)
                .as_deref(),
            Some("rules[1].name")
        );
        assert_eq!(
            s.field_at(text.find("\"x\"").unwrap())
                .map(ToString::to_string)
                .as_deref(),
            Some("profiles.a.rate")
        );
    }

    #[test]
    fn syntax_errors_name_the_header_or_key() {
        assert_eq!(
            syntax_field("[profiles.a\nrate = 1\n", 11).as_deref(),
            Some("profiles.a")
        );
        assert_eq!(syntax_field("[p]\nx = [1,\n", 11).as_deref(), Some("p.x"));
        assert_eq!(syntax_field("[[r]]\n[[r]]\nx = \n", 16).as_deref(), Some("r[1].x"));
        assert_eq!(syntax_field("t = { a = 1, b = }\n", 17).as_deref(), Some("t.b"));
        assert_eq!(syntax_field("", 0), None);
    }
}
