//! The runtime every `#[rate_limit]` route and config rule shares: the
//! limiter, the running configuration, key extraction state, the token
//! verifier and the limit service.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use super::error::SetupError;
use super::report::Observer;
use super::respond::{Outcome, RouteName};
use super::route::{rule_route_id, RouteSpec};
use crate::config::{Config, ConfigHandle, RuleConfig};
use crate::jwt::JwtVerifier;
use crate::key::{ClientKey, HeaderBudget, KeyContext, KeyHasher, KeySource};
use crate::resolve::{FinalResolver, ResolveContext};
use crate::service::{CacheSettings, HttpLimitService, ServiceCache, ServiceIdKey};
use crate::{AnyClock, Clock, Limiter, MemoryStore};

pub(crate) struct Runtime {
    pub(crate) config: ConfigHandle,
    pub(crate) limiter: Arc<Limiter<MemoryStore, AnyClock>>,
    pub(crate) header_budget: HeaderBudget<AnyClock>,
    pub(crate) key_hasher: KeyHasher,
    pub(crate) jwt: Option<JwtVerifier>,
    pub(crate) service: Option<ServiceCache<HttpLimitService>>,
    /// The key of the service's client ids (with `service`).
    service_ids: Option<ServiceIdKey>,
    observer: Observer,
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

/// The key of the limit service's client ids: `[service] id_secret` set in
/// code, else the variable `id_secret_env` names; unset, empty or short is a
/// startup error naming the variable (never an unkeyed id). The checks are
/// `ratelimit check`'s too.
fn service_id_key(s: &crate::config::ServiceConfig) -> Result<ServiceIdKey, SetupError> {
    crate::config::check::service_id_key(s)
        .map_err(|(field, message)| SetupError::new("service", format!("[service] {field}: {message}")))
}

impl Runtime {
    pub(crate) async fn build(
        config: Config,
        clock: AnyClock,
        jwt: Option<JwtVerifier>,
        sweep: bool,
    ) -> Result<Runtime, SetupError> {
        let store = config
            .build_store()
            .map_err(|e| SetupError::caused_by("store", "[store]: ", e))?;
        let header_budget = HeaderBudget::new(config.header_keys, config.store.new_keys_per_network, clock.clone())
            .map_err(|e| SetupError::caused_by("header_keys", "[header_keys]: ", e))?;
        let jwt = match jwt {
            Some(v) => Some(v),
            None => config
                .jwt_verifier()
                .await
                .map_err(|e| SetupError::caused_by("jwt", "[jwt]: ", e))?,
        };
        let (service, service_ids) = match &config.service {
            None => (None, None),
            Some(s) => {
                let ids = service_id_key(s)?;
                let http = HttpLimitService::new(&s.url)
                    .map_err(|e| SetupError::caused_by("service", "[service] url: ", e))?;
                let settings = CacheSettings {
                    ttl: s.ttl,
                    negative_ttl: s.negative_ttl,
                    timeout: s.timeout,
                    max_entries: s.max_entries,
                    ..CacheSettings::default()
                };
                let cache = ServiceCache::new(http, settings)
                    .map_err(|e| SetupError::caused_by("service", "[service]: ", e))?;
                (Some(cache), Some(ids))
            }
        };
        #[cfg(feature = "redis")]
        let gate = match &config.global {
            Some(g) => Some(super::gate::start_gate(g, &clock)?),
            None => None,
        };
        #[cfg(not(feature = "redis"))]
        if config.global.is_some() {
            return Err(SetupError::new(
                "global",
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
            service_ids,
            observer: Observer::default(),
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
            self.observer.no_peer(route);
            return ClientKey::UnknownPeer;
        };
        ClientKey::Ip(config.ip.client_key(peer.ip(), &parts.headers))
    }

    /// Decides one request on one route: key, limit, check.
    pub(crate) fn decide<K: KeySource, R: FinalResolver>(
        &self,
        parts: &Parts,
        route: &RouteSpec<'_>,
        name: RouteName,
        key: &K,
        chain: &R,
    ) -> Outcome {
        let config = self.config.load();
        if let Some(series) = route.series {
            if series.needs_check(Arc::as_ptr(&config) as usize) {
                self.observer.check_route(&config, route, self.service.is_some());
            }
        }
        let address = self.address(&config, parts, route.name);
        let mut cx = KeyContext::with_address(parts, address, &self.key_hasher)
            .verifier(self.jwt.as_ref())
            .header_values(&self.header_budget)
            .network(&config.ip);
        let client = key.extract(&mut cx);
        // Verify at most once per decision: a claim key that found no
        // (usable) claims leaves the request anonymous for the chain too.
        if !cx.claims_checked() && route.wants_claims {
            cx.claims();
        }
        let mut ctx = ResolveContext::new(&*config, route.name, cx.found_claims()).with_service(self.service.as_ref());
        if let (true, Some(ids)) = (route.wants_service, &self.service_ids) {
            ctx = ctx.with_client(ids.client_id(key, &cx, &client));
        }
        let resolved = chain.resolve_final(&ctx);
        let overrides = config.route(route.name);
        let cost = overrides.and_then(|r| r.cost).unwrap_or(route.cost);
        let shadow = overrides.and_then(|r| r.shadow).unwrap_or(route.shadow);

        // Address and header keys belong to the client's network, which
        // brings a bounded number of new keys into the store; a verified
        // claim or an application's key does not.
        let cell = match (client, cx.network_of()) {
            (ClientKey::Ip(_) | ClientKey::Header(_), Some(net)) => {
                self.limiter.grouped_cell_key(route.id, &client, &net)
            }
            _ => self.limiter.cell_key(route.id, &client),
        };
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
            cost,
            quota: resolved.quota,
            profile: resolved.profile,
            route: name,
            shadow,
            style: config.headers,
            claims_checked: cx.claims_checked(),
            claims: cx.take_claims(),
        };
        self.observer.record(route, &outcome, || self.limiter.clock().now());
        outcome
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
        let name = RouteName::Shared(Arc::clone(&rule.name));
        Some(self.decide(parts, &route, name, &rule.key, &rule.resolve))
    }
}
