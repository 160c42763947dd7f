//! The embedded backend (SPEC §9.2): rooms in memory, every change written to disk before it
//! is acknowledged.
//!
//! Operations queue their changed records on a channel (in order, under their room's lock)
//! and wait. One writer thread takes everything queued, appends it to a write-ahead log
//! segment as one checksummed frame, syncs it (`fdatasync`), and only then answers every
//! waiting operation. While one append is on its way to disk the next batch gathers, so
//! durability costs one sync per batch, not per operation (group commit). A commit smaller
//! than the one before first waits up to half the last sync (at most 1 ms) for more: the
//! visitors the last commit answered are usually on their way back, and the sync is the
//! dearest part of a commit.
//!
//! Why a log in front of redb: profiles showed a writer committing each batch straight to redb
//! spending its time in redb's copy-on-write page handling (a batch of joins touches one
//! random-key leaf each); appending a frame is one write and one sync. In redb, tickets and
//! sessions are keyed `room id, 0x00, id`, so a room is one key range; on open every room is
//! rebuilt with `RoomState::restore`.
//!
//! The redb file is the checkpoint: once a log segment has grown past
//! [`RedbOptions::checkpoint_bytes`], the writer starts a new segment (one a thread wrote and
//! synced ahead, renamed into place: `next_segment.rs`) and hands the latest
//! version of every record logged before it to a checkpoint thread, which writes them into
//! redb in one durable transaction (with the number of the last segment it covers) and
//! deletes the covered segments. Opening the store replays whatever segments redb does not
//! hold yet (a torn last frame, the trace of a crash during an append, is cut off: it was
//! never acknowledged), loads the rooms from redb with the replayed records laid over them,
//! and checkpoints the replayed records on the checkpoint thread while the node already
//! serves: the replayed segments are deleted only once that checkpoint is durable, so a crash
//! before then replays them again. A clean stop checkpoints everything, so the redb file
//! alone holds the store.
//!
//! Events for the sinks (SPEC §14.9) are records of the same log frame as the change they
//! report, so an acknowledged change always has its events; the store's event outbox
//! (`outbox.rs`) serves them from redb and, until their checkpoint, from memory.
//!
//! Liveness touches (a waiting ticket's last contact) are not written: after a restart every
//! waiting ticket counts as seen at the restart, so a crash never abandons anybody.
//!
//! If an append or a checkpoint fails, the store refuses every later write until it is
//! reopened: the in-memory state may then hold changes the disk does not, and acknowledging
//! anything built on them would break I6.

mod checkpoint;
mod compaction;
mod completion;
mod next_segment;
mod outbox;
mod tables;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
mod wal;
mod writer;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Instant;

use anteroom_core::engine::{RoomState, Session, Ticket};
use anteroom_core::{Clock, RoomId};
use parking_lot::RwLock;
use redb::{AccessGuard, Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::StoreError;
use crate::engine_host::{EngineHost, delegate_room_store};
use crate::persisted;
use checkpoint::Dirty;
use tables::room_range;
use tables::{CONFIGS, EVENT_ACKS, EVENTS, RecentEvents, SESSIONS, STATES, TICKETS};
use writer::{RedbWriter, Replayed, WriterStart};

/// The memory redb may use for its page cache (its own default is 1 GiB). Rooms live in
/// memory and redb is read only at opening and for history, so its cache mostly held the
/// pages the checkpoints wrote, which nothing read again: RSS the node paid per ticket.
const REDB_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// How the embedded store runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedbOptions {
    /// Reproducible random choices (tests); `None` draws from the OS.
    pub seed: Option<u64>,
    /// Log bytes after which the log is checkpointed into the redb file (default
    /// [`DEFAULT_CHECKPOINT_BYTES`](anteroom_core::config::DEFAULT_CHECKPOINT_BYTES)). Larger
    /// means fewer, bigger checkpoints and a longer replay after a crash.
    pub checkpoint_bytes: u64,
    /// Unused bytes in the redb file (deleted records, expired history) from which a
    /// checkpoint compacts it, when they are also half the file (`compaction.rs`; default
    /// [`DEFAULT_COMPACT_MIN_BYTES`]).
    pub compact_min_bytes: u64,
}

/// The default [`RedbOptions::compact_min_bytes`]: 64 MiB, so a small store is never
/// compacted for a few pages.
pub const DEFAULT_COMPACT_MIN_BYTES: u64 = 64 * 1024 * 1024;

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            seed: None,
            checkpoint_bytes: anteroom_core::config::DEFAULT_CHECKPOINT_BYTES,
            compact_min_bytes: DEFAULT_COMPACT_MIN_BYTES,
        }
    }
}

/// Rooms in a redb file with a write-ahead log beside it; durable, the default backend.
pub struct RedbStore {
    host: Arc<EngineHost<RedbWriter>>,
    database: Arc<RwLock<Database>>,
    recent_events: RecentEvents,
    outbox: OnceLock<Arc<outbox::RedbEventOutbox>>,
}

impl RedbStore {
    /// Opens (or creates) the store at `path`, replaying its log and loading every room.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<RedbStore, StoreError> {
        RedbStore::open_with(path, clock, RedbOptions::default())
    }

    /// Like [`open`](Self::open), with reproducible random choices.
    pub fn open_with_seed(
        path: &Path,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Result<RedbStore, StoreError> {
        let options = RedbOptions {
            seed: Some(seed),
            ..RedbOptions::default()
        };
        RedbStore::open_with(path, clock, options)
    }

    /// Like [`open`](Self::open), with these options.
    pub fn open_with(
        path: &Path,
        clock: Arc<dyn Clock>,
        options: RedbOptions,
    ) -> Result<RedbStore, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::backend(format!("cannot create {}", parent.display()), e)
            })?;
        }
        let started = Instant::now();
        let database = Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
            .map_err(|e| StoreError::backend(format!("cannot open {}", path.display()), e))?;
        create_tables(&database)?;
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis(),
            "opened the embedded store's redb file"
        );
        let (replayed, next_segment) = replay(&database, path)?;
        let empty = Dirty::default();
        let log = replayed.as_ref().map_or(&empty, |replayed| &replayed.dirty);
        let rooms = load_rooms(&database, log, clock.now())?;
        let last_event = outbox::last_event_sequence(&database)?.max(log.last_event().unwrap_or(0));
        tracing::info!(
            path = %path.display(),
            rooms = rooms.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "embedded store opened"
        );
        let database = Arc::new(RwLock::new(database));
        let recent_events = RecentEvents::default();
        let writer = RedbWriter::start(
            WriterStart {
                database: database.clone(),
                recent_events: recent_events.clone(),
                first_segment: next_segment,
                last_event,
                checkpoint_bytes: options.checkpoint_bytes,
                compact_min_bytes: options.compact_min_bytes,
                replayed,
            },
            path,
        )?;
        Ok(RedbStore {
            host: Arc::new(EngineHost::new(rooms, clock, writer, options.seed)),
            database,
            recent_events,
            outbox: OnceLock::new(),
        })
    }

    fn open_event_outbox(
        &self,
        limits: crate::OutboxLimits,
    ) -> Result<Arc<dyn crate::EventOutbox>, StoreError> {
        let outbox = self.outbox.get_or_init(|| {
            Arc::new(outbox::RedbEventOutbox {
                host: self.host.clone(),
                database: self.database.clone(),
                recent: self.recent_events.clone(),
                limits,
            })
        });
        Ok(outbox.clone())
    }

    /// Operations acknowledged so far and the log appends (syncs) they took, for group-commit
    /// metrics.
    pub fn commit_stats(&self) -> (u64, u64) {
        let stats = &self.host.persister().stats;
        (
            stats.operations.load(Ordering::Relaxed),
            stats.commits.load(Ordering::Relaxed),
        )
    }

    /// Checkpoints of the log into the redb file completed so far (those at opening and at a
    /// clean stop not counted).
    pub fn checkpoints(&self) -> u64 {
        self.host
            .persister()
            .stats
            .checkpoints
            .load(Ordering::Relaxed)
    }

    /// Compactions of the redb file completed so far (`compaction.rs`).
    pub fn compactions(&self) -> u64 {
        self.host
            .persister()
            .stats
            .compactions
            .load(Ordering::Relaxed)
    }
}

delegate_room_store!(RedbStore);

/// Reads the log segments redb does not hold yet, cutting a torn tail off the newest (it was
/// never acknowledged); answers their records (none when there is no log) and the number the
/// next segment takes.
fn replay(database: &Database, store: &Path) -> Result<(Option<Replayed>, u64), StoreError> {
    let fail = |e: wal::WalError| StoreError::backend("cannot replay the embedded store's log", e);
    let started = Instant::now();
    let through = checkpoint::checkpointed_through(database)
        .map_err(|e| StoreError::backend("cannot read the embedded store", e))?;
    let segments = wal::list_segments(store).map_err(fail)?;
    let Some(&(newest, _)) = segments.last() else {
        return Ok((None, through + 1));
    };
    let mut dirty = Dirty::default();
    let mut frames = 0usize;
    let unreplayed = segments.iter().filter(|(number, _)| *number > through);
    for (expected, (number, path)) in (through + 1..).zip(unreplayed) {
        if *number != expected {
            return Err(StoreError::Backend {
                message: format!(
                    "the embedded store's log is missing segment {}",
                    wal::segment_path(store, expected).display()
                ),
                source: None,
            });
        }
        let contents = wal::read_segment(path, *number == newest).map_err(fail)?;
        frames += contents.frames.len();
        if let Some(offset) = contents.torn_at {
            tracing::warn!(
                path = %path.display(),
                offset,
                "the embedded store's log ends in a torn write (a crash during an append); it was never acknowledged and is cut off"
            );
            wal::cut_torn_tail(path, offset).map_err(fail)?;
        }
        for write in contents.frames.into_iter().flatten() {
            dirty.absorb(write);
        }
    }
    if frames > 0 {
        tracing::info!(
            frames,
            elapsed_ms = started.elapsed().as_millis(),
            "replayed the embedded store's log"
        );
    }
    // Segments redb already holds (a crash came between a checkpoint and their deletion) are
    // covered too: the checkpoint of the replayed records deletes them.
    let last = newest.max(through);
    Ok((
        Some(Replayed {
            dirty,
            through: last,
        }),
        last + 1,
    ))
}

fn create_tables(database: &Database) -> Result<(), StoreError> {
    let fail =
        |e: redb::Error| StoreError::backend("cannot prepare the embedded store's tables", e);
    let transaction = checkpoint::begin_recoverable_write(database).map_err(fail)?;
    transaction
        .open_table(CONFIGS)
        .map_err(|e| fail(e.into()))?;
    transaction.open_table(STATES).map_err(|e| fail(e.into()))?;
    transaction
        .open_table(TICKETS)
        .map_err(|e| fail(e.into()))?;
    transaction
        .open_table(SESSIONS)
        .map_err(|e| fail(e.into()))?;
    transaction
        .open_table(checkpoint::WAL_STATE)
        .map_err(|e| fail(e.into()))?;
    transaction.open_table(EVENTS).map_err(|e| fail(e.into()))?;
    transaction
        .open_table(EVENT_ACKS)
        .map_err(|e| fail(e.into()))?;
    transaction.commit().map_err(|e| fail(e.into()))
}

/// Rebuilds every room from redb with `log` (the replayed records, newer) laid over it.
fn load_rooms(
    database: &Database,
    log: &Dirty,
    now: anteroom_core::Timestamp,
) -> Result<Vec<RoomState>, StoreError> {
    let read = database.begin_read().map_err(|e| read_failed(e.into()))?;
    let tables = StoredTables {
        states: read.open_table(STATES).map_err(|e| read_failed(e.into()))?,
        tickets: read
            .open_table(TICKETS)
            .map_err(|e| read_failed(e.into()))?,
        sessions: read
            .open_table(SESSIONS)
            .map_err(|e| read_failed(e.into()))?,
    };
    let configs = room_configs(&read, log)?;
    // With one room every ticket record is its own: the map is sized once, not grown.
    let expected_tickets = match configs.len() {
        1 => {
            let stored = tables.tickets.len().map_err(|e| read_failed(e.into()))?;
            usize::try_from(stored).unwrap_or(0)
        }
        _ => 0,
    };
    configs
        .into_iter()
        .map(|config| load_room(&tables, log, config, expected_tickets, now))
        .collect()
}

fn read_failed(error: redb::Error) -> StoreError {
    StoreError::backend("cannot read the embedded store", error)
}

fn corrupt(what: String, error: persisted::DecodeError) -> StoreError {
    StoreError::backend(format!("corrupt record {what}"), error)
}

/// The tables a restore reads, in one read transaction.
struct StoredTables {
    states: redb::ReadOnlyTable<&'static str, &'static [u8]>,
    tickets: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    sessions: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
}

/// The configuration of every room: redb's, except rooms the log deleted or configured again,
/// and the log's.
fn room_configs(
    read: &redb::ReadTransaction,
    log: &Dirty,
) -> Result<Vec<anteroom_core::room::RoomConfig>, StoreError> {
    let configs = read
        .open_table(CONFIGS)
        .map_err(|e| read_failed(e.into()))?;
    let mut room_configs = Vec::new();
    for entry in configs.iter().map_err(|e| read_failed(e.into()))? {
        let (key, value) = entry.map_err(|e| read_failed(e.into()))?;
        let room_name = key.value().to_owned();
        let config = persisted::decode_config(value.value())
            .map_err(|e| corrupt(format!("room {room_name}"), e))?;
        let replaced = log.configs().any(|(room, _)| *room == config.id);
        if !replaced && !log.deletes(&config.id) {
            room_configs.push(config);
        }
    }
    for (room, bytes) in log.configs() {
        room_configs
            .push(persisted::decode_config(bytes).map_err(|e| corrupt(format!("room {room}"), e))?);
    }
    Ok(room_configs)
}

/// Rebuilds one room. Its tickets are read and decoded on a thread of their own while this
/// one builds the room from them: on a restart with millions waiting the two halves cost
/// about the same, and the node has nothing else to do yet.
fn load_room(
    tables: &StoredTables,
    log: &Dirty,
    config: anteroom_core::room::RoomConfig,
    expected_tickets: usize,
    now: anteroom_core::Timestamp,
) -> Result<RoomState, StoreError> {
    let room = config.id.clone();
    // What redb holds of a room the log deleted is gone.
    let stored = !log.deletes(&room);
    let meta = room_meta(tables, log, config, stored, now)?;
    let sessions = room_sessions(tables, log, &room, stored)?;
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::sync_channel(TICKET_BATCHES_AHEAD);
        let (table, room_id) = (&tables.tickets, &room);
        // The sender moves to the thread: the stream ends when the thread does.
        let reader = std::thread::Builder::new()
            .name("anteroom-redb-restore".to_owned())
            .spawn_scoped(scope, move || {
                send_tickets(table, stored, log, room_id, &sender);
            })
            .map_err(|e| StoreError::backend("cannot start the store's restore thread", e))?;
        // The first unreadable ticket ends the stream, and the room rebuilt from the part
        // before it is dropped.
        let mut failure: Option<StoreError> = None;
        let tickets = receiver
            .iter()
            .map_while(|batch: Result<Vec<Ticket>, StoreError>| {
                batch.map_err(|error| failure = Some(error)).ok()
            })
            .flatten();
        let expected_tickets = if stored { expected_tickets } else { 0 };
        let restored = RoomState::restore_expecting(meta, tickets, expected_tickets, sessions, now);
        if reader.join().is_err() {
            return Err(StoreError::Backend {
                message: format!("the restore of room {room} stopped"),
                source: None,
            });
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(restored),
        }
    })
}

/// The room's scalar state: the log's latest, else redb's (unless the log deleted the room),
/// else a new room's.
fn room_meta(
    tables: &StoredTables,
    log: &Dirty,
    config: anteroom_core::room::RoomConfig,
    stored: bool,
    now: anteroom_core::Timestamp,
) -> Result<anteroom_core::engine::RoomMeta, StoreError> {
    let room = config.id.clone();
    let stored_state = match stored {
        true => tables
            .states
            .get(room.as_str())
            .map_err(|e| read_failed(e.into()))?,
        false => None,
    };
    let state = log
        .state(&room)
        .or(stored_state.as_ref().map(AccessGuard::value));
    match state {
        Some(state) => persisted::decode_state(config, state)
            .map_err(|e| corrupt(format!("state of room {room}"), e)),
        None => Ok(RoomState::new(config, now).meta().clone()),
    }
}

/// The room's sessions: redb's (unless the log deleted the room) with the log's laid over.
fn room_sessions(
    tables: &StoredTables,
    log: &Dirty,
    room: &RoomId,
    stored: bool,
) -> Result<Vec<Session>, StoreError> {
    let (start, end) = room_range(room);
    let stored_sessions = match stored {
        true => Some(
            tables
                .sessions
                .range(start.as_slice()..end.as_slice())
                .map_err(|e| read_failed(e.into()))?,
        ),
        false => None,
    };
    let mut sessions = Vec::new();
    for record in overlaid(stored_sessions, log.sessions_of(room)) {
        let record = record.map_err(|e| read_failed(e.into()))?;
        sessions.push(
            persisted::decode_session(record.bytes())
                .map_err(|e| corrupt(format!("session in room {room}"), e))?,
        );
    }
    Ok(sessions)
}

/// Tickets decoded per message from the reading thread to the rebuilding one.
const TICKET_BATCH: usize = 1024;
/// Batches the reading thread may be ahead by.
const TICKET_BATCHES_AHEAD: usize = 8;

/// Reads and decodes the tickets of `room` (redb's unless the log deleted the room, with the
/// log's laid over them) and sends them in batches, an error last; stops when nobody listens.
fn send_tickets(
    table: &redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    stored: bool,
    log: &Dirty,
    room: &RoomId,
    sender: &mpsc::SyncSender<Result<Vec<Ticket>, StoreError>>,
) {
    let (start, end) = room_range(room);
    let stored_tickets = match stored {
        true => match table.range(start.as_slice()..end.as_slice()) {
            Ok(range) => Some(range),
            Err(error) => {
                let _ = sender.send(Err(read_failed(error.into())));
                return;
            }
        },
        false => None,
    };
    let mut batch = Vec::with_capacity(TICKET_BATCH);
    for record in overlaid(stored_tickets, log.tickets_of(room)) {
        let decoded = record
            .map_err(|e| read_failed(e.into()))
            .and_then(|record| {
                persisted::decode_ticket(record.bytes())
                    .map_err(|e| corrupt(format!("ticket in room {room}"), e))
            });
        match decoded {
            Ok(ticket) => batch.push(ticket),
            Err(error) => {
                let _ = sender.send(Ok(batch));
                let _ = sender.send(Err(error));
                return;
            }
        }
        if batch.len() == TICKET_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(TICKET_BATCH));
            if sender.send(Ok(full)).is_err() {
                return;
            }
        }
    }
    let _ = sender.send(Ok(batch));
}

/// The latest version of a record: redb's, or the replayed log's.
enum Latest<'t, 'l> {
    Stored(AccessGuard<'t, &'static [u8]>),
    Logged(&'l [u8]),
}

impl Latest<'_, '_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Latest::Stored(guard) => guard.value(),
            Latest::Logged(bytes) => bytes,
        }
    }
}

/// The records of one room in key order: redb's (`stored`), where the log holds a newer
/// version of a key that one instead (a `None` there: the record was forgotten). Both are in
/// key order, so this is one merge, not a lookup per stored record.
fn overlaid<'t, 'l>(
    stored: Option<redb::Range<'t, &'static [u8], &'static [u8]>>,
    logged: Vec<(&'l [u8], Option<&'l [u8]>)>,
) -> impl Iterator<Item = Result<Latest<'t, 'l>, redb::StorageError>> {
    let mut stored = stored.into_iter().flatten().peekable();
    let mut logged = logged.into_iter().peekable();
    std::iter::from_fn(move || {
        loop {
            let order = match (stored.peek(), logged.peek()) {
                (Some(Err(_)), _) => return stored.next().and_then(Result::err).map(Err),
                (Some(Ok((stored_key, _))), Some((logged_key, _))) => {
                    logged_key.cmp(&stored_key.value())
                }
                (Some(Ok(_)), None) => std::cmp::Ordering::Greater,
                (None, _) => std::cmp::Ordering::Less,
            };
            if order == std::cmp::Ordering::Greater {
                let (_, value) = stored.next()?.ok()?;
                return Some(Ok(Latest::Stored(value)));
            }
            if order == std::cmp::Ordering::Equal {
                stored.next();
            }
            if let (_, Some(bytes)) = logged.next()? {
                return Some(Ok(Latest::Logged(bytes)));
            }
        }
    })
}
