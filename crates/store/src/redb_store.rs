//! The embedded backend (SPEC §9.2): rooms in memory, every change written to a redb file
//! before it is acknowledged.
//!
//! One writer thread owns the database. Operations queue their changed records on a channel
//! (in order, under their room's lock) and wait; the writer takes everything queued, applies it
//! in one write transaction, commits it durably (fsync), and only then answers every waiting
//! operation. While one commit is on its way to disk the next batch gathers, so durability
//! costs one fsync per batch, not per operation (group commit).
//!
//! Liveness touches (a waiting ticket's last contact) are not written: after a restart every
//! waiting ticket counts as seen at the restart, so a crash never abandons anybody.
//!
//! If a commit fails, the store refuses every later write until it is reopened: the
//! in-memory state may then hold changes the disk does not, and acknowledging anything built
//! on them would break I6.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anteroom_core::engine::{ChangeSet, RoomState, Session, Ticket};
use anteroom_core::{Clock, RoomId};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use crate::StoreError;
use crate::engine_host::{EngineHost, PendingWrite, Persister, delegate_room_store};
use crate::persisted;

const CONFIGS: TableDefinition<&str, &[u8]> = TableDefinition::new("room_configs");
const STATES: TableDefinition<&str, &[u8]> = TableDefinition::new("room_states");
const TICKETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("tickets");
const SESSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sessions");

/// The most operations one commit takes; more wait for the next commit.
const MAX_BATCH: usize = 4096;

/// Rooms in a redb file; durable, the default backend.
pub struct RedbStore {
    host: EngineHost<RedbWriter>,
}

impl RedbStore {
    /// Opens (or creates) the store at `path`, loading every room.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<RedbStore, StoreError> {
        RedbStore::open_inner(path, clock, None)
    }

    /// Like [`open`](Self::open), with reproducible random choices.
    pub fn open_with_seed(
        path: &Path,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Result<RedbStore, StoreError> {
        RedbStore::open_inner(path, clock, Some(seed))
    }

    fn open_inner(
        path: &Path,
        clock: Arc<dyn Clock>,
        seed: Option<u64>,
    ) -> Result<RedbStore, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::backend(format!("cannot create {}", parent.display()), e)
            })?;
        }
        let database = Database::create(path)
            .map_err(|e| StoreError::backend(format!("cannot open {}", path.display()), e))?;
        create_tables(&database)?;
        let rooms = load_rooms(&database, clock.now())?;
        tracing::info!(path = %path.display(), rooms = rooms.len(), "embedded store opened");
        let writer = RedbWriter::start(database)?;
        Ok(RedbStore {
            host: EngineHost::new(rooms, clock, writer, seed),
        })
    }

    /// Operations acknowledged so far and the commits they took (for group-commit metrics).
    pub fn commit_stats(&self) -> (u64, u64) {
        let stats = &self.host.persister().stats;
        (
            stats.operations.load(std::sync::atomic::Ordering::Relaxed),
            stats.commits.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

delegate_room_store!(RedbStore);

enum Write {
    Config {
        room: RoomId,
        bytes: Vec<u8>,
    },
    State {
        room: RoomId,
        bytes: Vec<u8>,
    },
    Ticket {
        key: Vec<u8>,
        bytes: Option<Vec<u8>>,
    },
    Session {
        key: Vec<u8>,
        bytes: Option<Vec<u8>>,
    },
    DeleteRoom {
        room: RoomId,
    },
}

struct Batch {
    sequence: u64,
    writes: Vec<Write>,
    done: oneshot::Sender<Result<(), String>>,
}

/// How far the log is durable: the highest committed sequence, or the failure that stopped it.
#[derive(Debug, Clone, Default)]
struct Durable {
    through: u64,
    failure: Option<String>,
}

#[derive(Default)]
struct CommitStats {
    operations: std::sync::atomic::AtomicU64,
    commits: std::sync::atomic::AtomicU64,
}

/// The handle on the writer thread.
pub(crate) struct RedbWriter {
    /// The next sequence number and the channel, under one lock so sequence order is
    /// channel order (and so commit order).
    queue: parking_lot::Mutex<(u64, Option<mpsc::Sender<Batch>>)>,
    durable: tokio::sync::watch::Receiver<Durable>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<CommitStats>,
}

impl RedbWriter {
    fn start(database: Database) -> Result<RedbWriter, StoreError> {
        let (sender, receiver) = mpsc::channel();
        let (durable_sender, durable) = tokio::sync::watch::channel(Durable::default());
        let stats = Arc::new(CommitStats::default());
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("anteroom-redb-writer".to_owned())
            .spawn(move || write_loop(database, receiver, &durable_sender, &thread_stats))
            .map_err(|e| StoreError::backend("cannot start the store's writer thread", e))?;
        Ok(RedbWriter {
            queue: parking_lot::Mutex::new((0, Some(sender))),
            durable,
            thread: Some(thread),
            stats,
        })
    }

    fn submit(&self, writes: Vec<Write>) -> Result<Option<PendingWrite>, StoreError> {
        let (done, pending) = oneshot::channel();
        let mut queue = self.queue.lock();
        let sequence = queue.0 + 1;
        let sender = queue.1.as_ref().ok_or_else(writer_gone)?;
        sender
            .send(Batch {
                sequence,
                writes,
                done,
            })
            .map_err(|_| writer_gone())?;
        queue.0 = sequence;
        Ok(Some(PendingWrite {
            sequence,
            done: pending,
        }))
    }
}

impl Drop for RedbWriter {
    fn drop(&mut self) {
        // Closing the channel ends the writer after it has committed what is queued; joining
        // it releases the database file, so the store can be reopened at once.
        self.queue.lock().1.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Persister for RedbWriter {
    fn persist(
        &self,
        room: &RoomState,
        changes: &ChangeSet,
        config_changed: bool,
    ) -> Result<Option<PendingWrite>, StoreError> {
        let id = &room.config().id;
        let mut writes = Vec::with_capacity(2 + changes.tickets.len() + changes.sessions.len());
        if config_changed {
            writes.push(Write::Config {
                room: id.clone(),
                bytes: persisted::encode_config(room.config()),
            });
        }
        if changes.meta || config_changed {
            writes.push(Write::State {
                room: id.clone(),
                bytes: persisted::encode_state(room.meta()),
            });
        }
        for ticket in &changes.tickets {
            let bytes = room.ticket(*ticket).map(persisted::encode_ticket);
            writes.push(Write::Ticket {
                key: record_key(id, &ticket.to_bytes()),
                bytes,
            });
        }
        for session in &changes.sessions {
            let bytes = room.session(*session).map(persisted::encode_session);
            writes.push(Write::Session {
                key: record_key(id, &session.to_bytes()),
                bytes,
            });
        }
        self.submit(writes)
    }

    fn persist_deletion(&self, room: &RoomId) -> Result<Option<PendingWrite>, StoreError> {
        self.submit(vec![Write::DeleteRoom { room: room.clone() }])
    }

    async fn wait_durable_until(&self, sequence: u64) -> Result<(), StoreError> {
        let mut durable = self.durable.clone();
        let state = durable
            .wait_for(|state| state.through >= sequence || state.failure.is_some())
            .await
            .map_err(|_| writer_gone())?;
        match &state.failure {
            Some(message) if state.through < sequence => Err(StoreError::Backend {
                message: message.clone(),
                source: None,
            }),
            _ => Ok(()),
        }
    }
}

fn writer_gone() -> StoreError {
    StoreError::Backend {
        message: "the embedded store's writer has stopped".to_owned(),
        source: None,
    }
}

fn write_loop(
    database: Database,
    receiver: mpsc::Receiver<Batch>,
    durable: &tokio::sync::watch::Sender<Durable>,
    stats: &CommitStats,
) {
    let mut failure: Option<String> = None;
    while let Ok(first) = receiver.recv() {
        let mut batches = vec![first];
        while batches.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(batch) => batches.push(batch),
                Err(_) => break,
            }
        }
        let result = match &failure {
            Some(message) => Err(message.clone()),
            None => commit(&database, &batches).map_err(|error| {
                let message = format!("embedded store commit failed ({error}); restart required");
                tracing::error!(%error, "embedded store commit failed; refusing further writes");
                failure = Some(message.clone());
                message
            }),
        };
        if result.is_ok() {
            stats
                .operations
                .fetch_add(batches.len() as u64, std::sync::atomic::Ordering::Relaxed);
            stats
                .commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let through = batches
            .iter()
            .map(|batch| batch.sequence)
            .max()
            .unwrap_or(0);
        durable.send_modify(|state| match &result {
            Ok(()) => state.through = state.through.max(through),
            Err(message) => state.failure = Some(message.clone()),
        });
        for batch in batches {
            let _ = batch.done.send(result.clone());
        }
    }
}

fn commit(database: &Database, batches: &[Batch]) -> Result<(), redb::Error> {
    let transaction = database.begin_write()?;
    {
        let mut configs = transaction.open_table(CONFIGS)?;
        let mut states = transaction.open_table(STATES)?;
        let mut tickets = transaction.open_table(TICKETS)?;
        let mut sessions = transaction.open_table(SESSIONS)?;
        for write in batches.iter().flat_map(|batch| &batch.writes) {
            match write {
                Write::Config { room, bytes } => {
                    configs.insert(room.as_str(), bytes.as_slice())?;
                }
                Write::State { room, bytes } => {
                    states.insert(room.as_str(), bytes.as_slice())?;
                }
                Write::Ticket {
                    key,
                    bytes: Some(bytes),
                } => {
                    tickets.insert(key.as_slice(), bytes.as_slice())?;
                }
                Write::Ticket { key, bytes: None } => {
                    tickets.remove(key.as_slice())?;
                }
                Write::Session {
                    key,
                    bytes: Some(bytes),
                } => {
                    sessions.insert(key.as_slice(), bytes.as_slice())?;
                }
                Write::Session { key, bytes: None } => {
                    sessions.remove(key.as_slice())?;
                }
                Write::DeleteRoom { room } => {
                    configs.remove(room.as_str())?;
                    states.remove(room.as_str())?;
                    let (start, end) = room_range(room);
                    tickets.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
                    sessions.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
                }
            }
        }
    }
    transaction.commit()?;
    Ok(())
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
        let mut room_tickets: Vec<Ticket> = Vec::new();
        for entry in tickets
            .range(start.as_slice()..end.as_slice())
            .map_err(|e| fail(e.into()))?
        {
            let (_, value) = entry.map_err(|e| fail(e.into()))?;
            room_tickets.push(
                persisted::decode_ticket(value.value())
                    .map_err(|e| corrupt(format!("ticket in room {room}"), e))?,
            );
        }
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
        rooms.push(RoomState::restore(meta, room_tickets, room_sessions, now));
    }
    Ok(rooms)
}

/// `room id, 0x00, record id`: the records of one room are one contiguous key range.
fn record_key(room: &RoomId, id: &[u8; 16]) -> Vec<u8> {
    let mut key = Vec::with_capacity(room.as_str().len() + 17);
    key.extend_from_slice(room.as_str().as_bytes());
    key.push(0);
    key.extend_from_slice(id);
    key
}

fn room_range(room: &RoomId) -> (Vec<u8>, Vec<u8>) {
    let mut start = room.as_str().as_bytes().to_vec();
    let mut end = start.clone();
    start.push(0);
    end.push(1);
    (start, end)
}
