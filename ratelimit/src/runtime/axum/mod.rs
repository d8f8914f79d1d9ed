//! HTTP integration: `#[rate_limit]` on axum handlers, and a
//! `tower::Layer` that applies rules from the configuration to any `tower`
//! service (feature `axum`).
//!
//! # Where the limiter comes from
//!
//! A [`RateLimit`] is the runtime every limited route shares: the limiter
//! and its store, the running [`Config`] (reloadable), key extraction state,
//! the JWT verifier and the limit service. A `#[rate_limit]` handler finds
//! it in one of two places:
//!
//! - **the router's state** (the default), through axum's `FromRef`: the
//!   state is the `RateLimit` itself (`.with_state(rate_limit)`: borrowed,
//!   nothing written per request), or the application's state holds it
//!   (`#[derive(FromRef)]` on an `AppState` with a `RateLimit` field: one
//!   reference count taken and dropped per request). A router whose state
//!   holds none does not compile, with an error that names the fixes;
//! - **the layer**, with `layer` in the attribute
//!   (`#[rate_limit(..., layer)]`): the one [`RateLimit::layer`] installed on
//!   the router or around it (else a `RateLimit` in the request's
//!   extensions). It works with any state type and also applies the
//!   configuration's `[[rules]]`; axum boxes each layered route, which costs
//!   a few allocations per request (see `cargo bench --bench http`).
//!
//! With the layer:
//!
//! ```no_run
//! use axum::{routing::get, Router};
//! use ratelimit::{config::Config, rate_limit, axum::RateLimit};
//! use std::net::SocketAddr;
//!
//! #[rate_limit(key = ip, resolve = [default], layer)]
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
//! A `#[rate_limit(..., layer)]` route reached with neither answers **500** with a
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
//! `application/problem+json` body (`[responses]`; or what a hook of the
//! application's returns, [`RateLimitBuilder::rejection`] and
//! `#[rate_limit(..., reject = f)]`, see [`Rejection`]), by default the draft's
//! `quota-exceeded` problem type with `violated-policies`. When a config rule
//! and a handler's attribute both limit a request, the draft-06 triple
//! reports the tighter of the two and the structured fields list both. See
//! `docs/http.md`.
//!
//! A refused gRPC call (`content-type: application/grpc...`, a `tonic`
//! server behind the layer, say) gets gRPC's shape instead of the 429: a
//! Trailers-Only response with `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a
//! `google.rpc.RetryInfo` in `grpc-status-details-bin`, `retry-after` and
//! the rate-limit headers as metadata ([`Rejection::is_grpc`],
//! [`Rejection::grpc_response`]). With the `tonic` feature, `ip` keys read
//! the peer address tonic's server gives.
//! `tonic::transport::Server::builder().layer(rate_limit.layer())` puts it
//! in front of every service of a tonic server (`docs/http.md`, gRPC).
//!
//! # Charging by size, and probes
//!
//! `cost = response_bytes(per = N)` (`cost = "response_bytes:N"` in a
//! `[[rules]]` entry) reserves one unit before the handler runs and settles
//! the request at one unit per started `N` bytes once the response body has
//! been sent (or dropped part way: a client that hangs up pays for what was
//! sent). `[responses] probe_methods = ["HEAD"]` makes the limiter answer a
//! `HEAD` on a limited route itself, with what a request would get (204 and
//! the headers, or the 429), charging nothing:
//!
//! ```
//! use axum::{body::Body, http::{Method, Request, StatusCode}, routing::get, Router};
//! use ratelimit::{axum::RateLimit, config::Config, key::PeerAddr, rate_limit};
//! use tower_service::Service;
//!
//! #[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = 1024))]
//! async fn download() -> Vec<u8> {
//!     vec![0; 10 * 1024] // settled at 10 units once sent
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml_str(r#"
//!     default_profile = "kib"
//!     [profiles.kib]
//!     rate = "100/h"
//!     [responses]
//!     probe_methods = ["HEAD"]
//! "#)?;
//! let rate_limit = RateLimit::from_config(config).await?;
//! let app = Router::new().route("/download", get(download)).with_state(rate_limit);
//! let request = |method: Method| {
//!     let mut r = Request::builder().method(method).uri("/download").body(Body::empty()).unwrap();
//!     r.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
//!     r
//! };
//! // Reading the body to its end settles it.
//! let served = app.clone().call(request(Method::GET)).await?;
//! assert_eq!(served.headers()["ratelimit-remaining"], "99", "one unit reserved");
//! axum::body::to_bytes(served.into_body(), usize::MAX).await?;
//! // The probe: 100 - 10 = 90 left, 89 after a request; nothing spent.
//! let probe = app.clone().call(request(Method::HEAD)).await?;
//! assert_eq!(probe.status(), StatusCode::NO_CONTENT);
//! assert_eq!(probe.headers()["ratelimit-remaining"], "89");
//! # Ok(()) }
//! ```
//!
//! # Observability
//!
//! `tracing` events (target `ratelimit`) for rejections and
//! misconfigurations, at most one per second per kind with a count of those
//! suppressed; `metrics` series ([`crate::metrics`] lists every one):
//! decisions ([`crate::metrics::DECISIONS`], by `route`, `tier` and
//! `decision`), waits ([`crate::metrics::RETRY_AFTER`]), the store's
//! occupancy, the verifier's keys and the limit service's cache, never
//! labelled by client.

mod charge;
pub mod command;
mod config_cache;
mod error;
#[cfg(feature = "redis")]
mod fleet;
mod gauges;
mod grpc;
pub(crate) mod handler;
mod in_flight;
mod layer;
mod log_gate;
mod meter;
mod observer;
mod outcome;
mod parts;
mod permits;
pub(crate) mod registry;
pub(crate) mod reject;
mod reload;
mod route;
mod rules;
mod runtime;
mod series;
mod setup;

/// What `#[rate_limit]` expansions call. Not a public API: no stability
/// promise, do not use directly.
#[doc(hidden)]
pub mod __private {
    pub use crate::runtime::axum::handler::{Admit, InState, Limited, Report, RouterState, Rule, Rules, ViaLayer};
    pub use crate::runtime::axum::registry::RouteSlot;
    pub use crate::runtime::axum::reject::call_reject;
    pub use crate::runtime::axum::series::RouteSeries;
    pub use crate::runtime::axum::{AttributeRoute, Rejection};
    pub use ::axum::response::{IntoResponse, Response};
    pub use ::inventory;
    // Every key source, by the names the spec gives them
    // (`KeyKind::runtime`): a new kind needs no edit here.
    pub use crate::runtime::key::*;
    /// `jwt_claim("path")`: the attribute's paths are `&'static str`.
    pub type Claim = crate::runtime::key::Claim<&'static str>;
    // What a rule needs of a cargo feature (`requires_jwt! { key }`): empty
    // with the feature, a compile error naming it without.
    pub use crate::{__rate_limit_requires_jwt as requires_jwt, __rate_limit_requires_service as requires_service};
}

use std::sync::Arc;

pub use charge::Charge;
pub use error::SetupError;
pub use layer::{RateLimitLayer, RateLimitService, ResponseFuture};
pub use outcome::{Outcome, RATELIMIT, RATELIMIT_LIMIT, RATELIMIT_POLICY, RATELIMIT_REMAINING, RATELIMIT_RESET};
pub use registry::AttributeRoute;
pub use reject::Rejection;

use crate::runtime::config::{Config, ConfigError};
#[cfg(feature = "jwt")]
use crate::runtime::jwt::JwtVerifier;
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
            extras: setup::Extras::default(),
            errors: Vec::new(),
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
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub fn jwt_verifier(&self) -> Option<&JwtVerifier> {
        self.inner.tokens.verifier()
    }

    /// The fleet-wide gate, when `[global]` is configured (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn gate(&self) -> Option<&crate::fleet::FleetGate> {
        self.inner.fleet.gate()
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
    ///
    /// A configuration whose `"custom:<name>"` rule keys name an extractor
    /// the builder was not given is refused, and the running one stays.
    ///
    /// Returns what changed ([`ConfigChanges`](crate::config::ConfigChanges):
    /// profiles, routes, rules, and the sections that only change at
    /// restart), for the log line an operator reads after a reload.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::axum::RateLimit;
    /// use ratelimit::config::Config;
    ///
    /// let v1 = Config::from_toml_str("[profiles.std]\nrate = \"10/s\"\n").unwrap();
    /// let rate_limit = RateLimit::from_config(v1).await.unwrap();
    /// let v2 = Config::from_toml_str("[profiles.std]\nrate = \"20/s\"\n").unwrap();
    /// let changes = rate_limit.reload(v2).unwrap();
    /// assert_eq!(changes.to_string(), "profile \"std\": 10/s (burst 10) -> 20/s (burst 20)");
    /// # }
    /// ```
    pub fn reload(&self, config: Config) -> Result<crate::runtime::config::ConfigChanges, ConfigError> {
        self.inner.reload(config, "<config>")
    }

    /// Sets the metrics that are not per request (the store's occupancy and
    /// counters, the limit-service cache's, the verifier's keys: see
    /// [`crate::metrics`]) from their current values. The runtime does this
    /// every second by itself; call this for this instant's values (a test,
    /// a shutdown hook). Not on every scrape an untrusted client can send:
    /// it locks the limit-service cache's shards in turn.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::axum::RateLimit;
    /// use ratelimit::config::Config;
    ///
    /// let config = Config::from_toml_str("[profiles.default]\nrate = \"10/s\"\n").unwrap();
    /// let rate_limit = RateLimit::from_config(config).await.unwrap();
    /// rate_limit.publish_metrics(); // with no recorder installed: nothing to do
    /// # }
    /// ```
    pub fn publish_metrics(&self) {
        gauges::publish(&self.inner);
    }

    /// Parses the configuration file at `path` and, if it is valid, swaps it
    /// in (see [`reload`](Self::reload)); on error the running configuration
    /// stays.
    pub fn reload_file(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> Result<crate::runtime::config::ConfigChanges, ConfigError> {
        let path = path.as_ref();
        self.inner.reload(Config::from_file(path)?, &path.display().to_string())
    }

    /// Reloads on every `SIGHUP` (`kill -HUP <pid>`, `systemctl reload`):
    /// `load` reads the configuration (`|| Config::from_file("limits.toml")`),
    /// and it is swapped in as [`reload`](Self::reload) does. Each reload
    /// logs under the `ratelimit` target what changed, the sections that
    /// wait for a restart, or why the file was refused (the running
    /// configuration then stays). The task runs until the runtime's last
    /// clone is dropped; it needs a tokio runtime. Unix only: elsewhere the
    /// error says it is unsupported (wire a file watch to
    /// [`reload_file`](Self::reload_file) there).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use ratelimit::axum::RateLimit;
    /// use ratelimit::config::Config;
    ///
    /// let rate_limit = RateLimit::from_config(Config::from_file("limits.toml")?).await?;
    /// rate_limit.reload_on_sighup(|| Config::from_file("limits.toml"))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reload_on_sighup<F>(&self, load: F) -> std::io::Result<tokio::task::JoinHandle<()>>
    where
        F: Fn() -> Result<Config, ConfigError> + Send + 'static,
    {
        reload::on_sighup(Arc::downgrade(&self.inner), load)
    }

    /// Every `#[rate_limit]` route this runtime serves, by route name: each
    /// attribute of the program registers its route at link time, and
    /// [`build`](RateLimitBuilder::build) checks them all against the
    /// configuration (the profiles they name exist, their cost fits the
    /// bursts their chain can reach, no two handlers share a name), as does
    /// every reload. [`RateLimitBuilder::routes_in`] narrows them to a module.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::axum::RateLimit;
    /// use ratelimit::config::Config;
    /// use ratelimit::rate_limit;
    ///
    /// #[rate_limit(key = ip, resolve = [profile("search"), default], name = "search", cost = 2)]
    /// async fn search() -> &'static str {
    ///     "found"
    /// }
    ///
    /// let config = Config::from_toml_str("[profiles.standard]\nrate = \"10/s\"\n").unwrap();
    /// // The configuration lacks the route's profile: startup says so.
    /// let refused = RateLimit::from_config(config).await.unwrap_err();
    /// assert!(refused.to_string().contains("profile(\"search\") is not a profile of the configuration"));
    ///
    /// let config = Config::from_toml_str(
    ///     "default_profile = \"standard\"\n[profiles.standard]\nrate = \"10/s\"\n[profiles.search]\nrate = \"1/s\"\nburst = 5\n",
    /// )
    /// .unwrap();
    /// let rate_limit = RateLimit::from_config(config).await.unwrap();
    /// let route = &rate_limit.routes()[0];
    /// assert_eq!((route.name(), route.key(), route.cost()), ("search", "ip", 2));
    /// assert_eq!(route.resolve(), ["profile(\"search\")", "default"]);
    /// # let _ = search::<RateLimit>;
    /// # }
    /// ```
    pub fn routes(&self) -> &[&'static AttributeRoute] {
        &self.inner.routes
    }
}

/// Builds a [`RateLimit`]: the clock, a token verifier, key extractors for
/// `"custom:<name>"` rules, the limit service, the rejection response.
///
/// ```no_run
/// use ratelimit::axum::{RateLimit, Rejection};
/// use ratelimit::config::Config;
/// use ratelimit::key::{ClientKey, KeyContext, KeySource};
///
/// /// The tenant an authentication layer put in the extensions.
/// #[derive(Clone)]
/// struct Tenant(String);
///
/// #[derive(Default)]
/// struct ByTenant;
///
/// impl KeySource for ByTenant {
///     fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
///         match cx.parts().extensions.get::<Tenant>() {
///             Some(t) => ClientKey::Custom(cx.hash(&t.0)),
///             None => cx.address(),
///         }
///     }
///     fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
///         match (key, cx.parts().extensions.get::<Tenant>()) {
///             (ClientKey::Custom(_), Some(t)) => {
///                 h.write(b"tenant:");
///                 h.write(t.0.as_bytes());
///             }
///             _ => ratelimit::key::write_address_id(key, h),
///         }
///     }
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = Config::from_toml_str(r#"
///     [profiles.standard]
///     rate = "600/min"
///     [[rules]]
///     name = "api"
///     path = "/api/{*rest}"
///     key = "custom:tenant"
///     resolve = ["default"]
/// "#)?;
/// let rate_limit = RateLimit::builder(config)
///     .key("tenant", ByTenant)
///     .rejection(|r: &Rejection<'_>| {
///         http::Response::builder()
///             .status(429)
///             .header("content-type", "text/plain")
///             .body(format!("{} is limited: retry in {} s\n", r.route(), r.retry_after_secs()))
///             .unwrap()
///     })
///     .build()
///     .await?;
/// # let _ = rate_limit; Ok(()) }
/// ```
pub struct RateLimitBuilder {
    config: Config,
    clock: AnyClock,
    extras: setup::Extras,
    /// Mistakes in what was registered, reported by `build`.
    errors: Vec<String>,
}

impl std::fmt::Debug for RateLimitBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("RateLimitBuilder");
        f.field("clock", &self.clock)
            .field("keys", &self.extras.keys.keys().collect::<Vec<_>>())
            .field("rejection", &self.extras.reject.is_some());
        #[cfg(feature = "service")]
        f.field("limit_service", &self.extras.given.service.is_some());
        f.finish_non_exhaustive()
    }
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
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    #[must_use]
    pub fn jwt_verifier(mut self, verifier: JwtVerifier) -> Self {
        self.extras.given.verifier = Some(verifier);
        self
    }

    /// Registers `source` as the key `"custom:<name>"` of `[[rules]]`
    /// entries (`#[rate_limit(key = custom(Type))]` names its type and
    /// needs no registration). A source must never key by a value a client
    /// can mint freely (see [`KeySource`](crate::key::KeySource)). `build` refuses a name that is
    /// not a valid custom key name or is registered twice, and a
    /// configuration naming an unregistered one.
    #[must_use]
    pub fn key(mut self, name: &str, source: impl crate::runtime::key::KeySource + 'static) -> Self {
        if let Err(e) = ratelimit_spec::custom_name(name) {
            self.errors.push(format!("key {name:?}: {e}"));
        } else if self.extras.keys.insert(name.to_owned(), Arc::new(source)).is_some() {
            self.errors.push(format!("key {name:?}: registered twice"));
        }
        self
    }

    /// Shapes the response to every refused request (routes with their own
    /// `reject = ...` aside): the hook returns the status, headers and body;
    /// the runtime then adds `Retry-After` (unless the hook set one) and the
    /// rate-limit headers. Without a hook, refusals are the problem+json of
    /// `[responses]` ([`Rejection::default_response`]). A refused gRPC call
    /// gets the hook's answer only when it is a gRPC refusal, else the
    /// default gRPC one ([`Rejection::is_grpc`]). The hook runs on the
    /// request path: it must not block.
    #[must_use]
    pub fn rejection<F, B>(mut self, hook: F) -> Self
    where
        F: Fn(&Rejection<'_>) -> http::Response<B> + Send + Sync + 'static,
        B: Into<bytes::Bytes>,
    {
        if self.extras.reject.is_some() {
            self.errors.push("rejection: a hook was given twice".to_owned());
        }
        self.extras.reject = Some(Arc::new(move |r: &Rejection<'_>| hook(r).map(Into::into)));
        self
    }

    /// Asks `service` in the `service` step of every chain, instead of the
    /// HTTP service of `[service] url` (then leave `url` out: `[service]`
    /// still names the id secret and tunes the cache). Lookups run off the
    /// request path, as the HTTP one's do.
    #[cfg(feature = "service")]
    #[cfg_attr(docsrs, doc(cfg(feature = "service")))]
    #[must_use]
    pub fn limit_service(mut self, service: impl crate::runtime::service::LimitService) -> Self {
        if self.extras.given.service.is_some() {
            self.errors.push("limit_service: a service was given twice".to_owned());
        }
        self.extras.given.service = Some(crate::runtime::service::BoxLimitService::new(service));
        self
    }

    /// Serves only the `#[rate_limit]` routes whose handler's path starts
    /// with `module` (`module_path!()`, `"my_app::api"`): startup and
    /// reloads check those against the configuration, and
    /// [`RateLimit::routes`] lists them. By default, every attribute route
    /// of the program: set it when one program runs several runtimes, each
    /// with its own configuration for its own routes (a test binary). A
    /// prefix no handler has (`"none"`) checks no route: for tests that
    /// serve routes a configuration cannot, on purpose.
    #[must_use]
    pub fn routes_in(mut self, module: &'static str) -> Self {
        self.extras.routes_in = module;
        self
    }

    /// Names a gRPC service the server serves (tonic's generated
    /// `FooServer<T>`, through its `NamedService::NAME`, `"pkg.Foo"`).
    /// Once any is named, startup and every reload refuse a `[[rules]]`
    /// entry whose path is shaped as a gRPC method's
    /// ([`PathPattern::grpc_service`](crate::config::PathPattern::grpc_service))
    /// but names no served service: it would never match a call, and every
    /// call would pass unlimited (`/RouteGuide/GetFeature` for
    /// `/routeguide.RouteGuide/GetFeature`: the refusal says which was
    /// meant).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::axum::RateLimit;
    /// use ratelimit::config::Config;
    ///
    /// // What tonic generates for `package routeguide; service RouteGuide`.
    /// struct RouteGuideServer;
    /// impl tonic::server::NamedService for RouteGuideServer {
    ///     const NAME: &'static str = "routeguide.RouteGuide";
    /// }
    ///
    /// let config = Config::from_toml_str(r#"
    ///     [profiles.standard]
    ///     rate = "10/s"
    ///     [[rules]]
    ///     name = "features"
    ///     path = "/RouteGuide/GetFeature"
    ///     key = "ip"
    ///     resolve = ["default"]
    /// "#).unwrap();
    /// let refused = RateLimit::builder(config).grpc_service::<RouteGuideServer>().build().await.unwrap_err();
    /// assert!(refused.to_string().contains("did you mean \"/routeguide.RouteGuide/GetFeature\"?"), "{refused}");
    /// # }
    /// ```
    #[cfg(feature = "tonic")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
    #[must_use]
    pub fn grpc_service<S: tonic::server::NamedService>(mut self) -> Self {
        self.extras.grpc_services.push(S::NAME);
        self
    }

    /// Builds the runtime (needs a tokio runtime). Refuses a configuration
    /// that cannot serve an attribute route (see [`RateLimit::routes`]),
    /// naming the route, its handler and where it is written.
    pub async fn build(self) -> Result<RateLimit, SetupError> {
        if !self.errors.is_empty() {
            return Err(SetupError::new("builder", self.errors.join("; ")));
        }
        let sweep = matches!(self.clock, AnyClock::System(_));
        let rt = Arc::new(runtime::Runtime::build(self.config, self.clock, self.extras, sweep).await?);
        gauges::spawn(&rt);
        Ok(RateLimit { inner: rt })
    }
}
