//! The tables of the embedded store (redb) and the keys of their records.

use std::collections::BTreeMap;
use std::sync::Arc;

use anteroom_core::RoomId;
use redb::TableDefinition;

pub(super) const CONFIGS: TableDefinition<&str, &[u8]> = TableDefinition::new("room_configs");
pub(super) const STATES: TableDefinition<&str, &[u8]> = TableDefinition::new("room_states");
pub(super) const TICKETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("tickets");
pub(super) const SESSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sessions");
/// Events for the sinks by sequence (`outbox.rs`).
pub(super) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// Each sink's highest delivered event sequence.
pub(super) const EVENT_ACKS: TableDefinition<&str, u64> = TableDefinition::new("event_acks");

/// Events that are durable in the log but not yet checkpointed into [`EVENTS`], by sequence:
/// the log writer adds them once their frame is synced, the checkpoint thread drops them once
/// redb holds them.
pub(super) type RecentEvents = Arc<parking_lot::Mutex<BTreeMap<u64, Vec<u8>>>>;

/// `room id, 0x00, record id`: the records of one room are one contiguous key range.
pub(super) fn record_key(room: &RoomId, id: &[u8; 16]) -> Vec<u8> {
    let mut key = Vec::with_capacity(room.as_str().len() + 17);
    key.extend_from_slice(room.as_str().as_bytes());
    key.push(0);
    key.extend_from_slice(id);
    key
}

pub(super) fn room_range(room: &RoomId) -> (Vec<u8>, Vec<u8>) {
    let mut start = room.as_str().as_bytes().to_vec();
    let mut end = start.clone();
    start.push(0);
    end.push(1);
    (start, end)
}
