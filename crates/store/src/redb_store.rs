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
mod completion;
mod outbox;
mod tables;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anteroom_core::engine::{ChangeSet, RoomState, Session};
use anteroom_core::{Clock, RoomId};
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::StoreError;
use crate::engine_host::{EngineHost, PendingWrite, Persister, delegate_room_store};
use crate::persisted;
use checkpoint::Dirty;
use completion::Completion;
use tables::{CONFIGS, EVENT_ACKS, EVENTS, RecentEvents, SESSIONS, STATES, TICKETS};
use tables::{record_key, room_range};
use wal::{Segment, Write};

/// The memory redb may use for its page cache (its own default is 1 GiB). Rooms live in
/// memory and redb is read only at opening and for history, so its cache mostly held the
/// pages the checkpoints wrote, which nothing read again: RSS the node paid per ticket.
const REDB_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The most operations one log frame takes; more wait for the next append.
const MAX_BATCH: usize = 4096;
/// The longest a commit waits for more operations (see [`linger`]).
const MAX_LINGER: Duration = Duration::from_millis(1);

/// How the embedded store runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedbOptions {
    /// Reproducible random choices (tests); `None` draws from the OS.
    pub seed: Option<u64>,
    /// Log bytes after which the log is checkpointed into the redb file (default
    /// [`DEFAULT_CHECKPOINT_BYTES`](anteroom_core::config::DEFAULT_CHECKPOINT_BYTES)). Larger
    /// means fewer, bigger checkpoints and a longer replay after a crash.
    pub checkpoint_bytes: u64,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            seed: None,
            checkpoint_bytes: anteroom_core::config::DEFAULT_CHECKPOINT_BYTES,
        }
    }
}

/// Rooms in a redb file with a write-ahead log beside it; durable, the default backend.
pub struct RedbStore {
    host: Arc<EngineHost<RedbWriter>>,
    database: Arc<Database>,
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
        let database = Arc::new(database);
        let recent_events = RecentEvents::default();
        let writer = RedbWriter::start(
            WriterStart {
                database: database.clone(),
                recent_events: recent_events.clone(),
                first_segment: next_segment,
                last_event,
                checkpoint_bytes: options.checkpoint_bytes,
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
}

delegate_room_store!(RedbStore);

struct Batch {
    sequence: u64,
    writes: Vec<Write>,
}

#[derive(Default)]
struct CommitStats {
    operations: AtomicU64,
    commits: AtomicU64,
    checkpoints: AtomicU64,
}

/// The log writer's queue: sequences are handed out under one lock with the send, so
/// sequence order is channel order (and so log order).
struct Queue {
    /// The last write's sequence.
    last_write: u64,
    /// The last event sequence handed out.
    last_event: u64,
    sender: Option<mpsc::Sender<Batch>>,
}

/// What the writer starts from.
struct WriterStart {
    database: Arc<Database>,
    recent_events: RecentEvents,
    first_segment: u64,
    last_event: u64,
    checkpoint_bytes: u64,
}

/// The handle on the log writer thread.
pub(crate) struct RedbWriter {
    queue: parking_lot::Mutex<Queue>,
    /// How far the log is durable; wakes the operations waiting for it.
    durable: Arc<Completion>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<CommitStats>,
}

impl RedbWriter {
    fn start(start: WriterStart, store: &Path) -> Result<RedbWriter, StoreError> {
        let WriterStart {
            database,
            recent_events,
            first_segment,
            last_event,
            checkpoint_bytes,
        } = start;
        let segment = Segment::create(store, first_segment)
            .map_err(|e| StoreError::backend("cannot start the embedded store's log", e))?;
        let (sender, receiver) = mpsc::channel();
        let durable = Arc::new(Completion::default());
        let stats = Arc::new(CommitStats::default());
        let (jobs, job_receiver) = mpsc::channel::<CheckpointJob>();
        let (result_sender, results) = mpsc::channel();
        let checkpointer = {
            let store = store.to_owned();
            let stats = stats.clone();
            let recent_events = recent_events.clone();
            std::thread::Builder::new()
                .name("anteroom-redb-checkpoint".to_owned())
                .spawn(move || {
                    let checkpoints = Checkpoints {
                        database: &database,
                        store: &store,
                        recent_events: &recent_events,
                        stats: &stats,
                    };
                    checkpoints.run(&job_receiver, &result_sender);
                })
                .map_err(|e| StoreError::backend("cannot start the store's checkpoint thread", e))?
        };
        let logger = Logger {
            store: store.to_owned(),
            segment,
            dirty: Dirty::default(),
            checkpoint_bytes,
            jobs,
            results,
            checkpointer: Some(checkpointer),
            checkpoint_running: false,
            failure: None,
            frame: Vec::new(),
            recent_events,
        };
        let thread_stats = stats.clone();
        let thread_durable = durable.clone();
        let thread = std::thread::Builder::new()
            .name("anteroom-redb-writer".to_owned())
            .spawn(move || logger.run(&receiver, &thread_durable, &thread_stats))
            .map_err(|e| StoreError::backend("cannot start the store's writer thread", e))?;
        Ok(RedbWriter {
            queue: parking_lot::Mutex::new(Queue {
                last_write: 0,
                last_event,
                sender: Some(sender),
            }),
            durable,
            thread: Some(thread),
            stats,
        })
    }

    /// Queues `writes` and `events` (numbered here, in log order) as one write.
    fn submit(
        &self,
        writes: Vec<Write>,
        events: Vec<Vec<u8>>,
    ) -> Result<Option<PendingWrite>, StoreError> {
        self.submit_numbered(writes, events)
            .map(|(pending, _)| Some(pending))
    }

    /// [`submit`](Self::submit), also answering the last event sequence handed out.
    fn submit_numbered(
        &self,
        mut writes: Vec<Write>,
        events: Vec<Vec<u8>>,
    ) -> Result<(PendingWrite, u64), StoreError> {
        let mut queue = self.queue.lock();
        let sequence = queue.last_write + 1;
        let first_event = queue.last_event + 1;
        let n_events = events.len() as u64;
        writes.extend(
            (first_event..)
                .zip(events)
                .map(|(sequence, payload)| Write::Event { sequence, payload }),
        );
        let sender = queue.sender.as_ref().ok_or_else(writer_gone)?;
        sender
            .send(Batch { sequence, writes })
            .map_err(|_| writer_gone())?;
        queue.last_write = sequence;
        queue.last_event += n_events;
        Ok((PendingWrite { sequence }, queue.last_event))
    }
}

impl Drop for RedbWriter {
    fn drop(&mut self) {
        // Closing the channel ends the writer after it has logged what is queued and
        // checkpointed the log into redb; joining it releases the database file, so the
        // store can be reopened at once.
        self.queue.lock().sender.take();
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
        events: Vec<Vec<u8>>,
    ) -> Result<Option<PendingWrite>, StoreError> {
        let id = &room.config().id;
        let mut writes =
            Vec::with_capacity(2 + changes.tickets.len() + changes.sessions.len() + events.len());
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
            let bytes = room.ticket(*ticket).as_ref().map(persisted::encode_ticket);
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
        self.submit(writes, events)
    }

    fn persist_deletion(&self, room: &RoomId) -> Result<Option<PendingWrite>, StoreError> {
        self.submit(vec![Write::DeleteRoom { room: room.clone() }], Vec::new())
    }

    async fn wait_durable_until(&self, sequence: u64) -> Result<(), StoreError> {
        self.durable
            .wait(sequence)
            .await
            .map_err(|message| StoreError::Backend {
                message,
                source: None,
            })
    }
}

fn writer_gone() -> StoreError {
    StoreError::Backend {
        message: "the embedded store's writer has stopped".to_owned(),
        source: None,
    }
}

/// Adds what is queued to `batches`, up to [`MAX_BATCH`] operations.
fn take_queued(receiver: &mpsc::Receiver<Batch>, batches: &mut Vec<Batch>) {
    while batches.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(batch) => batches.push(batch),
            Err(_) => break,
        }
    }
}

/// How long a commit smaller than the last one waits for more: half the last sync, at most
/// [`MAX_LINGER`].
fn linger(last_sync: Duration) -> Duration {
    (last_sync / 2).min(MAX_LINGER)
}

/// Records for the checkpoint thread: everything logged in segments up to `through`.
struct CheckpointJob {
    dirty: Dirty,
    through: u64,
}

/// The writer thread's state: the segment it appends to and what the next checkpoint writes.
struct Logger {
    store: PathBuf,
    segment: Segment,
    /// Records logged since the last checkpoint was handed off.
    dirty: Dirty,
    checkpoint_bytes: u64,
    jobs: mpsc::Sender<CheckpointJob>,
    results: mpsc::Receiver<Result<(), String>>,
    checkpointer: Option<JoinHandle<()>>,
    checkpoint_running: bool,
    failure: Option<String>,
    /// The frame being encoded (kept to reuse its allocation).
    frame: Vec<u8>,
    /// Where events go once their frame is durable, until their checkpoint.
    recent_events: RecentEvents,
}

impl Logger {
    fn run(mut self, receiver: &mpsc::Receiver<Batch>, durable: &Completion, stats: &CommitStats) {
        // Operations in the last commit and how long its sync took.
        let mut previous = (0, Duration::ZERO);
        while let Ok(first) = receiver.recv() {
            let mut batches = vec![first];
            take_queued(receiver, &mut batches);
            if batches.len() < previous.0 {
                // Fewer operations than last time: the visitors answered by the last commit
                // are probably on their way back. Waiting a fraction of a sync for them
                // makes one commit (one sync, one wake-up per thread) of what would be two.
                std::thread::sleep(linger(previous.1));
                take_queued(receiver, &mut batches);
            }
            self.collect_checkpoint(false);
            let started = Instant::now();
            let result = match &self.failure {
                Some(message) => Err(message.clone()),
                None => self.append(&batches),
            };
            previous = (batches.len(), started.elapsed());
            if result.is_ok() {
                stats
                    .operations
                    .fetch_add(batches.len() as u64, Ordering::Relaxed);
                stats.commits.fetch_add(1, Ordering::Relaxed);
            }
            let through = batches
                .iter()
                .map(|batch| batch.sequence)
                .max()
                .unwrap_or(0);
            match result {
                Ok(()) => {
                    self.publish_events(&batches);
                    durable.complete_through(through);
                    for write in batches.into_iter().flat_map(|batch| batch.writes) {
                        self.dirty.absorb(write);
                    }
                    self.maybe_checkpoint();
                }
                Err(message) => durable.fail(message),
            }
        }
        durable.fail("the embedded store's writer has stopped".to_owned());
        self.shut_down();
    }

    /// Appends the batches as one frame and syncs it.
    fn append(&mut self, batches: &[Batch]) -> Result<(), String> {
        wal::encode_frame(
            batches.iter().flat_map(|batch| &batch.writes),
            &mut self.frame,
        );
        self.segment.append(&self.frame).map_err(|error| {
            self.fail(format!(
                "embedded store log write failed ({error}); restart required"
            ))
        })
    }

    /// Makes the events of durable `batches` readable by the outbox.
    fn publish_events(&self, batches: &[Batch]) {
        let mut events = batches
            .iter()
            .flat_map(|batch| &batch.writes)
            .filter_map(|write| match write {
                Write::Event { sequence, payload } => Some((*sequence, payload.clone())),
                _ => None,
            })
            .peekable();
        if events.peek().is_some() {
            self.recent_events.lock().extend(events);
        }
    }

    /// Records a failure: nothing is acknowledged after it until the store is reopened (the
    /// rooms in memory may hold changes the disk does not).
    fn fail(&mut self, message: String) -> String {
        tracing::error!(%message, "embedded store failed; refusing further writes");
        self.failure = Some(message.clone());
        message
    }

    /// Takes the running checkpoint's result (waiting for it with `wait`).
    fn collect_checkpoint(&mut self, wait: bool) {
        if !self.checkpoint_running {
            return;
        }
        let result = if wait {
            self.results.recv().map_err(|_| ())
        } else {
            self.results.try_recv().map_err(|_| ())
        };
        match result {
            Ok(Ok(())) => self.checkpoint_running = false,
            Ok(Err(message)) => {
                self.checkpoint_running = false;
                self.fail(format!("embedded store {message}; restart required"));
            }
            Err(()) if wait => {
                self.checkpoint_running = false;
                self.fail("embedded store checkpoint thread stopped; restart required".to_owned());
            }
            Err(()) => {}
        }
    }

    /// Once the segment is big enough and no checkpoint is running, starts a new segment and
    /// hands everything logged before it to the checkpoint thread.
    fn maybe_checkpoint(&mut self) {
        if self.checkpoint_running
            || self.failure.is_some()
            || self.segment.len < self.checkpoint_bytes
        {
            return;
        }
        match Segment::create(&self.store, self.segment.number + 1) {
            Ok(next) => {
                let through = std::mem::replace(&mut self.segment, next).number;
                self.hand_off(through);
            }
            Err(error) => {
                self.fail(format!(
                    "embedded store cannot start a new log segment ({error}); restart required"
                ));
            }
        }
    }

    fn hand_off(&mut self, through: u64) {
        let job = CheckpointJob {
            dirty: std::mem::take(&mut self.dirty),
            through,
        };
        if self.jobs.send(job).is_ok() {
            self.checkpoint_running = true;
        } else {
            self.fail("embedded store checkpoint thread stopped; restart required".to_owned());
        }
    }

    /// After the last write: checkpoints everything (so a clean stop leaves no log behind)
    /// and stops the checkpoint thread, which closes the database.
    fn shut_down(mut self) {
        self.collect_checkpoint(true);
        if self.failure.is_none() {
            self.hand_off(self.segment.number);
            self.collect_checkpoint(true);
        }
        let Logger {
            jobs, checkpointer, ..
        } = self;
        drop(jobs);
        if let Some(thread) = checkpointer {
            let _ = thread.join();
        }
    }
}

/// The checkpoint thread's view of the store.
struct Checkpoints<'a> {
    database: &'a Database,
    store: &'a Path,
    recent_events: &'a RecentEvents,
    stats: &'a CommitStats,
}

impl Checkpoints<'_> {
    fn run(
        &self,
        jobs: &mpsc::Receiver<CheckpointJob>,
        results: &mpsc::Sender<Result<(), String>>,
    ) {
        while let Ok(job) = jobs.recv() {
            let result = checkpoint::checkpoint(self.database, self.store, &job.dirty, job.through);
            if result.is_ok() {
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                // redb holds them now; later events all have higher sequences.
                if let Some(last) = job.dirty.last_event() {
                    self.recent_events
                        .lock()
                        .retain(|sequence, _| *sequence > last);
                }
            }
            if results.send(result).is_err() {
                break;
            }
        }
    }
}

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
