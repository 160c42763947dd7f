//! Following the store's change notices (SPEC §6.2, §8.2): when several nodes share a store,
//! another node's admission, revocation or room change reaches this node within
//! milliseconds instead of at its next tick.
//!
//! On a notice the node
//! - refreshes the room's shared SSE view if any connection here watches it (notices of one
//!   room within [`COALESCE`] share one refresh: under a join storm every join announces
//!   itself, and one refresh covers them all);
//! - drops its copy of the room's configuration when the configuration may have changed;
//! - remembers a session the change ended, so this node refuses its pass at once
//!   ([`Revocations`]).
//!
//! A lost notice (the subscription broke, or this node fell behind) makes the node re-read
//! every room it keeps. The ticker still refreshes every view twice a second, so a node whose
//! subscription is down is late, never wrong.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;

use anteroom_core::{RoomId, SessionId};
use anteroom_store::Notice;

use crate::AppState;

/// Notices of one room arriving within this window share one view refresh.
pub const COALESCE: Duration = Duration::from_millis(50);

/// How long an ended session is remembered here; a pass lives at most its `session_ttl`
/// without renewal, and passes older than this are checked against the store anyway.
const REMEMBER_ENDED: Duration = Duration::from_secs(2 * 3600);

/// Sessions this node learned were ended (completed, abandoned or revoked) by any node.
#[derive(Default)]
pub struct Revocations {
    ended: Mutex<HashMap<SessionId, Instant>>,
}

impl Revocations {
    /// Whether `session` was ended recently (its pass must be refused).
    pub fn contains(&self, session: &SessionId) -> bool {
        self.ended.lock().contains_key(session)
    }

    /// Remembers an ended session.
    pub fn record(&self, session: SessionId) {
        let now = Instant::now();
        let mut ended = self.ended.lock();
        ended.insert(session, now);
        // Forgetting is amortised over insertions: at most one sweep per doubling.
        if ended.len().is_power_of_two() && ended.len() >= 1024 {
            ended.retain(|_, at| now.duration_since(*at) < REMEMBER_ENDED);
        }
    }

    /// Sessions remembered now.
    pub fn len(&self) -> usize {
        self.ended.lock().len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.ended.lock().is_empty()
    }
}

/// Applies the store's notices to this node until `shutdown` resolves; returns at once when
/// the store has no notices (only this process uses it).
pub async fn follow_notices(app: AppState, shutdown: impl Future<Output = ()>) {
    let Some(notices) = app.store().notices() else {
        return;
    };
    let mut receiver = notices.subscribe();
    let mut dirty: HashSet<RoomId> = HashSet::new();
    let mut flush_at: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let flush = async {
            match flush_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            notice = receiver.recv() => {
                match notice {
                    Ok(Notice::Changed(notice)) => {
                        if notice.change.touches_config() {
                            app.room_cache().invalidate(&notice.room);
                        }
                        if let Some(session) = notice.ended_session {
                            app.revocations().record(session);
                        }
                        dirty.insert(notice.room);
                    }
                    Ok(Notice::Resync) | Err(RecvError::Lagged(_)) => {
                        app.room_cache().invalidate_all();
                        dirty.extend(app.hub().watched_rooms());
                    }
                    Err(RecvError::Closed) => return,
                }
                if flush_at.is_none() {
                    flush_at = Some(tokio::time::Instant::now() + COALESCE);
                }
            }
            () = flush => {
                flush_at = None;
                for room in std::mem::take(&mut dirty) {
                    if app.hub().watches(&room) {
                        app.hub().refresh(&**app.store(), &room).await;
                    }
                }
            }
            () = &mut shutdown => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_sessions_are_remembered() {
        let revocations = Revocations::default();
        let session = SessionId::from_bytes([3; 16]);
        assert!(!revocations.contains(&session));
        revocations.record(session);
        assert!(revocations.contains(&session));
        assert_eq!(revocations.len(), 1);
        for byte in 0..=255u8 {
            for other in 0..8u8 {
                let mut id = [byte; 16];
                id[0] = other;
                revocations.record(SessionId::from_bytes(id));
            }
        }
        assert!(
            revocations.contains(&session),
            "recent entries survive sweeps"
        );
    }
}
