//! The `#[rate_limit]` attribute of the `ratelimit` crate (use it through
//! `ratelimit::rate_limit`).

use proc_macro::TokenStream;

/// See `ratelimit::rate_limit`.
#[proc_macro_attribute]
pub fn rate_limit(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
