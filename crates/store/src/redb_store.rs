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
//! [`RedbOptions::checkpoint_bytes`], the writer starts a new segment and hands the latest
//! version of every record logged before it to a checkpoint thread, which writes them into
//! redb in one durable transaction (with the number of the last segment it covers) and
//! deletes the covered segments. Opening the store replays whatever segments redb does not
//! hold yet (a torn last frame, the trace of a crash during an append, is ignored: it was
//! never acknowledged) and checkpoints them before loading the rooms; a clean stop
//! checkpoints everything, so the redb file alone holds the store.
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
mod outbox;
mod tables;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
mod wal;
mod writer;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use anteroom_core::Clock;
use anteroom_core::engine::{RoomState, Session};
use parking_lot::RwLock;
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::StoreError;
use crate::engine_host::{EngineHost, delegate_room_store};
use crate::persisted;
use checkpoint::Dirty;
use tables::room_range;
use tables::{CONFIGS, EVENT_ACKS, EVENTS, RecentEvents, SESSIONS, STATES, TICKETS};
use writer::{RedbWriter, WriterStart};

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
        let database = Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
            .map_err(|e| StoreError::backend(format!("cannot open {}", path.display()), e))?;
        create_tables(&database)?;
        let next_segment = recover(&database, path)?;
        let rooms = load_rooms(&database, clock.now())?;
        let last_event = outbox::last_event_sequence(&database)?;
        tracing::info!(path = %path.display(), rooms = rooms.len(), "embedded store opened");
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

/// Replays the log segments redb does not hold yet into redb (one durable checkpoint) and
/// deletes them; answers the number the next segment takes.
fn recover(database: &Database, store: &Path) -> Result<u64, StoreError> {
    let fail = |e: wal::WalError| StoreError::backend("cannot replay the embedded store's log", e);
    let through = checkpoint::checkpointed_through(database)
        .map_err(|e| StoreError::backend("cannot read the embedded store", e))?;
    let segments = wal::list_segments(store).map_err(fail)?;
    let Some(&(newest, _)) = segments.last() else {
        return Ok(through + 1);
    };
    let mut dirty = Dirty::default();
    let (mut frames, mut torn) = (0usize, None);
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
        torn = torn.or(contents.torn_at.map(|offset| (path.clone(), offset)));
        for write in contents.frames.into_iter().flatten() {
            dirty.absorb(write);
        }
    }
    if let Some((path, offset)) = &torn {
        tracing::warn!(
            path = %path.display(),
            offset,
            "the embedded store's log ends in a torn write (a crash during an append); it was never acknowledged and is ignored"
        );
    }
    let last = newest.max(through);
    checkpoint::checkpoint(database, store, &dirty, last).map_err(|message| {
        StoreError::Backend {
            message: format!("cannot replay the embedded store's log: {message}"),
            source: None,
        }
    })?;
    if frames > 0 {
        tracing::info!(frames, "replayed the embedded store's log");
    }
    Ok(last + 1)
}

fn create_tables(database: &Database) -> Result<(), StoreError> {
    let fail =
        |e: redb::Error| StoreError::backend("cannot prepare the embedded store's tables", e);
    let transaction = database.begin_write().map_err(|e| fail(e.into()))?;
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

fn load_rooms(
    database: &Database,
    now: anteroom_core::Timestamp,
) -> Result<Vec<RoomState>, StoreError> {
    let fail = |e: redb::Error| StoreError::backend("cannot read the embedded store", e);
    let corrupt = |what: String, e: persisted::DecodeError| {
        StoreError::backend(format!("corrupt record {what}"), e)
    };
    let read = database.begin_read().map_err(|e| fail(e.into()))?;
    let configs = read.open_table(CONFIGS).map_err(|e| fail(e.into()))?;
    let states = read.open_table(STATES).map_err(|e| fail(e.into()))?;
    let tickets = read.open_table(TICKETS).map_err(|e| fail(e.into()))?;
    let sessions = read.open_table(SESSIONS).map_err(|e| fail(e.into()))?;
    let mut rooms = Vec::new();
    for entry in configs.iter().map_err(|e| fail(e.into()))? {
        let (key, value) = entry.map_err(|e| fail(e.into()))?;
        let room_name = key.value().to_owned();
        let config = persisted::decode_config(value.value())
            .map_err(|e| corrupt(format!("room {room_name}"), e))?;
        let room = config.id.clone();
        let meta = match states.get(room.as_str()).map_err(|e| fail(e.into()))? {
            Some(state) => persisted::decode_state(config, state.value())
                .map_err(|e| corrupt(format!("state of room {room}"), e))?,
            None => RoomState::new(config, now).meta().clone(),
        };
        let (start, end) = room_range(&room);
        let mut room_sessions: Vec<Session> = Vec::new();
        for entry in sessions
            .range(start.as_slice()..end.as_slice())
            .map_err(|e| fail(e.into()))?
        {
            let (_, value) = entry.map_err(|e| fail(e.into()))?;
            room_sessions.push(
                persisted::decode_session(value.value())
                    .map_err(|e| corrupt(format!("session in room {room}"), e))?,
            );
        }
        // The tickets go to the room as they are read, never all decoded at once (a room of
        // ten million would hold them twice); the first unreadable one ends the stream, and
        // the room rebuilt from the part before it is dropped.
        let mut failure: Option<StoreError> = None;
        let room_tickets = tickets
            .range(start.as_slice()..end.as_slice())
            .map_err(|e| fail(e.into()))?
            .map_while(|entry| {
                let decoded = entry.map_err(|e| fail(e.into())).and_then(|(_, value)| {
                    persisted::decode_ticket(value.value())
                        .map_err(|e| corrupt(format!("ticket in room {room}"), e))
                });
                decoded.map_err(|error| failure = Some(error)).ok()
            });
        let restored = RoomState::restore(meta, room_tickets, room_sessions, now);
        if let Some(error) = failure {
            return Err(error);
        }
        rooms.push(restored);
    }
    Ok(rooms)
}
