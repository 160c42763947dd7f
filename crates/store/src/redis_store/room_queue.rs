//! The queue that sends one room's requests of one kind (session ends, statuses) as calls
//! that carry several: the first request into a room with no call in flight goes at once (no
//! added latency); requests that arrive while that call is in flight gather and go together in
//! the next one (at most [`BatchedCall::MAX_PER_CALL`]), so the slower Redis answers, the more
//! a call carries. One call of a room is in flight from a node at a time, and the calls are
//! sent in the order their requests were queued.
//!
//! The calls are sent by a task of the room's own, so a caller that stops waiting (its bound
//! ran out) strands nobody behind it: its request is still made. That is why only requests
//! that may be made twice without harm are queued here (ending a session again changes
//! nothing; a status asked again answers the same). Joins, which may not, have their own
//! queue (`join_batch.rs`).

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use anteroom_core::RoomId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::join_batch::{JoinOutcome, Sender};
use crate::StoreError;

/// What a caller hears of its request: the script's answer or refusal, or why the call failed
/// (as a join hears of its own, so a failed call answers all alike: `shared_failure`).
pub(crate) type Outcome = JoinOutcome;

/// One kind of request and the call that makes a batch of them.
pub(crate) trait BatchedCall: 'static {
    /// One request's arguments.
    type Request: Send + 'static;
    /// The most requests one call carries: Redis runs nothing else while a script runs, so a
    /// call is kept to a few milliseconds of script.
    const MAX_PER_CALL: usize;
    /// Makes one call for `batch` (in the order queued) and returns exactly one outcome per
    /// request, in the same order.
    fn call(
        sender: &Sender,
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
    /// task is made by `sender` when none runs. `what` names the request in the error of one
    /// dropped unsent. The caller bounds the wait.
    pub(crate) async fn submit(
        &self,
        room: &RoomId,
        request: C::Request,
        what: &str,
        sender: impl FnOnce() -> Sender,
    ) -> Outcome {
        let (reply, receiver) = oneshot::channel();
        let queued = Queued { request, reply };
        {
            let mut rooms = self.rooms.lock();
            match rooms.entry(room.clone()) {
                MapEntry::Occupied(mut queue) => queue.get_mut().push_back(queued),
                MapEntry::Vacant(slot) => {
                    slot.insert(VecDeque::from([queued]));
                    tokio::spawn(self.clone().send_all(room.clone(), sender()));
                }
            }
        }
        receiver.await.unwrap_or_else(|_| {
            Err(StoreError::Backend {
                message: format!("the {what} in {room} was dropped unsent"),
                source: None,
            })
        })
    }

    /// The next call's requests for `room` (at most [`BatchedCall::MAX_PER_CALL`], in the order
    /// queued), or `None` when none are queued: the room then leaves the map and its task ends.
    fn next_batch(&self, room: &RoomId) -> Option<Vec<Queued<C::Request>>> {
        let mut rooms = self.rooms.lock();
        let queue = rooms.get_mut(room)?;
        if queue.is_empty() {
            rooms.remove(room);
            return None;
        }
        let count = queue.len().min(C::MAX_PER_CALL);
        Some(queue.drain(..count).collect())
    }

    /// Sends `room`'s queued requests, one call at a time, until none are queued.
    async fn send_all(self, room: RoomId, sender: Sender) {
        while let Some(batch) = self.next_batch(&room) {
            let (requests, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|queued| (queued.request, queued.reply))
                .unzip();
            let outcomes = C::call(&sender, requests).await;
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that stopped waiting hears nothing; its request was made all the same.
                let _ = reply.send(outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind of request for the queue's own tests; never called.
    struct Numbered;

    impl BatchedCall for Numbered {
        type Request = usize;
        const MAX_PER_CALL: usize = 4;
        async fn call(_: &Sender, batch: Vec<usize>) -> Vec<Outcome> {
            unreachable!("the queue's tests make no call ({} requests)", batch.len())
        }
    }

    /// A call takes the requests queued, oldest first, at most `MAX_PER_CALL`; once the queue
    /// is empty the room leaves the map (its task ends).
    #[test]
    fn batches_take_the_oldest_requests_first_and_an_empty_queue_ends_the_task() {
        let room = RoomId::new("r").expect("a valid id");
        let queues = RoomQueues::<Numbered>::default();
        let mut receivers = Vec::new();
        let queued: VecDeque<Queued<usize>> = (0..Numbered::MAX_PER_CALL + 3)
            .map(|request| {
                let (reply, receiver) = oneshot::channel();
                receivers.push(receiver);
                Queued { request, reply }
            })
            .collect();
        queues.rooms.lock().insert(room.clone(), queued);
        let requests = |batch: Vec<Queued<usize>>| -> Vec<usize> {
            batch.into_iter().map(|queued| queued.request).collect()
        };
        let first = queues.next_batch(&room).expect("a full batch");
        assert_eq!(
            requests(first),
            (0..Numbered::MAX_PER_CALL).collect::<Vec<_>>()
        );
        let second = queues.next_batch(&room).expect("the rest");
        assert_eq!(
            requests(second),
            (Numbered::MAX_PER_CALL..Numbered::MAX_PER_CALL + 3).collect::<Vec<_>>()
        );
        assert!(queues.next_batch(&room).is_none());
        assert!(queues.rooms.lock().is_empty(), "the room left the map");
    }
}
