//! The runtime every `#[rate_limit]` route and config rule shares: the
//! limiter, the running configuration, key extraction state, the token
//! verifier and the limit service.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;

use super::observer::Observer;
use super::outcome::{Outcome, OuterWait};
use super::parts::{Fleet, Service, Tokens};
use super::permits::Permits;
use super::reject::{RejectHook, Rejection};
pub(crate) use super::route::Route;
use crate::runtime::config::MAX_STACK;
use crate::runtime::config::{Config, ConfigHandle};
use crate::runtime::key::{ClientKey, HeaderBudget, KeyContext, KeyHasher, KeySource};
use crate::runtime::plan::{Ask, Plan};
use crate::runtime::resolve::{JwtTier, ResolveContext, Resolver};
use crate::{AnyClock, Clock, Limiter, MemoryStore};

pub(crate) struct Runtime {
    pub(crate) config: ConfigHandle,
    pub(crate) limiter: Arc<Limiter<MemoryStore, AnyClock>>,
    pub(crate) header_budget: HeaderBudget<AnyClock>,
    pub(crate) key_hasher: KeyHasher,
    /// The token verifier, if any.
    pub(crate) tokens: Tokens,
    /// The limit service, if any.
    pub(crate) service: Service,
    /// The key extractors `"custom:<name>"` rules may name.
    pub(super) keys: BTreeMap<String, Arc<dyn KeySource>>,
    /// The application's rejection response, if it shapes its own.
    pub(super) reject_hook: Option<RejectHook>,
    pub(super) observer: Observer,
    /// `[responses] probe_methods`: bit 0 `HEAD`, bit 1 `OPTIONS` (read on
    /// every request, so a bit mask, not a look into the configuration).
    pub(super) probes: std::sync::atomic::AtomicU8,
    /// Whether the configuration has `[[rules]]`: most layers carry none,
    /// and then need no look at the configuration at all (set with it,
    /// like `probes`).
    pub(super) has_rules: std::sync::atomic::AtomicBool,
    /// Whether a request with `[[rules]]` in force has passed through this
    /// runtime's layer (or the warning that one did not was given): an
    /// attribute route's request that did not, while rules are in force,
    /// says the layer is missing or placed too low.
    pub(super) layer_seen: std::sync::atomic::AtomicBool,
    /// Held while a reload swaps the configuration and `probes`, so two
    /// reloads cannot leave one's mask with the other's configuration.
    pub(super) reloading: std::sync::Mutex<()>,
    /// What the telemetry task last published of this runtime's counters.
    pub(crate) published: crate::shared::metrics::Published,
    /// The fleet-wide gate, when `[global]` is configured.
    pub(crate) fleet: Fleet,
    /// Requests in flight per key, made when a concurrency limit is first
    /// used.
    pub(crate) in_flight: std::sync::OnceLock<Arc<crate::engine::concurrency::ConcurrencyLimiter>>,
    /// Its size (`[store] max_keys_in_flight` at startup).
    pub(super) max_keys_in_flight: usize,
    /// The gRPC services the application named (checked against gRPC-shaped
    /// `[[rules]]` at startup and on every reload).
    pub(super) grpc_services: Vec<&'static str>,
    /// `RateLimitBuilder::routes_in`: which attribute routes it serves.
    pub(super) routes_in: &'static str,
    /// The attribute routes this runtime serves (checked at startup and on
    /// every reload).
    pub(crate) routes: Vec<&'static super::AttributeRoute>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Runtime");
        f.field("limiter", &self.limiter);
        f.field("jwt", &self.tokens.is_on());
        f.field("service", &self.service.is_on());
        f.finish_non_exhaustive()
    }
}

static HOOK_STATUS_LOGGED: super::log_gate::Once = super::log_gate::Once::new();

/// What a refusal carries whoever built it: an error status (a hook that
/// answered with a success, `Json(...)` alone say, gets 429: a refused
/// request must not look served to clients, caches and dashboards), then
/// `Retry-After` and the rate-limit headers.
fn settle<B>(rejection: &Rejection<'_>, response: &mut http::Response<B>) {
    let outcome = rejection.outcome();
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        if HOOK_STATUS_LOGGED.first() {
            tracing::warn!(
                target: "ratelimit",
                route = outcome.route(),
                status = status.as_u16(),
                "a rejection hook answered a refused request with a non-error status; sending 429 instead (set \
                 the status in the hook)"
            );
        }
        *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    }
    rejection.finish(response.headers_mut());
}

impl Runtime {
    /// The response to a request refused on a `#[rate_limit]` route: the
    /// route's own (`reject = path`), else [`Self::reject_rule`]'s.
    pub(crate) fn reject_route(
        &self,
        outcomes: &[Outcome],
        parts: &Parts,
        outer: Option<OuterWait>,
        route_hook: fn(&Rejection<'_>) -> Option<Response>,
    ) -> Response {
        if let Some(o) = outcomes.iter().find(|o| o.no_peer) {
            return no_peer_response(o.route()).map(axum::body::Body::from);
        }
        let config = self.config.load();
        let rejection = match outcomes {
            [one] => Rejection::new(one, parts, &config.responses, outer),
            stack => Rejection::stacked(stack, parts, &config.responses, outer),
        };
        if rejection.is_grpc() {
            let own = route_hook(&rejection).or_else(|| {
                self.reject_hook
                    .as_ref()
                    .map(|hook| hook(&rejection).map(axum::body::Body::from))
            });
            return super::grpc::refuse(
                rejection.route(),
                rejection.outcome(),
                rejection.retry_after_secs(),
                own,
            );
        }
        let mut response = match route_hook(&rejection) {
            Some(own) => own,
            None => self.shaped(&rejection).map(axum::body::Body::from),
        };
        settle(&rejection, &mut response);
        response
    }

    /// The response to a refused request: the builder's hook's, else the
    /// problem+json; with `Retry-After` (unless the hook set one) and the
    /// rate-limit headers whoever built it.
    pub(crate) fn reject_rule(
        &self,
        outcomes: &[Outcome],
        parts: &Parts,
        outer: Option<OuterWait>,
    ) -> http::Response<Bytes> {
        if let Some(o) = outcomes.iter().find(|o| o.no_peer) {
            return no_peer_response(o.route());
        }
        let config = self.config.load();
        let rejection = match outcomes {
            [one] => Rejection::new(one, parts, &config.responses, outer),
            stack => Rejection::stacked(stack, parts, &config.responses, outer),
        };
        if rejection.is_grpc() {
            let own = self.reject_hook.as_ref().map(|hook| hook(&rejection));
            return super::grpc::refuse(
                rejection.route(),
                rejection.outcome(),
                rejection.retry_after_secs(),
                own,
            );
        }
        let mut response = self.shaped(&rejection);
        settle(&rejection, &mut response);
        response
    }

    fn shaped(&self, rejection: &Rejection<'_>) -> http::Response<Bytes> {
        match &self.reject_hook {
            Some(hook) => hook(rejection),
            None => rejection.default_response(),
        }
    }

    /// The client's address key ([`ClientKey::UnknownPeer`] when the server
    /// gives no peer address).
    fn address(&self, config: &Config, parts: &Parts) -> ClientKey {
        let Some(peer) = crate::runtime::key::peer(parts) else {
            return ClientKey::UnknownPeer;
        };
        ClientKey::Ip(config.ip.client_key(peer.ip(), &parts.headers))
    }

    /// The plan of every route under `config` (compiled on its first use:
    /// at startup and at each reload, before requests see it).
    #[inline]
    pub(crate) fn plan<'c>(&self, config: &'c Config) -> &'c Plan {
        config.plan(super::registry::compile)
    }

    /// Decides one request on one route (key, limit, concurrency, check),
    /// handing the outcome to `then` where it lies, with the permits the
    /// request holds until its response has been sent (none when the route
    /// has no concurrency limit, or the request is refused). What `then`
    /// makes of it (an attribute route's admission, a third of the
    /// outcome's size) is all that is moved on return, not the outcome
    /// (each move of one is a `memcpy` on the request path).
    #[inline(always)]
    pub(crate) fn decide_then<P: std::ops::Deref<Target = Parts>, K: KeySource, T>(
        &self,
        config: &Config,
        parts: P,
        route: Route<'_>,
        key: &K,
        then: impl FnOnce(&mut Outcome, Permits, P) -> T,
    ) -> T {
        let mut pending = self.prepare(config, &parts, route, key);
        if pending.outcome.no_peer {
            // Nothing to decide: answered 500 (see `reject_route`).
            return then(&mut pending.outcome, Permits::default(), parts);
        }
        let (quota, cost) = (pending.outcome.quota, pending.outcome.cost);
        // A charge a concurrency refusal hands back is dated before it.
        let charged_at = if pending.concurrency.is_some() { self.now() } else { 0 };
        pending.outcome.decision = self.fleet.check(&self.limiter, &pending.outcome.held, &quota, cost);
        // Most routes have no concurrency limit: no permit to take (and no
        // call to make for none).
        let permits = match pending.concurrency {
            None => Permits::default(),
            Some(_) => {
                let admitted = !pending.outcome.rejects();
                self.hold_in_flight(std::slice::from_mut(&mut pending), admitted, charged_at)
                    .unwrap_or_default()
            }
        };
        self.observer
            .record(&pending.route, &pending.outcome, || self.limiter.clock().now());
        then(&mut pending.outcome, permits, parts)
    }

    /// Everything about one limit of a request but the check: the key's
    /// cell, its fleet id and the quota, cost and route that apply. Its
    /// outcome's decision is a placeholder until [`Self::decide_all`].
    #[inline(always)]
    pub(crate) fn prepare<'c, K: KeySource>(
        &self,
        config: &Config,
        parts: &Parts,
        route: Route<'c>,
        key: &K,
    ) -> Pending<'c> {
        let Route { plan, name, .. } = route;
        let address = self.address(config, parts);
        let cx = self
            .tokens
            .attach(KeyContext::with_address(parts, address, &self.key_hasher));
        let mut cx = cx.header_values(&self.header_budget).network(&config.ip);
        let client = key.extract(&mut cx);
        // Verify at most once per decision: a claim key that found no
        // (usable) claims leaves the request anonymous for the chain too.
        if !cx.claims_checked() && plan.asks(Ask::Jwt) {
            cx.claims();
        }
        let ctx = ResolveContext::new(config, plan.name, cx.found_claims());
        let resolved = plan.resolve(|ask| match ask {
            Ask::Jwt => JwtTier.resolve(&ctx),
            Ask::Service => self.service.answer(ctx, key, &cx, &client),
        });
        let shadow = plan.shadow;
        // The key fell back to the address, and there is none: a wiring
        // mistake, answered 500 (a shadow route never refuses: it shares
        // the one bucket), unless the configuration asks for that bucket.
        let no_peer = client == ClientKey::UnknownPeer && !config.ip.shares_bucket_without_peer();
        if no_peer {
            self.observer.no_peer(plan.name, shadow);
        }
        let no_peer = no_peer && !shadow;

        // Address and header keys belong to the client's network, which
        // brings a bounded number of new keys into the store; a verified
        // claim or an application's key does not.
        // Within its network, a subnet brings in at most a quarter of the
        // network's new keys (a /56 of a /48: one tenant of a shared
        // network leaves the others most of its budget).
        // The fleet limits a network's shared cell as one client too.
        let (cell, network) = match (client, cx.network_of(), cx.address()) {
            (ClientKey::Ip(_) | ClientKey::Header(_), Some(net), ClientKey::Ip(address)) => {
                let subnet = config.ip.subnet(address);
                let cell = self.limiter.subgrouped_cell_key(plan.id, &client, &net, &subnet);
                (cell, Some(net))
            }
            _ => (self.limiter.cell_key(plan.id, &client), None),
        };
        let fleet_id = self.fleet.id(plan.id, key, &cx, &client);
        Pending {
            route,
            cell,
            concurrency: resolved.concurrency,
            outcome: Outcome {
                decision: crate::Decision::placeholder(),
                cost: plan.cost,
                bytes_per_unit: plan.bytes_per_unit,
                quota: resolved.quota,
                profile: resolved.profile,
                route: name,
                shadow,
                style: config.headers,
                claims_checked: cx.claims_checked(),
                claims: cx.take_claims(),
                held: super::outcome::Held {
                    cell,
                    route_id: plan.id,
                    fleet_id,
                    network,
                },
                in_flight: None,
                no_peer,
            },
        }
    }

    /// Decides several limits of one request as one decision: admitted
    /// only if every enforcing limit admits (its rate and its requests in
    /// flight), and then each is charged and holds its permit; refused,
    /// none is. Shadow limits are decided on their own (they never refuse):
    /// charged when they admit an admitted request. Returns the permits of
    /// an admitted request.
    pub(crate) fn decide_all(&self, pending: &mut [Pending<'_>]) -> Option<Permits> {
        if pending.iter().any(|p| p.outcome.no_peer) {
            // Nothing to decide: answered 500 (see `reject_route`).
            return None;
        }
        let at = self.now();
        // Tuples go to 8 and rules are refused past 7 stacking: never more.
        debug_assert!(pending.len() <= MAX_STACK, "a stack of at most {MAX_STACK} limits");
        let mut checks = [crate::Check::new(crate::CellKey::new(1, 0), crate::Quota::per_second(1), 0); MAX_STACK];
        let mut decisions = [crate::Decision::placeholder(); MAX_STACK];
        let mut enforcing = [0usize; MAX_STACK];
        let mut n = 0;
        for (i, p) in pending.iter().enumerate().take(MAX_STACK) {
            if !p.outcome.shadow {
                checks[n] = crate::Check::new(p.cell, p.outcome.quota, p.outcome.cost);
                enforcing[n] = i;
                n += 1;
            }
        }
        let mut held = [pending[0].outcome.held; MAX_STACK];
        for (h, &i) in held.iter_mut().zip(&enforcing[..n]) {
            *h = pending[i].outcome.held;
        }
        let admitted = self
            .fleet
            .check_all(&self.limiter, &checks[..n], &held[..n], &mut decisions[..n]);
        for (d, &i) in decisions[..n].iter().zip(&enforcing[..n]) {
            pending[i].outcome.decision = *d;
        }
        for p in pending.iter_mut().filter(|p| p.outcome.shadow) {
            let (cell, quota, cost) = (p.cell, p.outcome.quota, p.outcome.cost);
            p.outcome.decision = if admitted {
                self.fleet.check(&self.limiter, &p.outcome.held, &quota, cost)
            } else {
                self.limiter.peek_cell(cell, &quota, cost)
            };
        }
        let permits = self.hold_in_flight(pending, admitted, at);
        for p in pending.iter() {
            // A refused request counts its refusing limits as refusals, and
            // nothing for the limits that would have admitted it (they were
            // not charged, or were handed their charge back).
            if permits.is_some() || p.outcome.decision.is_denied() || p.outcome.refused_in_flight() {
                self.observer
                    .record(&p.route, &p.outcome, || self.limiter.clock().now());
            }
        }
        permits
    }

    /// A clock reading taken before a decision, for a reservation: no later
    /// than its charge, so a refund never counts it as younger than it is.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.limiter.clock().now()
    }

    /// Whether a request with `method` is a probe (`[responses]
    /// probe_methods`): answered with what it would get, never charged.
    #[inline]
    pub(crate) fn is_probe(&self, method: &http::Method) -> bool {
        let probes = self.probes.load(std::sync::atomic::Ordering::Relaxed);
        probes != 0 && (probes & EXPLAIN != 0 || crate::runtime::config::ResponseConfig::mask_has(probes, method))
    }

    /// What a request refused by its requests in flight reports of its
    /// rate, charging nothing: the refusal the rate would add, else the room
    /// it has now (not what a charge would leave: nothing was charged).
    pub(super) fn rate_now(&self, outcome: &Outcome, cost: u32) -> crate::Decision {
        let would = self.fleet.peek(&self.limiter, &outcome.held, &outcome.quota, cost);
        if would.is_denied() {
            return would;
        }
        self.fleet.peek(&self.limiter, &outcome.held, &outcome.quota, 0)
    }

    /// Decides prepared limits as a check would, charging nothing (a
    /// probe): whether every enforcing limit would admit.
    pub(super) fn peek_all(&self, pending: &mut [Pending<'_>]) -> bool {
        let mut admitted = true;
        for p in pending.iter_mut() {
            let (quota, cost) = (p.outcome.quota, p.outcome.cost);
            let decision = self.fleet.peek(&self.limiter, &p.outcome.held, &quota, cost);
            p.outcome.decision = decision;
            admitted &= !p.outcome.rejects();
        }
        admitted
    }

    /// The answer to a probe on a `#[rate_limit]` route: 204 with the
    /// rate-limit headers the request would get, or the 429 it would get
    /// (the route's hook of the limit the refusal reports, else the
    /// builder's, else problem+json). Nothing is charged.
    pub(crate) fn answer_probe(
        &self,
        pending: &mut [Pending<'_>],
        parts: &Parts,
        hooks: &[fn(&Rejection<'_>) -> Option<Response>],
    ) -> Response {
        if self.probes.load(std::sync::atomic::Ordering::Relaxed) & EXPLAIN != 0 {
            return explained(pending);
        }
        self.peek_permits(pending);
        let admitted = self.peek_all(pending);
        // A probe is not the hot path: one small allocation is fine.
        let outcomes: Vec<Outcome> = pending.iter().map(|p| p.outcome.clone()).collect();
        if !admitted {
            let main = super::outcome::reported(&outcomes).unwrap_or(0);
            let outer = parts.extensions.get::<OuterWait>().copied();
            let hook = hooks.get(main).copied().unwrap_or(|_| None);
            return self.reject_route(&outcomes, parts, outer, hook);
        }
        let mut response = Response::new(axum::body::Body::empty());
        probe_answer(&outcomes, &mut response);
        response
    }
}

/// The probe bit of `explain`'s runtime (beside `[responses]
/// probe_methods`' `HEAD` and `OPTIONS` bits): every method is a probe.
pub(crate) const EXPLAIN: u8 = 4;

/// What `explain`'s runtime answers: the names of the limited routes the
/// request reached, in the order of their decision.
#[derive(Debug, Clone)]
pub(crate) struct Explained(pub(crate) Vec<String>);

/// `explain`'s runtime's answer to a request on limited routes.
fn explained(pending: &[Pending<'_>]) -> axum::response::Response {
    let mut response = axum::response::Response::new(axum::body::Body::empty());
    let names = pending.iter().map(|p| p.route.plan.name.to_owned()).collect();
    response.extensions_mut().insert(Explained(names));
    response
}

/// The answer to a request whose key needs the client's address when the
/// server gave none: 500, naming the fix (axum's `ConnectInfo` extractor
/// answers the same way), never a bucket shared by every client.
fn no_peer_response(route: &str) -> http::Response<Bytes> {
    super::outcome::wiring_problem(
        "Client address unavailable",
        &format!(
            "route {route:?} is rate limited by client address, but the server gives no peer address: serve the \
             router with `into_make_service_with_connect_info::<SocketAddr>()` (or insert \
             `ratelimit::key::PeerAddr`); [ip] without_peer = \"shared\" limits every such request as one client"
        ),
    )
}

/// A probe that would be admitted: 204 with the headers the request would
/// get. `no-store`: the answer is this client's room now, which no cache may
/// hand to another client or to this one later.
pub(super) fn probe_answer<B>(outcomes: &[Outcome], response: &mut http::Response<B>) {
    *response.status_mut() = http::StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    super::outcome::write_stack(outcomes, headers, false);
    headers.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
}

/// One limit of a request, prepared: [`Runtime::prepare`]'s result.
pub(crate) struct Pending<'c> {
    pub(crate) route: Route<'c>,
    pub(crate) cell: crate::CellKey,
    /// The profile's limit on requests in flight, if any.
    pub(crate) concurrency: Option<u32>,
    pub(crate) outcome: Outcome,
}
