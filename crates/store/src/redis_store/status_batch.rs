//! Statuses on Redis in one call per room: the polls a node has queued for one room go to
//! Redis together, as one call of `status.lua`, which answers each in order.
//!
//! A waiting visitor polls every few seconds (SPEC §5.5), so in a crowd statuses are most of
//! a room's calls: 200,000 waiting make about 13,000 a second. Each call alone reads the
//! room's meta and configuration, settles a due lottery and (when something changed) writes
//! the meta back and publishes a notice, for one ticket; a call that answers many does that
//! once, and the node sends one request and reads one reply (a MessagePack string,
//! `packed_answers.rs`) for all of them.
//!
//! The statuses are queued and sent by the room's queue (`room_queue.rs`): the first into a
//! room with no call in flight goes at once, and those that arrive while it is in flight go
//! together in the next call. A status asked again answers the same (a claimed session is
//! the same session on every later ask, I7), so a caller that stops waiting strands nobody.

use super::connection::bounded;
use super::join_batch::{Sender, shared_failure};
use super::packed_answers::outcomes;
use super::room_call::lottery_seed;
use super::room_queue::{BatchedCall, Outcome, RoomQueues};
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
    /// A status costs Redis a few microseconds within a call (a ticket's record, its count
    /// tree's path): 128 keep a call to about a millisecond of script.
    const MAX_PER_CALL: usize = 128;

    async fn call(sender: &Sender, batch: Vec<StatusRequest>) -> Vec<Outcome> {
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
        let call = sender.prelude.call(RoomFunction::Status, args);
        match bounded(sender.timeout, "status", call.reply(&sender.connection))
            .await
            .and_then(|packed: Vec<u8>| outcomes("status", &packed, count))
        {
            Ok(outcomes) => outcomes,
            Err(error) => shared_failure(&error, count),
        }
    }
}
