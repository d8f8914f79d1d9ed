//! Charging by the response's size (`cost = response_bytes(per = N)`): the
//! response body is wrapped in a [`Metered`] body that counts the bytes the
//! server takes from it.
//!
//! * A body whose size is known up front (`size_hint` exact: a `Vec`, a
//!   `String`, a file with a length) is charged its whole size when the
//!   response is made, before a byte is sent: a client cannot run many such
//!   downloads at once on one unit each.
//! * A streamed body is charged as it goes, each time the bytes sent cross
//!   into a new unit: a long download's cost shows in the client's next
//!   decision while it is still running.
//! * When the body ends, fails or is dropped after the server started
//!   sending it, the request is settled at what was sent: a client that
//!   hangs up part way pays for what it got (a surplus charged up front is
//!   handed back). A body dropped before the server took anything from it
//!   (axum drops the body of a `HEAD` response) keeps what was charged.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::Charge;

pin_project! {
    /// A response body that settles a [`Charge`] at the size of what was
    /// sent once it ends (or is dropped).
    pub(crate) struct Metered<B> {
        #[pin]
        body: B,
        bytes: u64,
        // The server has polled the body: from then on the request pays for
        // what was sent.
        polled: bool,
        charge: Option<Charge>,
    }

    impl<B> PinnedDrop for Metered<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(charge) = this.charge.take() {
                if *this.polled {
                    charge.settle_response(*this.bytes);
                }
            }
        }
    }
}

impl<B: Body> Metered<B> {
    pub(crate) fn new(body: B, mut charge: Charge) -> Self {
        if let Some(size) = body.size_hint().exact() {
            charge.meter_to(size);
        }
        Metered {
            body,
            bytes: 0,
            polled: false,
            charge: Some(charge),
        }
    }
}

impl<B: Body> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        *this.polled = true;
        let polled = this.body.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes = this.bytes.saturating_add(data.remaining() as u64);
                    if let Some(charge) = this.charge.as_mut() {
                        charge.meter_to(*this.bytes);
                    }
                }
                // The last frame: settle now rather than when the server
                // gets round to dropping the body.
                if this.body.is_end_stream() {
                    if let Some(charge) = this.charge.take() {
                        charge.settle_response(*this.bytes);
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                if let Some(charge) = this.charge.take() {
                    charge.settle_response(*this.bytes);
                }
            }
            Poll::Pending => {}
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

impl<B> std::fmt::Debug for Metered<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metered")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// What `Admit` keeps for a route charged by its response's size, for
/// `Admit::finish` to wrap the body in.
pub(crate) fn meter_of(charge: Option<Charge>) -> Option<Charge> {
    charge.filter(Charge::is_metered)
}
