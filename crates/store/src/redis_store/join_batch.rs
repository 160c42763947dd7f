//! Group commit of joins on Redis: the joins a node has for one room go to Redis as one call
//! of `join.lua`, which runs them one after the other.
//!
//! The first join into a room whose queue is idle is sent at once (no added latency); while
//! that call is in flight, later joins for the room gather in its queue, and the next call
//! carries all of them (at most [`MAX_JOINS_PER_CALL`]). The room's meta is then read and
//! written, and its change notice published, once per call instead of once per join, and Redis
//! runs one script instead of many: a room's join rate on one Redis core is the script's rate
//! per join, not per call. Each join's answer goes back to its own caller.
//!
//! The calls are sent by a task of their own (one per room while it has joins queued), so a
//! caller that gives up never strands the joins queued behind it. A join whose caller has
//! already gone when its batch is made is left out: it makes no ticket nobody holds.

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::RoomId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::connection::Connection;
use super::records::{Answer, Refusal};
use super::scripts::SCRIPTS;
use super::{RoomPrelude, malformed};
use crate::StoreError;

/// The most joins one call carries: Redis runs nothing else while a script runs, so a batch
/// is kept to a few milliseconds of script.
pub(crate) const MAX_JOINS_PER_CALL: usize = 128;

/// What a caller hears of its join: the script's answer or refusal, or why the call failed.
pub(crate) type JoinOutcome = Result<Result<Answer, Refusal>, StoreError>;

/// One join waiting for its room's next call: its arguments (`join.lua`, ten per join) and
/// where its answer goes.
struct QueuedJoin {
    args: Vec<String>,
    reply: oneshot::Sender<JoinOutcome>,
}

/// The queues of joins per room. A room is in the map while a task sends its joins.
#[derive(Clone, Default)]
pub(crate) struct JoinQueues {
    rooms: Arc<Mutex<HashMap<RoomId, Vec<QueuedJoin>>>>,
}

/// What a room's sending task needs: the room's calls, a connection, and the bound on each call.
pub(crate) struct Sender {
    pub(crate) prelude: RoomPrelude,
    pub(crate) connection: Connection,
    pub(crate) timeout: Duration,
}

impl JoinQueues {
    /// Queues a join into `prelude`'s room, starting the room's sending task (made by
    /// `sender`) when none runs; the receiver gets the join's outcome.
    pub(crate) fn enqueue(
        &self,
        room: &RoomId,
        args: Vec<String>,
        sender: impl FnOnce() -> Sender,
    ) -> oneshot::Receiver<JoinOutcome> {
        let (reply, receiver) = oneshot::channel();
        let join = QueuedJoin { args, reply };
        let mut rooms = self.rooms.lock();
        match rooms.entry(room.clone()) {
            MapEntry::Occupied(mut queue) => queue.get_mut().push(join),
            MapEntry::Vacant(slot) => {
                slot.insert(vec![join]);
                tokio::spawn(self.clone().send_all(room.clone(), sender()));
            }
        }
        receiver
    }

    /// The next batch of `room`'s queue whose callers still wait, or `None` (the room leaves
    /// the map, so the next join starts a task again) when nobody does.
    fn next_batch(&self, room: &RoomId) -> Option<Vec<QueuedJoin>> {
        let mut rooms = self.rooms.lock();
        let queue = rooms.get_mut(room)?;
        queue.retain(|join| !join.reply.is_closed());
        if queue.is_empty() {
            rooms.remove(room);
            return None;
        }
        let count = queue.len().min(MAX_JOINS_PER_CALL);
        Some(queue.drain(..count).collect())
    }

    /// Sends `room`'s queued joins, a batch per call, until its queue is empty.
    async fn send_all(self, room: RoomId, sender: Sender) {
        while let Some(batch) = self.next_batch(&room) {
            let mut args = Vec::with_capacity(1 + batch.len() * batch[0].args.len());
            args.push(batch.len().to_string());
            let mut replies = Vec::with_capacity(batch.len());
            for join in batch {
                args.extend(join.args);
                replies.push(join.reply);
            }
            let outcomes = run_batch(&sender, args, replies.len()).await;
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that gave up meanwhile cancels its join itself.
                let _ = reply.send(outcome);
            }
        }
    }
}

/// Runs one call of `join.lua` for `count` joins: one outcome per join, in order.
async fn run_batch(sender: &Sender, args: Vec<String>, count: usize) -> Vec<JoinOutcome> {
    let call = sender.prelude.call("join", &SCRIPTS.join, args);
    let reply = match tokio::time::timeout(sender.timeout, call.reply(&sender.connection)).await {
        Ok(reply) => reply,
        Err(elapsed) => Err(StoreError::backend(
            format!("redis did not complete join within {:?}", sender.timeout),
            elapsed,
        )),
    };
    match reply.and_then(|values: Vec<redis::Value>| answers(values, count)) {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(error) => shared_failure(&error, count),
    }
}

/// Reads the script's reply: one answer per join, or one refusal for the whole batch (the room
/// is missing or closed) given to every join.
fn answers(
    values: Vec<redis::Value>,
    count: usize,
) -> Result<Vec<Result<Answer, Refusal>>, StoreError> {
    let per_join = matches!(values.first(), Some(redis::Value::Array(_)));
    if !per_join {
        let fields: Vec<String> = redis::from_redis_value(redis::Value::Array(values))
            .map_err(|error| StoreError::backend("redis script join answered badly", error))?;
        return (0..count)
            .map(|_| Answer::new(fields.clone()).map_err(|error| malformed("join", error)))
            .collect();
    }
    if values.len() != count {
        return Err(StoreError::Backend {
            message: format!(
                "redis script join answered {} joins of {count}",
                values.len()
            ),
            source: None,
        });
    }
    values
        .into_iter()
        .map(|value| {
            let fields: Vec<String> = redis::from_redis_value(value)
                .map_err(|error| StoreError::backend("redis script join answered badly", error))?;
            Answer::new(fields).map_err(|error| malformed("join", error))
        })
        .collect()
}

/// The failure of a batch's call, told to each of its `count` joins.
fn shared_failure(error: &StoreError, count: usize) -> Vec<JoinOutcome> {
    let mut message = match error {
        StoreError::Backend { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    (0..count)
        .map(|_| {
            Err(StoreError::Backend {
                message: message.clone(),
                source: None,
            })
        })
        .collect()
}
