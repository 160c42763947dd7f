//! Answers a client does not take, on connections hyper serves.
//!
//! An HTTP/2 client that never opens its flow-control window (the connection's, or a
//! stream's) makes hyper wait for window without writing a byte: the connection's write
//! timeout, which watches the socket ([`ClientIo`](super::client_io::ClientIo)), sees no
//! stalled write, and an answer whose body is never asked for again holds what its body
//! holds (an upstream connection and its place under `[upstream] max_connections`, a
//! per-address place, the connection's "request in flight" that keeps it from idling) for as
//! long as the client likes, up to a stream per answer.
//!
//! So every HTTP/2 answer hyper sends is watched ([`Watched`]): from when hyper is given it, and
//! again from each piece of its body hyper takes, until hyper asks for the next piece, it is
//! the client that is waited for; once an answer has waited so for `write_timeout`, the whole
//! connection is closed ([`Deliveries::stalled`]), as the HTTP/1 loop closes a connection
//! whose writes make no progress (and as nginx's `send_timeout` does on HTTP/2). An answer
//! whose body waits on its own source (an event stream between events) waits on nobody's
//! window and is never timed.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The answers of one connection, as far as they wait on the client.
pub(crate) struct Deliveries {
    /// What the answers' times count from.
    epoch: Instant,
    answers: Mutex<Vec<Weak<Delivery>>>,
    /// Told when an answer starts waiting on the client.
    waiting: Notify,
}

/// One answer: since when (milliseconds after the epoch, plus one) it has waited on the
/// client; 0 while it does not.
#[derive(Default)]
struct Delivery {
    waiting_since: AtomicU64,
}

impl Deliveries {
    pub(crate) fn new() -> Arc<Deliveries> {
        Arc::new(Deliveries {
            epoch: Instant::now(),
            answers: Mutex::new(Vec::new()),
            waiting: Notify::new(),
        })
    }

    /// `body`, watched until it ends or is dropped; a body with nothing to send is not.
    pub(crate) fn watch<B: Body>(self: &Arc<Self>, body: B) -> Watched<B> {
        let delivery = (!body.is_end_stream()).then(|| {
            let delivery = Arc::new(Delivery::default());
            let mut answers = self.answers.lock();
            answers.retain(|answer| answer.strong_count() > 0);
            answers.push(Arc::downgrade(&delivery));
            drop(answers);
            self.wait_on_client(&delivery);
            delivery
        });
        Watched {
            inner: body,
            deliveries: self.clone(),
            delivery,
        }
    }

    fn wait_on_client(&self, delivery: &Delivery) {
        let since = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        if delivery.waiting_since.swap(since, Ordering::AcqRel) == 0 {
            self.waiting.notify_one();
        }
    }

    /// When the answer waiting on the client the longest started to, if one does.
    fn oldest_waiting(&self) -> Option<Instant> {
        let mut answers = self.answers.lock();
        answers.retain(|answer| answer.strong_count() > 0);
        answers
            .iter()
            .filter_map(Weak::upgrade)
            .map(|answer| answer.waiting_since.load(Ordering::Acquire))
            .filter(|since| *since > 0)
            .min()
            .map(|since| self.epoch + Duration::from_millis(since - 1))
    }

    /// Ends once an answer has waited on the client for `within` (the connection is then to
    /// be closed); pending for ever otherwise.
    pub(crate) async fn stalled(&self, within: Duration) {
        loop {
            let started_waiting = self.waiting.notified();
            match self.oldest_waiting() {
                // Answers that start waiting later have later deadlines than this one.
                Some(since) if since + within > Instant::now() => {
                    tokio::time::sleep_until(since + within).await;
                }
                Some(_) => return,
                None => started_waiting.await,
            }
        }
    }
}

/// An answer's body, watched for the client taking it ([`Deliveries::watch`]).
pub(crate) struct Watched<B> {
    inner: B,
    deliveries: Arc<Deliveries>,
    delivery: Option<Arc<Delivery>>,
}

impl<B: Body + Unpin> Body for Watched<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(context);
        if let Some(delivery) = &this.delivery {
            match &polled {
                // A piece goes to the client: until hyper asks for the next, the client is
                // who is waited for (unless it was the last: hyper asks for nothing more).
                Poll::Ready(Some(Ok(_))) if !this.inner.is_end_stream() => {
                    this.deliveries.wait_on_client(delivery);
                }
                Poll::Ready(Some(Ok(_))) => delivery.waiting_since.store(0, Ordering::Release),
                // Waiting on the body's own source, or done.
                Poll::Pending | Poll::Ready(None | Some(Err(_))) => {
                    delivery.waiting_since.store(0, Ordering::Release);
                }
            }
        }
        polled
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
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Empty, Full, StreamBody};

    use super::*;

    const WITHIN: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_client_never_takes_stalls_the_connection_after_the_timeout() {
        let deliveries = Deliveries::new();
        let _untaken = deliveries.watch(Full::new(Bytes::from_static(b"never read")));
        let started = Instant::now();
        deliveries.stalled(WITHIN).await;
        assert_eq!(started.elapsed(), WITHIN);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_taken_or_waiting_on_their_source_are_not_timed() {
        let deliveries = Deliveries::new();
        // Nothing to send: never waited for.
        let _empty = deliveries.watch(Empty::<Bytes>::new());
        // Taken whole.
        let taken = deliveries.watch(Full::new(Bytes::from_static(b"read")));
        assert_eq!(taken.collect().await.unwrap().to_bytes().as_ref(), b"read");
        // An event stream between events: hyper asked, and the source has nothing yet.
        let (_sender, receiver) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
        let source = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        let mut between_events = deliveries.watch(StreamBody::new(Box::pin(source)));
        assert!(
            futures_util::poll!(std::future::poll_fn(|context| Pin::new(
                &mut between_events
            )
            .poll_frame(context)))
            .is_pending()
        );
        let timed = tokio::time::timeout(WITHIN * 4, deliveries.stalled(WITHIN)).await;
        assert!(timed.is_err(), "no answer waits on the client");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_taken_in_part_then_left_stalls_from_its_last_piece() {
        let deliveries = Deliveries::new();
        let pieces = futures_util::stream::iter([b"one".as_slice(), b"two"].map(|piece| {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(piece)))
        }));
        let mut body = deliveries.watch(StreamBody::new(pieces));
        tokio::time::sleep(Duration::from_secs(20)).await;
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap().as_ref(), b"one");
        let started = Instant::now();
        deliveries.stalled(WITHIN).await;
        assert_eq!(started.elapsed(), WITHIN, "timed from the piece taken");
        drop(body);
        let timed = tokio::time::timeout(WITHIN * 2, deliveries.stalled(WITHIN)).await;
        assert!(timed.is_err(), "a dropped answer waits on nobody");
    }
}
