//! The runtime's optional parts as types that exist in every build: the
//! token verifier (feature `jwt`), the limit service (feature `service`)
//! and the fleet gate (feature `redis`). Without its feature a part is
//! always off, so setup and the request path read the same in every
//! build; the `cfg`s stay here, at the module's boundary.

use super::error::SetupError;
use super::outcome::Held;
use crate::runtime::config::Config;
use crate::runtime::key::{ClientKey, KeyContext, KeySource};
use crate::runtime::resolve::ResolveContext;
use crate::{Check, Clock, Decision, Quota};

#[cfg(feature = "jwt")]
use crate::runtime::jwt::JwtVerifier;
#[cfg(feature = "service")]
use crate::runtime::service::{BoxLimitService, CacheSettings, HttpLimitService, ServiceCache, ServiceIdKey};

/// What verifies bearer tokens: the builder's verifier, else the one
/// `[jwt]` describes; none without one (or without the `jwt` feature).
#[derive(Default)]
pub(crate) struct Tokens {
    #[cfg(feature = "jwt")]
    verifier: Option<JwtVerifier>,
}

/// The builder's own parts, which the configuration cannot describe.
#[derive(Default)]
pub(crate) struct Given {
    #[cfg(feature = "jwt")]
    pub(crate) verifier: Option<JwtVerifier>,
    #[cfg(feature = "service")]
    pub(crate) service: Option<BoxLimitService>,
}

impl Tokens {
    /// The verifier `given` (the builder's), else the one `config`'s
    /// `[jwt]` describes (reading key files, fetching a JWKS URL).
    #[cfg(feature = "jwt")]
    pub(crate) async fn start(config: &Config, given: &mut Given) -> Result<Tokens, SetupError> {
        let verifier = match given.verifier.take() {
            Some(v) => Some(v),
            None => match config.jwt.as_ref().and_then(|j| j.verification.as_ref()) {
                None => None,
                Some(v) => Some(
                    JwtVerifier::from_settings(v, &config.tls, config.ip.network_prefixes())
                        .await
                        .map_err(|e| SetupError::caused_by("jwt", "[jwt]: ", e))?,
                ),
            },
        };
        if let Some(v) = &verifier {
            tracing::info!(target: "ratelimit", "{}", v.summary());
        }
        Ok(Tokens { verifier })
    }

    /// Without `jwt`: none (a configuration that needs one was refused).
    #[cfg(not(feature = "jwt"))]
    pub(crate) async fn start(_: &Config, _: &mut Given) -> Result<Tokens, SetupError> {
        Ok(Tokens {})
    }

    /// `cx`, verifying the request's token with this verifier.
    pub(crate) fn attach<'a>(&'a self, cx: KeyContext<'a>) -> KeyContext<'a> {
        #[cfg(feature = "jwt")]
        let cx = cx.verifier(self.verifier.as_ref());
        cx
    }

    /// The verifier, if any.
    #[cfg(feature = "jwt")]
    pub(crate) fn verifier(&self) -> Option<&JwtVerifier> {
        self.verifier.as_ref()
    }

    /// Whether a verifier is running.
    pub(crate) fn is_on(&self) -> bool {
        #[cfg(feature = "jwt")]
        return self.verifier.is_some();
        #[cfg(not(feature = "jwt"))]
        false
    }
}

/// The limit service: its cache, the key of the client ids it is asked
/// about, and whether it is the builder's (not `[service] url`'s).
#[derive(Default)]
pub(crate) struct Service {
    #[cfg(feature = "service")]
    cache: Option<ServiceCache<BoxLimitService>>,
    #[cfg(feature = "service")]
    ids: Option<ServiceIdKey>,
    #[cfg(feature = "service")]
    own: bool,
}

#[cfg(feature = "service")]
const NO_SERVICE_URL: &str = "[service] url: missing; name the limit service's base URL, or give the builder a \
                              LimitService of the application's (RateLimitBuilder::limit_service)";

impl Service {
    /// The service of `config`'s `[service]`: the builder's (`given`), else
    /// an HTTP(S) client of `url`, behind a cache; none without `[service]`.
    #[cfg(feature = "service")]
    pub(crate) fn start(config: &Config, given: &mut Given) -> Result<Service, SetupError> {
        let own_service = given.service.take();
        let own = own_service.is_some();
        shape(config, own).map_err(|message| SetupError::new("service", message))?;
        let Some(s) = &config.service else {
            return Ok(Service {
                own,
                ..Service::default()
            });
        };
        // The key of the client ids: `[service] id_secret` set in code, else
        // the variable `id_secret_env` names; unset, empty or short is a
        // startup error naming the variable (never an unkeyed id). The
        // checks are `ratelimit check`'s too.
        let ids = crate::runtime::config::check::service_id_key(s)
            .map_err(|(field, message)| SetupError::new("service", format!("[service] {field}: {message}")))?;
        let service = match (own_service, &s.url) {
            (Some(own), _) => own,
            (None, Some(url)) => BoxLimitService::new(
                HttpLimitService::with_tls(url, &config.tls)
                    .map_err(|e| SetupError::caused_by("service", "[service] url: ", e))?,
            ),
            (None, None) => return Err(SetupError::new("service", NO_SERVICE_URL.to_owned())),
        };
        let settings = CacheSettings {
            ttl: s.ttl,
            negative_ttl: s.negative_ttl,
            timeout: s.timeout,
            max_entries: s.max_entries,
            ..CacheSettings::default()
        };
        let cache =
            ServiceCache::new(service, settings).map_err(|e| SetupError::caused_by("service", "[service]: ", e))?;
        Ok(Service {
            cache: Some(cache),
            ids: Some(ids),
            own,
        })
    }

    /// Without `service`: none (a configuration that needs one was refused).
    #[cfg(not(feature = "service"))]
    pub(crate) fn start(_: &Config, _: &mut Given) -> Result<Service, SetupError> {
        Ok(Service {})
    }

    /// Whether `config`'s `[service]` fits how this runtime's service is
    /// given: a reload is refused where a restart would be.
    pub(crate) fn fits(&self, config: &Config) -> Result<(), String> {
        #[cfg(feature = "service")]
        return shape(config, self.own);
        #[cfg(not(feature = "service"))]
        {
            let _ = config;
            Ok(())
        }
    }

    /// The limit service's cached answer for the request's client (the
    /// `service` step): its client id, a keyed hash of the client key, is
    /// computed here, only for a request that reaches the step. `None`
    /// without a service, on a miss (the fetch runs in the background), or
    /// when the answer names a profile `ctx`'s configuration lacks.
    pub(crate) fn answer<K: KeySource + ?Sized>(
        &self,
        ctx: ResolveContext<'_>,
        key: &K,
        cx: &KeyContext<'_>,
        client: &ClientKey,
    ) -> Option<crate::runtime::resolve::Resolved> {
        #[cfg(feature = "service")]
        {
            use crate::runtime::resolve::Resolver;
            let ids = self.ids.as_ref()?;
            let ctx = ctx
                .with_client(ids.client_id(key, cx, client))
                .with_service(self.cache.as_ref());
            crate::runtime::resolve::ConfiguredService.resolve(&ctx)
        }
        #[cfg(not(feature = "service"))]
        {
            let _ = (ctx, key, cx, client);
            None
        }
    }

    /// The cache, if a service is running.
    #[cfg(feature = "service")]
    pub(crate) fn cache(&self) -> Option<&ServiceCache<BoxLimitService>> {
        self.cache.as_ref()
    }

    /// Whether a service is running.
    pub(crate) fn is_on(&self) -> bool {
        #[cfg(feature = "service")]
        return self.cache.is_some();
        #[cfg(not(feature = "service"))]
        false
    }
}

/// Whether `config`'s `[service]` fits how the limit service is given (`own`:
/// by the builder): a builder's service needs a `[service]` without `url`,
/// else `url` names the HTTP one. Checked at startup and at every reload, so
/// a file that reloads is a file that starts.
#[cfg(feature = "service")]
fn shape(config: &Config, own: bool) -> Result<(), String> {
    match (&config.service, own) {
        (None, true) => Err(
            "a limit service was given to the builder, but the configuration has no [service] \
                             section: add one (its id_secret_env keys the client ids the service is asked about; \
                             ttl, timeout and max_entries tune its cache)"
                .to_owned(),
        ),
        (Some(s), true) if s.url.is_some() => Err("[service] url: a limit service was also given to the builder \
                                                  (RateLimitBuilder::limit_service); remove the url, or the \
                                                  builder's service"
            .to_owned()),
        (Some(s), false) if s.url.is_none() => Err(NO_SERVICE_URL.to_owned()),
        _ => Ok(()),
    }
}

/// The engine the runtime decides with.
type Engine = crate::Limiter<crate::MemoryStore, crate::AnyClock>;

/// The fleet gate of `[global]` (feature `redis`): every check also holds
/// the key to its fleet budget. Without one, checks are the engine's.
#[derive(Default)]
pub(crate) struct Fleet {
    #[cfg(feature = "redis")]
    gate: Option<std::sync::Arc<crate::fleet::FleetGate>>,
}

impl Fleet {
    /// The gate `config`'s `[global]` describes, its sync loop spawned;
    /// none without `[global]`.
    #[cfg(feature = "redis")]
    pub(crate) fn start(config: &Config, clock: &crate::AnyClock) -> Result<Fleet, SetupError> {
        let Some(g) = &config.global else {
            return Ok(Fleet::default());
        };
        // `[global] ca_file` for Redis, else `[tls] ca_file`.
        let g = crate::runtime::config::FleetConfig {
            ca_file: config.redis_ca_file().map(std::path::Path::to_path_buf),
            ..g.clone()
        };
        Ok(Fleet {
            gate: Some(super::fleet::start_gate(&g, config.profiles(), clock)?),
        })
    }

    /// Without `redis`: none (a configuration with `[global]` was refused).
    #[cfg(not(feature = "redis"))]
    pub(crate) fn start(_: &Config, _: &crate::AnyClock) -> Result<Fleet, SetupError> {
        Ok(Fleet {})
    }

    /// The gate, if any.
    #[cfg(feature = "redis")]
    pub(crate) fn gate(&self) -> Option<&crate::fleet::FleetGate> {
        self.gate.as_deref()
    }

    /// The key's fleet id on route `route_id`: a keyed hash of what the key
    /// source writes for it (0 without a gate).
    pub(crate) fn id<K: KeySource + ?Sized>(
        &self,
        route_id: u32,
        key: &K,
        cx: &KeyContext<'_>,
        client: &ClientKey,
    ) -> u64 {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            use std::hash::Hasher;
            let mut h = gate.hasher().hasher();
            h.write_u32(route_id);
            key.write_id(cx, client, &mut h);
            return h.finish();
        }
        let _ = (route_id, key, cx, client);
        0
    }

    /// Checks `cost` units of `quota` on the bucket `held` names, held to
    /// the fleet budget too when there is a gate.
    pub(crate) fn check(&self, engine: &Engine, held: &Held, quota: &Quota, cost: u32) -> Decision {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            return gate.check_id_in(engine, &request(held, quota, cost), &|| group_id(gate, held));
        }
        engine.check_cell(held.cell, quota, cost)
    }

    /// What [`Self::check`] would say, charging nothing.
    pub(crate) fn peek(&self, engine: &Engine, held: &Held, quota: &Quota, cost: u32) -> Decision {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            return gate.peek_id_in(engine, &request(held, quota, cost), &|| group_id(gate, held));
        }
        engine.peek_cell(held.cell, quota, cost)
    }

    /// Checks several limits as one decision (`held[i]`: the route and
    /// fleet ids of `checks[i]`): all charged, or none.
    pub(crate) fn check_all(
        &self,
        engine: &Engine,
        checks: &[Check],
        held: &[Held],
        decisions: &mut [Decision],
    ) -> bool {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            let mut fleet = [crate::fleet::FleetCheck::new(checks[0], 0, 0); crate::runtime::config::MAX_STACK];
            for ((slot, check), held) in fleet.iter_mut().zip(checks).zip(held) {
                *slot = request(held, &check.quota, check.cost).in_group(group_id(gate, held));
            }
            return gate.check_all_id(engine, &fleet[..checks.len()], decisions);
        }
        let _ = held;
        engine.check_all_into(checks, decisions)
    }

    /// A settled charge's surplus handed back, to the cell it was charged
    /// to (the key's own, or a shared overflow or group cell), and in the
    /// fleet count: never more than the charge, made at `charged_at`, still
    /// holds.
    pub(crate) fn refund(
        &self,
        engine: &Engine,
        held: &Held,
        quota: &Quota,
        cost: u32,
        charged: &Decision,
        charged_at: u64,
    ) {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            let request = request(held, quota, cost).in_group(group_id(gate, held));
            gate.refund_placed_id(engine, &request, charged, charged_at);
            return;
        }
        engine.refund(&Check::new(held.cell, *quota, cost), charged, charged_at);
    }

    /// A settled charge's extra units, unchecked, locally (to the cell the
    /// check `charged` was placed in) and in the fleet count: the units
    /// really charged (the debt cap may stop it short).
    pub(crate) fn charge_more(
        &self,
        engine: &Engine,
        held: &Held,
        quota: &Quota,
        cost: u32,
        charged: &Decision,
    ) -> u32 {
        #[cfg(feature = "redis")]
        if let Some(gate) = &self.gate {
            let request = request(held, quota, cost).in_group(group_id(gate, held));
            return gate.charge_more_counted(engine, &request, charged);
        }
        if charged.is_denied() {
            return 0;
        }
        let placement = crate::engine::limiter::placement_of(charged);
        engine.charge_placed_at(held.cell, quota, cost, placement, engine.clock().now())
    }
}

/// The fleet's view of a check on the bucket `held` names (its group's
/// fleet id apart: [`group_id`]).
#[cfg(feature = "redis")]
fn request(held: &Held, quota: &Quota, cost: u32) -> crate::fleet::FleetCheck {
    crate::fleet::FleetCheck::new(Check::new(held.cell, *quota, cost), held.route_id, held.fleet_id)
}

/// The fleet id of the network of the key `held` names, on its route (0
/// for a key of no network): what a request placed on the network's shared
/// cell is counted on.
#[cfg(feature = "redis")]
fn group_id(gate: &crate::fleet::FleetGate, held: &Held) -> u64 {
    held.network.map_or(0, |net| gate.group_id(held.route_id, &net))
}
