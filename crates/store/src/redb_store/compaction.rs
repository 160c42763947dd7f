//! Giving the redb file back its unused space once expired history has been deleted from it.
//!
//! redb reuses the pages deleted records free, but never shrinks its file: after a sale's
//! hour of history is forgotten, the file keeps the size of its busiest moment. So after a
//! checkpoint, the checkpoint thread asks redb how many of the file's bytes hold nothing
//! (`fragmented_bytes`; spaced out so that this walk of the whole file takes at most about
//! 1 % of the thread's time); the rest is what the store holds. When that has fallen to half of
//! the most it held since the last compaction (history expired, a room purged) and the
//! unused bytes are at least
//! [`RedbOptions::compact_min_bytes`](super::RedbOptions::compact_min_bytes), it compacts
//! the file (`Database::compact`: live pages moved to the front, the file truncated).
//!
//! Why not on the unused share alone: redb's copy-on-write leaves most of a growing file
//! unused between checkpoints (three quarters in the tests here) and fills it again with
//! the next ones; compacting it then would only make the next checkpoints grow the file
//! again.
//!
//! What it costs: the checkpoint thread holds the database alone while it runs (the event
//! outbox's reads and the next checkpoint wait); operations do not, since they are durable
//! once in the write-ahead log, which goes on growing meanwhile. Each of redb's compaction
//! steps is a durable commit, so a crash (SIGKILL) in the middle leaves the last committed
//! step: every record is still there, in a file not fully compacted, which redb checks on the
//! next opening.

use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redb::Database;

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// The file's size before.
    pub(crate) bytes_before: u64,
    /// The file's size after.
    pub(crate) bytes_after: u64,
    /// How long the database was held.
    pub(crate) took: Duration,
}

/// A check that took `t` is not made again before `t` times this has passed: redb's
/// statistics walk every page of the file (2 GB with ten million waiting tickets), and the
/// check must not take a core from the node after every checkpoint. It takes at most about 1 % of the checkpoint thread's time this way.
const CHECK_SPACING: u32 = 100;

/// When to compact: the most the file has held since it was last compacted.
#[derive(Debug, Default)]
pub(super) struct CompactionPolicy {
    /// Unused bytes from which a compaction is worth it.
    min_unused_bytes: u64,
    /// The most bytes the file held (its size less the unused ones) at a check.
    most_held: u64,
    /// No check before this ([`CHECK_SPACING`]).
    next_check: Option<Instant>,
}

impl CompactionPolicy {
    pub(super) fn new(min_unused_bytes: u64) -> CompactionPolicy {
        CompactionPolicy {
            min_unused_bytes,
            most_held: 0,
            next_check: None,
        }
    }

    /// Compacts the file at `file` when the store holds half of what it held at most and
    /// enough of the file is unused (see the module doc); `None` when it did not, or when
    /// the last check was too recent to make another ([`CHECK_SPACING`]).
    pub(super) fn compact_if_worth_it(
        &mut self,
        database: &RwLock<Database>,
        file: &Path,
    ) -> Result<Option<Compacted>, String> {
        let started = Instant::now();
        if self.next_check.is_some_and(|next| started < next) {
            return Ok(None);
        }
        let unused = unused_bytes(&database.read())
            .map_err(|error| format!("cannot read the store file's statistics: {error}"))?;
        self.next_check = Some(started + started.elapsed() * CHECK_SPACING);
        let held = file_size(file)?.saturating_sub(unused);
        self.most_held = self.most_held.max(held);
        if unused < self.min_unused_bytes || held.saturating_mul(2) > self.most_held {
            return Ok(None);
        }
        let done = compact(&mut database.write(), file)?;
        self.most_held = held;
        Ok(Some(done))
    }
}

/// Compacts the file, whatever it holds unused.
pub(crate) fn compact(database: &mut Database, file: &Path) -> Result<Compacted, String> {
    let bytes_before = file_size(file)?;
    let started = Instant::now();
    database
        .compact()
        .map_err(|error| format!("cannot compact the store file: {error}"))?;
    let took = started.elapsed();
    Ok(Compacted {
        bytes_before,
        bytes_after: file_size(file)?,
        took,
    })
}

/// Bytes of the file that hold nothing: a write transaction's statistics, aborted.
fn unused_bytes(database: &Database) -> Result<u64, redb::Error> {
    let transaction = database.begin_write()?;
    let unused = transaction.stats()?.fragmented_bytes();
    transaction.abort()?;
    Ok(unused)
}

fn file_size(file: &Path) -> Result<u64, String> {
    std::fs::metadata(file)
        .map(|metadata| metadata.len())
        .map_err(|error| format!("cannot read the size of {}: {error}", file.display()))
}
