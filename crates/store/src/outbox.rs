//! The event outbox (SPEC §8.4, §14.9): events waiting to be delivered to the event sinks,
//! kept durably so that a restart or a receiver outage loses nothing (at-least-once delivery).
//!
//! The store writes each ticket and session event into its outbox in the same durable write
//! as the change itself ([`crate::RoomStore::event_outbox`] switches this on); the node's
//! own events (room changes by the admin API, `room.metrics`) are [`EventOutbox::append`]ed.
//!
//! An outbox is one or more **partitions**, each an ordered log with sequence numbers from 1:
//! the embedded and memory stores have one (`""`), the Redis store one per room (the room's
//! events live in the room's Cluster slot, written by the room's scripts) plus `""` for the
//! node's own events. Each sink remembers, per partition, the highest sequence it delivered
//! and reads what comes after, so events of one ticket (one room) arrive in order. Entries
//! every sink has delivered can be pruned. A partition holds at most
//! [`OutboxLimits::max_entries`]: past that the oldest entries are dropped, so a receiver gone
//! for days cannot fill the disk or Redis's memory.
//!
//! Backends: [`MemoryOutbox`] (the memory store's, and for tests), the embedded store's own
//! (`redb_store/outbox.rs`, in its redb file and log) and the Redis store's
//! ([`crate::RedisOutbox`]).

use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::StoreError;

/// One event waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The partition it is in (`""` for a single-partition outbox, a room id for the Redis
    /// store's room partitions).
    pub partition: String,
    /// Its place in its partition, from 1, strictly increasing.
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
    /// Appends `payloads` in order to the partition `""` and answers once they are durable,
    /// with the sequence of the last one (the last sequence so far when `payloads` is empty).
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError>;
    /// Up to `limit` entries `sink` has not acknowledged, oldest first within each partition.
    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Records that `sink` delivered every entry of `partition` up to `sequence` (never moves
    /// back).
    async fn acknowledge(
        &self,
        sink: &str,
        partition: &str,
        sequence: u64,
    ) -> Result<(), StoreError>;
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

    /// Appends at once (the memory store calls it under the room's lock, so a room's events
    /// go in in the order they happened); answers the last sequence.
    pub(crate) fn push(&self, payloads: Vec<Vec<u8>>) -> u64 {
        let mut state = self.state.lock();
        for payload in payloads {
            state.last += 1;
            let sequence = state.last;
            state.entries.push_back(OutboxEntry {
                partition: String::new(),
                sequence,
                payload,
            });
        }
        while state.entries.len() as u64 > self.limits.max_entries {
            state.entries.pop_front();
        }
        state.last
    }
}

#[async_trait]
impl EventOutbox for MemoryOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        Ok(self.push(payloads))
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

    async fn acknowledge(
        &self,
        sink: &str,
        _partition: &str,
        sequence: u64,
    ) -> Result<(), StoreError> {
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
pub(crate) fn delivered_by_all(sinks: &[&str], acknowledged: impl Fn(&str) -> Option<u64>) -> u64 {
    sinks
        .iter()
        .map(|sink| acknowledged(sink).unwrap_or(0))
        .min()
        .unwrap_or(0)
}
