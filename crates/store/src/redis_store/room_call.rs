//! One room function's call as the store makes it: the room's keys and the prelude's arguments
//! (`room.lua`), owned so that a join batch's task can make it too (`join_batch.rs`), and the
//! arguments and answers every call shares.

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::clock::duration_millis;
use anteroom_core::lottery::{Seed, seed_to_hex};
use anteroom_core::room::DEFAULT_HISTORY_RETENTION;
use anteroom_core::{Clock, RoomId};
use rand::Rng;
use rand::rngs::ThreadRng;

use super::connection::{Connection, bounded};
use super::outbox::RedisOutbox;
use super::records::{Answer, MalformedAnswer, Refusal};
use super::scripts::RoomFunction;
use crate::StoreError;

/// The largest duration handed to a script, so that time plus duration stays below 2^53.
pub(super) const MAX_SCRIPT_MILLIS: u64 = 1 << 52;

/// A room's keys and the prelude's arguments (`room.lua`), owned, so that a task of its own
/// (a join batch, `join_batch.rs`) can make the room's calls.
#[derive(Clone)]
pub(super) struct RoomPrelude {
    pub(super) room: RoomId,
    pub(super) keys: Vec<String>,
    pub(super) channel: String,
    pub(super) clock: Option<Arc<dyn Clock>>,
    /// Read at each call: events switched on reach a room's calls from then on, also those of
    /// a join batch that was started before.
    pub(super) outbox: Arc<std::sync::OnceLock<Arc<RedisOutbox>>>,
}

impl RoomPrelude {
    /// A call of `function` with the prelude's arguments (the time taken now), then `args`.
    pub(super) fn call(&self, function: RoomFunction, args: Vec<String>) -> RoomCall {
        let now = match &self.clock {
            Some(clock) => clock.now().as_millis().to_string(),
            None => String::new(),
        };
        let events = match self.outbox.get() {
            Some(outbox) => events_setting(outbox.limits().max_entries, &self.room),
            None => String::new(),
        };
        let mut all_args = vec![
            now,
            self.channel.clone(),
            // For a room stored before it had its own `history_retention`.
            duration_millis(DEFAULT_HISTORY_RETENTION).to_string(),
            events,
        ];
        all_args.extend(args);
        RoomCall {
            function,
            keys: self.keys.clone(),
            args: all_args,
        }
    }
}

/// What a caller of a batched call (`join_batch.rs`, `room_queue.rs`) hears of its request:
/// the script's answer or refusal, or why the call failed.
pub(crate) type Outcome = Result<Result<Answer, Refusal>, StoreError>;

/// What a room's sending task (a join batch's, a room queue's) needs: the room's calls, a
/// connection, and the bound on each call.
#[derive(Clone)]
pub(crate) struct RoomCaller {
    pub(crate) prelude: RoomPrelude,
    pub(crate) connection: Connection,
    pub(crate) timeout: Duration,
}

impl RoomCaller {
    /// Calls `function` for a batch of `count` requests (`args` after the prelude's) within
    /// the bound, and reads its reply into one outcome per request with `read`; a call that
    /// fails, or whose reply `read` refuses, fails each of the batch's requests alike.
    pub(crate) async fn batched<T: redis::FromRedisValue>(
        &self,
        function: RoomFunction,
        args: Vec<String>,
        count: usize,
        read: impl FnOnce(T, usize) -> Result<Vec<Outcome>, StoreError>,
    ) -> Vec<Outcome> {
        let call = self.prelude.call(function, args);
        match bounded(self.timeout, function.name(), call.reply(&self.connection))
            .await
            .and_then(|reply| read(reply, count))
        {
            Ok(outcomes) => outcomes,
            Err(error) => shared_failure(&error, count),
        }
    }
}

/// One room function's call, owned, so that it can also run from a task of its own.
pub(super) struct RoomCall {
    function: RoomFunction,
    keys: Vec<String>,
    args: Vec<String>,
}

impl RoomCall {
    pub(super) async fn run(
        &self,
        connection: &Connection,
    ) -> Result<Result<Answer, Refusal>, StoreError> {
        let fields: Vec<String> = self.reply(connection).await?;
        Answer::new(fields).map_err(|error| malformed(self.function.name(), error))
    }

    /// The function's `FCALL` with `args` after the room's keys.
    fn command(&self, args: &[String]) -> redis::Cmd {
        let mut command = redis::cmd("FCALL");
        command
            .arg(self.function.function_name())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(args);
        command
    }

    /// Calls the function and reads its reply as a `T`. A call that met a cut connection
    /// (Redis restarted, or the connection was dropped) is made once more, on the connection
    /// made again, when the function may be run twice: otherwise the call that met the cut
    /// would fail (a leave lost, a status answered 503). The second call's events get ids of
    /// their own, since the first may have run and given its ids away.
    pub(super) async fn reply<T: redis::FromRedisValue>(
        &self,
        connection: &Connection,
    ) -> Result<T, StoreError> {
        let reply = match connection.fcall(&self.command(&self.args)).await {
            Err(error) if error.is_connection_dropped() && self.function.may_be_sent_again() => {
                let function = self.function.name();
                tracing::debug!(function, %error, "the Redis connection dropped; calling again");
                let args = with_new_event_ids(self.args.clone());
                connection.fcall(&self.command(&args)).await
            }
            reply => reply,
        };
        reply.map_err(|error| {
            StoreError::backend(
                format!("redis function {} failed", self.function.name()),
                error,
            )
        })
    }
}

/// Where a call's arguments carry its events' settings (`room.lua`: the cap, the call's
/// random id prefix and the room, separated by `|`; empty with events off).
const EVENTS_ARG: usize = 3;

/// The events' setting of one call with events on (`room.lua`, `emit`): the outbox's cap, a
/// new random prefix for the ids of the call's events, and the room.
fn events_setting(cap: impl std::fmt::Display, room: impl std::fmt::Display) -> String {
    format!("{cap}|{}|{room}", crate::visitor_events::random_prefix())
}

/// `args` with a new random id prefix for the call's events (events off: as they were).
fn with_new_event_ids(mut args: Vec<String>) -> Vec<String> {
    if let Some(events) = args.get_mut(EVENTS_ARG) {
        let renewed = {
            let mut fields = events.splitn(3, '|');
            match (fields.next(), fields.next(), fields.next()) {
                (Some(cap), Some(_), Some(room)) => Some(events_setting(cap, room)),
                _ => None,
            }
        };
        if let Some(renewed) = renewed {
            *events = renewed;
        }
    }
    args
}

/// The failure of a batched call, told to each of its `count` requests (joins, session ends,
/// statuses, session checks).
fn shared_failure(error: &StoreError, count: usize) -> Vec<Outcome> {
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

pub(super) fn malformed(name: &str, error: MalformedAnswer) -> StoreError {
    StoreError::backend(format!("redis script {name} answered badly"), error)
}

pub(super) fn millis(duration: Duration) -> String {
    duration_millis(duration).min(MAX_SCRIPT_MILLIS).to_string()
}

pub(super) fn safe_number(number: u64) -> String {
    number.min(MAX_SCRIPT_MILLIS).to_string()
}

/// The generator of the ids and seeds the store's calls send: the thread's CSPRNG (ChaCha,
/// seeded and reseeded from the OS), as the embedded stores' generators are. Not the OS's
/// generator itself: `rand` draws an id's 16 bytes from it one `getrandom` system call per
/// byte, 33 calls a join, which took about 13 % of a node's CPU in joins on Redis.
pub(super) fn thread_rng() -> ThreadRng {
    rand::thread_rng()
}

/// A seed for random-order admissions, within what Lua's `math.randomseed` takes.
pub(super) fn admission_seed() -> String {
    thread_rng().gen_range(0..i32::MAX).to_string()
}

/// A seed for a pre-queue lottery the operation may find due (SPEC §5.3), from the thread's
/// CSPRNG ([`thread_rng`]); the script records it with the draw.
pub(super) fn lottery_seed() -> String {
    let mut seed: Seed = [0; 32];
    thread_rng().fill(&mut seed);
    seed_to_hex(&seed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_second_call_gets_new_event_ids_and_keeps_the_rest() {
        let events = events_setting(500, "shop");
        let args = vec![
            "1700000000000".to_owned(),
            "channel".to_owned(),
            "3600000".to_owned(),
            events.clone(),
            "ticket".to_owned(),
        ];
        let again = with_new_event_ids(args.clone());
        let fields: Vec<&str> = again[EVENTS_ARG].split('|').collect();
        let first: Vec<&str> = events.split('|').collect();
        assert_eq!(fields.len(), 3, "{again:?}");
        assert_eq!((fields[0], fields[2]), ("500", "shop"));
        assert_eq!(fields[1].len(), first[1].len());
        assert_ne!(fields[1], first[1], "the ids' prefix is new");
        assert_eq!(again[..EVENTS_ARG], args[..EVENTS_ARG]);
        assert_eq!(again[EVENTS_ARG + 1..], args[EVENTS_ARG + 1..]);

        // Events off: nothing to renew.
        let mut off = args;
        off[EVENTS_ARG] = String::new();
        assert_eq!(with_new_event_ids(off.clone()), off);
    }
}
