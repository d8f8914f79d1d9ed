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
//! // Also per_minute, per_hour, per_day, per_week, "600/min".parse(),
//! // "10000/d".parse() (long windows: see `Quota`).
//! let quota = Quota::per_second(100).with_burst(20);
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
//! ## Several limits, peeks and refunds
//!
//! A request held to several limits at once (an address's burst and an
//! account's daily quota) is one all-or-nothing decision:
//! [`Limiter::check_all`] charges every limit when all admit and none
//! otherwise, even when concurrent requests race for the last unit.
//! A [`Check`] (a cell, its quota, a cost) is the request value;
//! [`Limiter::peek_all`] answers "how much is left" without charging or
//! making a cell, and [`Limiter::refund`] hands back what a request was
//! charged but did not use. The fleet gate has the same three forms
//! (`fleet::FleetGate::check_all_id`, `peek_id`, `refund_id`).
//!
//! ```
//! use ratelimit::{Check, Clock, Limiter, ManualClock, MemoryStore, Quota};
//!
//! let limiter = Limiter::new(MemoryStore::default(), ManualClock::new());
//! let per_ip = Quota::per_second(10).with_burst(20);
//! let per_account: Quota = "2/h".parse().unwrap();
//! let checks = [
//!     Check::new(limiter.cell_key(1, "203.0.113.9"), per_ip, 1),
//!     Check::new(limiter.cell_key(2, "account-7"), per_account, 1),
//! ];
//! assert!(limiter.check_all(&checks).iter().all(|d| d.is_allowed()));
//! assert!(limiter.peek_all(&[checks[1]])[0].is_allowed(), "one more fits");
//! let at = limiter.clock().now(); // before the charge a refund may undo
//! let charged = limiter.check_all(&checks);
//! let [ip, account] = limiter.check_all(&checks);
//! assert!(account.is_denied() && ip.is_allowed(), "the account refuses");
//! assert_eq!(limiter.peek_all(&[Check { cost: 0, ..checks[0] }])[0].remaining(), 18, "the address paid for two, not three");
//! // The last admitted request failed before doing any work: hand its units back.
//! for (check, decision) in checks.iter().zip(&charged) {
//!     limiter.refund(check, decision, at);
//! }
//! assert!(limiter.check_all(&checks).iter().all(|d| d.is_allowed()));
//! ```
//!
//! ## Wings and layers
//!
//! The library is three wings and the leaves two of them share, each a
//! folder of `src/`. Dependencies point one way, down: from the runtime to
//! the fleet, the shared leaves and the engine; from the fleet to the shared
//! leaves and the engine; from the shared leaves to the engine. Inside a
//! wing, a module uses lower layers only (the engine's and the shared
//! leaves' modules are pools that may use each other), and no two files
//! import each other, directly or around a circle. `src/architecture.rs`
//! checks every path, grouped imports and `super::` included, against this
//! map, and that the code names a module by its folder
//! (`crate::runtime::config`; `ratelimit::config` is the path users write).
//!
//! ```text
//!  runtime/  from a request to a decision (feature `config` and up; 11,600 code lines)
//!    integrations     axum/     setup (config to runtime), runtime (the request path), config_cache,
//!                               handler, layer, rules, route, outcome/, reject, observer, series,
//!                               log_gate, gauges, in_flight, permits, charge, meter, parts (the
//!                               optional parts: verifier, limit service, fleet gate), fleet, grpc,
//!                               registry, reload, command (check and explain), error
//!    configuration    config/   the model (mod.rs), raw/ (TOML to Config: schema, env, spans,
//!                               validate/*), rules, reload, diff, check/ (the checker and explain)
//!    routes compiled  plan.rs   each route's limit settled once per configuration, read by index
//!    resolution       resolve.rs  the steps that ask the request (JwtTier, Service)
//!    limit service    service/  the trait and answers, client ids, the HTTP(S) service, the cache
//!    keys             key/      KeySource, KeyContext, Ip/Header/Claim/AnyKey, the client address
//!    tokens           jwt/      the verifier and its caches, the failed-check budget, JWKS, key sets
//!    data             claims.rs (verified claims), limits.rs (profiles as data)
//!  fleet/    the fleet limit through Redis (`ratelimit::fleet`, `[global]`, feature `redis`; 4,000)
//!                     the gate (gate, check, stacked, settlement, tracking), each epoch's table
//!                     (table, closed, marks, hot), the sync loop and its rounds (task, round,
//!                     visit, history, ration, health), the store (store, redis, tls), ids, names
//!  shared/   leaves the fleet and the runtime share (600): net/ (networks, TLS, rustls, the HTTP
//!            client), metrics.rs (public names and handles), defaults.rs, setters.rs
//!  engine/   GCRA, usable alone (no feature; 2,500): limiter/, gcra.rs, decision.rs, quota.rs,
//!            store/, clock.rs, concurrency.rs (requests in flight), window.rs (the fleet's
//!            sliding-window arithmetic, which the configuration checks too), units.rs,
//!            errors.rs, sync.rs (std or loom)
//!
//!  rule language  ratelimit-spec (no dependencies): key kinds, steps, names, costs, one validator,
//!                 used by ratelimit-macros (the attribute) and runtime/config/ (the [[rules]] entries)
//! ```
//!
//! | file | holds |
//! |---|---|
//! | `ratelimit-spec/src/` | the rule language: `keys.rs`, `steps.rs`, `costs.rs`, `names.rs`, `error.rs` (messages for both surfaces) |
//! | `ratelimit-macros/src/` | the attribute: `parse.rs` (one typed value per option), `check.rs`, `expand.rs` (one zero-sized `Rule` type per handler) |
//! | `runtime/key/source.rs` | [`key::KeySource`], the one path every key takes, and the built-in sources |
//! | `runtime/key/ip.rs`, `runtime/key/header.rs` | the client address behind trusted proxies; the bound on header values per address |
//! | `runtime/claims.rs`, `runtime/jwt/` | verified claims; token verification, its caches and failed-check budget, JWKS URLs |
//! | `runtime/limits.rs`, `runtime/resolve.rs` | profiles as data; the steps that ask the request (a token's limit, a limit service's answer) |
//! | `runtime/plan.rs` | the plan: every route (attribute or `[[rules]]`) compiled against a configuration, once per generation; what requests, startup and `explain` read |
//! | `runtime/config/` | TOML to a validated [`config::Config`]; reload; the checker |
//! | `runtime/axum/setup.rs` | from a configuration to a running runtime (store, verifier, limit service, fleet gate, keys), at startup and at each reload |
//! | `runtime/axum/runtime.rs` | the one `decide` every route takes: key, its plan's limit, check, fleet gate |
//! | `runtime/axum/handler.rs`, `runtime/axum/layer.rs` | the attribute's extractor; the `tower::Layer` of `[[rules]]` |
//! | `runtime/axum/outcome.rs`, `reject.rs` | a limit's outcome, its headers and 429s |
//! | `runtime/axum/observer.rs`, `series.rs`, `log_gate.rs`, `gauges.rs` | what each decision reports (metric series, refusal logs, route warnings); the bounded series; the log gates; the gauges published once a second |
//! | `shared/net/`, `runtime/service/` | networks, the one rustls client setup and the CA file, the HTTP(S) client; the limit service |
//! | `fleet/` | the fleet gate: request path, table, sync rounds, history, Redis and `rediss://` |
//! | `engine/store/`, `engine/gcra.rs`, `engine/limiter/` | the engine: the bounded lock-free table and the arithmetic |
//! | `engine/concurrency.rs` | requests in flight per key: permits given back on drop, a bounded table |
//!
//! **One rule, one path.** A `#[rate_limit(...)]` attribute and a `[[rules]]`
//! entry are read by the same validator (`ratelimit-spec`; a differential test
//! feeds both thousands of generated rules), compiled into the same plan
//! (`plan.rs`: the chain cut to what a request can reach, every profile
//! resolved, `[routes]` applied) and decided by the same generic `decide`:
//! the attribute instantiates it with its key's concrete type (`Header`), a
//! config rule with [`key::AnyKey`], which dispatches with a `match` to the
//! same types. A new key kind is a variant in
//! `ratelimit-spec` (its name, argument and the type that runs it) and a
//! [`key::KeySource`] in `runtime/key/source.rs` with its [`key::AnyKey`] arm; the
//! attribute and the configuration pick it up from there. A key of the
//! application's own is a [`key::KeySource`] it implements (see there).
//!
//! # The attribute (feature `axum`)
//!
//! ```no_run
//! use axum::{extract::Path, routing::get, Router};
//! use ratelimit::{axum::RateLimit, config::Config, rate_limit};
//! use std::net::SocketAddr;
//!
//! // Who is limited: the verified `sub` claim (the address without one).
//! // How much: the token's tier, else profile "standard", else the default.
//! #[rate_limit(key = jwt_claim("sub"), resolve = [jwt, profile("standard"), default], name = "users.get")]
//! async fn get_user(Path(id): Path<u64>) -> String {
//!     format!("user {id}")
//! }
//!
//! #[rate_limit(key = ip, resolve = [default], cost = 5, shadow)]
//! async fn export() -> &'static str {
//!     "a costly export, watched before it is enforced"
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = Config::from_toml_str(r#"
//!         default_profile = "anonymous"
//!         [profiles.anonymous]
//!         rate = "30/min"
//!         burst = 5
//!         [profiles.standard]
//!         rate = "600/min"
//!     "#)?;
//!     let rate_limit = RateLimit::from_config(config).await?;
//!     let app = Router::new()
//!         .route("/users/{id}", get(get_user))
//!         .route("/export", get(export))
//!         .with_state(rate_limit); // or an `AppState` holding it (`FromRef`)
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//!     Ok(())
//! }
//! ```
//!
//! Grammar, on an `async fn` handler (a free function, not a method):
//!
//! ```text
//! #[rate_limit(key = KEY, resolve = [STEP, ..., default] [, name = "route.name"] [, cost = N] [, shadow]
//!              [, layer] [, reject = path::to::function] [, crate = "path"])]
//!
//! KEY  := ip                      the client address (see [ip] in the config)
//!       | header("x-api-key")     a header's value, hashed; capped per address
//!       | jwt_claim("sub")        a verified token's claim (dotted paths: "org.id")
//!       | route                   one bucket for the whole route, whoever the client
//!       | custom(path::To::Type)  a KeySource + Default of the application's
//! STEP := jwt                     the tier or numbers the verified token carries
//!       | service                 the limit service of [service] (cached, never awaited)
//!       | profile("standard")     a named profile of the configuration
//!       | default                 the route's [routes."name"] profile, else default_profile
//! ```
//!
//! * `key` and `resolve` are required; `resolve` ends with `default`, which
//!   always answers, and names each step once. A missing key value (no
//!   claim, no header) falls back to the address: never unlimited.
//! * `name`: the stable route name for `[routes."name"]` overrides, metrics
//!   and logs; by default the handler's path (`my_crate::users::get_user`).
//! * `cost = N` (N >= 1): units of the limit each request uses.
//! * `shadow`: decide, send headers and count, but never reject.
//! * `layer`: find the [`RateLimit`](axum::RateLimit) through
//!   [`RateLimit::layer`](axum::RateLimit::layer) on the router instead of
//!   in its state (see below).
//! * `reject = f`: the route's own response to a refusal, `fn(&Rejection<'_>)
//!   -> http::Response<B>` with `B: Into<Bytes>` ([`Rejection`](axum::Rejection)),
//!   the builder's hook's signature; `Retry-After` and
//!   the rate-limit headers are added to it.
//! * `crate = "path"`: where the `ratelimit` crate is, for a renamed
//!   dependency or a re-export (`crate = "platform::limits"`).
//! * `custom(Type)`: `Type` implements [`key::KeySource`] (reads the
//!   request's parts and extensions, e.g. a tenant an authentication layer
//!   verified, and falls back to [`key::KeyContext::address`] when it finds
//!   none) and `Default` (made once, on first use). A `[[rules]]` entry
//!   names a key registered on the builder instead: `key = "custom:tenant"`
//!   with `RateLimit::builder(config).key("tenant", ByTenant)`.
//!
//! ```no_run
//! use axum::extract::{FromRef, State};
//! use axum::{response::IntoResponse, routing::get, Router};
//! use ratelimit::axum::{RateLimit, Rejection};
//! use ratelimit::key::{ClientKey, KeyContext, KeySource};
//! use ratelimit::rate_limit;
//!
//! #[derive(Clone)]
//! struct AppState {
//!     db: String, // a pool in a real service
//!     rate_limit: RateLimit,
//! }
//! impl FromRef<AppState> for RateLimit {
//!     fn from_ref(s: &AppState) -> RateLimit {
//!         s.rate_limit.clone()
//!     }
//! }
//!
//! /// The tenant an authentication layer verified.
//! #[derive(Clone)]
//! struct Tenant(String);
//!
//! #[derive(Default)]
//! struct ByTenant;
//! impl KeySource for ByTenant {
//!     fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
//!         match cx.parts().extensions.get::<Tenant>() {
//!             Some(t) => ClientKey::Custom(cx.hash(&t.0)),
//!             None => cx.address(),
//!         }
//!     }
//!     fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
//!         match (key, cx.parts().extensions.get::<Tenant>()) {
//!             (ClientKey::Custom(_), Some(t)) => {
//!                 h.write(b"tenant:");
//!                 h.write(t.0.as_bytes());
//!             }
//!             _ => ratelimit::key::write_address_id(key, h),
//!         }
//!     }
//! }
//!
//! fn busy(r: &Rejection<'_>) -> http::Response<String> {
//!     let mut response = http::Response::new(format!("busy, retry in {} s", r.retry_after_secs()));
//!     *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
//!     response
//! }
//!
//! #[rate_limit(key = custom(ByTenant), resolve = [default], reject = busy)]
//! async fn orders(State(app): State<AppState>) -> String {
//!     format!("orders from {}", app.db)
//! }
//!
//! #[rate_limit(key = route, resolve = [profile("fragile"), default])]
//! async fn report() -> &'static str {
//!     "one bucket for every client"
//! }
//!
//! fn router(state: AppState) -> Router {
//!     Router::new().route("/orders", get(orders)).route("/report", get(report)).with_state(state)
//! }
//! # let _ = router;
//! ```
//!
//! **Stacked limits.** Several attributes on one handler are one decision,
//! all or nothing: the request is admitted only if every limit admits it,
//! and when any refuses, none is charged (a burst on the address and a
//! daily quota on the account, say). The `RateLimit-Limit` triple reports
//! the tightest, the structured fields list every limit, `Retry-After` is
//! the longest wait among the refusing ones. Each attribute is its own
//! route: give each a `name` (by default the second is the handler's path
//! and `#2`). `[[rules]]` entries stack with `stack = true`.
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use ratelimit::axum::RateLimit;
//! use ratelimit::config::Config;
//! use ratelimit::rate_limit;
//!
//! #[rate_limit(key = ip, resolve = [profile("burst"), default], name = "orders.ip")]
//! #[rate_limit(key = header("x-api-key"), resolve = [profile("daily"), default], name = "orders.key")]
//! async fn create_order() -> &'static str {
//!     "created"
//! }
//!
//! # async fn app() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml_str(r#"
//!     default_profile = "burst"
//!     [profiles.burst]
//!     rate = "10/s"
//!     burst = 20
//!     [profiles.daily]
//!     rate = "10000/d"
//! "#)?;
//! let rl = RateLimit::builder(config).build().await?;
//! let app: Router = Router::new().route("/orders", post(create_order)).with_state(rl);
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! Mistakes are compile errors on the offending token, all reported at once
//! (see `ui-tests/fail/`). The expansion is one zero-sized rule type per
//! handler (key extractor and resolver chain as concrete types, no dynamic
//! dispatch, no allocation on the allowed path) and the handler rewritten to
//! take a hidden first extractor, so the decision runs before any other
//! extractor and before the body.
//!
//! **Where the limiter comes from**: the router's state, through axum's
//! `FromRef`: the state is the [`RateLimit`](axum::RateLimit) itself
//! (`.with_state(rate_limit)`), or an `AppState` that holds it
//! (`#[derive(FromRef)]`, or an `impl FromRef<AppState> for RateLimit`).
//! A router whose state holds none **does not compile**, and the error names
//! both fixes. With `layer` in the attribute, the
//! [`RateLimitLayer`](axum::RateLimitLayer) on the router
//! (`.layer(rate_limit.layer())`) instead, which the compiler cannot see: a
//! route reached without it answers **500** and logs the mistake once, never
//! served unlimited. See [`axum`](mod@axum) and `docs/http.md`.
//!
//! # Features
//!
//! None is on by default: without features the crate is the engine alone
//! ([`Quota`], [`Limiter`], [`Decision`], [`Clock`], [`Store`],
//! [`MemoryStore`]), whose only dependencies are `ahash` and
//! `quanta` (no serde, no TOML, no HTTP types).
//!
//! * `tokio`: [`Limiter::spawn_sweeper`], a background task that drops
//!   recovered cells.
//! * `config`: the configuration and request layers: `ratelimit::config`
//!   (TOML profiles, routes, `[[rules]]`, environment overrides, reload, the
//!   checker), `ratelimit::key` (client address behind trusted proxies,
//!   header and claim keys), `ratelimit::resolve`
//!   (resolver chains), `ratelimit::claims` (verified claims). Brings serde,
//!   serde_json, toml and http. Every feature below implies it.
//! * `jwt`: `ratelimit::jwt`, JWT verification with `jsonwebtoken`: the
//!   `[jwt]` key sources (a JWKS URL included), `jwt_claim` keys and the
//!   `jwt` step.
//! * `service`: `ratelimit::service`, an external limit service over HTTP
//!   or HTTPS, cached and fetched off the request path (`[service]`, the
//!   `service` step).
//! * `fetch` (implied by `jwt` and `service`): the HTTP(S) client they
//!   fetch with. HTTPS is rustls with ring (no aws-lc-rs), trusting the
//!   webpki roots or `[tls] ca_file`, with the application's process-default
//!   crypto provider if it installed one: the library never installs one.
//! * `axum` (implies `config` and `tokio`, not `jwt` or `service`):
//!   `#[rate_limit]`, the `ratelimit::axum::RateLimit` runtime, its
//!   `tower::Layer` for config-defined rules, headers, logs and metrics.
//!   Add `jwt` for token keys and the `jwt` step, `service` for the limit
//!   service, `redis` for the fleet gate.
//!   gRPC calls behind the layer are refused with `RESOURCE_EXHAUSTED` and
//!   a `RetryInfo` (no feature needed: see `docs/http.md`, gRPC).
//! * `tonic` (implies `axum`): `ip` keys read the peer address a tonic
//!   server gives (`tonic::transport::server::TcpConnectInfo`); tonic's
//!   `server` feature only, no TLS.
//! * `redis`: the fleet-wide gate over Redis (`ratelimit::fleet`,
//!   `[global]`): a shared budget per key across instances, reconciled off
//!   the request path.
//! * `redis-tls` (implies `redis`): `rediss://` for the fleet gate, the same
//!   rustls setup as HTTPS (`[global] ca_file`, else `[tls] ca_file`).
//!
//! What a configuration or an attribute asks of a feature the build lacks
//! is refused, naming the feature, never skipped: `RateLimit::builder(config)
//! .build()`, a reload and `Config::check_startup` (the library checker;
//! the `ratelimit check` command is built with every feature, so it cannot
//! tell what your build lacks) for a
//! `[jwt]` key source, a `jwt_claim` key, a `jwt` or `service` step of a
//! `[[rules]]` entry, `[service]` or `[global]`; the compiler for
//! `#[rate_limit(key = jwt_claim(..))]` or a `jwt` or `service` step.
//! Combinations checked by `scripts/test`: each feature alone, none,
//! `axum,jwt`, `axum,service`, `axum,redis`, `jwt,service`, and all.
//!
//! Every metric any feature exports is listed in `ratelimit::metrics`
//! (present with `axum`, `jwt`, `service` or `redis`).

#![cfg_attr(docsrs, feature(doc_cfg))]

// The wings (see "Wings" above): the engine, the leaves the fleet and the
// runtime share, the fleet, the runtime. The code names a module by its
// path (`crate::engine::store`, `crate::runtime::config`); the re-exports
// below are the paths users write (`ratelimit::config`), never used inside
// the crate (the architecture test checks it).
mod engine;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod fleet;
#[cfg(feature = "config")]
mod runtime;
#[cfg(feature = "config")]
mod shared;

pub use engine::concurrency;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use runtime::axum;
#[cfg(feature = "jwt")]
#[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
pub use runtime::jwt;
#[cfg(feature = "service")]
#[cfg_attr(docsrs, doc(cfg(feature = "service")))]
pub use runtime::service;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub use runtime::{claims, config, key, resolve};

#[cfg(any(feature = "axum", feature = "redis", feature = "jwt", feature = "service"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "axum", feature = "redis", feature = "jwt", feature = "service")))
)]
pub use shared::metrics;

#[cfg(test)]
mod architecture;

pub use engine::clock::{AnyClock, Clock, ManualClock, SystemClock};
pub use engine::decision::{Decision, Denial};
pub use engine::limiter::{Check, Limiter, DEFAULT_ROUTE};
pub use engine::quota::{Quota, QuotaError};
pub use engine::store::{
    CellKey, MemoryStore, MemoryStoreBuilder, OverflowPolicy, Placement, Store, StoreConfigError, StoreStats,
};

/// Rate-limits an async axum handler: see [the crate docs](crate#the-attribute-feature-axum)
/// for the grammar and an example.
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use ratelimit_macros::rate_limit;

/// What `#[rate_limit]` expansions call. Not a public API: no stability
/// promise, do not use directly.
#[cfg(feature = "axum")]
#[doc(hidden)]
pub use axum::__private;

#[cfg(all(feature = "axum", feature = "jwt"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __rate_limit_requires_jwt {
    (key) => {};
    (step) => {};
}

#[cfg(all(feature = "axum", not(feature = "jwt")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __rate_limit_requires_jwt {
    (key) => {
        ::core::compile_error!(::core::concat!(
            "`key = jwt_claim(...)` needs the `jwt` feature of ratelimit, which is not enabled: ",
            "add \"jwt\" to its features in Cargo.toml (claims are never read from an unverified token)",
        ));
    };
    (step) => {
        ::core::compile_error!(::core::concat!(
            "the `jwt` step of `resolve` needs the `jwt` feature of ratelimit, which is not enabled: ",
            "add \"jwt\" to its features in Cargo.toml",
        ));
    };
}

#[cfg(all(feature = "axum", feature = "service"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __rate_limit_requires_service {
    (step) => {};
}

#[cfg(all(feature = "axum", not(feature = "service")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __rate_limit_requires_service {
    (step) => {
        ::core::compile_error!(::core::concat!(
            "the `service` step of `resolve` needs the `service` feature of ratelimit, which is not enabled: ",
            "add \"service\" to its features in Cargo.toml",
        ));
    };
}
