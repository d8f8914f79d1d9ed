//! The runtime every `#[rate_limit]` route and config rule shares: the
//! limiter, the running configuration, key extraction state, the token
//! verifier and the limit service.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use super::observe::{LogGate, Metrics, Once, RouteSeries, Series};
use super::respond::Outcome;
use crate::config::{Config, ConfigHandle, RuleConfig};
use crate::jwt::JwtVerifier;
use crate::key::{ClientKey, HeaderBudget, KeyContext, KeyHasher, KeySource};
use crate::resolve::{FinalResolver, ResolveContext};
use crate::service::{CacheSettings, HttpLimitService, ServiceCache};
use crate::{AnyClock, Clock, Denial, Limiter, MemoryStore};

/// A route as the runtime sees it: its name, cell namespace and defaults
/// (a `[routes."name"]` section overrides `cost` and `shadow`).
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec<'a> {
    /// The stable route name.
    pub name: &'a str,
    /// Its cell namespace ([`route_id`] of the name).
    pub id: u32,
    /// Units per request.
    pub cost: u32,
    /// Never reject.
    pub shadow: bool,
    /// The chain has a `jwt` step: find verified claims even when the key
    /// is not a claim.
    pub wants_claims: bool,
    /// The chain has a `service` step: compute the client id.
    pub wants_service: bool,
    /// The route's own metric handles (`#[rate_limit]` routes), else the
    /// runtime's map is used.
    pub series: Option<&'a RouteSeries>,
    /// The profiles its chain names (checked against the configuration).
    pub profiles: &'a [&'a str],
}

/// The cell namespace of a route name (FNV-1a, 32-bit; never 0, which is
/// [`DEFAULT_ROUTE`](crate::DEFAULT_ROUTE)). A `const fn`, so
/// `#[rate_limit]` routes compute it at compile time.
pub const fn route_id(name: &str) -> u32 {
    let bytes = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u32).wrapping_mul(0x0100_0193);
        i += 1;
    }
    if h == 0 {
        1
    } else {
        h
    }
}

/// Builds the fleet gate of `[global]` and spawns its sync loop.
#[cfg(feature = "redis")]
fn start_gate(g: &crate::config::GlobalConfig, clock: &AnyClock) -> Result<Arc<crate::global::FleetGate>, SetupError> {
    use crate::global::{FleetGate, GateSettings, RedisSettings, RedisStore};
    let secret = match (&g.key_secret, &g.key_secret_env) {
        (Some(s), _) => s.0.clone(),
        (None, Some(var)) => std::env::var(var)
            .map_err(|_| {
                SetupError(format!(
                    "[global] key_secret_env: the environment variable {var} is not set (the fleet secret: \
                     at least 16 bytes, the same on every instance)"
                ))
            })?
            .into_bytes(),
        (None, None) => {
            return Err(SetupError(
                "[global] key_secret_env: name the environment variable holding the fleet secret (at least \
                 16 bytes, the same on every instance; Redis keys are keyed hashes under it)"
                    .to_owned(),
            ))
        }
    };
    let settings = GateSettings {
        window: g.window,
        sync_interval: g.sync_interval,
        max_keys: g.max_keys,
        sub_epochs: g.sub_epochs,
        ..GateSettings::new(&secret)
    };
    let gate = Arc::new(FleetGate::new(settings, clock).map_err(|e| SetupError(format!("[global] {e}")))?);
    let store = RedisStore::new(
        &g.redis_url,
        RedisSettings {
            prefix: g.key_prefix.clone(),
            cluster: g.cluster,
            connect_timeout: g.connect_timeout,
            response_timeout: g.timeout,
            ca_file: g.ca_file.clone(),
            ..RedisSettings::default()
        },
    )
    .map_err(|e| SetupError(format!("[global] {e}")))?;
    // A round: a connection attempt at most, then the replies.
    let round_timeout = g.connect_timeout.saturating_mul(2).saturating_add(g.timeout);
    gate.spawn_sync(store, clock.clone(), round_timeout);
    tracing::info!(
        target: "ratelimit",
        window = ?g.window,
        sub_epochs = gate.window().slices(),
        sync_interval = ?g.sync_interval,
        "fleet gate on (Redis key prefix {:?}); local-only until the first sync round succeeds if Redis is unreachable",
        g.key_prefix
    );
    Ok(gate)
}

/// The cell namespace of a `[[rules]]` entry: distinct from an attribute
/// route of the same name, so a request limited by both is charged once in
/// each.
pub(crate) fn rule_route_id(name: &str) -> u32 {
    route_id(name).rotate_left(16) ^ 0x5bd1_e995
}

pub(crate) struct Runtime {
    pub(crate) config: ConfigHandle,
    pub(crate) limiter: Arc<Limiter<MemoryStore, AnyClock>>,
    pub(crate) header_budget: HeaderBudget<AnyClock>,
    pub(crate) key_hasher: KeyHasher,
    pub(crate) jwt: Option<JwtVerifier>,
    pub(crate) service: Option<ServiceCache<HttpLimitService>>,
    pub(crate) metrics: Metrics,
    pub(crate) log_rejected: LogGate,
    pub(crate) log_misconfigured: LogGate,
    pub(crate) log_no_peer: Once,
    /// The fleet-wide gate, when `[global]` is configured.
    #[cfg(feature = "redis")]
    pub(crate) gate: Option<Arc<crate::global::FleetGate>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("limiter", &self.limiter)
            .field("jwt", &self.jwt.is_some())
            .field("service", &self.service.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a [`RateLimit`](super::RateLimit) could not be built.
#[derive(Debug)]
pub struct SetupError(String);

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

impl Runtime {
    pub(crate) async fn build(
        config: Config,
        clock: AnyClock,
        jwt: Option<JwtVerifier>,
        sweep: bool,
    ) -> Result<Runtime, SetupError> {
        let store = config.build_store().map_err(|e| SetupError(format!("[store]: {e}")))?;
        let header_budget = HeaderBudget::new(config.header_keys, clock.clone())
            .map_err(|e| SetupError(format!("[header_keys]: {e}")))?;
        let jwt = match jwt {
            Some(v) => Some(v),
            None => config
                .jwt_verifier()
                .await
                .map_err(|e| SetupError(format!("[jwt]: {e}")))?,
        };
        let service = match &config.service {
            None => None,
            Some(s) => {
                let http = HttpLimitService::new(&s.url).map_err(|e| SetupError(format!("[service] url: {e}")))?;
                let settings = CacheSettings {
                    ttl: s.ttl,
                    negative_ttl: s.negative_ttl,
                    timeout: s.timeout,
                    max_entries: s.max_entries,
                    ..CacheSettings::default()
                };
                Some(ServiceCache::new(http, settings).map_err(|e| SetupError(format!("[service]: {e}")))?)
            }
        };
        #[cfg(feature = "redis")]
        let gate = match &config.global {
            Some(g) => Some(start_gate(g, &clock)?),
            None => None,
        };
        #[cfg(not(feature = "redis"))]
        if config.global.is_some() {
            return Err(SetupError(
                "[global] needs the `redis` feature of ratelimit (or remove the section for local-only limiting)"
                    .to_owned(),
            ));
        }
        let limiter = Arc::new(Limiter::new(store, clock));
        if sweep {
            limiter.spawn_sweeper(config.store.sweep_interval.max(Duration::from_millis(10)));
        }
        Ok(Runtime {
            config: ConfigHandle::new(config),
            limiter,
            header_budget,
            key_hasher: KeyHasher::new(),
            jwt,
            service,
            metrics: Metrics::default(),
            log_rejected: LogGate::new(),
            log_misconfigured: LogGate::new(),
            log_no_peer: Once::new(),
            #[cfg(feature = "redis")]
            gate,
        })
    }

    /// Swaps the running configuration.
    pub(crate) fn reload(&self, config: Config) {
        self.config.store(config);
    }

    /// The client's address key, warning once when the server gives no
    /// peer address.
    fn address(&self, config: &Config, parts: &Parts, route: &str) -> ClientKey {
        let Some(peer) = crate::key::peer(parts) else {
            if self.log_no_peer.first() {
                tracing::warn!(
                    target: "ratelimit",
                    route,
                    "no peer address on the request: every client shares one bucket. Serve with \
                     `into_make_service_with_connect_info::<SocketAddr>()` or insert `ratelimit::key::PeerAddr`"
                );
            }
            return ClientKey::UnknownPeer;
        };
        ClientKey::Ip(config.ip.client_key(peer.ip(), &parts.headers))
    }

    /// Decides one request on one route: key, limit, check.
    pub(crate) fn decide<K: KeySource, R: FinalResolver>(
        &self,
        parts: &Parts,
        route: &RouteSpec<'_>,
        key: &K,
        chain: &R,
    ) -> Outcome {
        let config = self.config.load();
        if let Some(series) = route.series {
            if series.needs_check(Arc::as_ptr(&config) as usize) {
                self.check_route(&config, route);
            }
        }
        let address = self.address(&config, parts, route.name);
        let mut cx = KeyContext::with_address(parts, address, &self.key_hasher)
            .verifier(self.jwt.as_ref())
            .header_values(&self.header_budget);
        let client = key.extract(&mut cx);
        // Verify at most once per decision: a claim key that found no
        // (usable) claims leaves the request anonymous for the chain too.
        if !cx.claims_checked() && route.wants_claims {
            cx.claims();
        }
        let mut ctx = ResolveContext::new(&**config, route.name, cx.found_claims()).with_service(self.service.as_ref());
        if route.wants_service {
            ctx = ctx.with_client(key.client_id(&cx, &client));
        }
        let resolved = chain.resolve_final(&ctx);
        let overrides = config.route(route.name);
        let cost = overrides.and_then(|r| r.cost).unwrap_or(route.cost);
        let shadow = overrides.and_then(|r| r.shadow).unwrap_or(route.shadow);

        let cell = self.limiter.cell_key(route.id, &client);
        #[cfg(feature = "redis")]
        let decision = match &self.gate {
            Some(gate) => {
                use std::hash::Hasher;
                let mut h = gate.hasher().hasher();
                h.write_u32(route.id);
                key.write_id(&cx, &client, &mut h);
                gate.check_id(&self.limiter, route.id, cell, h.finish(), &resolved.quota, cost)
            }
            None => self.limiter.check_cell(cell, &resolved.quota, cost),
        };
        #[cfg(not(feature = "redis"))]
        let decision = self.limiter.check_cell(cell, &resolved.quota, cost);
        let outcome = Outcome {
            decision,
            quota: resolved.quota,
            profile: resolved.profile,
            shadow,
            style: config.headers,
            claims_checked: cx.claims_checked(),
            claims: cx.take_claims(),
        };
        self.observe(route, &outcome);
        outcome
    }

    /// Warns (once per configuration) about an attribute route whose chain
    /// has steps that can never answer: a silent fall-through would hide a
    /// typo or a missing section.
    fn check_route(&self, config: &Config, route: &RouteSpec<'_>) {
        for name in route.profiles.iter().filter(|n| config.profile(n).is_none()) {
            tracing::warn!(
                target: "ratelimit",
                route = route.name,
                profile = *name,
                "the route's resolve chain names a profile the configuration does not define: the step is skipped"
            );
        }
        if route.wants_claims && config.jwt.is_none() {
            tracing::warn!(
                target: "ratelimit",
                route = route.name,
                "the route's `jwt` step needs a [jwt] section (claim names and caps): it never answers"
            );
        }
        if route.wants_service && self.service.is_none() {
            tracing::warn!(
                target: "ratelimit",
                route = route.name,
                "the route's `service` step needs a [service] section: it never answers"
            );
        }
    }

    /// Applies the first `[[rules]]` entry matching the request, if any.
    pub(crate) fn decide_rules(&self, parts: &Parts) -> Option<Outcome> {
        let config = self.config.load();
        if config.rules.is_empty() {
            return None;
        }
        let rule: &RuleConfig = config
            .rules
            .iter()
            .find(|r| r.matches(&parts.method, parts.uri.path()))?;
        let route = RouteSpec {
            name: &rule.name,
            id: rule_route_id(&rule.name),
            cost: rule.cost,
            shadow: rule.shadow,
            wants_claims: rule.resolve.wants_claims(),
            wants_service: rule.resolve.wants_service(),
            series: None,
            profiles: &[],
        };
        Some(self.decide(parts, &route, &rule.key, &rule.resolve))
    }

    fn observe(&self, route: &RouteSpec<'_>, outcome: &Outcome) {
        let d = &outcome.decision;
        let record = |s: &Series| match (d.is_allowed(), outcome.shadow) {
            (true, _) => s.allowed.increment(1),
            (false, true) => {
                s.shadow_rejected.increment(1);
                s.allowed.increment(1);
            }
            (false, false) => {
                s.rejected.increment(1);
                s.retry_after.record(outcome.retry_after_secs() as f64);
            }
        };
        let tier = outcome.profile.as_ref();
        match route.series {
            Some(cache) => cache.with(&self.metrics, route.id, route.name, tier, record),
            None => self.metrics.with(route.id, route.name, tier, record),
        }
        if d.is_allowed() {
            return;
        }
        let now = self.limiter.clock().now();
        match d.denial() {
            Some(Denial::CostExceedsBurst) => {
                if let Some(suppressed) = self.log_misconfigured.pass(now) {
                    tracing::error!(
                        target: "ratelimit",
                        route = route.name,
                        tier = outcome.profile.as_deref().unwrap_or("custom"),
                        burst = d.limit(),
                        suppressed,
                        "the route's cost is above the burst of the limit that applies: every request is refused; \
                         lower the cost or raise the profile's burst"
                    );
                }
            }
            _ => {
                if let Some(suppressed) = self.log_rejected.pass(now) {
                    tracing::info!(
                        target: "ratelimit",
                        route = route.name,
                        tier = outcome.profile.as_deref().unwrap_or("custom"),
                        shadow = outcome.shadow,
                        store_full = d.denial() == Some(Denial::StoreFull),
                        fleet = d.denial() == Some(Denial::FleetLimited),
                        retry_after_s = outcome.retry_after_secs(),
                        suppressed,
                        "request over its limit"
                    );
                }
            }
        }
    }
}
