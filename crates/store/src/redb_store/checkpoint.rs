//! Checkpoints: the records the log made durable since the last checkpoint, latest version
//! of each, written into redb in one durable transaction together with the number of the
//! last log segment they cover. After that commit the covered segments are deleted, never
//! before. A checkpoint covers whole segments, and records are whole images, so replaying a
//! segment redb already holds is harmless.
//!
//! [`Dirty`] collects the records (a room's state changes with every join, but only its last
//! version is written); recovery uses the same collection to replay the log. The log writer
//! adds every record it logs, on the commit path, so tickets and sessions are only appended
//! in log order there: a hash map by key cost the writer a probe into a table of up to a
//! segment's records (a cache miss or two per record, and a stall of the commit each time the
//! table doubled). The latest version of each key is found where the records are read, by the
//! sort the checkpoint thread (or the restore) does anyway to write or lay them in key order.
//! A key written many times is held once per version until its checkpoint: at most the bytes
//! of the log segments it covers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anteroom_core::RoomId;
use redb::{Database, ReadableTable, TableDefinition, WriteTransaction};

use super::tables::{CONFIGS, EVENTS, SESSIONS, STATES, TICKETS, room_range};
use super::wal::{self, Write};

/// The log's own table: how far redb holds the log.
pub(crate) const WAL_STATE: TableDefinition<&str, u64> = TableDefinition::new("wal");
/// Key in [`WAL_STATE`]: every segment up to this number is in redb.
pub(crate) const CHECKPOINTED_THROUGH: &str = "checkpointed_through_segment";
/// Key in [`WAL_STATE`]: the highest event sequence handed out, kept even when every event
/// has been delivered and pruned, so sequences never start over.
pub(crate) const LAST_EVENT_SEQUENCE: &str = "last_event_sequence";

/// Ticket or session records (`None`: forgotten) in log order, a key once per version.
type Records = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A record as read: its key and its bytes (`None`: forgotten).
type Version<'a> = (&'a [u8], Option<&'a [u8]>);

/// The latest version of each of `records` whose key `keep`s, in key order.
fn latest<'a>(records: &'a Records, keep: impl Fn(&[u8]) -> bool) -> Vec<Version<'a>> {
    let mut kept: Vec<(usize, Version<'a>)> = records
        .iter()
        .enumerate()
        .filter(|(_, (key, _))| keep(key))
        .map(|(index, (key, bytes))| (index, (key.as_slice(), bytes.as_deref())))
        .collect();
    // By key, the latest version first: the deduplication keeps the first of each key.
    kept.sort_unstable_by(|(a, (a_key, _)), (b, (b_key, _))| a_key.cmp(b_key).then(b.cmp(a)));
    kept.dedup_by(|(_, (later, _)), (_, (first, _))| later == first);
    kept.into_iter().map(|(_, version)| version).collect()
}

/// The records changed since the last checkpoint: the latest configuration and state of each
/// room, and every version of the tickets and sessions (read through `latest`).
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    /// Rooms deleted: cleared before the records below are written (those came later).
    deleted_rooms: BTreeSet<RoomId>,
    configs: BTreeMap<RoomId, Vec<u8>>,
    states: BTreeMap<RoomId, Vec<u8>>,
    tickets: Records,
    sessions: Records,
    /// Events for the sinks by sequence (never overwritten: each is logged once).
    events: BTreeMap<u64, Vec<u8>>,
}

impl Dirty {
    /// Records `write`, which happened after everything recorded so far.
    pub(crate) fn absorb(&mut self, write: Write) {
        match write {
            Write::Config { room, bytes } => {
                self.configs.insert(room, bytes);
            }
            Write::State { room, bytes } => {
                self.states.insert(room, bytes);
            }
            Write::Ticket { key, bytes } => self.tickets.push((key, bytes)),
            Write::Session { key, bytes } => self.sessions.push((key, bytes)),
            Write::Event { sequence, payload } => {
                self.events.insert(sequence, payload);
            }
            Write::DeleteRoom { room } => {
                self.configs.remove(&room);
                self.states.remove(&room);
                let (start, _) = room_range(&room);
                for records in [&mut self.tickets, &mut self.sessions] {
                    records.retain(|(key, _)| !key.starts_with(&start));
                }
                self.deleted_rooms.insert(room);
            }
        }
    }

    /// Whether the log deleted `room`: what redb holds of it is gone, the records here (made
    /// after the deletion) are all it has.
    pub(crate) fn deletes(&self, room: &RoomId) -> bool {
        self.deleted_rooms.contains(room)
    }

    /// The configurations logged, by room.
    pub(crate) fn configs(&self) -> impl Iterator<Item = (&RoomId, &[u8])> {
        self.configs
            .iter()
            .map(|(room, bytes)| (room, bytes.as_slice()))
    }

    /// The latest state logged for `room`.
    pub(crate) fn state(&self, room: &RoomId) -> Option<&[u8]> {
        self.states.get(room).map(Vec::as_slice)
    }

    /// The latest version of each ticket of `room` logged (`None`: forgotten), in key order.
    pub(crate) fn tickets_of(&self, room: &RoomId) -> Vec<Version<'_>> {
        records_of(&self.tickets, room)
    }

    /// The latest version of each session of `room` logged (`None`: forgotten), in key order.
    pub(crate) fn sessions_of(&self, room: &RoomId) -> Vec<Version<'_>> {
        records_of(&self.sessions, room)
    }

    /// The events logged, by sequence.
    pub(crate) fn events(&self) -> impl Iterator<Item = (u64, &Vec<u8>)> {
        self.events
            .iter()
            .map(|(sequence, payload)| (*sequence, payload))
    }

    /// The highest event sequence among the records.
    pub(crate) fn last_event(&self) -> Option<u64> {
        self.events.last_key_value().map(|(sequence, _)| *sequence)
    }

    /// Writes everything into `transaction` (records in key order, which redb inserts fastest).
    pub(crate) fn apply(&self, transaction: &WriteTransaction) -> Result<(), redb::Error> {
        let mut configs = transaction.open_table(CONFIGS)?;
        let mut states = transaction.open_table(STATES)?;
        let mut tickets = transaction.open_table(TICKETS)?;
        let mut sessions = transaction.open_table(SESSIONS)?;
        if let Some((&last, _)) = self.events.last_key_value() {
            let mut events = transaction.open_table(EVENTS)?;
            for (sequence, payload) in &self.events {
                events.insert(*sequence, payload.as_slice())?;
            }
            let mut wal_state = transaction.open_table(WAL_STATE)?;
            let recorded = wal_state
                .get(LAST_EVENT_SEQUENCE)?
                .map_or(0, |value| value.value());
            wal_state.insert(LAST_EVENT_SEQUENCE, recorded.max(last))?;
        }
        for room in &self.deleted_rooms {
            configs.remove(room.as_str())?;
            states.remove(room.as_str())?;
            let (start, end) = room_range(room);
            tickets.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
            sessions.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
        }
        for (room, bytes) in &self.configs {
            configs.insert(room.as_str(), bytes.as_slice())?;
        }
        for (room, bytes) in &self.states {
            states.insert(room.as_str(), bytes.as_slice())?;
        }
        for (table, records) in [
            (&mut tickets, &self.tickets),
            (&mut sessions, &self.sessions),
        ] {
            for (key, bytes) in latest(records, |_| true) {
                match bytes {
                    Some(bytes) => {
                        table.insert(key, bytes)?;
                    }
                    None => {
                        table.remove(key)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn records_of<'a>(records: &'a Records, room: &RoomId) -> Vec<Version<'a>> {
    let (start, _) = room_range(room);
    latest(records, |key| key.starts_with(&start))
}

/// A write transaction that records redb's allocator state as it commits (redb's "quick
/// repair"): an open after a crash loads that state instead of walking and checksumming the
/// whole file, which took longer than replaying the log with millions of tickets stored. The
/// price is a second sync per commit (redb's two-phase commit) and the state's pages; the
/// store commits only checkpoints, outbox writes and the tables at opening, none on the path
/// of an answer.
pub(crate) fn begin_recoverable_write(
    database: &Database,
) -> Result<redb::WriteTransaction, redb::Error> {
    let mut transaction = database.begin_write()?;
    transaction.set_quick_repair(true);
    Ok(transaction)
}

/// Writes `dirty` into redb durably, recording that segments up to `through` are in it, then
/// deletes those segments.
pub(crate) fn checkpoint(
    database: &Database,
    store: &Path,
    dirty: &Dirty,
    through: u64,
) -> Result<(), String> {
    let commit = || -> Result<(), redb::Error> {
        let transaction = begin_recoverable_write(database)?;
        dirty.apply(&transaction)?;
        transaction
            .open_table(WAL_STATE)?
            .insert(CHECKPOINTED_THROUGH, through)?;
        transaction.commit()?;
        Ok(())
    };
    commit().map_err(|error| format!("checkpoint into redb failed: {error}"))?;
    delete_segments_through(store, through).map_err(|error| error.to_string())
}

/// Removes the log segments numbered up to `through` (redb holds their records).
pub(crate) fn delete_segments_through(store: &Path, through: u64) -> Result<(), wal::WalError> {
    let mut removed = false;
    for (number, path) in wal::list_segments(store)? {
        if number <= through {
            std::fs::remove_file(&path).map_err(|source| wal::WalError::Io { path, source })?;
            removed = true;
        }
    }
    if removed {
        wal::sync_directory(store)?;
    }
    Ok(())
}

/// The number of the last segment redb holds (0: none yet).
pub(crate) fn checkpointed_through(database: &Database) -> Result<u64, redb::Error> {
    use redb::ReadableDatabase;
    let read = database.begin_read()?;
    let table = read.open_table(WAL_STATE)?;
    Ok(table
        .get(CHECKPOINTED_THROUGH)?
        .map_or(0, |value| value.value()))
}
