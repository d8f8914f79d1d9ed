//! The `#[rate_limit]` attribute of the `ratelimit` crate. Use it through
//! `ratelimit::rate_limit`, whose documentation has the grammar; this crate
//! only parses, checks and expands.
//!
//! Parsing (`parse.rs`) collects every error in the arguments, each on the
//! offending token; checks of the function and of stacked attributes
//! (`check.rs`) add theirs; when there is any, the function is emitted
//! unchanged after the errors, so the rest of the crate and the IDE keep
//! working. Otherwise `expand.rs` writes the rule types and the wrapper.

mod check;
#[cfg(test)]
mod differential;
mod expand;
mod parse;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Rate-limits an async axum handler. See `ratelimit::rate_limit`.
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rate_limit(args.into(), item.into()).into()
}
