//! [`RedisStore`]: rooms, tickets and sessions in Redis, standalone or Cluster (SPEC §9.3),
//! shared by any number of anteroom nodes.
//!
//! Every room operation is one Lua function (`lua/rooms/`) of a Redis 7 function library
//! (`scripts.rs`), called with FCALL: the library is loaded when the store connects (on every
//! primary of a Cluster) and again when Redis answers that a function is missing (a restart
//! without persistence, `FUNCTION FLUSH`). The scripts reproduce the room engine of
//! `anteroom-core` over the room's keys, so any node may run any operation, `tick` included, at
//! any time: Redis runs one script at a time, which makes each operation atomic without a
//! leader.
//!
//! - **Keys** are `anteroom:{<room>}:<part>`: the hash tag is the room, so a room lives in one
//!   Cluster slot and no script crosses slots. The room list (`anteroom:rooms`, a set) lives in
//!   another slot and is changed by separate commands: a room is listed before it is created
//!   and unlisted after it is deleted; a listed room without its meta key is skipped.
//!   Redeemed OIDC authorization codes are `anteroom:oidc-code:<code id>` (`codes.rs`), spread
//!   over the slots like rate-limit keys.
//! - **Time** comes from the server's `TIME` inside each script, so every node agrees on it. A
//!   store given a [`Clock`] (tests driving a `ManualClock`) passes that clock's time to the
//!   scripts instead; production stores are built without one.
//! - **Randomness**: ticket and session ids are drawn here from the OS's CSPRNG and passed in;
//!   random-order admission draws from Lua's generator seeded per call from the same source.
//! - **Change notices**: scripts that change a room publish `<op>|<generation>|<serving>|
//!   <last position>|<waiting>` (ending a session adds `|<session id>`) on the room's shard
//!   channel `anteroom:{<room>}:events` (SPUBLISH, so a notice stays on the room's shard in a
//!   Cluster). [`RoomStore::notices`] subscribes to them on a connection of its own
//!   (`subscriber.rs`), so every node hears of another node's admissions and revocations.
//! - **Opening** a store (its first connection) counts as contact for every waiting ticket, as
//!   reopening the embedded store does: a restart of the service never abandons anybody.
//! - **Failures**: every call is bounded by [`RedisConfig::timeout`]; connections reconnect on
//!   their own. A call that timed out may still have happened; for a join that was sent, whose
//!   ticket nobody would hold, the store then cancels it (`cancel_join.lua`, the joins of one
//!   failed call in one cancellation); a join that was never sent fails at its bound and costs
//!   Redis nothing.
//! - **Joins** into one room are group-committed (`join_batch.rs`): while a node's join call
//!   for the room is in flight, its further joins gather and go as one `join.lua` call, which
//!   runs them in order and answers each; a few calls per room may be in flight at once. A
//!   busy room's next call waits (at most 2 ms) for as many joins as its last one carried.
//! - **Session ends** into one room go together too (`end_batch.rs`): the ends a node queues
//!   while its end call for the room is in flight go as one `end_session.lua` call, which ends
//!   each and ticks once (one refill for all of them instead of a tick per end). Statuses
//!   (polls) likewise (`status_batch.rs`): one `status.lua` call answers the polls a node
//!   queued for the room while four of its status calls were in flight, reading and writing
//!   the room's meta once for all of them, and session checks (the gateway's, when a pass's
//!   last check is a second old, and the OpenID Connect endpoints') are read with one `HMGET`
//!   a call (`session_batch.rs`). Each kind has its own queue per room, all three built by
//!   `room_queue.rs`.
//! - **Layout** 3 (`room.lua`): a waiting ticket is its id and a short record in a
//!   listpack-encoded hash of 128 positions (`:line:<n>`), its id's entry in an index of small
//!   hashes (`:line:id:<n>`, id -> position, linear hashing), and a bit in its lane's count hash
//!   (`:waiting`, `:priority`: a mask of live positions per line bucket and a Fenwick tree of
//!   the buckets' counts, so `ahead` is exact in O(log n)); idle tickets are found by a bounded
//!   sweep. Rooms written in layouts 1 and 2 are migrated by the first script that touches
//!   them; an unknown layout is refused with an error naming the meta key. The keys of a room,
//!   their types and the record fields are listed at the top of `room.lua`: `:meta`
//!   (configuration as numbers, the `RawRoom` JSON, schedule, latest lottery, counters, bucket,
//!   rate, totals, the lanes' totals), `:tickets` (tickets no longer waiting), `:waiting` and
//!   `:priority`, `:line:<n>`, `:line:id:<n>`, `:admitted` (by claim deadline), `:sessions`,
//!   `:active` (by expiry), `:identities`, `:ended` and `:forget` (history trimmed by
//!   `tick`), `:session_ids` (all at score 0, so session listings walk ids with ZRANGE BYLEX),
//!   `:cancelled`, `:outbox`. The idle sweep runs from a cursor in meta over about 1,024
//!   records a tick (`SWEEP_BUDGET`, then the rest of its bucket), wrapping around; admission
//!   checks each ticket it is about to admit, so no idle ticket is admitted.
//! - **Cancelled joins**: `cancel_join.lua` takes the ticket out of the line, or, if the join
//!   has not run yet, keeps its id in `:cancelled` for 10 minutes so the join refuses it. Each
//!   join also carries the time after which its caller stops waiting (`server_clock.rs`).
//! - **Configuration writes**: `replace_room_if` is `put_room.lua` given the expected
//!   configuration's JSON, compared with the stored text before writing. `load_room` (in the
//!   prelude) puts the schedule's mode and limits at the script's time in force, and `settle`
//!   draws a due pre-queue lottery with `anteroom_core::lottery`'s algorithm (ChaCha20 on Redis's
//!   `bit` library), from a 32-byte seed drawn in Rust and passed to the scripts that may need it.
//!
//! Integers stay below 2^53 so Lua's doubles hold them exactly: durations handed to the
//! scripts are capped at 2^52 ms (about 142 000 years).

mod codes;
pub(crate) mod connection;
mod end_batch;
mod join_batch;
mod key_entries;
mod node_keys;
mod outbox;
mod packed_answers;
mod records;
mod room_call;
mod room_queue;
mod scripts;
mod server_clock;
mod session_batch;
mod status_batch;
mod subscriber;

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::adaptive::LoadSignal;
use anteroom_core::clock::duration_millis;
use anteroom_core::engine::{
    Entry, JoinRequest, MAX_IDENTITY_LEN, MAX_RETURN_PATH_LEN, RoomSnapshot, Session, SessionEnd,
    TickReport, TicketRef,
};
use anteroom_core::lottery::seed_to_hex;
use anteroom_core::room::{RoomConfig, Schedule, priority_code_hash};
use anteroom_core::{Clock, RoomId, SessionId, TicketId};
use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::notices::Notices;
use crate::persisted::{decode_config, encode_config};
use crate::{
    ConfigWrite, LineMasks, MAX_SESSIONS_EXAMINED, RoomRecords, RoomStore, SessionFilter,
    SessionListing, SessionQuery, StoreError,
};
use connection::{Client, Connection};
use node_keys::{outbox_rooms_key, rooms_key};
use records::{Answer, Refusal, encode_text};
use room_call::{MAX_SCRIPT_MILLIS, RoomCall, RoomPrelude};
use room_call::{admission_seed, lottery_seed, malformed, millis, safe_number, thread_rng};
use scripts::RoomFunction;

pub(crate) use connection::{DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT};
pub use key_entries::{KeyEntries, RedisKeyEntries};
pub use outbox::RedisOutbox;

/// Admission bucket units per token (`anteroom_core::engine::AdmissionBucket`).
const UNITS_PER_TOKEN: u64 = 60_000;

/// Takes the lease `KEYS[1]` for `ARGV[1]` for `ARGV[2]` ms when nobody else holds it, or
/// extends it for its holder; 1 when `ARGV[1]` holds it after the call.
static LEASE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
",
    )
});

/// The parts of a room's keys, in the order the scripts expect them (`room.lua`).
/// `line` is not a key itself but the prefix of the waiting records' buckets (`line:<n>`) and
/// of the id index's (`line:id:<n>`).
const ROOM_KEY_PARTS: [&str; 15] = [
    "meta",
    "tickets",
    "waiting",
    "line",
    "admitted",
    "sessions",
    "active",
    "identities",
    "ended",
    "forget",
    "priority",
    "session_ids",
    "cancelled",
    "outbox",
    "outbox_seq",
];

/// Where and how to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// One standalone server's URL, or a Cluster's seed nodes.
    pub urls: Vec<String>,
    /// Whether `urls` are Redis Cluster nodes.
    pub cluster: bool,
    /// Bound on every store call, connecting included (2 s by default).
    pub timeout: Duration,
    /// First part of every key (`<prefix>:{<room>}:…`, `<prefix>:rooms`; `anteroom` by
    /// default), so several deployments can share one Redis.
    pub key_prefix: String,
}

impl RedisConfig {
    /// One standalone server (`redis://host:port/db`).
    pub fn standalone(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            urls: vec![url.into()],
            cluster: false,
            timeout: DEFAULT_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// A Redis Cluster, reached through any of its `nodes`.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> RedisConfig {
        RedisConfig {
            urls: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            timeout: DEFAULT_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// With another bound on every call.
    pub fn with_timeout(mut self, timeout: Duration) -> RedisConfig {
        self.timeout = timeout;
        self
    }

    /// With another key prefix.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> RedisConfig {
        self.key_prefix = prefix.into();
        self
    }
}

/// Rooms in Redis (standalone or Cluster), shared by every node that opens the same keys.
///
/// ```no_run
/// # async fn example() -> Result<(), anteroom_store::StoreError> {
/// use anteroom_store::{RedisConfig, RedisStore, RoomStore};
///
/// let store = RedisStore::new(RedisConfig::standalone("redis://127.0.0.1:6379"), None)?;
/// let rooms = store.rooms().await?;
/// # let _ = rooms;
/// # Ok(())
/// # }
/// ```
pub struct RedisStore {
    client: Client,
    connection: OnceCell<Connection>,
    clock: Option<Arc<dyn Clock>>,
    prefix: String,
    timeout: Duration,
    urls: Vec<String>,
    notices: std::sync::OnceLock<Notices>,
    server_clock: server_clock::ServerClock,
    /// Once events are on (SPEC §14.9): the outbox, whose cap the scripts trim to.
    /// Shared with the join batches, which read it for every call they make.
    outbox: Arc<std::sync::OnceLock<Arc<RedisOutbox>>>,
    /// Joins waiting for their room's next call (`join_batch.rs`).
    joins: join_batch::JoinQueues,
    /// Session ends waiting for their room's next call (`end_batch.rs`).
    ends: end_batch::EndQueues,
    /// Statuses waiting for their room's next call (`status_batch.rs`).
    statuses: status_batch::StatusQueues,
    /// Session checks waiting for their room's next call (`session_batch.rs`).
    sessions: session_batch::SessionQueues,
}

impl RedisStore {
    /// A store over `config`. It connects on first use (and again on its own after a
    /// failure), so building one needs no reachable server.
    ///
    /// `clock` is for tests only: with one, scripts use its time instead of the server's
    /// `TIME`. Production passes `None`, so every node shares the server's clock.
    pub fn new(
        config: RedisConfig,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<RedisStore, StoreError> {
        let client =
            Client::new(&config.urls, config.cluster, config.timeout).map_err(|error| {
                StoreError::backend(format!("invalid redis configuration: {error}"), error)
            })?;
        Ok(RedisStore {
            client,
            connection: OnceCell::new(),
            clock,
            prefix: config.key_prefix,
            timeout: config.timeout,
            urls: config.urls,
            notices: std::sync::OnceLock::new(),
            server_clock: server_clock::ServerClock::default(),
            outbox: Arc::default(),
            joins: join_batch::JoinQueues::default(),
            ends: end_batch::EndQueues::default(),
            statuses: status_batch::StatusQueues::default(),
            sessions: session_batch::SessionQueues::default(),
        })
    }

    /// Connects now (if not yet connected) and checks the server answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.bounded("ping", async {
            let connection = self.connection().await?;
            let _: String = connection
                .query(&redis::cmd("PING"))
                .await
                .map_err(|error| StoreError::backend("redis did not answer PING", error))?;
            Ok(())
        })
        .await
    }

    /// Starts the notice subscriber (once); needs a tokio runtime.
    fn start_notices(&self) -> Option<Notices> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let target = match &self.client {
            Client::Standalone(client) => {
                subscriber::Target::Standalone(client.get_connection_info().clone())
            }
            Client::Cluster(_) => subscriber::Target::Cluster(self.urls.clone()),
        };
        let notices = self.notices.get_or_init(|| {
            let notices = Notices::new();
            let subscriber = subscriber::Subscriber {
                target,
                timeout: self.timeout,
                prefix: self.prefix.clone(),
                notices: notices.downgrade(),
            };
            runtime.spawn(subscriber.run());
            notices
        });
        Some(notices.clone())
    }

    async fn connection(&self) -> Result<Connection, StoreError> {
        self.connection
            .get_or_try_init(|| async {
                let connection = self
                    .client
                    .connect(self.timeout)
                    .await
                    .map_err(|error| StoreError::backend("cannot connect to redis", error))?;
                connection.load_room_library().await.map_err(|error| {
                    StoreError::backend(
                        "cannot load the room functions into redis (FUNCTION LOAD: Redis 7 or \
                         later is needed)",
                        error,
                    )
                })?;
                self.reopen_rooms(&connection).await?;
                Ok(connection)
            })
            .await
            .cloned()
    }

    /// Gives every waiting ticket of every room a fresh idle period (see the module docs).
    async fn reopen_rooms(&self, connection: &Connection) -> Result<(), StoreError> {
        for room in self.listed_rooms(connection).await? {
            match self
                .eval_on(connection, RoomFunction::Reopen, &room, Vec::new())
                .await?
            {
                Ok(_) | Err(Refusal::RoomNotFound) => {}
                Err(refusal) => return Err(refusal.into_error(&room)),
            }
        }
        Ok(())
    }

    async fn listed_rooms(&self, connection: &Connection) -> Result<Vec<RoomId>, StoreError> {
        let names: Vec<String> = connection
            .query(redis::cmd("SMEMBERS").arg(self.rooms_key()))
            .await
            .map_err(|error| StoreError::backend("cannot list rooms in redis", error))?;
        let mut rooms: Vec<RoomId> = names
            .iter()
            .filter_map(|name| RoomId::new(name).ok())
            .collect();
        rooms.sort();
        Ok(rooms)
    }

    fn rooms_key(&self) -> String {
        rooms_key(&self.prefix)
    }

    fn room_key(&self, room: &RoomId, part: &str) -> String {
        format!("{}:{{{}}}:{}", self.prefix, room, part)
    }

    /// Runs `operation` within the configured timeout.
    async fn bounded<T>(
        &self,
        what: &str,
        operation: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        connection::bounded(self.timeout, what, operation).await
    }

    /// Runs a room function and reads its answer; refusals become [`StoreError`]s.
    async fn eval(
        &self,
        function: RoomFunction,
        room: &RoomId,
        args: Vec<String>,
    ) -> Result<Answer, StoreError> {
        self.bounded(function.name(), async {
            let connection = self.connection().await?;
            self.eval_on(&connection, function, room, args)
                .await?
                .map_err(|refusal| refusal.into_error(room))
        })
        .await
    }

    async fn eval_on(
        &self,
        connection: &Connection,
        function: RoomFunction,
        room: &RoomId,
        args: Vec<String>,
    ) -> Result<Result<Answer, Refusal>, StoreError> {
        self.room_call(function, room, args).run(connection).await
    }

    /// A room function's call: its keys, then the prelude's arguments and `args`.
    fn room_call(&self, function: RoomFunction, room: &RoomId, args: Vec<String>) -> RoomCall {
        self.room_prelude(room).call(function, args)
    }

    /// What a task of its own needs to make `room`'s batched calls on `connection` (a join
    /// batch's, a room queue's).
    fn room_caller(&self, room: &RoomId, connection: Connection) -> room_call::RoomCaller {
        room_call::RoomCaller {
            prelude: self.room_prelude(room),
            connection,
            timeout: self.timeout,
        }
    }

    /// What every script call on `room` carries besides its own arguments.
    fn room_prelude(&self, room: &RoomId) -> RoomPrelude {
        RoomPrelude {
            room: room.clone(),
            keys: ROOM_KEY_PARTS
                .iter()
                .map(|part| self.room_key(room, part))
                .collect(),
            channel: self.room_key(room, "events"),
            clock: self.clock.clone(),
            outbox: self.outbox.clone(),
        }
    }

    /// The time after which a join sent now is no longer awaited, in the scripts' clock, or
    /// `""` while the server's clock is not known yet (see `server_clock.rs`).
    fn join_deadline(&self, connection: &Connection) -> String {
        match &self.clock {
            Some(clock) => (clock.now().as_millis() + duration_millis(self.timeout)).to_string(),
            None => self
                .server_clock
                .deadline(self.timeout, connection)
                .map(|deadline| deadline.to_string())
                .unwrap_or_default(),
        }
    }

    async fn config_on(
        &self,
        connection: &Connection,
        room: &RoomId,
    ) -> Result<Option<RoomConfig>, StoreError> {
        let stored: Option<Vec<u8>> = connection
            .query(
                redis::cmd("HGET")
                    .arg(self.room_key(room, "meta"))
                    .arg("config"),
            )
            .await
            .map_err(|error| StoreError::backend("cannot read a room from redis", error))?;
        stored
            .map(|bytes| {
                decode_config(&bytes).map_err(|error| {
                    StoreError::backend(format!("room {room} is stored badly in redis"), error)
                })
            })
            .transpose()
    }
}

/// A room's schedule as the scripts read it (`room.lua`): events joined by `;`, each
/// `prequeue_at,opens_at,closes_at,shuffle,max_active,per_minute,capacity`.
fn schedule_arg(schedule: &Schedule) -> String {
    let optional = |value: Option<u64>| value.map(safe_number).unwrap_or_default();
    let events: Vec<String> = schedule
        .events
        .iter()
        .map(|event| {
            [
                safe_number(event.prequeue_at.as_millis()),
                safe_number(event.opens_at.as_millis()),
                safe_number(event.closes_at.as_millis()),
                if event.shuffle { "1" } else { "0" }.to_owned(),
                optional(event.max_active),
                optional(event.admit_per_minute),
                optional(
                    event
                        .admit_burst
                        .map(|burst| burst.max(1).saturating_mul(UNITS_PER_TOKEN)),
                ),
            ]
            .join(",")
        })
        .collect();
    events.join(";")
}

/// `put_room.lua`'s arguments: the configuration's JSON, the JSON the room must still have
/// (`""` for any), then [`config_fields`] as name, value pairs.
fn config_args(config: &RoomConfig, expected: String) -> Vec<String> {
    let mut args = vec![
        String::from_utf8_lossy(&encode_config(config)).into_owned(),
        expected,
    ];
    for (name, value) in config_fields(config) {
        args.push(name.to_owned());
        args.push(value);
    }
    args
}

/// The configuration as the scripts read it: each meta field by its name, in one list, so
/// `put_room.lua` writes what it is given and reads each value by name, never by position.
fn config_fields(config: &RoomConfig) -> [(&'static str, String); 15] {
    [
        ("mode", config.mode.as_str().to_owned()),
        ("order", config.order.as_str().to_owned()),
        ("max_active", safe_number(config.max_active)),
        ("per_minute", safe_number(config.admit_per_minute)),
        // The bucket's capacity, in units.
        (
            "capacity",
            safe_number(config.admit_burst.max(1).saturating_mul(UNITS_PER_TOKEN)),
        ),
        ("session_ttl", millis(config.session_ttl)),
        (
            "session_max",
            config.session_max.map(millis).unwrap_or_default(),
        ),
        ("claim_ttl", millis(config.claim_ttl)),
        ("idle_ttl", millis(config.ticket_idle_ttl)),
        ("retention", millis(config.history_retention)),
        // Renewal happens once more than half the ttl has passed (RoomState::renew_session).
        ("renew_after", millis(config.session_ttl / 2)),
        ("schedule", schedule_arg(&config.schedule)),
        ("before", config.schedule.before.as_str().to_owned()),
        ("after", config.schedule.after.as_str().to_owned()),
        ("priority_codes", priority_codes_arg(config)),
    ]
}

/// The priority codes: `<sha256 hex>=<uses>` joined by `,` (`""` for none).
fn priority_codes_arg(config: &RoomConfig) -> String {
    config
        .priority
        .iter()
        .flat_map(|lane| {
            lane.hashes
                .iter()
                .map(move |hash| format!("{}={}", seed_to_hex(hash), safe_number(lane.uses)))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Cuts `text` to at most `max_len` bytes on a character boundary (as the engine does).
fn truncate(mut text: String, max_len: usize) -> String {
    if text.len() > max_len {
        let mut end = max_len;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[async_trait]
impl RoomStore for RedisStore {
    async fn put_room(&self, config: RoomConfig) -> Result<RoomSnapshot, StoreError> {
        let room = config.id.clone();
        self.bounded("put_room", async {
            let connection = self.connection().await?;
            // Listed first, created second: a crash in between leaves a listed room without
            // data, which listings skip.
            let _: i64 = connection
                .query(redis::cmd("SADD").arg(self.rooms_key()).arg(room.as_str()))
                .await
                .map_err(|error| StoreError::backend("cannot list the room in redis", error))?;
            // Its event partition is read until delivered, even after the room is deleted.
            let _: i64 = connection
                .query(
                    redis::cmd("SADD")
                        .arg(outbox_rooms_key(&self.prefix))
                        .arg(room.as_str()),
                )
                .await
                .map_err(|error| StoreError::backend("cannot list the room in redis", error))?;
            Ok(())
        })
        .await?;
        let args = config_args(&config, String::new());
        self.eval(RoomFunction::PutRoom, &room, args)
            .await?
            .snapshot()
            .map_err(|error| malformed("put_room", error))
    }

    async fn replace_room_if(
        &self,
        expected: &RoomConfig,
        config: RoomConfig,
    ) -> Result<ConfigWrite, StoreError> {
        let room = config.id.clone();
        let mut expected_text = String::from_utf8_lossy(&encode_config(expected)).into_owned();
        // The script compares the stored text. Text written by an older version may encode
        // the same configuration differently: then the comparison is made once more against
        // that very text, still inside the script, so the check stays atomic.
        for _ in 0..2 {
            let args = config_args(&config, expected_text.clone());
            let mut answer = self.eval(RoomFunction::PutRoom, &room, args).await?;
            if !answer.is_refused_as("changed") {
                return answer
                    .snapshot()
                    .map(ConfigWrite::Written)
                    .map_err(|error| malformed("put_room", error));
            }
            let stored = answer
                .expect("changed")
                .and_then(|()| answer.text())
                .map_err(|error| malformed("put_room", error))?;
            let current = decode_config(stored.as_bytes()).map_err(|error| {
                StoreError::backend(format!("room {room} is stored badly in redis"), error)
            })?;
            if current != *expected || stored == expected_text {
                return Ok(ConfigWrite::Changed(current));
            }
            expected_text = stored;
        }
        let current = self.room(&room).await?;
        Ok(ConfigWrite::Changed(current))
    }

    async fn delete_room(&self, room: &RoomId) -> Result<bool, StoreError> {
        let mut answer = self
            .eval(RoomFunction::DeleteRoom, room, Vec::new())
            .await?;
        let existed = answer
            .expect("ok")
            .and_then(|()| answer.number())
            .map_err(|error| malformed("delete_room", error))?
            == 1;
        self.bounded("delete_room", async {
            let connection = self.connection().await?;
            let _: i64 = connection
                .query(redis::cmd("SREM").arg(self.rooms_key()).arg(room.as_str()))
                .await
                .map_err(|error| StoreError::backend("cannot unlist the room in redis", error))?;
            Ok(())
        })
        .await?;
        Ok(existed)
    }

    async fn rooms(&self) -> Result<Vec<RoomConfig>, StoreError> {
        self.bounded("rooms", async {
            let connection = self.connection().await?;
            let mut configs = Vec::new();
            for room in self.listed_rooms(&connection).await? {
                if let Some(config) = self.config_on(&connection, &room).await? {
                    configs.push(config);
                }
            }
            Ok(configs)
        })
        .await
    }

    async fn room(&self, room: &RoomId) -> Result<RoomConfig, StoreError> {
        self.bounded("room", async {
            let connection = self.connection().await?;
            self.config_on(&connection, room)
                .await?
                .ok_or_else(|| StoreError::RoomNotFound(room.clone()))
        })
        .await
    }

    async fn join(&self, room: &RoomId, request: JoinRequest) -> Result<Entry, StoreError> {
        let identity = request
            .identity
            .map(|identity| truncate(identity, MAX_IDENTITY_LEN));
        let return_to = request
            .return_to
            .filter(|path| path.len() <= MAX_RETURN_PATH_LEN);
        let (resume_id, resume_generation) = match request.resume {
            Some(held) => (held.id.to_string(), held.generation.to_string()),
            None => (String::new(), String::new()),
        };
        let ticket = TicketId::random(&mut thread_rng()).to_string();
        // `join.lua`'s arguments after the ticket id.
        let mut args = vec![
            SessionId::random(&mut thread_rng()).to_string(),
            resume_id,
            resume_generation,
            encode_text(identity.as_deref()),
            encode_text(return_to.as_deref()),
            request
                .priority_code
                .as_deref()
                .map(|code| seed_to_hex(&priority_code_hash(code)))
                .unwrap_or_default(),
            if request.resume_only { "1" } else { "" }.to_owned(),
        ];
        let start = tokio::time::Instant::now();
        let connection = self.bounded("join", self.connection()).await?;
        args.push(self.join_deadline(&connection));
        let sender = || self.room_caller(room, connection);
        // The node bounds every call (SPEC §9.4): the join's bound counts from its start.
        let answer = self
            .joins
            .join(room, ticket, args, start + self.timeout, sender)
            .await?;
        let mut answer = answer.map_err(|refusal| refusal.into_error(room))?;
        let entry = answer.entry().map_err(|error| malformed("join", error))?;
        // Every field read: an answer longer than its kind's is malformed, not half-read.
        if !answer.is_empty() {
            return Err(malformed(
                "join",
                records::MalformedAnswer("fields after the join's answer".to_owned()),
            ));
        }
        Ok(entry)
    }

    async fn status(&self, room: &RoomId, ticket: TicketRef) -> Result<Entry, StoreError> {
        // The node's polls of this room go together, one call for many (`status_batch.rs`).
        let outcome = self
            .bounded("status", async {
                let connection = self.connection().await?;
                let sender = || self.room_caller(room, connection);
                let status = status_batch::StatusRequest {
                    ticket: ticket.id.to_string(),
                    generation: ticket.generation.to_string(),
                    session: SessionId::random(&mut thread_rng()).to_string(),
                };
                self.statuses.submit(room, status, sender).await
            })
            .await?;
        outcome
            .map_err(|refusal| refusal.into_error(room))?
            .entry()
            .map_err(|error| malformed("status", error))
    }

    async fn leave(&self, room: &RoomId, ticket: TicketRef) -> Result<(), StoreError> {
        let args = vec![
            ticket.id.to_string(),
            ticket.generation.to_string(),
            admission_seed(),
            lottery_seed(),
        ];
        self.eval(RoomFunction::Leave, room, args)
            .await?
            .expect("ok")
            .map_err(|error| malformed("leave", error))
    }

    async fn end_session(
        &self,
        room: &RoomId,
        session: SessionId,
        reason: SessionEnd,
    ) -> Result<Session, StoreError> {
        // The node's ends for this room go together, one tick for all (`end_batch.rs`).
        let outcome = self
            .bounded("end_session", async {
                let connection = self.connection().await?;
                let sender = || self.room_caller(room, connection);
                let end = end_batch::EndRequest {
                    session: session.to_string(),
                    reason: reason.as_str().to_owned(),
                };
                self.ends.submit(room, end, sender).await
            })
            .await?;
        let mut answer = outcome.map_err(|refusal| refusal.into_error(room))?;
        answer
            .expect("ok")
            .and_then(|()| answer.session())
            .map_err(|error| malformed("end_session", error))
    }

    async fn renew_session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<(Session, bool), StoreError> {
        let mut answer = self
            .eval(RoomFunction::RenewSession, room, vec![session.to_string()])
            .await?;
        let read = |answer: &mut Answer| {
            answer.expect("ok")?;
            let renewed = answer.number()? == 1;
            Ok((answer.session()?, renewed))
        };
        read(&mut answer).map_err(|error| malformed("renew_session", error))
    }

    async fn session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<Option<Session>, StoreError> {
        let id = session.to_string();
        // The node's checks of this room go together, one call for many (`session_batch.rs`).
        let outcome = self
            .bounded("session", async {
                let connection = self.connection().await?;
                let sender = || self.room_caller(room, connection);
                self.sessions.submit(room, id.clone(), sender).await
            })
            .await?;
        let mut answer = outcome.map_err(|refusal| refusal.into_error(room))?;
        let read = |answer: &mut Answer| {
            answer.expect("ok")?;
            let record = answer.text()?;
            if record.is_empty() {
                return Ok(None);
            }
            records::decode_session(&id, &record).map(Some)
        };
        read(&mut answer).map_err(|error| malformed("session", error))
    }

    async fn issue_session(
        &self,
        room: &RoomId,
        uid: Option<String>,
        ttl: Duration,
    ) -> Result<Session, StoreError> {
        let args = vec![
            SessionId::random(&mut thread_rng()).to_string(),
            encode_text(uid.as_deref()),
            millis(ttl),
        ];
        let mut answer = self.eval(RoomFunction::IssueSession, room, args).await?;
        answer
            .expect("ok")
            .and_then(|()| answer.session())
            .map_err(|error| malformed("issue_session", error))
    }

    async fn tick(&self, room: &RoomId) -> Result<TickReport, StoreError> {
        self.eval(
            RoomFunction::Tick,
            room,
            vec![admission_seed(), lottery_seed()],
        )
        .await?
        .tick_report()
        .map_err(|error| malformed("tick", error))
    }

    async fn snapshot(&self, room: &RoomId) -> Result<RoomSnapshot, StoreError> {
        self.eval(RoomFunction::Snapshot, room, Vec::new())
            .await?
            .snapshot()
            .map_err(|error| malformed("snapshot", error))
    }

    async fn advance(&self, room: &RoomId, count: u64) -> Result<(u64, RoomSnapshot), StoreError> {
        let mut answer = self
            .eval(
                RoomFunction::Advance,
                room,
                vec![safe_number(count), lottery_seed()],
            )
            .await?;
        let read = |answer: &mut Answer| {
            let snapshot = answer.snapshot()?;
            Ok((answer.number()?, snapshot))
        };
        read(&mut answer).map_err(|error| malformed("advance", error))
    }

    async fn reset(&self, room: &RoomId, purge: bool) -> Result<RoomSnapshot, StoreError> {
        let purge = if purge { "1" } else { "0" };
        self.eval(RoomFunction::Reset, room, vec![purge.to_owned()])
            .await?
            .snapshot()
            .map_err(|error| malformed("reset", error))
    }

    async fn records(&self, room: &RoomId) -> Result<RoomRecords, StoreError> {
        let (tickets, sessions) = self
            .eval(RoomFunction::Records, room, Vec::new())
            .await?
            .records()
            .map_err(|error| malformed("records", error))?;
        Ok(RoomRecords { tickets, sessions })
    }

    async fn session_page(
        &self,
        room: &RoomId,
        query: &SessionQuery,
    ) -> Result<SessionListing, StoreError> {
        let filter = match query.filter {
            SessionFilter::Any => String::new(),
            SessionFilter::Active => "a".to_owned(),
            SessionFilter::Ended(reason) => reason.as_str().to_owned(),
        };
        let arguments = vec![
            query.after.clone().unwrap_or_default(),
            filter,
            query.limit.max(1).to_string(),
            MAX_SESSIONS_EXAMINED.to_string(),
        ];
        let mut answer = self
            .eval(RoomFunction::SessionPage, room, arguments)
            .await?;
        let read = |answer: &mut Answer| {
            answer.expect("ok")?;
            let next = answer.text()?;
            let mut sessions = Vec::new();
            while !answer.is_empty() {
                let id = answer.text()?;
                let record = answer.text()?;
                sessions.push(records::decode_session(&id, &record)?);
            }
            Ok(SessionListing {
                sessions,
                next_after: (!next.is_empty()).then_some(next),
            })
        };
        read(&mut answer).map_err(|error| malformed("session_page", error))
    }

    async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = format!("{}:lease:{{{name}}}", self.prefix);
        let ttl_ms = duration_millis(ttl).clamp(1, MAX_SCRIPT_MILLIS);
        self.bounded("hold_lease", async {
            let connection = self.connection().await?;
            let mut invocation = LEASE.prepare_invoke();
            invocation.key(key).arg(holder).arg(ttl_ms);
            let held: i64 = connection
                .eval(&invocation)
                .await
                .map_err(|error| StoreError::backend("cannot hold a lease in redis", error))?;
            Ok(held == 1)
        })
        .await
    }

    async fn put_load_signal(&self, room: &RoomId, signal: LoadSignal) -> Result<(), StoreError> {
        let record = records::encode_signal(&signal);
        self.eval(RoomFunction::PutSignal, room, vec![record])
            .await?
            .expect("ok")
            .map_err(|error| malformed("put_signal", error))
    }

    async fn load_signal(&self, room: &RoomId) -> Result<Option<LoadSignal>, StoreError> {
        let mut answer = self
            .eval(RoomFunction::LoadSignal, room, Vec::new())
            .await?;
        let read = |answer: &mut Answer| {
            answer.expect("ok")?;
            records::decode_signal(&answer.text()?)
        };
        read(&mut answer).map_err(|error| malformed("load_signal", error))
    }

    fn event_outbox(
        &self,
        limits: crate::OutboxLimits,
    ) -> Result<Arc<dyn crate::EventOutbox>, StoreError> {
        if let Some(outbox) = self.outbox.get() {
            return Ok(outbox.clone());
        }
        let config = RedisConfig {
            urls: self.urls.clone(),
            cluster: matches!(self.client, Client::Cluster(_)),
            timeout: self.timeout,
            key_prefix: self.prefix.clone(),
        };
        let outbox = Arc::new(RedisOutbox::new(&config, limits)?);
        Ok(self.outbox.get_or_init(|| outbox).clone())
    }

    fn notices(&self) -> Option<Notices> {
        self.start_notices()
    }

    async fn line_masks(&self, room: &RoomId) -> Result<LineMasks, StoreError> {
        let fields: Vec<Vec<u8>> = self
            .bounded(RoomFunction::LineMasks.name(), async {
                let connection = self.connection().await?;
                self.room_call(RoomFunction::LineMasks, room, Vec::new())
                    .reply(&connection)
                    .await
            })
            .await?;
        records::decode_line_masks(fields)
            .map_err(|error| malformed("line_masks", error))?
            .map_err(|refusal| refusal.into_error(room))
    }

    async fn touch(&self, room: &RoomId, tickets: &[TicketRef]) -> Result<u64, StoreError> {
        let args = tickets
            .iter()
            .flat_map(|ticket| [ticket.id.to_string(), ticket.generation.to_string()])
            .collect();
        let mut answer = self.eval(RoomFunction::Touch, room, args).await?;
        answer
            .expect("ok")
            .and_then(|()| answer.number())
            .map_err(|error| malformed("touch", error))
    }
}
