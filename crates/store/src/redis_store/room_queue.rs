//! The queue that sends one room's requests of one kind (session ends, statuses, session
//! checks) as calls that carry several: a request into a room with fewer than
//! [`BatchedCall::MAX_CALLS_IN_FLIGHT`] calls in flight goes at once, with whatever else is
//! queued (no added latency); requests that arrive while that many are in flight gather and
//! go together in the next call (at most [`BatchedCall::MAX_PER_CALL`]), sent as soon as a
//! call in flight comes back. So the slower Redis answers, the more a call carries, and a
//! request with fewer than `MAX_PER_CALL` queued ahead of it waits for one call at most
//! before its own goes.
//!
//! Each call in flight is made by a task of its own, which, once its call is answered, sends
//! what queued meanwhile, so a caller that stops waiting (its bound ran out, its client left)
//! strands nobody behind it. Whether its request is still made is the kind's choice
//! ([`BatchedCall::SEND_ABANDONED`]): an end is (ending a session is owed even when nobody
//! waits to hear of it), a status is not (nobody would read its answer, and under overload
//! the requests of callers gone would hold up the living ones). Only requests that may be
//! made twice, and in any order, without harm are queued here (ending a session again changes
//! nothing; a status claims a session once and then returns the same one, I7). Joins, which
//! may not, have their own queue (`join_batch.rs`).
//!
//! A room's queue holds at most [`BatchedCall::MAX_QUEUED`] requests: past that, Redis is
//! far behind this node, and a request is refused at once (the caller's bound would run out
//! in the queue anyway) instead of growing the queue without end.

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
    /// The most calls of one room in flight from a node at once.
    const MAX_CALLS_IN_FLIGHT: usize;
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

/// A room's requests not sent yet, oldest first, and how many of its calls are in flight.
struct RoomState<R> {
    queued: VecDeque<Queued<R>>,
    in_flight: usize,
}

/// The rooms with requests queued or calls in flight (a room leaves once it has neither).
type Waiting<R> = HashMap<RoomId, RoomState<R>>;

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
    /// Queues `request` for `room` and waits for the call that makes it; a call's task is
    /// given `context()` when one starts. The caller bounds the wait.
    pub(crate) async fn submit(
        &self,
        room: &RoomId,
        request: C::Request,
        context: impl FnOnce() -> C::Context,
    ) -> Outcome {
        let (reply, receiver) = oneshot::channel();
        let queued = Queued { request, reply };
        let start = {
            let mut rooms = self.rooms.lock();
            let state = rooms.entry(room.clone()).or_insert_with(|| RoomState {
                queued: VecDeque::new(),
                in_flight: 0,
            });
            if state.queued.len() >= C::MAX_QUEUED && !C::SEND_ABANDONED {
                // Callers gone since do not count against the living.
                state.queued.retain(|queued| !queued.reply.is_closed());
            }
            if state.queued.len() >= C::MAX_QUEUED {
                return Err(StoreError::Backend {
                    message: format!(
                        "{} refused: {} requests of its kind are already queued for {room} on \
                         this node",
                        C::WHAT,
                        C::MAX_QUEUED
                    ),
                    source: None,
                });
            }
            state.queued.push_back(queued);
            let start = state.in_flight < C::MAX_CALLS_IN_FLIGHT;
            if start {
                state.in_flight += 1;
            }
            start
        };
        if start {
            // Counted in flight from here: should the context's building panic, or the task
            // never run (a runtime shutting down), the slot is still given back.
            let slot = CallSlot {
                rooms: self.rooms.clone(),
                room: room.clone(),
                done: false,
            };
            // Built outside the lock every room shares: a context may take a while to build
            // (a room's keys).
            let context = context();
            tokio::spawn(self.clone().send_calls(slot, context));
        }
        receiver.await.unwrap_or_else(|_| {
            Err(StoreError::Backend {
                message: format!(
                    "the {} in {room} was dropped unanswered (its call failed in this node; it \
                     may or may not have been made)",
                    C::WHAT
                ),
                source: None,
            })
        })
    }

    /// The next call's requests for `room` (at most [`BatchedCall::MAX_PER_CALL`], in the order
    /// queued; unless [`BatchedCall::SEND_ABANDONED`], without those whose callers stopped
    /// waiting), or `None` when none are queued: the calling task then ends (and the room
    /// leaves the map if no other call of it is in flight).
    fn next_batch(&self, room: &RoomId) -> Option<Vec<Queued<C::Request>>> {
        let mut rooms = self.rooms.lock();
        let state = rooms.get_mut(room)?;
        if !C::SEND_ABANDONED {
            state.queued.retain(|queued| !queued.reply.is_closed());
        }
        if state.queued.is_empty() {
            state.in_flight = state.in_flight.saturating_sub(1);
            if state.in_flight == 0 {
                rooms.remove(room);
            }
            return None;
        }
        let count = state.queued.len().min(C::MAX_PER_CALL);
        Some(state.queued.drain(..count).collect())
    }

    /// Makes one of the room's calls in flight (its `slot`), then the calls of what queued
    /// meanwhile, until nothing is queued.
    async fn send_calls(self, mut slot: CallSlot<C::Request>, context: C::Context) {
        while let Some(batch) = self.next_batch(&slot.room) {
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
        // `next_batch` gave the slot back with the empty queue.
        slot.done = true;
    }
}

/// One of a room's calls in flight, counted from the moment a request decides to start it.
/// Should its task end other than by finding the queue empty (a panicking call or context, a
/// task dropped unrun), the slot is given back, and the last one out takes the room out of
/// the map (its queued callers hear that their requests were dropped), so the room's next
/// request starts anew instead of queueing behind tasks that are gone.
struct CallSlot<R> {
    rooms: Arc<Mutex<Waiting<R>>>,
    room: RoomId,
    done: bool,
}

impl<R> Drop for CallSlot<R> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut rooms = self.rooms.lock();
        if let Some(state) = rooms.get_mut(&self.room) {
            state.in_flight = state.in_flight.saturating_sub(1);
            if state.in_flight == 0 {
                rooms.remove(&self.room);
            }
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
        const MAX_CALLS_IN_FLIGHT: usize = 1;
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
        // One closure for every request, so that their futures have one type.
        let context = || calls.clone();
        let mut waiting: Vec<_> = (0..Numbered::MAX_QUEUED)
            .map(|n| Box::pin(queues.submit(&room, n, context)))
            .collect();
        // Queued, not sent: the room's task has not run yet.
        for request in &mut waiting {
            assert!(futures_util::poll!(request.as_mut()).is_pending());
        }
        let refused = queues.submit(&room, 99, context).await;
        assert!(
            matches!(&refused, Err(StoreError::Backend { message, .. }) if message.contains("number refused: 6 requests")),
            "{:?}",
            refused.err()
        );
        // The first four callers leave: they no longer count against the queue's bound, and
        // the last two and a new one are answered by one call.
        let mut kept = waiting.split_off(4);
        drop(waiting);
        kept.push(Box::pin(queues.submit(&room, 7, context)));
        let numbers: Vec<usize> = futures_util::future::join_all(kept)
            .await
            .into_iter()
            .map(number)
            .collect();
        assert_eq!(numbers, [4, 5, 7]);
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
            matches!(&dropped, Err(StoreError::Backend { message, .. }) if message.contains("dropped unanswered")),
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

    /// Numbers whose calls wait for a permit each, up to two calls in flight.
    struct Gated;

    /// The calls begun, and the permits they wait for.
    struct Gate {
        begun: AtomicUsize,
        permits: tokio::sync::Semaphore,
    }

    impl BatchedCall for Gated {
        type Request = usize;
        type Context = Arc<Gate>;
        const WHAT: &'static str = "number";
        const MAX_PER_CALL: usize = 4;
        const MAX_CALLS_IN_FLIGHT: usize = 2;
        const MAX_QUEUED: usize = 16;
        const SEND_ABANDONED: bool = false;

        async fn call(gate: &Arc<Gate>, batch: Vec<usize>) -> Vec<Outcome> {
            gate.begun.fetch_add(1, Ordering::SeqCst);
            gate.permits.acquire().await.expect("open").forget();
            Numbered::call(&Arc::default(), batch).await
        }
    }

    /// A request goes at once while fewer than `MAX_CALLS_IN_FLIGHT` calls are in flight;
    /// past that it waits, and the first call back sends what queued meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn requests_go_at_once_until_the_calls_in_flight_are_many_then_gather() {
        let queues = RoomQueues::<Gated>::default();
        let gate = Arc::new(Gate {
            begun: AtomicUsize::new(0),
            permits: tokio::sync::Semaphore::new(0),
        });
        let submit = |number: usize| {
            let (queues, gate) = (queues.clone(), gate.clone());
            tokio::spawn(async move { queues.submit(&room(), number, || gate).await })
        };
        let settle = || async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        };
        let first = submit(0);
        settle().await;
        let second = submit(1);
        settle().await;
        assert_eq!(gate.begun.load(Ordering::SeqCst), 2, "two calls in flight");
        let waiting: Vec<_> = (2..5).map(submit).collect();
        settle().await;
        assert_eq!(gate.begun.load(Ordering::SeqCst), 2, "the others queue");
        gate.permits.add_permits(3);
        assert_eq!(number(first.await.expect("answered")), 0);
        assert_eq!(number(second.await.expect("answered")), 1);
        for (task, expected) in waiting.into_iter().zip(2..5) {
            assert_eq!(number(task.await.expect("answered")), expected);
        }
        assert_eq!(
            gate.begun.load(Ordering::SeqCst),
            3,
            "the three that queued went as one call"
        );
        assert!(queues.rooms.lock().is_empty(), "the room left the map");
    }
}
