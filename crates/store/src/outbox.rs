//! The event outbox (SPEC §8.4): events waiting to be delivered to the event sinks, kept
//! durably so that a restart or a receiver outage loses nothing (at-least-once delivery).
//!
//! Events are appended with increasing sequence numbers (from 1); each sink remembers the
//! highest sequence it delivered, and reads what comes after. Entries every sink has delivered
//! can be pruned. The outbox holds at most [`OutboxLimits::max_entries`]: past that the oldest
//! entries are dropped, so a receiver gone for days cannot fill the disk.
//!
//! Backends: [`MemoryOutbox`] (tests, memory store) and [`RedbOutbox`] (a redb file of its
//! own beside the embedded store; each append is one durable commit).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use async_trait::async_trait;
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::StoreError;

/// One event waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Its place, from 1, strictly increasing.
    pub sequence: u64,
    /// The event as its sinks receive it (JSON).
    pub payload: Vec<u8>,
}

/// How much an outbox keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLimits {
    /// Entries kept at most; the oldest go first.
    pub max_entries: u64,
}

impl Default for OutboxLimits {
    fn default() -> Self {
        OutboxLimits {
            max_entries: 1_000_000,
        }
    }
}

/// Events waiting for delivery, per sink.
#[async_trait]
pub trait EventOutbox: Send + Sync + 'static {
    /// Appends `payloads` in order and answers once they are durable, with the sequence of
    /// the last one (the last sequence so far when `payloads` is empty).
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError>;
    /// Up to `limit` entries after the last one `sink` acknowledged, oldest first.
    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Records that `sink` delivered every entry up to `sequence` (never moves back).
    async fn acknowledge(&self, sink: &str, sequence: u64) -> Result<(), StoreError>;
    /// Drops the entries every sink in `sinks` has acknowledged; returns how many.
    async fn prune(&self, sinks: &[&str]) -> Result<u64, StoreError>;
}

/// The outbox in process memory: nothing survives a restart.
#[derive(Default)]
pub struct MemoryOutbox {
    state: Mutex<MemoryState>,
    limits: OutboxLimits,
}

#[derive(Default)]
struct MemoryState {
    entries: VecDeque<OutboxEntry>,
    last: u64,
    acknowledged: BTreeMap<String, u64>,
}

impl MemoryOutbox {
    /// An empty outbox with these limits.
    pub fn new(limits: OutboxLimits) -> MemoryOutbox {
        MemoryOutbox {
            state: Mutex::default(),
            limits,
        }
    }
}

#[async_trait]
impl EventOutbox for MemoryOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        let mut state = self.state.lock();
        for payload in payloads {
            state.last += 1;
            let sequence = state.last;
            state.entries.push_back(OutboxEntry { sequence, payload });
        }
        while state.entries.len() as u64 > self.limits.max_entries {
            state.entries.pop_front();
        }
        Ok(state.last)
    }

    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let state = self.state.lock();
        let after = state.acknowledged.get(sink).copied().unwrap_or(0);
        Ok(state
            .entries
            .iter()
            .filter(|entry| entry.sequence > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn acknowledge(&self, sink: &str, sequence: u64) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        let acknowledged = state.acknowledged.entry(sink.to_owned()).or_insert(0);
        *acknowledged = (*acknowledged).max(sequence);
        Ok(())
    }

    async fn prune(&self, sinks: &[&str]) -> Result<u64, StoreError> {
        let mut state = self.state.lock();
        let through = delivered_by_all(sinks, |sink| state.acknowledged.get(sink).copied());
        let before = state.entries.len();
        state.entries.retain(|entry| entry.sequence > through);
        Ok((before - state.entries.len()) as u64)
    }
}

/// The highest sequence every sink has delivered (0 when there is no sink).
fn delivered_by_all(sinks: &[&str], acknowledged: impl Fn(&str) -> Option<u64>) -> u64 {
    sinks
        .iter()
        .map(|sink| acknowledged(sink).unwrap_or(0))
        .min()
        .unwrap_or(0)
}

const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const ACKNOWLEDGED: TableDefinition<&str, u64> = TableDefinition::new("acknowledged");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const LAST_SEQUENCE: &str = "last_sequence";

/// The outbox in a redb file: an append is acknowledged once committed durably.
pub struct RedbOutbox {
    database: std::sync::Arc<Database>,
    limits: OutboxLimits,
    /// Appends are serialised, so sequences are handed out in commit order.
    append_lock: tokio::sync::Mutex<()>,
}

impl RedbOutbox {
    /// Opens (or creates) the outbox file at `path`.
    pub fn open(path: &Path, limits: OutboxLimits) -> Result<RedbOutbox, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::backend(format!("cannot create {}", parent.display()), e)
            })?;
        }
        let database = Database::create(path)
            .map_err(|e| StoreError::backend(format!("cannot open {}", path.display()), e))?;
        let transaction = database.begin_write().map_err(backend)?;
        {
            transaction.open_table(EVENTS).map_err(backend)?;
            transaction.open_table(ACKNOWLEDGED).map_err(backend)?;
            transaction.open_table(META).map_err(backend)?;
        }
        transaction.commit().map_err(backend)?;
        Ok(RedbOutbox {
            database: std::sync::Arc::new(database),
            limits,
            append_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// Runs a blocking database job off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Database) -> Result<T, redb::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let database = self.database.clone();
        tokio::task::spawn_blocking(move || job(&database))
            .await
            .map_err(|error| StoreError::backend("the outbox task failed", error))?
            .map_err(backend)
    }
}

fn backend(error: impl Into<redb::Error>) -> StoreError {
    StoreError::backend("event outbox failed", error.into())
}

#[async_trait]
impl EventOutbox for RedbOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        let _serial = self.append_lock.lock().await;
        let max_entries = self.limits.max_entries;
        self.blocking(move |database| {
            let transaction = database.begin_write()?;
            let last = {
                let mut meta = transaction.open_table(META)?;
                let mut events = transaction.open_table(EVENTS)?;
                let mut last = meta.get(LAST_SEQUENCE)?.map_or(0, |value| value.value());
                for payload in &payloads {
                    last += 1;
                    events.insert(last, payload.as_slice())?;
                }
                meta.insert(LAST_SEQUENCE, last)?;
                // Past the cap the oldest entries go.
                let cutoff = last.saturating_sub(max_entries);
                if cutoff > 0 {
                    events.retain_in(..=cutoff, |_, _| false)?;
                }
                last
            };
            transaction.commit()?;
            Ok(last)
        })
        .await
    }

    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let sink = sink.to_owned();
        self.blocking(move |database| {
            let transaction = database.begin_read()?;
            let acknowledged = transaction.open_table(ACKNOWLEDGED)?;
            let after = acknowledged.get(sink.as_str())?.map_or(0, |v| v.value());
            let events = transaction.open_table(EVENTS)?;
            let mut entries = Vec::new();
            for item in events.range(after.saturating_add(1)..)?.take(limit) {
                let (sequence, payload) = item?;
                entries.push(OutboxEntry {
                    sequence: sequence.value(),
                    payload: payload.value().to_vec(),
                });
            }
            Ok(entries)
        })
        .await
    }

    async fn acknowledge(&self, sink: &str, sequence: u64) -> Result<(), StoreError> {
        let sink = sink.to_owned();
        self.blocking(move |database| {
            let transaction = database.begin_write()?;
            {
                let mut acknowledged = transaction.open_table(ACKNOWLEDGED)?;
                let current = acknowledged.get(sink.as_str())?.map_or(0, |v| v.value());
                if sequence > current {
                    acknowledged.insert(sink.as_str(), sequence)?;
                }
            }
            transaction.commit()?;
            Ok(())
        })
        .await
    }

    async fn prune(&self, sinks: &[&str]) -> Result<u64, StoreError> {
        let sinks: Vec<String> = sinks.iter().map(|sink| (*sink).to_owned()).collect();
        self.blocking(move |database| {
            let transaction = database.begin_write()?;
            let pruned = {
                let acknowledged = transaction.open_table(ACKNOWLEDGED)?;
                let mut marks = Vec::with_capacity(sinks.len());
                for sink in &sinks {
                    marks.push(acknowledged.get(sink.as_str())?.map(|v| v.value()));
                }
                drop(acknowledged);
                let through = marks.into_iter().map(|m| m.unwrap_or(0)).min().unwrap_or(0);
                let mut events = transaction.open_table(EVENTS)?;
                let before = events.len()?;
                if through > 0 {
                    events.retain_in(..=through, |_, _| false)?;
                }
                before - events.len()?
            };
            transaction.commit()?;
            Ok(pruned)
        })
        .await
    }
}
