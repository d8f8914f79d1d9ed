//! The permits a request holds while it is in flight (`[profiles.NAME]
//! concurrency`), given back when its response body has been sent, fails
//! or is dropped. [`in_flight`](super::in_flight) takes them.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::engine::concurrency::Permit;

/// The permits a request holds until its response has been sent.
#[derive(Debug, Default)]
pub(crate) struct Permits {
    first: Option<HeldPermit>,
    /// A stack with more than one concurrency limit (rare: allocates).
    more: Vec<HeldPermit>,
}

/// One permit, and the route's in-flight gauge it counts in.
#[derive(Debug)]
pub(super) struct HeldPermit {
    pub(super) _permit: Permit,
    pub(super) gauge: metrics::Gauge,
}

impl Drop for HeldPermit {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

impl Permits {
    pub(super) fn push(&mut self, held: HeldPermit) {
        if self.first.is_none() {
            self.first = Some(held);
        } else {
            self.more.push(held);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Holds these permits until `body` has been sent. Only an empty body
    /// gives them back now: a body's stated length says nothing of how
    /// fast it is produced (a proxied upstream streams its
    /// `Content-Length` as slowly as it likes).
    pub(crate) fn hold<B: Body>(self, body: B) -> Holding<B> {
        let permits = if body.is_end_stream() { Permits::default() } else { self };
        Holding { body, permits }
    }

    /// Whether holding them for `body` needs a wrapper.
    pub(crate) fn held_by<B: Body>(&self, body: &B) -> bool {
        !self.is_empty() && !body.is_end_stream()
    }
}

pin_project! {
    /// A response body holding its request's permits until it ends, fails
    /// or is dropped.
    pub(crate) struct Holding<B> {
        #[pin]
        body: B,
        permits: Permits,
    }
}

impl<B: Body> Body for Holding<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            // Sent, or failed: the request is over.
            *this.permits = Permits::default();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
