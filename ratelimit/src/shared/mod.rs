//! Leaves the fleet and the runtime both use: networks, TLS and the HTTP
//! client (`net`), metric names and handles (`metrics`, public), the
//! defaults of settings and the setters that build them. They use only the
//! engine.

pub(crate) mod defaults;
#[cfg(any(feature = "axum", feature = "redis", feature = "jwt", feature = "service"))]
pub mod metrics;
pub(crate) mod net;
pub(crate) mod setters;
