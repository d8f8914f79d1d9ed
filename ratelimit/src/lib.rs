//! A GCRA rate limiter for Rust services that face untrusted clients.
//!
//! `ratelimit` decides, per client key, whether a request conforms to a
//! [`Quota`] (a sustained rate and a burst), in tens of nanoseconds, without
//! locks on the hot path, without I/O, and in memory that is bounded however
//! many distinct keys clients invent.
//!
//! ```
//! use ratelimit::{Limiter, MemoryStore, Quota, SystemClock};
//!
//! let limiter = Limiter::new(MemoryStore::default(), SystemClock::default());
//! let quota = Quota::per_second(100).with_burst(20); // also per_minute, per_hour, "600/min".parse()
//!
//! let d = limiter.check(&"user-42", &quota);
//! if d.is_allowed() {
//!     // serve; send d.limit(), d.remaining(), d.reset_after() as headers
//! } else {
//!     // 429 with Retry-After: d.retry_after()
//! }
//! let d = limiter.check_n(&42u64, &quota, 5); // weighted cost
//! # assert!(d.is_allowed());
//! ```
//!
//! # Design
//!
//! * **Algorithm**: GCRA with one stored theoretical arrival time (TAT, `u64`
//!   nanoseconds) per key, exact integer arithmetic (see `docs/engine.md`).
//!   Over any interval of length `d`, a key is admitted at most
//!   `burst + floor(d / T)` units of cost, where `T = period / count`.
//! * **Time**: a [`Clock`] gives monotonic nanoseconds; [`SystemClock`] reads
//!   the TSC through `quanta`; [`ManualClock`] is for tests. A clock that
//!   steps backwards never grants extra capacity, and neither does a decision
//!   made with a slightly older reading than the last one stored.
//! * **State**: a [`Store`] holds the cells; [`MemoryStore`] is a fixed-size,
//!   lock-free table keyed by a seeded 64-bit hash, that evicts only fully
//!   recovered cells and charges new keys to a per-route overflow cell when it
//!   is full of live ones, so a flood of fresh keys is never unlimited.
//! * **Decisions are values**: a [`Decision`] says allowed or denied and
//!   carries what the `RateLimit-*` and `Retry-After` headers need.
//!
//! # Features
//!
//! * `tokio`: [`Limiter::spawn_sweeper`], a background task that drops
//!   recovered cells.
//! * `jwt`: `ratelimit::jwt`, JWT verification with `jsonwebtoken`.
//! * `service`: `ratelimit::service`, an external limit service over HTTP,
//!   cached and fetched off the request path.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
mod clock;
pub mod config;
mod decision;
mod gcra;
#[cfg(feature = "jwt")]
#[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
pub mod jwt;
pub mod key;
mod limiter;
mod quota;
pub mod resolve;
#[cfg(feature = "service")]
#[cfg_attr(docsrs, doc(cfg(feature = "service")))]
pub mod service;
mod store;
mod sync;
pub mod window;

pub use clock::{AnyClock, Clock, ManualClock, SystemClock};
pub use decision::{Decision, Denial};
pub use limiter::{Limiter, DEFAULT_ROUTE};
pub use quota::{Quota, QuotaError};
pub use store::{CellKey, MemoryStore, MemoryStoreBuilder, OverflowPolicy, Placement, Store, StoreConfigError};

/// Rate-limits an async axum handler: see the crate docs' "The attribute".
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use ratelimit_macros::rate_limit;

/// What `#[rate_limit]` expansions call. Not a public API: no stability
/// promise, do not use directly.
#[cfg(feature = "axum")]
#[doc(hidden)]
pub mod __private {
    pub use crate::axum::{Admit, Claim, Header, Ip, Limited, Rule};
    pub use crate::resolve::{Chain, ConfiguredService, DefaultProfile, JwtTier, NamedProfile};
    pub use http::HeaderName;
}
