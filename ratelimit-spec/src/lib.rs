//! The rule language of `ratelimit`: who is limited ([`KeyKind`]), how much
//! ([`Step`]s of a resolver chain), a route's name and its cost, described
//! once, with one validator and one set of errors.
//!
//! Two surfaces spell the same language:
//!
//! | | attribute (`#[rate_limit(...)]`) | configuration (`[[rules]]`) |
//! |---|---|---|
//! | key | `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route`, `custom(path::To::Type)` | `"ip"`, `"header:x-api-key"`, `"jwt_claim:sub"`, `"route"`, `"custom:<name>"` |
//! | steps | `jwt`, `service`, `profile("standard")`, `default` | `"jwt"`, `"service"`, `"profile:standard"`, `"default"` |
//! | name | `name = "users.get"` | `name = "users.get"` |
//! | cost | `cost = 5` | `cost = 5` |
//! | shadow | `shadow` | `shadow = true` |
//!
//! Each surface only splits its syntax into a kind and an optional argument
//! (`header("x")` and `"header:x"` both become `("header", Some("x"))`) and
//! calls [`key`] or [`step`]; everything else — which kinds exist, what their
//! arguments may contain, how a chain must be shaped — is decided here, so the
//! two cannot disagree. [`Error`] renders itself in the spelling of the
//! surface that reported it ([`Error::describe`]).
//!
//! This crate has no dependencies: the proc-macro crate and the runtime crate
//! both build on it. It is not a stable API of its own; use it through
//! `ratelimit`.
//!
//! ```
//! use ratelimit_spec::{key, key_text, step_text, check_chain, KeyKind, Step};
//!
//! // The attribute's `header("X-Api-Key")` and the config's "header:X-Api-Key":
//! assert_eq!(key("header", Some("X-Api-Key")), key_text("header:X-Api-Key"));
//! assert_eq!(key_text("header:X-Api-Key").unwrap(), KeyKind::Header("x-api-key".into()));
//!
//! let chain = ["jwt", "profile:standard", "default"].map(|s| step_text(s).unwrap());
//! assert_eq!(chain[1], Step::Profile("standard".into()));
//! assert!(check_chain(&chain).is_empty());
//! assert!(!check_chain(&[Step::Default, Step::Jwt]).is_empty());
//! ```

mod costs;
mod error;
mod keys;
mod names;
mod steps;
mod vocabulary;

pub use costs::{cost, cost_text, response_bytes, unknown_cost, Cost, COST_KINDS, DEFAULT_COST};
pub use error::{expected_keys, expected_steps, Error, Surface};
pub use keys::{key, key_takes_argument, key_text};
pub use names::{claim_path, custom_name, header_name, route_name};
pub use steps::{check_chain, check_partial_chain, empty_chain, reachable, step, step_takes_argument, step_text};
pub use vocabulary::{KeyKind, Step, KEY_KINDS, MAX_CUSTOM_NAME, MAX_HEADER_NAME, STEPS};
