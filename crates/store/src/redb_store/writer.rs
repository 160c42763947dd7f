//! The embedded store's log writer: one thread appends the operations' batches to the
//! write-ahead log, syncs it, and hands full segments to the checkpoint thread, which writes
//! them into redb.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anteroom_core::RoomId;
use anteroom_core::engine::{ChangeSet, RoomState};
use parking_lot::RwLock;
use redb::Database;

use super::checkpoint::{self, Dirty};
use super::compaction::CompactionPolicy;
use super::completion::Completion;
use super::next_segment::SegmentPreparer;
use super::tables::{RecentEvents, record_key};
use super::wal::{self, Segment, Write};
use crate::StoreError;
use crate::engine_host::{PendingWrite, Persister};
use crate::persisted;

/// The most operations one log frame takes; more wait for the next append.
const MAX_BATCH: usize = 4096;
/// The longest a commit waits for more operations (see [`linger`]).
const MAX_LINGER: Duration = Duration::from_millis(1);

struct Batch {
    sequence: u64,
    writes: Vec<Write>,
}

#[derive(Default)]
pub(super) struct CommitStats {
    pub(super) operations: AtomicU64,
    pub(super) commits: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) compactions: AtomicU64,
}

/// The log writer's queue: sequences are handed out under one lock with the send, so
/// sequence order is channel order (and so log order).
pub(super) struct Queue {
    /// The last write's sequence.
    last_write: u64,
    /// The last event sequence handed out.
    pub(super) last_event: u64,
    sender: Option<mpsc::Sender<Batch>>,
}

/// What the writer starts from.
pub(super) struct WriterStart {
    pub(super) database: Arc<RwLock<Database>>,
    pub(super) recent_events: RecentEvents,
    pub(super) first_segment: u64,
    pub(super) last_event: u64,
    pub(super) checkpoint_bytes: u64,
    pub(super) compact_min_bytes: u64,
    /// The log replayed at opening, not in redb yet: the first checkpoint writes it.
    pub(super) replayed: Option<Replayed>,
}

/// The records of the log segments up to `through`, replayed at opening.
pub(super) struct Replayed {
    pub(super) dirty: Dirty,
    pub(super) through: u64,
}

/// The handle on the log writer thread.
pub(crate) struct RedbWriter {
    pub(super) queue: parking_lot::Mutex<Queue>,
    /// How far the log is durable; wakes the operations waiting for it.
    durable: Arc<Completion>,
    thread: Option<JoinHandle<()>>,
    pub(super) stats: Arc<CommitStats>,
}

impl RedbWriter {
    pub(super) fn start(start: WriterStart, store: &Path) -> Result<RedbWriter, StoreError> {
        let WriterStart {
            database,
            recent_events,
            first_segment,
            last_event,
            checkpoint_bytes,
            compact_min_bytes,
            replayed,
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
                    let mut checkpoints = Checkpoints {
                        database: &database,
                        store: &store,
                        recent_events: &recent_events,
                        stats: &stats,
                        compaction: CompactionPolicy::new(compact_min_bytes),
                    };
                    checkpoints.run(&job_receiver, &result_sender);
                })
                .map_err(|e| StoreError::backend("cannot start the store's checkpoint thread", e))?
        };
        let mut logger = Logger {
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
            preparer: SegmentPreparer::start(store)?,
        };
        if let Some(replayed) = replayed {
            logger.checkpoint_replayed(replayed);
        }
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
    pub(super) fn submit_numbered(
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
            let bytes = room
                .session(*session)
                .as_ref()
                .map(persisted::encode_session);
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
    /// Whether it counts in [`CommitStats::checkpoints`] (the one at opening does not).
    counted: bool,
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
    /// Writes the next segment while this one fills.
    preparer: SegmentPreparer,
}

impl Logger {
    fn run(mut self, receiver: &mpsc::Receiver<Batch>, durable: &Completion, stats: &CommitStats) {
        // Operations in the last commit and how long its sync took.
        let mut previous = (0, Duration::ZERO);
        // The commit's batches, its allocation kept from one commit to the next (grown a step
        // at a time it was reallocated a few times in every commit).
        let mut batches = Vec::new();
        while let Ok(first) = receiver.recv() {
            batches.push(first);
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
                    for write in batches.drain(..).flat_map(|batch| batch.writes) {
                        self.dirty.absorb(write);
                    }
                    self.maybe_checkpoint();
                }
                Err(message) => {
                    batches.clear();
                    durable.fail(message);
                }
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
        if self.segment.len >= self.checkpoint_bytes / 2 {
            self.preparer.request(self.checkpoint_bytes);
        }
        if self.checkpoint_running
            || self.failure.is_some()
            || self.segment.len < self.checkpoint_bytes
        {
            return;
        }
        match self.next_segment() {
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

    /// The segment after this one: the prepared one if it is ready (a rename), else one
    /// created here.
    fn next_segment(&mut self) -> Result<Segment, wal::WalError> {
        let number = self.segment.number + 1;
        if let Some(prepared) = self.preparer.take() {
            match Segment::adopt(&self.store, number, prepared) {
                Ok(segment) => return Ok(segment),
                Err(error) => {
                    tracing::warn!(%error, "the embedded store could not use its prepared log segment");
                }
            }
        }
        Segment::create(&self.store, number)
    }

    fn hand_off(&mut self, through: u64) {
        let job = CheckpointJob {
            dirty: std::mem::take(&mut self.dirty),
            through,
            counted: true,
        };
        self.send_job(job);
    }

    /// Serves the replayed log's events until redb holds them, and checkpoints its records
    /// while the node already runs (its segments stay until that checkpoint is durable, so a
    /// crash before then replays them again).
    fn checkpoint_replayed(&mut self, replayed: Replayed) {
        let events = replayed.dirty.events();
        self.recent_events
            .lock()
            .extend(events.map(|(sequence, payload)| (sequence, payload.clone())));
        self.send_job(CheckpointJob {
            dirty: replayed.dirty,
            through: replayed.through,
            counted: false,
        });
    }

    fn send_job(&mut self, job: CheckpointJob) {
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
            jobs,
            checkpointer,
            preparer,
            ..
        } = self;
        preparer.stop();
        drop(jobs);
        if let Some(thread) = checkpointer {
            let _ = thread.join();
        }
    }
}

/// The checkpoint thread's view of the store.
struct Checkpoints<'a> {
    database: &'a RwLock<Database>,
    store: &'a Path,
    recent_events: &'a RecentEvents,
    stats: &'a CommitStats,
    compaction: CompactionPolicy,
}

impl Checkpoints<'_> {
    fn run(
        &mut self,
        jobs: &mpsc::Receiver<CheckpointJob>,
        results: &mpsc::Sender<Result<(), String>>,
    ) {
        while let Ok(job) = jobs.recv() {
            let started = Instant::now();
            let result =
                checkpoint::checkpoint(&self.database.read(), self.store, &job.dirty, job.through);
            if result.is_ok() && !job.counted {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis(),
                    "checkpointed the log replayed at opening"
                );
            }
            if result.is_ok() && job.counted {
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            if result.is_ok() {
                // redb holds them now; later events all have higher sequences.
                if let Some(last) = job.dirty.last_event() {
                    self.recent_events
                        .lock()
                        .retain(|sequence, _| *sequence > last);
                }
                self.compact_if_worth_it();
            }
            if results.send(result).is_err() {
                break;
            }
        }
    }

    /// After a checkpoint (which may have deleted expired history): gives the file's unused
    /// space back when there is much of it. A failure is reported, not fatal: every record
    /// is still in the file (`compaction.rs`).
    fn compact_if_worth_it(&mut self) {
        match self
            .compaction
            .compact_if_worth_it(self.database, self.store)
        {
            Ok(None) => {}
            Ok(Some(done)) => {
                self.stats.compactions.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    bytes_before = done.bytes_before,
                    bytes_after = done.bytes_after,
                    took_ms = done.took.as_millis() as u64,
                    "embedded store file compacted"
                );
            }
            Err(message) => tracing::warn!(%message, "embedded store file not compacted"),
        }
    }
}
