//! Session checks on Redis in one call per room: the sessions a node asks about for one room
//! go to Redis together, as one call of `session.lua`, which reads their records with one
//! command.
//!
//! The gateway checks a visitor's session in the store when the pass's last check is a second
//! old, so at most once a second a pass (`gateway/protect.rs`), and the OpenID Connect
//! endpoints check the session their token names. In a crowd thousands of sessions are open,
//! so a node makes hundreds of checks a second; each call alone costs Redis the call itself
//! (its prelude, its keys) for one `HGET`. A call that answers many costs that once.
//!
//! The checks are queued and sent by a queue of their own per room (`room_queue.rs`, the kind
//! statuses and ends have too): a check into a room
//! with fewer than four session calls in flight goes at once, and those that arrive while four
//! are in flight go together in the next call. A check whose caller stopped waiting before it
//! was sent is left out: it changes nothing.

use super::packed_answers;
use super::room_call::{Outcome, RoomCaller};
use super::room_queue::{BatchedCall, RoomQueues};
use super::scripts::RoomFunction;

/// Session checks waiting for their room's next call.
pub(crate) type SessionQueues = RoomQueues<SessionCall>;

/// A call of `session.lua` for the session checks queued for one room; a request is the
/// session's id.
pub(crate) struct SessionCall;

impl BatchedCall for SessionCall {
    type Request = String;
    type Context = RoomCaller;
    const WHAT: &'static str = "session check";
    /// A check is one field of one `HMGET` and a record in the answer: 128 keep a call short.
    const MAX_PER_CALL: usize = 128;
    /// As many as a room's statuses (`status_batch.rs`): a check waits behind calls only
    /// when a Redis slow to answer has four of them.
    const MAX_CALLS_IN_FLIGHT: usize = 4;
    /// Eight calls' worth, as statuses: deeper, the checks at its end would wait out their
    /// bound in the queue anyway; they are refused at once instead.
    const MAX_QUEUED: usize = 8 * 128;
    /// A check changes nothing, and nobody would read its answer.
    const SEND_ABANDONED: bool = false;

    async fn call(sender: &RoomCaller, batch: Vec<String>) -> Vec<Outcome> {
        let count = batch.len();
        let mut args = Vec::with_capacity(1 + count);
        args.push(count.to_string());
        args.extend(batch);
        packed_answers::call(sender, RoomFunction::Session, args, count).await
    }
}
