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
//!   ([`Revocations`](crate::revocations::Revocations)).
//!
//! A lost notice (the subscription broke, or this node fell behind) makes the node re-read
//! every room it keeps. The ticker still refreshes every view twice a second, so a node whose
//! subscription is down is late, never wrong.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;

use anteroom_core::RoomId;
use anteroom_store::Notice;

use crate::AppState;

/// Notices of one room arriving within this window share one view refresh: at most five
/// refreshes a second per room and node from notices (two store calls each), whatever the
/// join rate, well inside the 2 s in which a stream must show a change.
pub(crate) const COALESCE: Duration = Duration::from_millis(200);

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
