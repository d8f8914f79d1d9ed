//! What the crate's public errors share: their `Debug` is the readable line
//! their `Display` is. `fn main() -> Result<(), Box<dyn Error>>` prints an
//! error it returns through `Debug`, as `.unwrap()` and `.expect()` do, so a
//! struct dump there would be the first thing a new user reads of a typo in
//! a config file (`limits.toml:10:1: profiles.write.brust: unknown field`,
//! not `ConfigError { source_name: "limits.toml", line: Some(10), .. }`).
//! The parts stay available through each error's accessors and `source()`.

/// `Debug` as `Display`, for each listed type.
macro_rules! debug_as_display {
    ($($ty:ty),* $(,)?) => {
        $(
            impl ::std::fmt::Debug for $ty {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    ::std::fmt::Display::fmt(self, f)
                }
            }
        )*
    };
}
pub(crate) use debug_as_display;
