//! `RateLimitLayer`: installs the runtime for `#[rate_limit]` handlers and
//! applies `[[rules]]` from the configuration to any `tower` service.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::Body as AxumBody;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tower_layer::Layer;
use tower_service::Service;

use super::handler::CURRENT;
use super::outcome::Outcome;
use super::permits::Permits;
use super::rules::Decided;
use super::RateLimit;

/// The `tower::Layer` of a [`RateLimit`]: see [`RateLimit::layer`].
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    pub(crate) rt: RateLimit,
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            rt: self.rt.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct RateLimitService<S> {
    inner: S,
    rt: RateLimit,
}

impl<S, B, ResBody> Service<Request<B>> for RateLimitService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    // axum's body: an axum route's own body passes through as it is (axum
    // boxes any other body type, one allocation per request), and a
    // rejection, a metered body or one holding permits is wrapped.
    type Response = Response<AxumBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        if self.rt.inner.is_probe(&parts.method) {
            if let Some(answer) = self.rt.inner.probe_rules(&parts) {
                return ResponseFuture {
                    state: State::Rejected { response: Some(answer) },
                };
            }
        }
        // Read before the decision when a rule is charged by size: time
        // repays that charge from then on, which bounds what a refund
        // hands back.
        let mut charged_at = 0;
        let (mut decided, permits) = match self.rt.inner.decide_rules(&parts, &mut charged_at) {
            Some((decided, permits)) => (Some(decided), permits),
            None => (None, Permits::default()),
        };
        if let Some(d) = decided.as_ref().filter(|d| d.outcomes().iter().any(Outcome::rejects)) {
            // An outer layer's wait (it admitted, with nothing left) is
            // this refusal's too: the outer layer raises Retry-After to it,
            // and the body must say the same number.
            let outer = parts.extensions.get::<super::outcome::OuterWait>().copied();
            let rejection = self.rt.inner.reject_rule(d.outcomes(), &parts, outer);
            return ResponseFuture {
                state: State::Rejected {
                    response: Some(rejection),
                },
            };
        }
        // Claims a rule verified are handed on (to a `#[rate_limit]`
        // handler, or the application), so nothing verifies them twice.
        if let Some(d) = decided.as_mut() {
            // What these rules need before the client's next request: a
            // refusal from beneath tells the whole wait, in its body too.
            // The longest of every layer's: an outer layer's wait is not
            // replaced by a shorter one from a layer nested inside it.
            let outer = parts.extensions.get::<super::outcome::OuterWait>().map_or(0, |w| w.0);
            let own = d.outcomes().iter().map(Outcome::outer_wait_secs).max().unwrap_or(0);
            let wait = own.max(outer);
            if wait > 0 {
                parts.extensions.insert(super::outcome::OuterWait(wait));
            }
            let upstream = parts
                .extensions
                .get::<crate::runtime::claims::VerifiedClaims>()
                .is_some();
            let mut claims = None;
            let mut checked = false;
            for o in d.outcomes_mut() {
                checked |= o.claims_checked;
                if claims.is_none() {
                    claims = o.claims.take();
                }
            }
            match claims {
                Some(claims) if !upstream => {
                    parts.extensions.insert(claims);
                }
                // Looked at and found wanting: say so (a zero-sized marker,
                // no allocation), so nothing verifies the token again.
                None if checked => {
                    parts.extensions.insert(crate::runtime::claims::NotVerified);
                }
                _ => {}
            }
        }
        // A rule charged by the response's size: the body settles the
        // reservation once it has been sent.
        let meter = decided
            .as_ref()
            .filter(|d| d.outcomes().iter().any(|o| o.bytes_per_unit.is_some()))
            .map(|d| super::Charge::reserve(&self.rt, d.outcomes(), charged_at));
        let future = self.inner.call(Request::from_parts(parts, body));
        ResponseFuture {
            state: State::Inner {
                future: CURRENT.scope(self.rt.clone(), future),
                outcome: decided,
                meter,
                permits,
            },
        }
    }
}

pin_project! {
    /// The response future of [`RateLimitService`].
    pub struct ResponseFuture<F: Future> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F: Future> {
        Rejected { response: Option<Response<Bytes>> },
        Inner {
            #[pin] future: TaskLocalFuture<RateLimit, F>,
            outcome: Option<Decided>,
            meter: Option<super::Charge>,
            // Held until the response body has been sent.
            permits: Permits,
        },
    }
}

impl<F: Future> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Output = Result<Response<AxumBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Rejected { response } => {
                match response
                    .take()
                    .map(|r| r.map(|data| AxumBody::new(LimitBody::<AxumBody>::rejected(data))))
                {
                    Some(r) => Poll::Ready(Ok(r)),
                    // Polled after completion: a contract violation by the
                    // caller, reported as tower's futures do (a future that
                    // stayed pending would hide it).
                    None => panic!("ratelimit::axum::ResponseFuture polled after completion"),
                }
            }
            StateProj::Inner {
                future,
                outcome,
                meter,
                permits,
            } => {
                let mut response = ready!(future.poll(cx))?;
                match outcome.take() {
                    Some(Decided::One(o)) => o.write_headers(response.headers_mut()),
                    Some(Decided::Many(stack)) => super::outcome::write_stack(&stack, response.headers_mut(), true),
                    None => {}
                }
                // Held until the body has been sent; an empty body gives
                // them back here.
                let permits = std::mem::take(permits);
                let hold = permits.held_by(response.body());
                let response = match meter.take() {
                    // The common case: the inner body as it is (no
                    // allocation when it is axum's).
                    None if !hold => response.map(AxumBody::new),
                    meter => response.map(|body| {
                        let mut body = match meter {
                            Some(charge) => LimitBody::metered(body, charge),
                            None => LimitBody::inner(body),
                        };
                        if hold {
                            body.permits = permits;
                        }
                        AxumBody::new(body)
                    }),
                };
                Poll::Ready(Ok(response))
            }
        }
    }
}

pin_project! {
    /// The response body of [`RateLimitService`] when it is not the inner
    /// service's own: the problem+json of a rejection, a body charged by
    /// its size, or one holding the request's permits.
    pub(crate) struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
        // The request's permits (`concurrency`), given back when the body
        // ends, fails or is dropped.
        permits: Permits,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Full { data: Option<Bytes> },
        Inner { #[pin] body: B },
        Metered { #[pin] body: super::meter::Metered<B> },
    }
}

impl<B> std::fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitBody").finish_non_exhaustive()
    }
}

impl<B: Body> LimitBody<B> {
    fn metered(body: B, charge: super::Charge) -> Self {
        LimitBody {
            kind: Kind::Metered {
                body: super::meter::Metered::new(body, charge),
            },
            permits: Permits::default(),
        }
    }
}

impl<B> LimitBody<B> {
    fn inner(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
            permits: Permits::default(),
        }
    }
    fn rejected(data: Bytes) -> Self {
        // An empty body ends with the head (a gRPC refusal is
        // "Trailers-Only": one HEADERS frame with END_STREAM).
        LimitBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            permits: Permits::default(),
        }
    }
}

impl<B> Body for LimitBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let polled = match this.kind.project() {
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Metered { body } => body.poll_frame(cx),
        };
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) && !this.permits.is_empty() {
            // Sent, or failed: the request is over.
            *this.permits = Permits::default();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data } => data.is_none(),
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Metered { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Kind::Inner { body } => body.size_hint(),
            Kind::Metered { body } => body.size_hint(),
        }
    }
}
