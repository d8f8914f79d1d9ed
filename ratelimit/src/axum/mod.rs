//! HTTP integration: `#[rate_limit]` on axum handlers, and a
//! `tower::Layer` that applies rules from the configuration to any `tower`
//! service (feature `axum`).
//!
//! # Where the limiter comes from
//!
//! A [`RateLimit`] is the runtime every limited route shares: the limiter
//! and its store, the running [`Config`] (reloadable), key extraction state,
//! the JWT verifier and the limit service. A `#[rate_limit]` handler finds
//! it, in this order:
//!
//! 1. as the router's state, when the state is the `RateLimit` itself
//!    (`Router::new()....with_state(rate_limit)`): the cheapest, no
//!    allocation per request;
//! 2. installed by [`RateLimit::layer`] on the router (or around it): works
//!    with any state type, and also applies the configuration's `[[rules]]`;
//!    axum boxes each layered route, which costs a few allocations per
//!    request (see `cargo bench --bench http`);
//! 3. in the request's extensions (`.layer(axum::Extension(rate_limit))`).
//!
//! With the layer:
//!
//! ```no_run
//! use axum::{routing::get, Router};
//! use ratelimit::{config::Config, rate_limit, axum::RateLimit};
//! use std::net::SocketAddr;
//!
//! #[rate_limit(key = ip, resolve = [default])]
//! async fn public() -> &'static str {
//!     "hello"
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml_str(r#"
//!     [profiles.standard]
//!     rate = "60/min"
//! "#)?;
//! let rate_limit = RateLimit::from_config(config).await?;
//! let app = Router::new()
//!     .route("/public", get(public))
//!     .layer(rate_limit.layer());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address is what `key = ip` limits by.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! [`RateLimit::layer`] makes the runtime available to the handlers beneath
//! it (as a task-local of the request's future, not an extension, whose
//! insertion would allocate) and applies the configuration's `[[rules]]` to
//! every request it sees. A service beneath it that moves the request to
//! another task (a `tower::buffer`) loses the task-local; use the state or an
//! extension there.
//!
//! A `#[rate_limit]` route reached with none of the three answers **500** with a
//! problem+json body naming the route, logs the misconfiguration once, and
//! counts it in `ratelimit_missing_limiter_total`: it is never served
//! unlimited.
//!
//! # Responses
//!
//! Allowed and rejected responses carry `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Reset` (or the structured
//! `RateLimit-Policy` and `RateLimit` of
//! draft-ietf-httpapi-ratelimit-headers-10, or both, or none:
//! [`HeaderStyle`](crate::config::HeaderStyle), `[headers] style`). A
//! rejection is a 429 with `Retry-After` (whole seconds, rounded up, at least
//! 1, never earlier than the structured `t`) and an
//! `application/problem+json` body (`[responses]`), by default the draft's
//! `quota-exceeded` problem type with `violated-policies`. When a config rule
//! and a handler's attribute both limit a request, the draft-06 triple
//! reports the tighter of the two and the structured fields list both. See
//! `docs/http.md`.
//!
//! # Observability
//!
//! `tracing` events (target `ratelimit`) for rejections and
//! misconfigurations, at most one per second per kind with a count of those
//! suppressed; `metrics` counters [`observe::ALLOWED`],
//! [`observe::REJECTED`], [`observe::SHADOW_REJECTED`] and the histogram
//! [`observe::RETRY_AFTER`], labelled by `route` and `tier` (the profile, or
//! `custom`), never by client.

mod error;
#[cfg(feature = "redis")]
mod gate;
mod handler;
mod layer;
pub mod observe;
mod report;
mod respond;
mod route;
mod runtime;

use std::sync::Arc;

/// The key sources, now in [`crate::key`] (re-exported here for code written
/// against their old place).
pub use crate::key::{Claim, Header, Ip, KeyContext, KeySource};
pub use error::SetupError;
pub use handler::{Admit, Limited, Rule};
pub use layer::{LimitBody, RateLimitLayer, RateLimitService, ResponseFuture};
pub use respond::{Outcome, RATELIMIT, RATELIMIT_LIMIT, RATELIMIT_POLICY, RATELIMIT_REMAINING, RATELIMIT_RESET};
pub use route::{route_id, RouteSpec};

use crate::config::{Config, ConfigError};
use crate::jwt::JwtVerifier;
use crate::{AnyClock, Limiter, MemoryStore};

/// The rate-limiting runtime of a service: see the [module docs](self).
/// Cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct RateLimit {
    inner: Arc<runtime::Runtime>,
}

impl RateLimit {
    /// Builds the runtime from a configuration with the system clock: the
    /// store from `[store]` (and its sweeper task), the JWT verifier from
    /// `[jwt]`, the limit service from `[service]`. Needs a tokio runtime.
    pub async fn from_config(config: Config) -> Result<RateLimit, SetupError> {
        RateLimit::builder(config).build().await
    }

    /// A builder, to choose the clock or supply a verifier.
    pub fn builder(config: Config) -> RateLimitBuilder {
        RateLimitBuilder {
            config,
            clock: AnyClock::default(),
            jwt: None,
        }
    }

    /// The layer to put on a router (or any `tower` stack): installs this
    /// runtime for `#[rate_limit]` handlers and applies `[[rules]]`.
    pub fn layer(&self) -> RateLimitLayer {
        RateLimitLayer { rt: self.clone() }
    }

    /// The engine underneath (for `sweep`, `store().len()`, ...).
    pub fn limiter(&self) -> &Limiter<MemoryStore, AnyClock> {
        &self.inner.limiter
    }

    /// The token verifier, when `[jwt]` names a key source or the builder
    /// was given one (for monitoring: [`JwtVerifier::signature_checks`],
    /// [`JwtVerifier::jwks_fetches`]).
    pub fn jwt_verifier(&self) -> Option<&JwtVerifier> {
        self.inner.jwt.as_ref()
    }

    /// The fleet-wide gate, when `[global]` is configured (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn gate(&self) -> Option<&crate::global::FleetGate> {
        self.inner.gate.as_deref()
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&*self.inner.config.load())
    }

    /// Replaces the running configuration: profiles, route overrides,
    /// rules, header style and response body take effect for the next
    /// request, and every client keeps its state (a tier change keeps the
    /// client's TAT), and so do `[ip]` (trusted proxies, prefixes). The
    /// store (`[store]`), header-key tracking (`[header_keys]`), the verifier
    /// (`[jwt]` keys) and the limit service (`[service]`) are built once and
    /// keep their settings until restart.
    pub fn reload(&self, config: Config) {
        self.inner.reload(config);
    }

    /// Parses the configuration file at `path` and, if it is valid, swaps it
    /// in (see [`reload`](Self::reload)); on error the running configuration
    /// stays.
    pub fn reload_file(&self, path: impl AsRef<std::path::Path>) -> Result<(), ConfigError> {
        self.reload(Config::from_file(path)?);
        Ok(())
    }
}

/// Builds a [`RateLimit`].
#[derive(Debug)]
pub struct RateLimitBuilder {
    config: Config,
    clock: AnyClock,
    jwt: Option<JwtVerifier>,
}

impl RateLimitBuilder {
    /// The clock (a [`ManualClock`](crate::ManualClock) in tests). With a
    /// manual clock no sweeper task is started; call
    /// `rate_limit.limiter().sweep()` yourself.
    #[must_use]
    pub fn clock(mut self, clock: impl Into<AnyClock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Verifies tokens with this verifier instead of building one from
    /// `[jwt]`.
    #[must_use]
    pub fn jwt_verifier(mut self, verifier: JwtVerifier) -> Self {
        self.jwt = Some(verifier);
        self
    }

    /// Builds the runtime (needs a tokio runtime).
    pub async fn build(self) -> Result<RateLimit, SetupError> {
        let sweep = matches!(self.clock, AnyClock::System(_));
        let rt = runtime::Runtime::build(self.config, self.clock, self.jwt, sweep).await?;
        Ok(RateLimit { inner: Arc::new(rt) })
    }
}
