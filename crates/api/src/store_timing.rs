//! Store latency on the request path (SPEC §14.7): [`TimedStore`] wraps the node's store and
//! times the calls visitors and the ticker wait on (`anteroom_store_operation_seconds` by
//! `operation`). Every other call passes through untimed.
//!
//! The histogram handles are resolved once, when the metrics recorder is installed
//! ([`resolve_timers`]); a call made before that (installing the configured rooms at start)
//! is not timed, and no call ever looks a series up by name.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anteroom_core::adaptive::LoadSignal;
use anteroom_core::engine::{
    Entry, JoinRequest, RoomSnapshot, Session, SessionEnd, TickReport, TicketRef,
};
use anteroom_core::room::RoomConfig;
use anteroom_core::{RoomId, SessionId};
use anteroom_store::{
    ConfigWrite, EventOutbox, LineMasks, Notices, OutboxLimits, RoomRecords, RoomStore,
    SessionListing, SessionQuery, StoreError,
};
use async_trait::async_trait;
use metrics::{Histogram, histogram};

/// The timed operations: the `operation` label of each.
#[derive(Debug, Clone, Copy)]
enum Timed {
    Room,
    Join,
    Status,
    Leave,
    EndSession,
    RenewSession,
    Session,
    Tick,
    Touch,
}

impl Timed {
    const ALL: [Timed; 9] = [
        Timed::Room,
        Timed::Join,
        Timed::Status,
        Timed::Leave,
        Timed::EndSession,
        Timed::RenewSession,
        Timed::Session,
        Timed::Tick,
        Timed::Touch,
    ];

    fn label(self) -> &'static str {
        match self {
            Timed::Room => "room",
            Timed::Join => "join",
            Timed::Status => "status",
            Timed::Leave => "leave",
            Timed::EndSession => "end_session",
            Timed::RenewSession => "renew_session",
            Timed::Session => "session",
            Timed::Tick => "tick",
            Timed::Touch => "touch",
        }
    }
}

/// One histogram handle per [`Timed`] operation, in [`Timed::ALL`]'s order.
static TIMERS: OnceLock<[Histogram; 9]> = OnceLock::new();

/// Resolves the histogram handles; called once the recorder is installed.
pub fn resolve_timers() {
    TIMERS.get_or_init(|| {
        Timed::ALL.map(|operation| {
            histogram!("anteroom_store_operation_seconds", "operation" => operation.label())
        })
    });
}

/// Runs `call`, timing it as `operation` once the handles are resolved.
async fn timed<T>(operation: Timed, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let answer = call.await;
    if let Some(timers) = TIMERS.get() {
        timers[operation as usize].record(started.elapsed().as_secs_f64());
    }
    answer
}

/// A store whose request-path calls are timed.
pub struct TimedStore {
    inner: Arc<dyn RoomStore>,
}

impl TimedStore {
    /// `inner` with its request-path calls timed.
    pub fn wrap(inner: Arc<dyn RoomStore>) -> Arc<dyn RoomStore> {
        Arc::new(TimedStore { inner })
    }
}

#[async_trait]
impl RoomStore for TimedStore {
    async fn put_room(&self, config: RoomConfig) -> Result<RoomSnapshot, StoreError> {
        self.inner.put_room(config).await
    }

    async fn replace_room_if(
        &self,
        expected: &RoomConfig,
        config: RoomConfig,
    ) -> Result<ConfigWrite, StoreError> {
        self.inner.replace_room_if(expected, config).await
    }

    async fn delete_room(&self, room: &RoomId) -> Result<bool, StoreError> {
        self.inner.delete_room(room).await
    }

    async fn rooms(&self) -> Result<Vec<RoomConfig>, StoreError> {
        self.inner.rooms().await
    }

    async fn room(&self, room: &RoomId) -> Result<RoomConfig, StoreError> {
        timed(Timed::Room, self.inner.room(room)).await
    }

    async fn join(&self, room: &RoomId, request: JoinRequest) -> Result<Entry, StoreError> {
        timed(Timed::Join, self.inner.join(room, request)).await
    }

    async fn status(&self, room: &RoomId, ticket: TicketRef) -> Result<Entry, StoreError> {
        timed(Timed::Status, self.inner.status(room, ticket)).await
    }

    async fn leave(&self, room: &RoomId, ticket: TicketRef) -> Result<(), StoreError> {
        timed(Timed::Leave, self.inner.leave(room, ticket)).await
    }

    async fn end_session(
        &self,
        room: &RoomId,
        session: SessionId,
        reason: SessionEnd,
    ) -> Result<Session, StoreError> {
        timed(
            Timed::EndSession,
            self.inner.end_session(room, session, reason),
        )
        .await
    }

    async fn renew_session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<(Session, bool), StoreError> {
        timed(Timed::RenewSession, self.inner.renew_session(room, session)).await
    }

    async fn session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<Option<Session>, StoreError> {
        timed(Timed::Session, self.inner.session(room, session)).await
    }

    async fn issue_session(
        &self,
        room: &RoomId,
        uid: Option<String>,
        ttl: Duration,
    ) -> Result<Session, StoreError> {
        self.inner.issue_session(room, uid, ttl).await
    }

    async fn tick(&self, room: &RoomId) -> Result<TickReport, StoreError> {
        timed(Timed::Tick, self.inner.tick(room)).await
    }

    async fn snapshot(&self, room: &RoomId) -> Result<RoomSnapshot, StoreError> {
        self.inner.snapshot(room).await
    }

    async fn advance(&self, room: &RoomId, count: u64) -> Result<(u64, RoomSnapshot), StoreError> {
        self.inner.advance(room, count).await
    }

    async fn reset(&self, room: &RoomId, purge: bool) -> Result<RoomSnapshot, StoreError> {
        self.inner.reset(room, purge).await
    }

    async fn records(&self, room: &RoomId) -> Result<RoomRecords, StoreError> {
        self.inner.records(room).await
    }

    async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.inner.hold_lease(name, holder, ttl).await
    }

    async fn put_load_signal(&self, room: &RoomId, signal: LoadSignal) -> Result<(), StoreError> {
        self.inner.put_load_signal(room, signal).await
    }

    async fn load_signal(&self, room: &RoomId) -> Result<Option<LoadSignal>, StoreError> {
        self.inner.load_signal(room).await
    }

    async fn session_page(
        &self,
        room: &RoomId,
        query: &SessionQuery,
    ) -> Result<SessionListing, StoreError> {
        self.inner.session_page(room, query).await
    }

    fn event_outbox(&self, limits: OutboxLimits) -> Result<Arc<dyn EventOutbox>, StoreError> {
        self.inner.event_outbox(limits)
    }

    fn notices(&self) -> Option<Notices> {
        self.inner.notices()
    }

    fn config_version(&self) -> Option<u64> {
        self.inner.config_version()
    }

    async fn line_masks(&self, room: &RoomId) -> Result<LineMasks, StoreError> {
        self.inner.line_masks(room).await
    }

    async fn touch(&self, room: &RoomId, tickets: &[TicketRef]) -> Result<u64, StoreError> {
        timed(Timed::Touch, self.inner.touch(room, tickets)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_own_handle() {
        for (index, operation) in Timed::ALL.iter().enumerate() {
            assert_eq!(*operation as usize, index, "{operation:?}");
        }
    }
}
