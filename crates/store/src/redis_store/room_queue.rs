//! The queue that sends one room's requests of one kind (session ends, statuses) as calls
//! that carry several: the first request into a room with no call in flight goes at once (no
//! added latency); requests that arrive while that call is in flight gather and go together in
//! the next one (at most [`BatchedCall::MAX_PER_CALL`]), so the slower Redis answers, the more
//! a call carries. The calls are sent in the order their requests were queued.
//!
//! One call of a room is in flight from a node at a time: a call carries up to
//! `MAX_PER_CALL` requests and takes Redis a few milliseconds at most, so one room's calls
//! keep up with tens of thousands of requests a second from a node, and a Redis that falls
//! behind gets bigger calls rather than more of them.
//!
//! The calls are sent by a task of the room's own, so a caller that stops waiting (its bound
//! ran out, its client left) strands nobody behind it. Whether its request is still made is
//! the kind's choice ([`BatchedCall::SEND_ABANDONED`]): an end is (ending a session is owed
//! even when nobody waits to hear of it), a status is not (nobody would read its answer, and
//! under overload the requests of callers gone would hold up the living ones). Only requests
//! that may be made twice without harm are queued here (ending a session again changes
//! nothing; a status claims a session once and then returns the same one, I7). Joins, which
//! may not, have their own queue (`join_batch.rs`).
//!
//! A room's queue holds at most [`BatchedCall::MAX_QUEUED`] requests: past that, Redis is
//! far behind this node, and a request is refused at once (the caller's bound would run out
//! in the queue anyway) instead of growing the queue without end.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use anteroom_core::RoomId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::room_call::Outcome;
use crate::StoreError;

/// One kind of request and the call that makes a batch of them.
pub(crate) trait BatchedCall: 'static {
    /// One request's arguments.
    type Request: Send + 'static;
    /// What a room's sending task makes its calls with (for Redis, a `RoomCaller`).
    type Context: Send + Sync + 'static;
    /// The request's name, in errors ("status", "end of a session").
    const WHAT: &'static str;
    /// The most requests one call carries: Redis runs nothing else while a script runs, so a
    /// call is kept to a few milliseconds of script.
    const MAX_PER_CALL: usize;
    /// The most requests one room's queue holds on a node; more are refused at once.
    const MAX_QUEUED: usize;
    /// Whether a request whose caller stopped waiting before it was sent is still made.
    const SEND_ABANDONED: bool;
    /// Makes one call for `batch` (in the order queued) and returns exactly one outcome per
    /// request, in the same order.
    fn call(
        context: &Self::Context,
        batch: Vec<Self::Request>,
    ) -> impl Future<Output = Vec<Outcome>> + Send + '_;
}

/// One request waiting for its room's next call.
struct Queued<R> {
    request: R,
    reply: oneshot::Sender<Outcome>,
}

/// Each room's requests not sent yet, oldest first. A room is in the map while a task sends
/// its calls.
type Waiting<R> = HashMap<RoomId, VecDeque<Queued<R>>>;

/// The requests per room not sent yet, shared by the callers and the rooms' sending tasks.
pub(crate) struct RoomQueues<C: BatchedCall> {
    rooms: Arc<Mutex<Waiting<C::Request>>>,
}

impl<C: BatchedCall> Default for RoomQueues<C> {
    fn default() -> Self {
        Self {
            rooms: Arc::default(),
        }
    }
}

impl<C: BatchedCall> Clone for RoomQueues<C> {
    fn clone(&self) -> Self {
        Self {
            rooms: self.rooms.clone(),
        }
    }
}

impl<C: BatchedCall> RoomQueues<C> {
    /// Queues `request` for `room` and waits for the call that makes it; the room's sending
    /// task is given `context()` when none runs. The caller bounds the wait.
    pub(crate) async fn submit(
        &self,
        room: &RoomId,
        request: C::Request,
        context: impl FnOnce() -> C::Context,
    ) -> Outcome {
        let (reply, receiver) = oneshot::channel();
        let queued = Queued { request, reply };
        let first = {
            let mut rooms = self.rooms.lock();
            match rooms.entry(room.clone()) {
                MapEntry::Occupied(mut queue) => {
                    if queue.get().len() >= C::MAX_QUEUED {
                        return Err(StoreError::Backend {
                            message: format!(
                                "{} {}s are already queued for {room} on this node",
                                C::MAX_QUEUED,
                                C::WHAT
                            ),
                            source: None,
                        });
                    }
                    queue.get_mut().push_back(queued);
                    false
                }
                MapEntry::Vacant(slot) => {
                    slot.insert(VecDeque::from([queued]));
                    true
                }
            }
        };
        // The task is made outside the lock every room shares: its context may take a while
        // to build (a room's keys). Until it runs, requests for the room gather in its queue.
        if first {
            tokio::spawn(self.clone().send_all(room.clone(), context()));
        }
        receiver.await.unwrap_or_else(|_| {
            Err(StoreError::Backend {
                message: format!("the {} in {room} was dropped unsent", C::WHAT),
                source: None,
            })
        })
    }

    /// The next call's requests for `room` (at most [`BatchedCall::MAX_PER_CALL`], in the order
    /// queued; unless [`BatchedCall::SEND_ABANDONED`], without those whose callers stopped
    /// waiting), or `None` when none are queued: the room then leaves the map and its task
    /// ends.
    fn next_batch(&self, room: &RoomId) -> Option<Vec<Queued<C::Request>>> {
        let mut rooms = self.rooms.lock();
        let queue = rooms.get_mut(room)?;
        if !C::SEND_ABANDONED {
            queue.retain(|queued| !queued.reply.is_closed());
        }
        if queue.is_empty() {
            rooms.remove(room);
            return None;
        }
        let count = queue.len().min(C::MAX_PER_CALL);
        Some(queue.drain(..count).collect())
    }

    /// Sends `room`'s queued requests, one call at a time, until none are queued.
    async fn send_all(self, room: RoomId, context: C::Context) {
        // Should a call panic, the room leaves the map with the task (its queued callers hear
        // that their requests were dropped), so the room's next request starts a new task
        // instead of queueing behind one that is gone.
        let mut guard = LeaveOnUnwind {
            rooms: &self.rooms,
            room: &room,
            done: false,
        };
        while let Some(batch) = self.next_batch(&room) {
            let (requests, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|queued| (queued.request, queued.reply))
                .unzip();
            let outcomes = C::call(&context, requests).await;
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that stopped waiting hears nothing; its request was made all the same.
                let _ = reply.send(outcome);
            }
        }
        guard.done = true;
    }
}

/// Takes a room out of the map when its sending task ends other than by running out of
/// requests (see [`RoomQueues::send_all`]).
struct LeaveOnUnwind<'a, R> {
    rooms: &'a Mutex<Waiting<R>>,
    room: &'a RoomId,
    done: bool,
}

impl<R> Drop for LeaveOnUnwind<'_, R> {
    fn drop(&mut self) {
        if !self.done {
            self.rooms.lock().remove(self.room);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::redis_store::records::Answer;
    use crate::redis_store::room_call::malformed;

    /// Numbers, answered with themselves; a call with `PANIC` in it panics. The context
    /// counts the calls made.
    struct Numbered;

    const PANIC: usize = 666;

    impl BatchedCall for Numbered {
        type Request = usize;
        type Context = Arc<AtomicUsize>;
        const WHAT: &'static str = "number";
        const MAX_PER_CALL: usize = 4;
        const MAX_QUEUED: usize = 6;
        const SEND_ABANDONED: bool = false;

        async fn call(calls: &Arc<AtomicUsize>, batch: Vec<usize>) -> Vec<Outcome> {
            calls.fetch_add(1, Ordering::SeqCst);
            assert!(!batch.contains(&PANIC), "a call that panics");
            batch
                .into_iter()
                .map(|number| {
                    Answer::new(vec!["ok".to_owned(), number.to_string()])
                        .map_err(|error| malformed("number", error))
                })
                .collect()
        }
    }

    fn room() -> RoomId {
        RoomId::new("r").expect("a valid id")
    }

    fn number(outcome: Outcome) -> usize {
        let mut answer = outcome.expect("made").expect("answered");
        answer.expect("ok").expect("an ok answer");
        answer.number().expect("a number") as usize
    }

    /// Requests queued before the room's task runs go in calls of at most `MAX_PER_CALL`,
    /// each caller hears its own answer, and the room leaves the map once they are sent.
    #[tokio::test(flavor = "current_thread")]
    async fn requests_queued_together_go_in_full_calls_each_answered_its_own() {
        let queues = RoomQueues::<Numbered>::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let room = room();
        let answers = futures_util::future::join_all(
            (0..6).map(|n| queues.submit(&room, n, || calls.clone())),
        )
        .await;
        let numbers: Vec<usize> = answers.into_iter().map(number).collect();
        assert_eq!(numbers, (0..6).collect::<Vec<_>>());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "a call of four, then of two"
        );
        assert!(queues.rooms.lock().is_empty(), "the room left the map");
    }

    /// A room's queue past `MAX_QUEUED` refuses at once; a request whose caller left before
    /// it was sent is not made.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_refuses_and_requests_of_callers_gone_are_not_sent() {
        let queues = RoomQueues::<Numbered>::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let room = room();
        let mut waiting: Vec<_> = (0..Numbered::MAX_QUEUED)
            .map(|n| Box::pin(queues.submit(&room, n, || calls.clone())))
            .collect();
        // Queued, not sent: the room's task has not run yet.
        for request in &mut waiting {
            assert!(futures_util::poll!(request.as_mut()).is_pending());
        }
        let refused = queues.submit(&room, 99, || calls.clone()).await;
        assert!(
            matches!(&refused, Err(StoreError::Backend { message, .. }) if message.contains("6 numbers are already queued")),
            "{:?}",
            refused.err()
        );
        // The first four callers leave; the last two are answered by one call.
        let kept = waiting.split_off(4);
        drop(waiting);
        let numbers: Vec<usize> = futures_util::future::join_all(kept)
            .await
            .into_iter()
            .map(number)
            .collect();
        assert_eq!(numbers, [4, 5]);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the callers gone were not sent"
        );
    }

    /// A call that panics leaves its room's queue: its callers hear their requests were
    /// dropped, and the room's next request is sent by a new task.
    #[tokio::test(flavor = "current_thread")]
    async fn a_call_that_panics_does_not_hold_up_its_room() {
        let queues = RoomQueues::<Numbered>::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let dropped = queues.submit(&room(), PANIC, || calls.clone()).await;
        assert!(
            matches!(&dropped, Err(StoreError::Backend { message, .. }) if message.contains("dropped unsent")),
            "{:?}",
            dropped.err()
        );
        assert!(queues.rooms.lock().is_empty(), "the room left the map");
        let room = room();
        let next = queues.submit(&room, 7, || calls.clone());
        let answered = tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("the next request is not stuck behind the task that panicked");
        assert_eq!(number(answered), 7);
    }
}
