//! Body wrappers for the requests and answers hyper carries, where the own loop keeps the same
//! rules in its own code: [`TimedBody`] gives a request body `body_timeout`, and [`Holding`]
//! keeps a request's guards (in flight, counted for its client address) until its answer's
//! body has been written.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why a request body fails when no byte arrived for `body_timeout`: the source of the
/// `TimedOut` I/O error it fails with (so whoever reads it, such as the gateway's proxy, can
/// tell a visitor's stall by its kind).
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?}")]
pub(crate) struct BodyTimedOut(Duration);

/// A request body that fails when it makes no progress for its timeout while it is read.
pub(crate) struct TimedBody<B> {
    inner: B,
    timeout: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl<B> TimedBody<B> {
    pub(crate) fn new(inner: B, timeout: Duration) -> Self {
        TimedBody {
            inner,
            timeout,
            timer: None,
            waiting: false,
        }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(context) {
            this.waiting = false;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if !this.waiting {
            let at = Instant::now() + this.timeout;
            match &mut this.timer {
                Some(timer) => timer.as_mut().reset(at),
                None => this.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            this.waiting = true;
        }
        let expired = this
            .timer
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll(context).is_ready());
        if expired {
            let stalled =
                std::io::Error::new(std::io::ErrorKind::TimedOut, BodyTimedOut(this.timeout));
            return Poll::Ready(Some(Err(stalled.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body that keeps `guards` until it is dropped (written or abandoned).
pub(crate) struct Holding<B, G> {
    inner: B,
    _guards: G,
}

impl<B, G> Holding<B, G> {
    pub(crate) fn new(inner: B, guards: G) -> Self {
        Holding {
            inner,
            _guards: guards,
        }
    }
}

impl<B: Body + Unpin, G: Unpin> Body for Holding<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use http_body_util::{BodyExt as _, StreamBody};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_fails_after_its_timeout() {
        let (sender, receiver) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        let mut body = TimedBody::new(StreamBody::new(Box::pin(stream)), Duration::from_secs(30));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                sender
                    .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .unwrap();
            }
            // Then nothing, with the sender kept open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(sender);
        });
        let started = Instant::now();
        for _ in 0..3 {
            assert!(body.frame().await.unwrap().is_ok());
        }
        assert!(body.frame().await.unwrap().is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(90));
        feeder.abort();
    }
}
