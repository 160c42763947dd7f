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
        let events = self
            .outbox
            .get()
            .map(|outbox| (outbox.limits().max_entries, self.room.clone()));
        let mut all_args = vec![
            now,
            self.channel.clone(),
            // For a room stored before it had its own `history_retention`.
            duration_millis(DEFAULT_HISTORY_RETENTION).to_string(),
        ];
        all_args.extend(args);
        RoomCall {
            function,
            keys: self.keys.clone(),
            args: all_args,
            events,
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
    /// Every argument but the events' setting, which goes at [`EVENTS_ARG`].
    args: Vec<String>,
    /// With events on: the outbox's cap and the room, for the events' setting of each send.
    events: Option<(u64, RoomId)>,
}

impl RoomCall {
    pub(super) async fn run(
        &self,
        connection: &Connection,
    ) -> Result<Result<Answer, Refusal>, StoreError> {
        let fields: Vec<String> = self.reply(connection).await?;
        Answer::new(fields).map_err(|error| malformed(self.function.name(), error))
    }

    /// The function's `FCALL`: the room's keys, then the arguments with the events' setting
    /// (`room.lua`, `emit`: the outbox's cap, a new random prefix for the ids of this send's
    /// events, and the room; empty with events off).
    fn command(&self) -> redis::Cmd {
        let events = self
            .events
            .as_ref()
            .map_or_else(String::new, |(cap, room)| {
                format!("{cap}|{}|{room}", crate::visitor_events::random_prefix())
            });
        let (before, after) = self.args.split_at(EVENTS_ARG.min(self.args.len()));
        let mut command = redis::cmd("FCALL");
        command
            .arg(self.function.function_name())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(before)
            .arg(events)
            .arg(after);
        command
    }

    /// Calls the function and reads its reply as a `T`. A call that met a cut connection
    /// (Redis restarted, or the connection was dropped) is made once more, on the connection
    /// made again, when the function may be run twice: otherwise the call that met the cut
    /// would fail (a leave lost, a status answered 503). The second call's events get ids of
    /// their own ([`command`](Self::command)), since the first may have run and given its ids
    /// away.
    pub(super) async fn reply<T: redis::FromRedisValue>(
        &self,
        connection: &Connection,
    ) -> Result<T, StoreError> {
        let reply = match connection.fcall(&self.command()).await {
            Err(error) if error.is_connection_dropped() && self.function.may_be_sent_again() => {
                let function = self.function.name();
                tracing::debug!(function, %error, "the Redis connection dropped; calling again");
                connection.fcall(&self.command()).await
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

/// Where a call's arguments carry its events' setting (`room.lua`).
const EVENTS_ARG: usize = 3;

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

    /// A command's arguments after `FCALL` and the function's name, as text.
    fn sent_args(command: &redis::Cmd) -> Vec<String> {
        command
            .args_iter()
            .skip(2)
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                _ => panic!("only plain arguments in an FCALL"),
            })
            .collect()
    }

    #[test]
    fn a_second_call_gets_new_event_ids_and_keeps_the_rest() {
        let args = vec![
            "1700000000000".to_owned(),
            "channel".to_owned(),
            "3600000".to_owned(),
            "ticket".to_owned(),
        ];
        let call = RoomCall {
            function: RoomFunction::Leave,
            keys: vec!["key".to_owned()],
            args: args.clone(),
            events: Some((500, RoomId::new("shop").unwrap())),
        };
        let (first, again) = (sent_args(&call.command()), sent_args(&call.command()));
        // The key count and the key, then the arguments.
        let events_at = 2 + EVENTS_ARG;
        let first_events: Vec<&str> = first[events_at].split('|').collect();
        let fields: Vec<&str> = again[events_at].split('|').collect();
        assert_eq!(fields.len(), 3, "{again:?}");
        assert_eq!((fields[0], fields[2]), ("500", "shop"));
        assert_eq!(fields[1].len(), first_events[1].len());
        assert_ne!(fields[1], first_events[1], "the ids' prefix is new");
        assert_eq!(again[..events_at], first[..events_at]);
        assert_eq!(again[events_at + 1..], first[events_at + 1..]);
        assert_eq!(again[2..events_at], args[..EVENTS_ARG]);
        assert_eq!(again[events_at + 1..], args[EVENTS_ARG..]);

        // Events off: nothing to renew.
        let off = RoomCall {
            events: None,
            ..call
        };
        assert_eq!(sent_args(&off.command())[events_at], "");
        assert_eq!(sent_args(&off.command()), sent_args(&off.command()));
    }
}
