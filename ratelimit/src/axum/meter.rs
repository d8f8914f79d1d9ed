//! Charging by the response's size (`cost = response_bytes(per = N)`): the
//! response body is wrapped in a [`Metered`] body that counts the bytes the
//! server took from it, and settles the reservation once the body has
//! ended, failed or been dropped (a client gone part way pays for what was
//! sent, streamed bodies included).

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
        charge: Option<Charge>,
    }

    impl<B> PinnedDrop for Metered<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(charge) = this.charge.take() {
                charge.settle_response(*this.bytes);
            }
        }
    }
}

impl<B> Metered<B> {
    pub(crate) fn new(body: B, charge: Charge) -> Self {
        Metered {
            body,
            bytes: 0,
            charge: Some(charge),
        }
    }
}

impl<B: Body> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let polled = this.body.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes = this.bytes.saturating_add(data.remaining() as u64);
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

/// What `Admit` keeps for a route charged by its response's size, to wrap
/// the body in [`Limited`](super::Limited).
pub(crate) fn meter_of(charge: Option<Charge>) -> Option<Charge> {
    charge.filter(Charge::is_metered)
}
