//! What `#[rate_limit]` handlers run: the `Admit` extractor decides before
//! any other extractor or the body, and `Limited` adds the headers to the
//! handler's own response.

// The extractor's rejection is axum's `Response` (what axum sends); boxing
// it would add an allocation to every rejection for nothing.
#![allow(clippy::result_large_err)]

use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use super::observe::{Once, RouteSeries};
use super::reject::Rejection;
use super::respond::{Outcome, RouteName};
use super::route::RouteSpec;
use super::RateLimit;
use crate::claims::VerifiedClaims;
use crate::key::KeySource;
use crate::resolve::FinalResolver;

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
    /// The route's cell namespace.
    const ID: u32 = super::route_id(Self::NAME);
    /// `cost = N`.
    const COST: u32;
    /// `shadow`.
    const SHADOW: bool;
    /// The chain has a `jwt` step.
    const WANTS_CLAIMS: bool;
    /// The chain has a `service` step.
    const WANTS_SERVICE: bool;
    /// The profiles the chain names (`profile("..")` steps).
    const PROFILES: &'static [&'static str];
    /// The key source type.
    type Key: KeySource + 'static;
    /// The resolver chain type.
    type Chain: FinalResolver + 'static;
    /// The key source.
    fn key() -> &'static Self::Key;
    /// The resolver chain.
    fn chain() -> &'static Self::Chain;
    /// The route's metric handles (a `static` per route).
    fn series() -> &'static RouteSeries;
    /// The route's own rejection (`reject = path`): `None` leaves it to the
    /// builder's hook ([`RateLimitBuilder::rejection`](super::RateLimitBuilder::rejection)),
    /// else the default problem+json.
    fn reject(_rejection: &Rejection<'_>) -> Option<Response> {
        None
    }
}

/// Where an [`Admit`] finds the runtime: the router's state when it is the
/// `RateLimit` itself, else the one [`RateLimitLayer`](super::RateLimitLayer)
/// installed, else the request's extensions (the attribute's default).
#[derive(Debug)]
pub enum Auto {}

/// Where an [`Admit`] finds the runtime: in the router's state, through
/// axum's [`FromRef`](axum::extract::FromRef) (`#[rate_limit(..., state)]`,
/// with `#[derive(FromRef)]` on the application's state). No layer, no
/// allocation: one reference count taken and dropped per request.
#[derive(Debug)]
pub enum FromState {}

/// Proof that a request was admitted on route `R` (or is on a shadow
/// route), carrying what its response headers need. `M` says where the
/// runtime is found: [`Auto`] or [`FromState`].
#[derive(Debug)]
pub struct Admit<R, M = Auto> {
    outcome: Outcome,
    _rule: PhantomData<fn() -> (R, M)>,
}

impl<R, M> Admit<R, M> {
    /// The decision and the limit that applied.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// Wraps the handler's response so it gets the rate-limit headers.
    pub fn finish<T>(self, response: T) -> Limited<T> {
        Limited {
            response,
            outcome: self.outcome,
        }
    }
}

/// Decides a request for route `R` with the installed runtime: the router's
/// state when it is the `RateLimit` itself, else the one `RateLimitLayer`
/// installed for the request, else one in the request's extensions.
pub(crate) fn admit<R: Rule>(parts: &Parts, state: Option<&RateLimit>) -> Result<Outcome, Response> {
    let spec = RouteSpec {
        name: R::NAME,
        id: R::ID,
        cost: R::COST,
        shadow: R::SHADOW,
        wants_claims: R::WANTS_CLAIMS,
        wants_service: R::WANTS_SERVICE,
        series: Some(R::series()),
        profiles: R::PROFILES,
    };
    let decide = |rt: &RateLimit| {
        let outcome = rt
            .inner
            .decide(parts, &spec, RouteName::Static(R::NAME), R::key(), R::chain());
        if outcome.rejects() {
            let outer = parts.extensions.get::<super::respond::OuterWait>().copied();
            Err(rt.inner.reject_route(&outcome, parts, outer, R::reject))
        } else {
            Ok(outcome)
        }
    };
    if let Some(rt) = state {
        return decide(rt);
    }
    if let Ok(result) = CURRENT.try_with(decide) {
        return result;
    }
    match parts.extensions.get::<RateLimit>() {
        Some(rt) => decide(rt),
        None => Err(missing_limiter(R::NAME)),
    }
}

static MISSING_LOGGED: Once = Once::new();

/// A limited route with no runtime: never served unlimited.
fn missing_limiter(route: &'static str) -> Response {
    metrics::counter!(super::observe::MISSING_LIMITER, "route" => route).increment(1);
    if MISSING_LOGGED.first() {
        tracing::error!(
            target: "ratelimit",
            route,
            "#[rate_limit] route reached without a rate limiter: add `.layer(rate_limit.layer())` to the router \
             (answering 500 rather than serving it unlimited)"
        );
    }
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Rate limiter not installed",
        "status": 500,
        "detail": format!("route {route:?} is rate limited, but no rate limiter is installed on this router"),
    });
    (
        http::StatusCode::INTERNAL_SERVER_ERROR,
        [(http::header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

impl<R: Rule, S: Send + Sync + 'static> FromRequestParts<S> for Admit<R, Auto> {
    type Rejection = Response;

    // Decides synchronously: the future is only the result (a smaller
    // handler future, less to move).
    fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> impl std::future::Future<Output = Result<Self, Self::Rejection>> + Send {
        let state = (state as &dyn std::any::Any).downcast_ref::<RateLimit>();
        std::future::ready(Self::decide(parts, state))
    }
}

impl<R: Rule, S: Send + Sync> FromRequestParts<S> for Admit<R, FromState>
where
    RateLimit: FromRef<S>,
{
    type Rejection = Response;

    fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> impl std::future::Future<Output = Result<Self, Self::Rejection>> + Send {
        let rt = RateLimit::from_ref(state);
        std::future::ready(Self::decide(parts, Some(&rt)))
    }
}

impl<R: Rule, M> Admit<R, M> {
    fn decide(parts: &mut Parts, state: Option<&RateLimit>) -> Result<Self, Response> {
        let mut outcome = admit::<R>(parts, state)?;
        // Claims this crate verified are handed to the handler
        // (`Extension<VerifiedClaims>`), so it need not verify again.
        if let Some(claims) = outcome.claims.take() {
            if parts.extensions.get::<VerifiedClaims>().is_none() {
                parts.extensions.insert(claims);
            }
        }
        Ok(Admit {
            outcome,
            _rule: PhantomData,
        })
    }
}

/// A handler's response with the rate-limit headers of its decision.
#[derive(Debug)]
pub struct Limited<T> {
    response: T,
    outcome: Outcome,
}

impl<T> Limited<T> {
    /// The handler's own response.
    pub fn into_inner(self) -> T {
        self.response
    }
}

impl<T: IntoResponse> IntoResponse for Limited<T> {
    fn into_response(self) -> Response {
        let mut response = self.response.into_response();
        // Innermost: no other rule's headers can be here yet.
        self.outcome.write_headers_over(response.headers_mut());
        response
    }
}
