//! The runtime wing: from a request to a decision. The configuration and
//! its reloads, request keys, verified tokens, the limit service, each
//! route's compiled plan, and the axum, tower and tonic integration. It
//! uses the engine, the shared leaves and the fleet; nothing below uses it.
//! Its public modules are re-exported at the crate root
//! (`ratelimit::config`, `ratelimit::axum`, ...).

#[cfg(feature = "axum")]
pub mod axum;
pub mod claims;
pub mod config;
#[cfg(feature = "jwt")]
pub mod jwt;
pub mod key;
pub(crate) mod limits;
pub(crate) mod plan;
pub mod resolve;
#[cfg(feature = "service")]
pub mod service;
