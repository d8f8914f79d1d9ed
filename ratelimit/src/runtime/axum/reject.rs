//! Rejections an application shapes itself: [`Rejection`] is what a hook
//! sees of a request turned away; the hook returns the response, and the
//! runtime adds `Retry-After` (unless the hook set one) and the rate-limit
//! headers, so a custom body never loses the contract clients rely on.

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::Response;

use super::outcome::{Outcome, OuterWait};
use crate::runtime::config::ResponseConfig;
use crate::Decision;

/// A request turned away, as a rejection hook sees it
/// ([`RateLimitBuilder::rejection`](super::RateLimitBuilder::rejection), or
/// `#[rate_limit(..., reject = path)]`).
///
/// ```
/// use ratelimit::axum::Rejection;
///
/// // A plain-text 429 for one API's older clients.
/// fn too_many(r: &Rejection<'_>) -> http::Response<String> {
///     http::Response::builder()
///         .status(429)
///         .header("content-type", "text/plain")
///         .body(format!("slow down: {} is limited, retry in {} s\n", r.route(), r.retry_after_secs()))
///         .unwrap()
/// }
/// # let _ = too_many;
/// ```
pub struct Rejection<'a> {
    outcome: &'a Outcome,
    /// Every limit of the decision (just `outcome` unless stacked).
    stack: &'a [Outcome],
    request: &'a Parts,
    responses: &'a ResponseConfig,
    retry: u64,
}

impl std::fmt::Debug for Rejection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejection")
            .field("route", &self.outcome.route())
            .field("retry_after_secs", &self.retry)
            .finish_non_exhaustive()
    }
}

impl<'a> Rejection<'a> {
    pub(crate) fn new(
        outcome: &'a Outcome,
        request: &'a Parts,
        responses: &'a ResponseConfig,
        outer: Option<OuterWait>,
    ) -> Self {
        Rejection {
            outcome,
            stack: std::slice::from_ref(outcome),
            request,
            responses,
            retry: outcome.retry_within(outer),
        }
    }

    /// A refusal by one or more limits of a stacked decision: it reports
    /// the refusing limit with the longest wait, and `Retry-After` is that
    /// wait (the longest among the refusing limits, an enclosing rule's
    /// included).
    pub(crate) fn stacked(
        stack: &'a [Outcome],
        request: &'a Parts,
        responses: &'a ResponseConfig,
        outer: Option<OuterWait>,
    ) -> Self {
        let main = super::outcome::reported(stack).unwrap_or(0);
        let outcome = &stack[main];
        let retry = stack
            .iter()
            .filter(|o| o.rejects())
            .map(|o| o.retry_within(outer))
            .max()
            .unwrap_or_else(|| outcome.retry_within(outer));
        Rejection {
            outcome,
            stack,
            request,
            responses,
            retry,
        }
    }

    /// Every limit that applied to the request, in the order they were
    /// declared (one, unless the route stacks several): the refusing ones
    /// and those that would have admitted it (charged nothing).
    pub fn outcomes(&self) -> &[Outcome] {
        self.stack
    }

    /// The policy names of every refusing limit, as the default body's
    /// `violated-policies` lists them.
    pub fn violated_policies(&self) -> Vec<String> {
        super::outcome::violated(self.stack)
    }

    /// What every refusal carries whoever built it: `Retry-After` (a
    /// hook's own is kept when no shorter) and the rate-limit headers.
    pub(crate) fn finish(&self, headers: &mut http::HeaderMap) {
        if self.stack.len() == 1 {
            self.outcome.finish_rejection(headers, self.retry);
            return;
        }
        let own = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        if own.is_none_or(|secs| secs < self.retry) {
            headers.insert(http::header::RETRY_AFTER, super::outcome::number(self.retry));
        }
        super::outcome::write_stack(self.stack, headers, false);
    }

    /// The engine's decision (why: [`Decision::denial`]).
    pub fn decision(&self) -> &Decision {
        self.outcome.decision()
    }

    /// The whole outcome: quota, profile, cost.
    pub fn outcome(&self) -> &Outcome {
        self.outcome
    }

    /// The route's name (the attribute's, or the `[[rules]]` entry's).
    pub fn route(&self) -> &str {
        self.outcome.route()
    }

    /// The refusing limit's policy name, as the headers and the default
    /// body's `violated-policies` spell it (of a stacked decision, the
    /// refusing limit with the longest wait: see
    /// [`violated_policies`](Self::violated_policies) for all).
    pub fn policy(&self) -> String {
        self.outcome.policy_name()
    }

    /// The profile the limit came from (`None` for numbers from a token or
    /// the limit service).
    pub fn profile(&self) -> Option<&str> {
        self.outcome.profile()
    }

    /// The seconds `Retry-After` will say (an enclosing rule's longer wait
    /// included).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry
    }

    /// The request's head (method, URI, headers, extensions), to answer in
    /// the client's language or format. Its values are the client's: never
    /// echo them into the response unescaped.
    pub fn request(&self) -> &Parts {
        self.request
    }

    /// The response the runtime sends without a hook: the problem+json of
    /// `[responses]` (its `Retry-After` and rate-limit headers are added
    /// either way).
    pub fn default_response(&self) -> Response<Bytes> {
        self.outcome
            .problem_of(self.responses, self.retry, super::outcome::violated(self.stack))
    }

    /// Whether the refused request is a gRPC call: its `content-type` is
    /// `application/grpc`, `application/grpc+proto` or another
    /// `application/grpc+<format>` (any case). A hook's answer to one is
    /// sent only when it is a gRPC refusal itself (a gRPC `content-type`
    /// and a `grpc-status` other than 0); anything else is replaced by
    /// [`grpc_response`](Self::grpc_response), as a gRPC client could not
    /// read it.
    ///
    /// ```
    /// use ratelimit::axum::Rejection;
    ///
    /// // gRPC clients get the standard RESOURCE_EXHAUSTED, with a message
    /// // of the application's; browsers get plain text.
    /// fn refuse(r: &Rejection<'_>) -> http::Response<String> {
    ///     if r.is_grpc() {
    ///         let mut response = r.grpc_response().map(|_| String::new());
    ///         response.headers_mut().insert(
    ///             "grpc-message",
    ///             http::HeaderValue::from_static("quota spent, see https://example.invalid/limits"),
    ///         );
    ///         return response;
    ///     }
    ///     http::Response::builder()
    ///         .status(429)
    ///         .header("content-type", "text/plain")
    ///         .body(format!("retry in {} s\n", r.retry_after_secs()))
    ///         .unwrap()
    /// }
    /// # let _ = refuse;
    /// ```
    pub fn is_grpc(&self) -> bool {
        super::grpc::is_grpc_request(self.request)
    }

    /// The refusal the runtime sends a gRPC call without a hook: a gRPC
    /// Trailers-Only response, HTTP 200 with `content-type:
    /// application/grpc`, `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a
    /// `grpc-message`, and a `google.rpc.RetryInfo` with the retry delay in
    /// `grpc-status-details-bin`; `retry-after` and the rate-limit headers
    /// are added either way (see `docs/http.md`, gRPC).
    pub fn grpc_response(&self) -> Response<Bytes> {
        super::grpc::response(self.outcome, self.retry)
    }
}

/// A rejection hook, type-erased (the builder wraps the application's).
pub(crate) type RejectHook = Arc<dyn Fn(&Rejection<'_>) -> Response<Bytes> + Send + Sync>;

/// What `#[rate_limit(..., reject = f)]` expands to: calls the route's hook,
/// which has the builder's hook's signature
/// ([`RateLimitBuilder::rejection`](super::RateLimitBuilder::rejection)).
#[doc(hidden)]
pub fn call_reject<F, B>(hook: F, rejection: &Rejection<'_>) -> axum::response::Response
where
    F: FnOnce(&Rejection<'_>) -> http::Response<B>,
    B: Into<bytes::Bytes>,
{
    hook(rejection).map(|body| axum::body::Body::from(body.into()))
}
