//! Statuses on Redis in one call per room: the polls a node has queued for one room go to
//! Redis together, as one call of `status.lua`, which answers each in order.
//!
//! The store answers the statuses the node's view of the line cannot: admitted visitors'
//! claims, polls of clients that do not send the `ahead` they were shown (every such poll),
//! the priority lane's, an event stream's first view. A waiting visitor polls every few
//! seconds (SPEC §5.5), so 200,000 waiting whose polls all reach the store make about 13,000
//! calls a second. Each call alone reads the room's meta and configuration, settles a due
//! lottery and (when something changed) writes the meta back and publishes a notice, for one
//! ticket; a call that answers many does that once, and the node sends one request and reads
//! one reply (a MessagePack string, `packed_answers.rs`) for all of them.
//!
//! The statuses are queued and sent by the room's queue (`room_queue.rs`): a status into a
//! room with fewer than four status calls in flight goes at once, and those that arrive while
//! four are in flight go together in the next call. A status whose caller stopped waiting
//! before it was sent is left out.

use super::packed_answers;
use super::room_call::{Outcome, RoomCaller, lottery_seed};
use super::room_queue::{BatchedCall, RoomQueues};
use super::scripts::RoomFunction;

/// Statuses waiting for their room's next call.
pub(crate) type StatusQueues = RoomQueues<StatusCall>;

/// One ticket whose status is asked, and the id of the session its status claims if its
/// ticket was admitted.
pub(crate) struct StatusRequest {
    pub(crate) ticket: String,
    pub(crate) generation: String,
    pub(crate) session: String,
}

/// A call of `status.lua` for the statuses queued for one room.
pub(crate) struct StatusCall;

impl BatchedCall for StatusCall {
    type Request = StatusRequest;
    type Context = RoomCaller;
    const WHAT: &'static str = "status";
    /// A status costs Redis 13 to 17 µs within a call (a ticket's record, its count tree's
    /// path, its answer), against 39 to 49 µs alone: 128 keep a call to about 2 ms of script.
    const MAX_PER_CALL: usize = 128;
    /// As many as a room's joins (`join_batch::MAX_CALLS_IN_FLIGHT`): a status waits behind
    /// calls only when a Redis slow to answer has four of them, and then its call carries
    /// what queued meanwhile. (With one, every status that came while a call was in flight
    /// waited for two round trips, which under a crowd's load ran past the store's bound.)
    const MAX_CALLS_IN_FLIGHT: usize = 4;
    /// Eight calls' worth: deeper, and the statuses at its end would wait out their bound in
    /// the queue anyway; they are refused at once instead.
    const MAX_QUEUED: usize = 8 * 128;
    /// Nobody would read the answer; a claim nobody hears of would start a session's TTL for
    /// nothing, and under overload the requests of callers gone would hold up the others.
    const SEND_ABANDONED: bool = false;

    async fn call(sender: &RoomCaller, batch: Vec<StatusRequest>) -> Vec<Outcome> {
        let count = batch.len();
        let mut args = Vec::with_capacity(2 + 3 * count);
        // One lottery seed for the call: its settling comes before every status.
        args.push(lottery_seed());
        args.push(count.to_string());
        for status in batch {
            args.push(status.ticket);
            args.push(status.generation);
            args.push(status.session);
        }
        packed_answers::call(sender, RoomFunction::Status, args, count).await
    }
}
