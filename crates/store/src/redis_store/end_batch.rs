//! Ended sessions on Redis in one call per room: the session ends a node has queued for one
//! room go to Redis together, as one call of `end_session.lua`, which ends each in order and
//! then ticks the room once.
//!
//! Every ended session refills its slot with a tick in the same call (SPEC §5.1: one in, one
//! out), and a tick is most of an end's cost in Redis (the room's expiry, no-show and idle
//! sweeps, the bucket, the history): in a crowd whose visitors release their sessions hundreds
//! of times a second, one tick per end was the largest share of Redis' time. A call that ends
//! many sessions ticks once, and that tick admits as many as the ends freed (and the bucket
//! allows), so each caller still hears of its end only once the refill is done.
//!
//! The first end into a room with no call in flight is sent at once (no added latency); ends
//! that arrive while that call is in flight gather and go together in the next one (at most
//! [`MAX_ENDS_PER_CALL`]), so the slower Redis answers, the more ends a call carries. One call
//! of a room is in flight from a node at a time, and the calls are sent in the order their ends
//! were queued. The calls are sent by a task of the room's own, so a caller that stops waiting
//! (its bound ran out) strands nobody: its end is still made, as an end whose answer came too
//! late may have been made before (ending a session twice changes nothing).

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use anteroom_core::RoomId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::connection::bounded;
use super::join_batch::Sender;
use super::records::{Answer, MalformedAnswer};
use super::room_call::{admission_seed, lottery_seed, malformed};
use super::scripts::RoomFunction;
use crate::StoreError;

/// The most ends one call carries: Redis runs nothing else while a script runs, so a call is
/// kept to a few milliseconds of script.
pub(crate) const MAX_ENDS_PER_CALL: usize = 64;

/// What a caller hears of its end: the script's answer or refusal, or why the call failed
/// (as a join hears of its own, so a failed call answers both alike: `shared_failure`).
pub(crate) type EndOutcome = super::join_batch::JoinOutcome;

/// One end waiting for its room's next call.
struct QueuedEnd {
    session: String,
    reason: String,
    reply: oneshot::Sender<EndOutcome>,
}

/// The ends per room not sent yet. A room is in the map while a task sends its ends.
#[derive(Clone, Default)]
pub(crate) struct EndQueues {
    rooms: Arc<Mutex<HashMap<RoomId, VecDeque<QueuedEnd>>>>,
}

impl EndQueues {
    /// Ends `session` in `room` for `reason` (the reason's stored word), waiting for the call
    /// that makes it; the room's sending task is made by `sender` when none runs. The caller
    /// bounds the wait.
    pub(crate) async fn end(
        &self,
        room: &RoomId,
        session: String,
        reason: String,
        sender: impl FnOnce() -> Sender,
    ) -> EndOutcome {
        let (reply, receiver) = oneshot::channel();
        let end = QueuedEnd {
            session,
            reason,
            reply,
        };
        {
            let mut rooms = self.rooms.lock();
            match rooms.entry(room.clone()) {
                MapEntry::Occupied(mut queue) => queue.get_mut().push_back(end),
                MapEntry::Vacant(slot) => {
                    slot.insert(VecDeque::from([end]));
                    tokio::spawn(self.clone().send_all(room.clone(), sender()));
                }
            }
        }
        receiver.await.unwrap_or_else(|_| {
            Err(StoreError::Backend {
                message: format!("the end of a session in {room} was dropped unsent"),
                source: None,
            })
        })
    }

    /// The next call's ends for `room` (at most [`MAX_ENDS_PER_CALL`], in the order queued), or
    /// `None` when none are queued: the room then leaves the map and its task ends.
    fn next_batch(&self, room: &RoomId) -> Option<Vec<QueuedEnd>> {
        let mut rooms = self.rooms.lock();
        let queue = rooms.get_mut(room)?;
        if queue.is_empty() {
            rooms.remove(room);
            return None;
        }
        let count = queue.len().min(MAX_ENDS_PER_CALL);
        Some(queue.drain(..count).collect())
    }

    /// Sends `room`'s queued ends, one call at a time, until none are queued.
    async fn send_all(self, room: RoomId, sender: Sender) {
        while let Some(batch) = self.next_batch(&room) {
            run_call(&sender, batch).await;
        }
    }
}

/// Runs one call of `end_session.lua` for `batch` and answers each end.
async fn run_call(sender: &Sender, batch: Vec<QueuedEnd>) {
    let count = batch.len();
    let mut args = Vec::with_capacity(3 + 2 * count);
    args.push(admission_seed());
    args.push(lottery_seed());
    args.push(count.to_string());
    let mut replies = Vec::with_capacity(count);
    for end in batch {
        args.push(end.session);
        args.push(end.reason);
        replies.push(end.reply);
    }
    let call = sender.prelude.call(RoomFunction::EndSession, args);
    let outcomes = match bounded(
        sender.timeout,
        "end_session",
        call.reply::<Vec<Vec<String>>>(&sender.connection),
    )
    .await
    .and_then(|answers| read_answers(answers, count))
    {
        Ok(outcomes) => outcomes,
        Err(error) => super::join_batch::shared_failure(&error, count),
    };
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        // A caller that stopped waiting hears nothing; its end was made all the same.
        let _ = reply.send(outcome);
    }
}

/// The script's answers, one per end; a reply with another count of answers is malformed.
fn read_answers(answers: Vec<Vec<String>>, count: usize) -> Result<Vec<EndOutcome>, StoreError> {
    if answers.len() != count {
        return Err(malformed(
            "end_session",
            MalformedAnswer(format!("{} answers for {count} ends", answers.len())),
        ));
    }
    Ok(answers
        .into_iter()
        .map(|fields| Answer::new(fields).map_err(|error| malformed("end_session", error)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(session: &str) -> (QueuedEnd, oneshot::Receiver<EndOutcome>) {
        let (reply, receiver) = oneshot::channel();
        let end = QueuedEnd {
            session: session.to_owned(),
            reason: "completed".to_owned(),
            reply,
        };
        (end, receiver)
    }

    /// A call takes the ends queued, oldest first, at most [`MAX_ENDS_PER_CALL`]; once the
    /// queue is empty the room leaves the map (its task ends).
    #[test]
    fn batches_take_the_oldest_ends_first_and_an_empty_queue_ends_the_task() {
        let room = RoomId::new("r").expect("a valid id");
        let queues = EndQueues::default();
        let mut receivers = Vec::new();
        let ends: VecDeque<QueuedEnd> = (0..MAX_ENDS_PER_CALL + 3)
            .map(|i| {
                let (end, receiver) = queued(&i.to_string());
                receivers.push(receiver);
                end
            })
            .collect();
        queues.rooms.lock().insert(room.clone(), ends);
        let first = queues.next_batch(&room).expect("a full batch");
        let sessions: Vec<&str> = first.iter().map(|end| end.session.as_str()).collect();
        let expected: Vec<String> = (0..MAX_ENDS_PER_CALL).map(|i| i.to_string()).collect();
        assert_eq!(sessions, expected);
        let second = queues.next_batch(&room).expect("the rest");
        assert_eq!(second.len(), 3);
        assert_eq!(second[0].session, MAX_ENDS_PER_CALL.to_string());
        assert!(queues.next_batch(&room).is_none());
        assert!(queues.rooms.lock().is_empty(), "the room left the map");
    }

    /// A reply with fewer or more answers than ends is refused, not matched up by guess.
    #[test]
    fn a_reply_with_another_count_of_answers_is_malformed() {
        let one = vec!["error".to_owned(), "session_unknown".to_owned()];
        assert!(read_answers(vec![one.clone()], 2).is_err());
        assert!(read_answers(vec![one.clone(), one.clone()], 1).is_err());
        let answers = read_answers(vec![one], 1).expect("one answer for one end");
        assert!(matches!(answers.as_slice(), [Ok(Err(_))]));
    }
}
