//! Procedural macros for the `ratelimit` crate.
//!
//! The `#[rate_limit(...)]` attribute lands here (issue 4). Until then this
//! crate is intentionally empty so that the workspace layout, lints and CI are
//! in place for it.
