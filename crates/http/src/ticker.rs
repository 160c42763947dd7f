//! The admission ticker (SPEC §5.1): ticks every room at least once a second.
//!
//! Ending a session or leaving with an admitted ticket ticks the room inside the same store
//! operation, so a freed slot is refilled at once; this loop covers everything time does
//! (expiries, no-shows, the admission bucket refilling).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anteroom_store::RoomStore;

/// How often every room is ticked: twice a second, so no room waits longer than a second
/// even when one pass runs late.
pub const TICK_INTERVAL: Duration = Duration::from_millis(500);

/// Ticks every room every [`TICK_INTERVAL`] until `shutdown` resolves.
pub async fn run_ticker(store: Arc<dyn RoomStore>, shutdown: impl Future<Output = ()>) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = interval.tick() => tick_every_room(&*store).await,
            () = &mut shutdown => return,
        }
    }
}

async fn tick_every_room(store: &dyn RoomStore) {
    let rooms = match store.rooms().await {
        Ok(rooms) => rooms,
        Err(error) => {
            tracing::warn!(%error, "cannot list rooms to tick");
            return;
        }
    };
    for room in rooms {
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
}
