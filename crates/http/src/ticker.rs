//! The admission ticker (SPEC §5.1): ticks every room at least once a second, then refreshes
//! the room views this node's SSE streams share and keeps their tickets alive (§5.2, §6.2).
//!
//! Ending a session or leaving with an admitted ticket ticks the room inside the same store
//! operation, so a freed slot is refilled at once; this loop covers everything time does
//! (expiries, no-shows, the admission bucket refilling).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use anteroom_core::RoomId;
use anteroom_core::room::RoomConfig;
use anteroom_store::RoomStore;

use crate::SseHub;

/// How often every room is ticked: twice a second, so no room waits longer than a second
/// even when one pass runs late.
pub const TICK_INTERVAL: Duration = Duration::from_millis(500);

/// Ticks every room every [`TICK_INTERVAL`] until `shutdown` resolves; refreshes the views of
/// rooms with SSE listeners, and touches their connected tickets every `ticket_idle_ttl / 3`
/// (10 s at most).
pub async fn run_ticker(
    store: Arc<dyn RoomStore>,
    hub: Arc<SseHub>,
    shutdown: impl Future<Output = ()>,
) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_touch: HashMap<RoomId, tokio::time::Instant> = HashMap::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let rooms = tick_every_room(&*store).await;
                for room in hub.watched_rooms() {
                    hub.refresh(&*store, &room).await;
                }
                for room in hub.rooms_with_connections() {
                    let every = rooms
                        .iter()
                        .find(|config| config.id == room)
                        .map_or(MAX_TOUCH_INTERVAL, |config| (config.ticket_idle_ttl / 3).min(MAX_TOUCH_INTERVAL));
                    let due = last_touch.get(&room).is_none_or(|at| at.elapsed() >= every);
                    if due {
                        hub.touch_connected(&*store, &room).await;
                        last_touch.insert(room, tokio::time::Instant::now());
                    }
                }
            }
            () = &mut shutdown => return,
        }
    }
}

/// Connected tickets are touched at least this often.
const MAX_TOUCH_INTERVAL: Duration = Duration::from_secs(10);

async fn tick_every_room(store: &dyn RoomStore) -> Vec<RoomConfig> {
    let rooms = match store.rooms().await {
        Ok(rooms) => rooms,
        Err(error) => {
            tracing::warn!(%error, "cannot list rooms to tick");
            return Vec::new();
        }
    };
    for room in &rooms {
        match store.tick(&room.id).await {
            Ok(report)
                if report.admitted + report.expired + report.no_shows + report.abandoned > 0 =>
            {
                tracing::debug!(
                    room = %room.id,
                    admitted = report.admitted,
                    expired = report.expired,
                    no_shows = report.no_shows,
                    abandoned = report.abandoned,
                    "tick"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(room = %room.id, %error, "tick failed"),
        }
    }
    rooms
}
