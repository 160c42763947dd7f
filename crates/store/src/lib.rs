//! Storage for anteroom's rooms, tickets and sessions, behind one trait with several backends
//! (SPEC §9).
//!
//! [`RoomStore`] names each operation for what it means (`join`, `status`, `tick`, …); every
//! operation is atomic per room. Backends:
//! - [`MemoryStore`]: the reference, in process memory, for tests and throwaway demos.
//! - [`RedbStore`]: the default embedded store, a redb file behind a write-ahead log with group
//!   commit: an operation is acknowledged only once durable, and concurrent operations share
//!   one log append and sync.
//! - [`RedisStore`]: shared by any number of nodes, each operation one Lua script that
//!   re-states the engine over the room's keys.
//!
//! The first two run the room engine of `anteroom-core` over an in-memory copy of each room
//! (`engine_host.rs`); the embedded store writes exactly the records each operation changed
//! before answering. One conformance suite (`tests/conformance`) runs unchanged against every
//! backend, and `tests/redis_parity.rs` holds the Redis scripts to the engine's answers,
//! snapshots and records over random operation sequences.
//!
//! `replace_room_if` is the compare-and-swap of a room's configuration (the admin API's
//! read-modify-write and the adaptive loop write only through it). A room's last pushed load
//! signal (SPEC §5.4) is kept in the room's slot in memory by the local stores, unlogged (a
//! signal counts for 30 s), and in the room's meta hash on Redis, gone with the room.
//!
//! Rate-limit counters ([`limit`]) and one-time marks ([`marks`]) have their own modules.
//!
//! This crate must not depend on HTTP or token crates: it stores, it does not speak.

mod codes;
mod engine_host;
mod error;
pub mod limit;
mod line_masks;
pub mod marks;
mod memory;
mod notices;
mod outbox;
mod persisted;
mod redb_store;
mod redis_store;
mod visitor_events;

use anteroom_core::adaptive::LoadSignal;
use anteroom_core::engine::{
    Entry, JoinRequest, RoomSnapshot, Session, SessionEnd, SessionState, TickReport, Ticket,
    TicketRef,
};
use anteroom_core::room::RoomConfig;
use anteroom_core::{RoomId, SessionId};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

pub use codes::{CodeRedemptions, CodeUse, MemoryCodeRedemptions, Redemption};
pub use error::StoreError;
pub use line_masks::LineMasks;
pub use memory::MemoryStore;
pub use notices::{Change, Notice, NoticeFigures, Notices, RoomNotice};
pub use outbox::{EventOutbox, MemoryOutbox, OutboxEntry, OutboxLimits};
pub use redb_store::{DEFAULT_COMPACT_MIN_BYTES, RedbOptions, RedbStore};
pub use redis_store::{KeyEntries, RedisConfig, RedisKeyEntries, RedisOutbox, RedisStore};

/// Everything a room holds, for audits, tests and admin listings.
#[derive(Debug, Clone)]
pub struct RoomRecords {
    /// Tickets the room remembers.
    pub tickets: Vec<Ticket>,
    /// Sessions the room remembers.
    pub sessions: Vec<Session>,
}

/// Which sessions a listing wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFilter {
    /// Every session the room remembers.
    Any,
    /// Sessions holding a slot.
    Active,
    /// Sessions that ended for this reason.
    Ended(SessionEnd),
}

impl SessionFilter {
    /// Whether a session in `state` is wanted.
    pub fn matches(self, state: SessionState) -> bool {
        match (self, state) {
            (SessionFilter::Any, _) | (SessionFilter::Active, SessionState::Active) => true,
            (SessionFilter::Ended(wanted), SessionState::Ended { reason, .. }) => wanted == reason,
            _ => false,
        }
    }
}

/// One page of a room's sessions, in the order of their ids (as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionQuery {
    /// Only sessions whose id is greater than this (the previous page's `next_after`).
    pub after: Option<String>,
    /// Which sessions.
    pub filter: SessionFilter,
    /// At most this many sessions (at least 1).
    pub limit: usize,
}

/// The answer to a [`SessionQuery`].
#[derive(Debug, Clone)]
pub struct SessionListing {
    /// At most `limit` sessions, ordered by id.
    pub sessions: Vec<Session>,
    /// Where the next page starts; `None` once every session has been listed. A page may hold
    /// fewer than `limit` sessions and still have a next one: a backend examines a bounded
    /// number of sessions per page ([`MAX_SESSIONS_EXAMINED`]) so that a rare filter cannot
    /// make one call walk the whole room.
    pub next_after: Option<String>,
}

/// What a conditional configuration write ([`RoomStore::replace_room_if`]) did.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigWrite {
    /// The room still had the expected configuration; the new one is in force.
    Written(RoomSnapshot),
    /// The room's configuration was no longer the expected one; nothing changed. Holds the
    /// configuration in force.
    Changed(RoomConfig),
}

/// The most sessions one [`RoomStore::session_page`] call examines on a shared backend.
pub const MAX_SESSIONS_EXAMINED: usize = 5_000;

/// Rooms, tickets and sessions (SPEC §9.1). Every operation is atomic per room.
#[async_trait]
pub trait RoomStore: Send + Sync + 'static {
    /// Creates a room, or replaces its configuration keeping its queue and sessions.
    async fn put_room(&self, config: RoomConfig) -> Result<RoomSnapshot, StoreError>;
    /// Replaces an existing room's configuration only while it is still `expected`
    /// (compare-and-swap on the whole configuration): the comparison and the write are one
    /// atomic step, so of several writers that read the same configuration one wins and the
    /// others get [`ConfigWrite::Changed`]. Queue, sessions and counters are kept.
    async fn replace_room_if(
        &self,
        expected: &RoomConfig,
        config: RoomConfig,
    ) -> Result<ConfigWrite, StoreError>;
    /// Deletes a room and everything in it; `false` if there was none.
    async fn delete_room(&self, room: &RoomId) -> Result<bool, StoreError>;
    /// Every room's configuration, ordered by id.
    async fn rooms(&self) -> Result<Vec<RoomConfig>, StoreError>;
    /// One room's configuration.
    async fn room(&self, room: &RoomId) -> Result<RoomConfig, StoreError>;
    /// Joins (or resumes) the queue.
    async fn join(&self, room: &RoomId, request: JoinRequest) -> Result<Entry, StoreError>;
    /// A ticket's status; keeps it alive and claims its session once admitted.
    async fn status(&self, room: &RoomId, ticket: TicketRef) -> Result<Entry, StoreError>;
    /// Leaves the queue.
    async fn leave(&self, room: &RoomId, ticket: TicketRef) -> Result<(), StoreError>;
    /// Ends a session early, freeing its slot and revoking its pass.
    async fn end_session(
        &self,
        room: &RoomId,
        session: SessionId,
        reason: SessionEnd,
    ) -> Result<Session, StoreError>;
    /// Renews a session when half its idle lifetime has passed; `true` when renewed.
    async fn renew_session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<(Session, bool), StoreError>;
    /// One session, if the room remembers it.
    async fn session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<Option<Session>, StoreError>;
    /// Issues a session by hand (VIP pass) lasting `ttl`.
    async fn issue_session(
        &self,
        room: &RoomId,
        uid: Option<String>,
        ttl: Duration,
    ) -> Result<Session, StoreError>;
    /// Runs the admitter once (SPEC §5.1).
    async fn tick(&self, room: &RoomId) -> Result<TickReport, StoreError>;
    /// A consistent summary of the room.
    async fn snapshot(&self, room: &RoomId) -> Result<RoomSnapshot, StoreError>;
    /// The operator's advance by hand (SPEC §8.1): admits up to `count` more waiting tickets
    /// now, lowest positions first, bounded by the line and by free capacity (I2, I8); returns
    /// how many were admitted and the room after.
    async fn advance(&self, room: &RoomId, count: u64) -> Result<(u64, RoomSnapshot), StoreError>;
    /// Starts a new generation; with `purge`, deletes the old generation's records.
    async fn reset(&self, room: &RoomId, purge: bool) -> Result<RoomSnapshot, StoreError>;
    /// Everything the room holds.
    async fn records(&self, room: &RoomId) -> Result<RoomRecords, StoreError>;
    /// Takes or keeps the lease `name` for `holder` for `ttl`: `true` while `holder` has it.
    /// Nodes sharing a store use it so that one of them does a node-wide duty (reporting
    /// the rooms' totals as events); a backend only this process uses always grants it.
    async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let _ = (name, holder, ttl);
        Ok(true)
    }
    /// Keeps `signal` as the room's latest load signal (SPEC §5.4), replacing the previous
    /// one, so the adaptive controller of every node sharing the store reads it. A deleted
    /// room's signal goes with it.
    async fn put_load_signal(&self, room: &RoomId, signal: LoadSignal) -> Result<(), StoreError>;
    /// The room's latest load signal, if an origin pushed one.
    async fn load_signal(&self, room: &RoomId) -> Result<Option<LoadSignal>, StoreError>;
    /// One page of the room's sessions (admin listings): bounded whatever the room's size.
    async fn session_page(
        &self,
        room: &RoomId,
        query: &SessionQuery,
    ) -> Result<SessionListing, StoreError>;

    /// Switches on per-visitor events (SPEC §14.9) and answers the store's event outbox: from
    /// now on every ticket and session event is written into it in the same durable write as
    /// the change that made it, so an acknowledged change always has its events, even when
    /// the node dies right after. The outbox also takes the node's own events
    /// ([`EventOutbox::append`]). Every call answers the same outbox; the first call's
    /// `limits` hold.
    fn event_outbox(&self, limits: OutboxLimits) -> Result<Arc<dyn EventOutbox>, StoreError>;

    /// Change notices from every node sharing this store, or `None` for a backend only this
    /// process uses (it made every change itself).
    fn notices(&self) -> Option<Notices> {
        None
    }

    /// For a backend only this process uses: a number that changes whenever a room's
    /// configuration is created, replaced or deleted, so a node may keep configurations
    /// between changes. `None` for a shared backend, whose other users announce their
    /// changes through [`notices`](Self::notices) instead.
    fn config_version(&self) -> Option<u64> {
        None
    }

    /// The live waiting positions of the regular line as one bit each: what a node needs to
    /// compute every connected visitor's `ahead` locally from one shared read, at a cost that
    /// grows with the line's length / 128 (not with its tickets) on a shared store.
    async fn line_masks(&self, room: &RoomId) -> Result<LineMasks, StoreError> {
        let records = self.records(room).await?;
        Ok(LineMasks::from_positions(
            records
                .tickets
                .iter()
                .filter(|ticket| {
                    ticket.state == anteroom_core::engine::TicketState::Waiting && !ticket.priority
                })
                .map(|ticket| ticket.position),
        ))
    }

    /// Keeps the given waiting tickets alive in one batched operation (open SSE streams count
    /// as contact); returns how many were still waiting.
    async fn touch(&self, room: &RoomId, tickets: &[TicketRef]) -> Result<u64, StoreError> {
        let mut waiting = 0;
        for ticket in tickets {
            if let Ok(Entry::Waiting(_)) = self.status(room, *ticket).await {
                waiting += 1;
            }
        }
        Ok(waiting)
    }
}
