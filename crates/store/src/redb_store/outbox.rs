//! The embedded store's event outbox: one partition (`""`) in the store's own redb file.
//!
//! Events are records of the write-ahead log, in the frame of the change they report (or, for
//! [`EventOutbox::append`], a frame of their own), numbered in log order. Once a frame is
//! synced its events are readable from memory ([`super::RecentEvents`]); a checkpoint moves
//! them into the `events` table. [`EventOutbox::pending`] reads memory first, then the table
//! in a transaction begun after that, so an event the checkpoint moves in between is found in
//! one or the other.
//!
//! Acknowledgements and pruning are redb transactions of their own (an acknowledgement lost
//! in a crash only repeats a delivery). Pruning also enforces the cap: it drops what every
//! sink delivered and whatever lies more than [`OutboxLimits::max_entries`] behind the last
//! event.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;
use redb::{Database, ReadableDatabase, ReadableTable};

use super::tables::{EVENT_ACKS, EVENTS, RecentEvents};
use super::writer::RedbWriter;
use super::{EngineHost, checkpoint};
use crate::engine_host::Persister;
use crate::outbox::delivered_by_all;
use crate::{EventOutbox, OutboxEntry, OutboxLimits, StoreError};

/// The outbox over a [`super::RedbStore`]'s log and redb file.
pub(crate) struct RedbEventOutbox {
    pub(super) host: Arc<EngineHost<RedbWriter>>,
    pub(super) database: Arc<RwLock<Database>>,
    pub(super) recent: RecentEvents,
    pub(super) limits: OutboxLimits,
}

/// The highest event sequence the store has handed out (after its log was replayed).
pub(super) fn last_event_sequence(database: &Database) -> Result<u64, StoreError> {
    let read = || -> Result<u64, redb::Error> {
        let transaction = database.begin_read()?;
        let recorded = transaction
            .open_table(checkpoint::WAL_STATE)?
            .get(checkpoint::LAST_EVENT_SEQUENCE)?
            .map_or(0, |value| value.value());
        let stored = transaction
            .open_table(EVENTS)?
            .last()?
            .map_or(0, |(key, _)| key.value());
        Ok(recorded.max(stored))
    };
    read().map_err(|error| StoreError::backend("cannot read the embedded store's events", error))
}

fn failed(error: impl Into<redb::Error>) -> StoreError {
    StoreError::backend("the embedded store's event outbox failed", error.into())
}

impl RedbEventOutbox {
    /// Runs a blocking database job off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Database) -> Result<T, redb::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let database = self.database.clone();
        tokio::task::spawn_blocking(move || job(&database.read()))
            .await
            .map_err(|error| StoreError::backend("the outbox task failed", error))?
            .map_err(failed)
    }

    fn last_sequence(&self) -> u64 {
        self.host.persister().queue.lock().last_event
    }
}

#[async_trait]
impl EventOutbox for RedbEventOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        if payloads.is_empty() {
            return Ok(self.last_sequence());
        }
        let writer = self.host.persister();
        let (pending, last) = writer.submit_numbered(Vec::new(), payloads)?;
        writer.wait_durable_until(pending.sequence).await?;
        Ok(last)
    }

    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let sink = sink.to_owned();
        let recent = self.recent.clone();
        self.blocking(move |database| {
            let after = database
                .begin_read()?
                .open_table(EVENT_ACKS)?
                .get(sink.as_str())?
                .map_or(0, |value| value.value());
            // Memory first, then a read transaction begun after it: a checkpoint drops events
            // from memory only once its commit holds them, so an event is in the copy taken
            // here or in the table as the later transaction sees it (one begun earlier would
            // not see that commit, and the event would be skipped).
            let mut found: BTreeMap<u64, Vec<u8>> = recent
                .lock()
                .range(after.saturating_add(1)..)
                .take(limit)
                .map(|(sequence, payload)| (*sequence, payload.clone()))
                .collect();
            let transaction = database.begin_read()?;
            let events = transaction.open_table(EVENTS)?;
            for item in events.range(after.saturating_add(1)..)?.take(limit) {
                let (sequence, payload) = item?;
                found
                    .entry(sequence.value())
                    .or_insert_with(|| payload.value().to_vec());
            }
            Ok(found
                .into_iter()
                .take(limit)
                .map(|(sequence, payload)| OutboxEntry {
                    partition: String::new(),
                    sequence,
                    payload,
                })
                .collect())
        })
        .await
    }

    async fn acknowledge(
        &self,
        sink: &str,
        _partition: &str,
        sequence: u64,
    ) -> Result<(), StoreError> {
        let sink = sink.to_owned();
        self.blocking(move |database| {
            let transaction = checkpoint::begin_recoverable_write(database)?;
            {
                let mut acks = transaction.open_table(EVENT_ACKS)?;
                let current = acks.get(sink.as_str())?.map_or(0, |value| value.value());
                if sequence > current {
                    acks.insert(sink.as_str(), sequence)?;
                }
            }
            transaction.commit()?;
            Ok(())
        })
        .await
    }

    async fn prune(&self, sinks: &[&str]) -> Result<u64, StoreError> {
        let sinks: Vec<String> = sinks.iter().map(|sink| (*sink).to_owned()).collect();
        let beyond_cap = self.last_sequence().saturating_sub(self.limits.max_entries);
        let recent = self.recent.clone();
        self.blocking(move |database| {
            let transaction = checkpoint::begin_recoverable_write(database)?;
            let pruned = {
                let acks = transaction.open_table(EVENT_ACKS)?;
                let mut marks = BTreeMap::new();
                for sink in &sinks {
                    if let Some(mark) = acks.get(sink.as_str())? {
                        marks.insert(sink.as_str(), mark.value());
                    }
                }
                let names: Vec<&str> = sinks.iter().map(String::as_str).collect();
                let through =
                    delivered_by_all(&names, |sink| marks.get(sink).copied()).max(beyond_cap);
                let mut events = transaction.open_table(EVENTS)?;
                // An event may be in memory, in the table, or (checkpointed a moment ago)
                // in both: count each once.
                let mut pruned = std::collections::BTreeSet::new();
                if through > 0 {
                    events.retain_in(..=through, |sequence, _| {
                        pruned.insert(sequence);
                        false
                    })?;
                    recent.lock().retain(|sequence, _| {
                        let keep = *sequence > through;
                        if !keep {
                            pruned.insert(*sequence);
                        }
                        keep
                    });
                }
                pruned.len() as u64
            };
            transaction.commit()?;
            Ok(pruned)
        })
        .await
    }
}
