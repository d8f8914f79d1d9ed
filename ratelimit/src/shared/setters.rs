//! The `with_*` setters of the settings structs, written once: the
//! configuration's sections and the settings of the parts they configure
//! (the limit service's cache, the fleet gate, its Redis client) all build
//! the same way.

/// `with_<field>(value)` for each listed field: sets it, returns `self`.
macro_rules! with {
    ($ty:ty { $($method:ident => $field:ident: $arg:ty $(as $conv:ident)?),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets `", stringify!($field), "`.")]
                #[must_use]
                pub fn $method(mut self, value: $arg) -> Self {
                    self.$field = $crate::shared::setters::with!(@conv value $(, $conv)?);
                    self
                }
            )*
        }
    };
    (@conv $v:ident) => { $v };
    (@conv $v:ident, into) => { $v.into() };
    (@conv $v:ident, some) => { Some($v) };
    (@conv $v:ident, some_into) => { Some($v.into()) };
}
pub(crate) use with;
