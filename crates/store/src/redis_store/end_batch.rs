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
//! The ends are queued and sent by the room's queue (`room_queue.rs`): the first end into a
//! room with no call in flight goes at once, and ends that arrive while it is in flight go
//! together in the next call. A caller that stops waiting strands nobody: its end is still
//! made, as an end whose answer came too late may have been made before (ending a session
//! twice changes nothing).

use super::records::{Answer, MalformedAnswer};
use super::room_call::{Outcome, RoomCaller, admission_seed, lottery_seed, malformed};
use super::room_queue::{BatchedCall, RoomQueues};
use super::scripts::RoomFunction;
use crate::StoreError;

/// Session ends waiting for their room's next call.
pub(crate) type EndQueues = RoomQueues<EndCall>;

/// One session to end, and why (the reason's stored word).
pub(crate) struct EndRequest {
    pub(crate) session: String,
    pub(crate) reason: String,
}

/// A call of `end_session.lua` for the ends queued for one room.
pub(crate) struct EndCall;

impl BatchedCall for EndCall {
    type Request = EndRequest;
    type Context = RoomCaller;
    const WHAT: &'static str = "end of a session";
    /// An end's share of a call is a session's record and its slot; the call's one tick
    /// refills up to this many slots: 64 keep a call to a few milliseconds of script.
    const MAX_PER_CALL: usize = 64;
    /// One: the ends that queue behind a call share the next call's one tick.
    const MAX_CALLS_IN_FLIGHT: usize = 1;
    /// Sixteen calls' worth: a room whose ends queue deeper on one node has a Redis far
    /// behind; an end refused then leaves its session to expire at its TTL.
    const MAX_QUEUED: usize = 16 * 64;
    /// An end is owed whether or not its caller still waits to hear of it.
    const SEND_ABANDONED: bool = true;

    async fn call(sender: &RoomCaller, batch: Vec<EndRequest>) -> Vec<Outcome> {
        let count = batch.len();
        let mut args = Vec::with_capacity(3 + 2 * count);
        args.push(admission_seed());
        args.push(lottery_seed());
        args.push(count.to_string());
        for end in batch {
            args.push(end.session);
            args.push(end.reason);
        }
        sender
            .batched(RoomFunction::EndSession, args, count, read_answers)
            .await
    }
}

/// The script's answers, one per end; a reply with another count of answers is malformed.
fn read_answers(answers: Vec<Vec<String>>, count: usize) -> Result<Vec<Outcome>, StoreError> {
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
