//! The engine wing: GCRA over a [`Clock`](crate::Clock) and a
//! [`Store`](crate::Store), usable alone (no feature needed). Its types are
//! the crate root's (`ratelimit::Limiter`, `ratelimit::Quota`); only
//! [`concurrency`](crate::concurrency) is a public module. Nothing here
//! knows of keys, configuration, HTTP or the fleet.

pub(crate) mod clock;
pub mod concurrency;
pub(crate) mod decision;
pub(crate) mod errors;
pub(crate) mod gcra;
pub(crate) mod limiter;
pub(crate) mod quota;
pub(crate) mod store;
pub(crate) mod sync;
pub(crate) mod units;
// The fleet's sliding-window arithmetic: pure, and read by the
// configuration's checks of `[global]` without the `redis` feature.
#[cfg_attr(not(feature = "redis"), allow(dead_code, unreachable_pub))]
pub(crate) mod window;
