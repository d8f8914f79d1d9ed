//! What `#[rate_limit]` handlers run: the `Admit` extractor decides before
//! any other extractor or the body, and `Admit::finish` adds the headers to
//! the handler's own response.

// The extractor's rejection is axum's `Response` (what axum sends); boxing
// it would add an allocation to every rejection for nothing.
#![allow(clippy::result_large_err)]

use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::HeaderMap;

use super::outcome::{write_triple, Outcome, RouteName, Triple};
use super::permits::Permits;
use super::registry::RouteSlot;
use super::reject::Rejection;
use super::runtime::Route;
use super::RateLimit;
use super::{log_gate::Once, series::RouteSeries};
use crate::runtime::claims::VerifiedClaims;
use crate::runtime::config::Config;
use crate::runtime::key::KeySource;

tokio::task_local! {
    /// The runtime installed by `RateLimitLayer` for the request being
    /// served: a task-local rather than a request extension because
    /// inserting an extension allocates on every request.
    pub(crate) static CURRENT: RateLimit;
}

/// A route's rule, as `#[rate_limit]` compiles it: one zero-sized type per
/// handler with everything known at compile time.
pub trait Rule: Send + Sync + 'static {
    /// The stable route name (`name = "..."`, or the handler's path).
    const NAME: &'static str;
    /// `cost = N` (with [`BYTES_PER_UNIT`](Self::BYTES_PER_UNIT), the one
    /// unit reserved before the handler runs).
    const COST: u32;
    /// `cost = response_bytes(per = N)`: `Some(N)`, the request is settled
    /// at one unit per `N` bytes of its response body.
    const BYTES_PER_UNIT: Option<u32> = None;
    /// `shadow`.
    const SHADOW: bool;
    /// The key source type.
    type Key: KeySource + 'static;
    /// The key source.
    fn key() -> &'static Self::Key;
    /// Where the route's plan is in every configuration's plan (what the
    /// attribute registers with the route's description).
    fn slot() -> &'static RouteSlot;
    /// The route's metric handles (a `static` per route).
    fn series() -> &'static RouteSeries;
    /// The handler takes a [`Charge`](super::Charge): keep the reservation
    /// for it.
    const WANTS_CHARGE: bool = false;
    /// The route's own rejection (`reject = path`): `None` leaves it to the
    /// builder's hook ([`RateLimitBuilder::rejection`](super::RateLimitBuilder::rejection)),
    /// else the default problem+json.
    fn reject(_rejection: &Rejection<'_>) -> Option<Response> {
        None
    }
}

/// Where an [`Admit`] finds the runtime: in the router's state `S`,
/// through axum's [`FromRef`] (the attribute's default). No layer, no
/// allocation; a state that is the `RateLimit` itself is borrowed, a state
/// that holds one (`#[derive(FromRef)]`) gives a clone (one reference count).
#[derive(Debug)]
pub struct InState<S>(PhantomData<fn() -> S>);

/// Where an [`Admit`] finds the runtime: the one
/// [`RateLimitLayer`](super::RateLimitLayer) installed for the request, else
/// a `RateLimit` in the request's extensions (`#[rate_limit(..., layer)]`).
/// Neither is known to the compiler: a route reached without either answers
/// 500, never unlimited.
#[derive(Debug)]
pub enum ViaLayer {}

/// A router state that holds the rate limiter: the `RateLimit` itself, or
/// any state it can be taken from with axum's [`FromRef`]. The bound that
/// `#[rate_limit]` handlers put on their router's state, so that a router
/// without the runtime is a compile error rather than a 500.
#[diagnostic::on_unimplemented(
    message = "`#[rate_limit]` looks for the `RateLimit` in the router's state, and the state `{Self}` has none",
    label = "this handler's router state `{Self}` holds no `RateLimit`",
    note = "give the router the runtime as its state (`.with_state(rate_limit)`), or hold it in a field of your \
            state with `#[derive(FromRef)]` (or an `impl FromRef<YourState> for RateLimit`)",
    note = "or, to find it through `.layer(rate_limit.layer())` instead, write `layer` in the attribute: \
            `#[rate_limit(..., layer)]`"
)]
pub trait RouterState: Send + Sync + 'static {
    /// Runs `f` with the runtime this state holds.
    fn with_rate_limit<T>(&self, f: impl FnOnce(&RateLimit) -> T) -> T;
}

// Not recommended in diagnostics: a state without the runtime is reported
// as not a `RouterState` (the message above), not as a missing `FromRef`.
#[diagnostic::do_not_recommend]
impl<S: Send + Sync + 'static> RouterState for S
where
    RateLimit: FromRef<S>,
{
    #[inline]
    fn with_rate_limit<T>(&self, f: impl FnOnce(&RateLimit) -> T) -> T {
        // The runtime as the state itself is borrowed: no reference count
        // written by every request on every core.
        match (self as &dyn std::any::Any).downcast_ref::<RateLimit>() {
            Some(rt) => f(rt),
            None => f(&RateLimit::from_ref(self)),
        }
    }
}

/// The limits of one handler: a [`Rule`] (one `#[rate_limit]` attribute),
/// or a tuple of them (several attributes on one handler, stacked: one
/// all-or-nothing decision; see [`Limiter::check_all`](crate::Limiter::check_all)).
pub trait Rules: Send + Sync + 'static {
    /// What the decision carries to the response: one [`Outcome`], or one
    /// per stacked limit.
    type Outcomes: Report;
    /// The first limit's route name.
    const NAME: &'static str;
    /// The handler takes a [`Charge`](super::Charge).
    const WANTS_CHARGE: bool;
    /// A limit is charged by the response's size (a `[routes]` override
    /// can turn that off at run time, never on).
    const METERED: bool = false;
    /// Decides the request with `rt`: when admitted (or only shadow limits
    /// refused), what its response needs (see [`Admitted`]), else the 429.
    /// `charged_at`: a clock reading taken before the decision, for a
    /// route that settles its charge.
    #[doc(hidden)]
    fn admit(parts: &mut Parts, rt: &RateLimit, charged_at: u64) -> Result<Admitted<Self::Outcomes>, Response>;
    /// Answers a probe (a request whose method is one of `[responses]
    /// probe_methods`) with what the request would get, charging nothing.
    #[doc(hidden)]
    fn probe(parts: &Parts, rt: &RateLimit) -> Response;
}

/// The outcomes of a request's limits, as a response reports them.
pub trait Report: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// Every limit that applied, in declaration order.
    fn outcomes(&self) -> &[Outcome];
    /// Every limit that applied, to take claims from.
    #[doc(hidden)]
    fn outcomes_mut(&mut self) -> &mut [Outcome];
    /// Writes the rate-limit headers on the handler's own response.
    #[doc(hidden)]
    fn write_over(&self, headers: &mut http::HeaderMap);
    /// The limit the `RateLimit-Limit` triple reports (of stacked limits,
    /// the refusing one with the longest wait, else the tightest).
    #[doc(hidden)]
    fn reported(&self) -> Option<&Outcome> {
        let all = self.outcomes();
        super::outcome::reported(all).map(|i| &all[i])
    }
}

impl Report for Outcome {
    fn outcomes(&self) -> &[Outcome] {
        std::slice::from_ref(self)
    }
    fn outcomes_mut(&mut self) -> &mut [Outcome] {
        std::slice::from_mut(self)
    }
    fn write_over(&self, headers: &mut http::HeaderMap) {
        // Innermost: no other rule's headers can be here yet.
        self.write_headers_over(headers);
    }
    fn reported(&self) -> Option<&Outcome> {
        Some(self)
    }
}

impl<const N: usize> Report for [Outcome; N] {
    fn outcomes(&self) -> &[Outcome] {
        self
    }
    fn outcomes_mut(&mut self) -> &mut [Outcome] {
        self
    }
    fn write_over(&self, headers: &mut http::HeaderMap) {
        super::outcome::write_stack(self, headers, false);
    }
}

/// The route of rule `R` under `config`'s plan; `None` for a rule type
/// the registry does not list (see [`unregistered`]).
#[inline(always)]
fn route<'c, R: Rule>(rt: &RateLimit, config: &'c Config) -> Option<Route<'c>> {
    Some(Route {
        plan: rt.inner.plan(config).attribute.get(R::slot().index())?,
        name: RouteName::Static(R::NAME),
        series: Some(R::series()),
    })
}

impl<R: Rule> Rules for R {
    type Outcomes = Outcome;
    const NAME: &'static str = R::NAME;
    const WANTS_CHARGE: bool = R::WANTS_CHARGE;
    const METERED: bool = R::BYTES_PER_UNIT.is_some();

    #[inline(always)]
    fn admit(parts: &mut Parts, rt: &RateLimit, charged_at: u64) -> Result<Admitted<Outcome>, Response> {
        rt.inner.check_layer_wired(R::NAME);
        let config = super::config_cache::local(&rt.inner.config);
        let route = route::<R>(rt, &config).ok_or_else(|| unregistered(R::NAME))?;
        rt.inner.decide_then(
            &config,
            parts,
            route,
            R::key(),
            #[inline(always)]
            |outcome, permits, parts| {
                if outcome.rejects() {
                    return Err(refuse::<R>(outcome, parts, rt));
                }
                Ok(Admitted::new::<Self>(outcome, permits, parts, rt, charged_at))
            },
        )
    }

    fn probe(parts: &Parts, rt: &RateLimit) -> Response {
        let config = super::config_cache::local(&rt.inner.config);
        let Some(route) = route::<R>(rt, &config) else {
            return unregistered(R::NAME);
        };
        let mut pending = [rt.inner.prepare(&config, parts, route, R::key())];
        rt.inner.answer_probe(&mut pending, parts, &[R::reject])
    }
}

/// The 429 of a request the route of `R` refused (out of the admitted
/// path, which is then small enough to be inlined whole).
#[cold]
#[inline(never)]
fn refuse<R: Rule>(outcome: &Outcome, parts: &Parts, rt: &RateLimit) -> Response {
    let outer = parts.extensions.get::<super::outcome::OuterWait>().copied();
    rt.inner
        .reject_route(std::slice::from_ref(outcome), parts, outer, R::reject)
}

/// `impl Rules for (A, B, ...)`: stacked attributes.
macro_rules! stacked {
    ($n:literal; $first:ident $($rule:ident)*) => {
        impl<$first: Rule, $($rule: Rule),*> Rules for ($first, $($rule),*) {
            type Outcomes = [Outcome; $n];
            const NAME: &'static str = $first::NAME;
            const WANTS_CHARGE: bool = $first::WANTS_CHARGE $(|| $rule::WANTS_CHARGE)*;
            const METERED: bool = $first::BYTES_PER_UNIT.is_some() $(|| $rule::BYTES_PER_UNIT.is_some())*;

            fn admit(parts: &mut Parts, rt: &RateLimit, charged_at: u64) -> Result<Admitted<[Outcome; $n]>, Response> {
                rt.inner.check_layer_wired($first::NAME);
                let config = super::config_cache::local(&rt.inner.config);
                let mut pending = [
                    rt.inner.prepare(&config, parts, route::<$first>(rt, &config).ok_or_else(|| unregistered($first::NAME))?, $first::key()),
                    $(rt.inner.prepare(&config, parts, route::<$rule>(rt, &config).ok_or_else(|| unregistered($rule::NAME))?, $rule::key())),*
                ];
                let admitted = rt.inner.decide_all(&mut pending);
                let mut outcomes = pending.map(|p| p.outcome);
                if let Some(permits) = admitted {
                    return Ok(Admitted::new::<Self>(&mut outcomes, permits, parts, rt, charged_at));
                }
                // The hook of the limit the refusal reports.
                let hooks: [fn(&Rejection<'_>) -> Option<Response>; $n] = [$first::reject, $($rule::reject),*];
                let main = super::outcome::reported(&outcomes).unwrap_or(0);
                let outer = parts.extensions.get::<super::outcome::OuterWait>().copied();
                Err(rt.inner.reject_route(&outcomes, parts, outer, hooks[main]))
            }

            fn probe(parts: &Parts, rt: &RateLimit) -> Response {
                let config = super::config_cache::local(&rt.inner.config);
                let mut pending = [
                    rt.inner.prepare(&config, parts, match route::<$first>(rt, &config) { Some(r) => r, None => return unregistered($first::NAME) }, $first::key()),
                    $(rt.inner.prepare(&config, parts, match route::<$rule>(rt, &config) { Some(r) => r, None => return unregistered($rule::NAME) }, $rule::key())),*
                ];
                rt.inner.answer_probe(&mut pending, parts, &[$first::reject, $($rule::reject),*])
            }
        }
    };
}

stacked!(2; A B);
stacked!(3; A B C);
stacked!(4; A B C D);
stacked!(5; A B C D E);
stacked!(6; A B C D E F);
stacked!(7; A B C D E F G);
stacked!(8; A B C D E F G H);

/// Proof that a request was admitted on the route of `R` (one rule, or a
/// stack of them: see [`Rules`]), or is on a shadow route, carrying what its
/// response headers need. `M` says where the runtime is found: [`InState`]
/// or [`ViaLayer`].
#[derive(Debug)]
pub struct Admit<R: Rules, M> {
    admitted: Admitted<R::Outcomes>,
    _rule: PhantomData<fn() -> (R, M)>,
}

/// What an admitted request carries to its response: made where the
/// decision lies, and small (the handler's future carries it across its
/// await and moves it several times; the outcomes it is made from are not
/// moved again).
#[doc(hidden)]
#[derive(Debug)]
pub struct Admitted<O> {
    /// What the response will say of the decision.
    headers: Headers<O>,
    /// A route charged by its response's size: the reservation its body
    /// settles.
    meter: Option<super::Charge>,
    /// Held until the response has been sent (`concurrency`).
    permits: Permits,
}

impl<O: Report> Admitted<O> {
    /// The admission of a request `outcomes` admitted on the route of
    /// `R`, holding `permits`. A handler taking a `Charge` gets the
    /// reservation of what was charged (in the request's extensions); a
    /// route charged by its response's size keeps it for the body (the
    /// attribute refuses both on one handler). Claims this crate verified
    /// are handed to the handler (`Extension<VerifiedClaims>`), so it need
    /// not verify again.
    #[inline(always)]
    fn new<R: Rules<Outcomes = O>>(
        outcomes: &mut O,
        permits: Permits,
        parts: &mut Parts,
        rt: &RateLimit,
        charged_at: u64,
    ) -> Admitted<O> {
        let metered = R::METERED && outcomes.outcomes().iter().any(|o| o.bytes_per_unit.is_some());
        let meter = if R::WANTS_CHARGE || metered {
            let charge = super::Charge::reserve(rt, outcomes.outcomes(), charged_at);
            if R::WANTS_CHARGE {
                parts.extensions.insert(super::charge::Reservation(Some(charge)));
                None
            } else {
                super::meter::meter_of(Some(charge))
            }
        } else {
            None
        };
        for o in outcomes.outcomes_mut() {
            if let Some(claims) = o.claims.take() {
                if parts.extensions.get::<VerifiedClaims>().is_none() {
                    parts.extensions.insert(claims);
                }
            }
        }
        Admitted {
            headers: Headers::of(outcomes),
            meter,
            permits,
        }
    }
}

impl<R: Rules, M> Admit<R, M> {
    /// The handler's response with the rate-limit headers, its body
    /// settling a metered charge and holding the permits until it has been
    /// sent. Built here, as the handler's future ends, not when axum turns
    /// the handler's output into a response: what leaves the handler is
    /// then a `Response`, not the response plus every outcome (each move of
    /// those is a `memcpy` on the request path).
    #[inline]
    pub fn finish<T: IntoResponse>(self, response: T) -> Limited {
        let Admitted {
            headers,
            meter,
            permits,
        } = self.admitted;
        let mut response = response.into_response();
        headers.write_over(response.headers_mut());
        Limited(match meter {
            // Charged by its size: the body settles the reservation once
            // it has been sent (and gives the permits back then).
            Some(charge) => response.map(|body| {
                let metered = super::meter::Metered::new(body, charge);
                if permits.is_empty() {
                    axum::body::Body::new(metered)
                } else {
                    axum::body::Body::new(permits.hold(metered))
                }
            }),
            // Held until the body has been sent; an empty body gives them
            // back here (no wrapper, no allocation).
            None if permits.held_by(response.body()) => response.map(|body| axum::body::Body::new(permits.hold(body))),
            None => response,
        })
    }
}

static UNREGISTERED_LOGGED: Once = Once::new();

/// A limited route whose rule type the registry does not list (its
/// registration did not run: a platform where `inventory` cannot collect):
/// it has no plan, and is never served unlimited.
#[cold]
#[inline(never)]
fn unregistered(route: &'static str) -> Response {
    if UNREGISTERED_LOGGED.first() {
        tracing::error!(
            target: "ratelimit",
            route,
            "#[rate_limit] route not in the registry of routes (its registration did not run on this platform): \
             answering 500 rather than serving it unlimited"
        );
    }
    super::outcome::wiring_problem(
        "Rate limit not registered",
        &format!("route {route:?} is rate limited, but its limit is not registered with the rate limiter"),
    )
    .map(axum::body::Body::from)
}

static MISSING_LOGGED: Once = Once::new();

/// A limited route with no runtime: never served unlimited.
fn missing_limiter(route: &'static str) -> Response {
    metrics::counter!(crate::shared::metrics::MISSING_LIMITER, "route" => route).increment(1);
    if MISSING_LOGGED.first() {
        tracing::error!(
            target: "ratelimit",
            route,
            "#[rate_limit(..., layer)] route reached without a rate limiter: add `.layer(rate_limit.layer())` to \
             the router, or drop `layer` from the attribute and give the router the runtime as (part of) its state \
             (answering 500 rather than serving it unlimited)"
        );
    }
    super::outcome::wiring_problem(
        "Rate limiter not installed",
        &format!("route {route:?} is rate limited, but no rate limiter is installed on this router"),
    )
    .map(axum::body::Body::from)
}

impl<R: Rules, S: RouterState> FromRequestParts<S> for Admit<R, InState<S>> {
    type Rejection = Response;

    // Decides synchronously: the future is only the result (a smaller
    // handler future, less to move).
    fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> impl std::future::Future<Output = Result<Self, Self::Rejection>> + Send {
        std::future::ready(state.with_rate_limit(|rt| Self::decide_with(parts, rt)))
    }
}

impl<R: Rules, S: Send + Sync> FromRequestParts<S> for Admit<R, ViaLayer> {
    type Rejection = Response;

    fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> impl std::future::Future<Output = Result<Self, Self::Rejection>> + Send {
        let admitted = match CURRENT.try_with(|rt| Self::decide_with(parts, rt)) {
            Ok(admitted) => admitted,
            Err(_) => match parts.extensions.get::<RateLimit>().cloned() {
                Some(rt) => Self::decide_with(parts, &rt),
                None => Err(missing_limiter(R::NAME)),
            },
        };
        std::future::ready(admitted)
    }
}

impl<R: Rules, M> Admit<R, M> {
    /// Decides with `rt`: the admission is made where the decision lies
    /// ([`Rules::admit`]).
    #[inline(always)]
    fn decide_with(parts: &mut Parts, rt: &RateLimit) -> Result<Self, Response> {
        if rt.inner.is_probe(&parts.method) {
            return Err(R::probe(parts, rt));
        }
        // A route that may settle reads the clock before its decision: time
        // repays a charge from then on, which bounds what a refund hands back.
        let charged_at = if R::WANTS_CHARGE || R::METERED {
            rt.inner.now()
        } else {
            0
        };
        Ok(Admit {
            admitted: R::admit(parts, rt, charged_at)?,
            _rule: PhantomData,
        })
    }
}

/// A handler's response with the rate-limit headers of its decision
/// ([`Admit::finish`]).
#[derive(Debug)]
pub struct Limited(Response);

impl IntoResponse for Limited {
    #[inline]
    fn into_response(self) -> Response {
        self.0
    }
}

/// The rate-limit headers of an admitted request's response, fixed by its
/// decision and kept while the handler runs. The `-06` triple (the default
/// style) is three numbers; structured fields name every limit, and keep
/// the outcomes, boxed: the handler's future carries this across its await
/// and moves it several times, and a move of the outcomes (200 bytes each)
/// is a `memcpy` (structured fields allocate their values anyway).
#[derive(Debug)]
pub(crate) enum Headers<O> {
    /// `headers = "none"`.
    None,
    Triple(Triple),
    Outcomes(Box<O>),
}

impl<O: Report> Headers<O> {
    /// The headers of `outcomes` (one limit, or a stack of them), as
    /// [`Report::write_over`](Report::write_over) writes them.
    #[inline]
    pub(crate) fn of(outcomes: &O) -> Headers<O> {
        let Some(first) = outcomes.reported() else {
            return Headers::None;
        };
        if first.style.structured() {
            Headers::Outcomes(Box::new(outcomes.clone()))
        } else if first.style.draft06() {
            Headers::Triple(first.triple())
        } else {
            Headers::None
        }
    }

    /// Writes them on the handler's own response.
    pub(crate) fn write_over(&self, headers: &mut HeaderMap) {
        match self {
            Headers::None => {}
            Headers::Triple(t) => write_triple(headers, *t),
            Headers::Outcomes(o) => o.write_over(headers),
        }
    }
}
