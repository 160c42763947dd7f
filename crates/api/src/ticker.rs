//! The admission ticker (SPEC §5.1): ticks every room at least once a second (`[server]
//! tick_interval`), then refreshes the room views this node's SSE streams share (and its
//! polls are answered from) and keeps their tickets alive (§5.2, §6.2).
//!
//! Ending a session or leaving with an admitted ticket ticks the room inside the same store
//! operation, so a freed slot is refilled at once; this loop covers everything time does
//! (expiries, no-shows, the admission bucket refilling).
//!
//! The listing of every room it reads first also refreshes this node's copies of the room
//! configurations, and is published ([`AppState::room_listings`]) for the gateway's route
//! table (the rooms' `routes`). Failed calls are counted and logged at a bounded rate
//! (store_failure.rs); the loop itself never stops, so a store that comes back is used again
//! at the next pass.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use anteroom_core::RoomId;
use anteroom_core::room::RoomConfig;
use metrics::gauge;
use tokio::task::JoinHandle;

use crate::AppState;

/// Ticks every room every `[server] tick_interval` until `shutdown` resolves; refreshes the
/// views of rooms with SSE listeners or polled lately, touches their connected tickets every
/// `ticket_idle_ttl / 3`, `[server] sse_touch_interval` at most, and the tickets whose polls
/// the view answered every `ticket_idle_ttl / 3`.
pub async fn run_ticker(app: AppState, shutdown: impl Future<Output = ()>) {
    let store = app.store().clone();
    let hub = app.hub().clone();
    let intervals = app.ticker_intervals();
    let mut interval = tokio::time::interval(intervals.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_touch: HashMap<RoomId, tokio::time::Instant> = HashMap::new();
    let mut polled_touches: HashMap<RoomId, (tokio::time::Instant, JoinHandle<()>)> =
        HashMap::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            scheduled = interval.tick() => {
                // A listing that failed is not published: it says nothing about the rooms.
                let rooms = match tick_every_room(&app).await {
                    Some(rooms) => {
                        let rooms = Arc::new(rooms);
                        app.publish_room_listing(rooms.clone());
                        rooms
                    }
                    None => Arc::default(),
                };
                for room in hub.watched_rooms() {
                    hub.refresh(&*store, &room).await;
                }
                for room in hub.rooms_with_connections() {
                    let every = rooms
                        .iter()
                        .find(|config| config.id == room)
                        .map_or(intervals.touch, |config| (config.ticket_idle_ttl / 3).min(intervals.touch));
                    let due = last_touch.get(&room).is_none_or(|at| at.elapsed() >= every);
                    if due {
                        hub.touch_connected(&*store, &room).await;
                        last_touch.insert(room, tokio::time::Instant::now());
                    }
                }
                // A poll the view answered is contact at most `ticket_idle_ttl / 3` before
                // its touch: polls come every 15 s at most, so the line's polled tickets are
                // written in batches a few times per idle limit, not once per poll. A line of
                // 100,000 is many batches: they run beside this loop (one run per room at a
                // time), so the ticks that admit never wait for them.
                for room in hub.rooms_with_polled_tickets() {
                    let every = rooms
                        .iter()
                        .find(|config| config.id == room)
                        .map_or(intervals.touch, |config| config.ticket_idle_ttl / 3);
                    let due = polled_touches
                        .get(&room)
                        .is_none_or(|(at, run)| run.is_finished() && at.elapsed() >= every);
                    if due {
                        let (hub, store, touched) = (hub.clone(), store.clone(), room.clone());
                        let run = tokio::spawn(async move {
                            hub.touch_polled(&*store, &touched).await;
                        });
                        polled_touches.insert(room, (tokio::time::Instant::now(), run));
                    }
                }
                // A round that ends long after its start means admissions run late.
                gauge!("anteroom_ticker_lag_seconds").set(scheduled.elapsed().as_secs_f64());
            }
            () = &mut shutdown => return,
        }
    }
}

/// Ticks every room; the listing of the rooms, or `None` when the store could not list them.
async fn tick_every_room(app: &AppState) -> Option<Vec<RoomConfig>> {
    let store = app.store();
    let failures = app.store_failures();
    let epoch = app.room_cache().epoch();
    let version = store.config_version();
    let rooms = match store.rooms().await {
        Ok(rooms) => rooms,
        Err(error) => {
            failures.record(None, "rooms", &error);
            return None;
        }
    };
    failures.succeeded(None);
    failures.forget_unlisted(&rooms);
    app.room_cache().replace_all(&rooms, epoch, version);
    for room in &rooms {
        let ticked = store.tick(&room.id).await;
        if ticked.is_ok() {
            failures.succeeded(Some(&room.id));
        }
        match ticked {
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
            Err(error @ anteroom_store::StoreError::Backend { .. }) => {
                failures.record(Some(&room.id), "tick", &error);
            }
            Err(error) => tracing::warn!(room = %room.id, %error, "tick failed"),
        }
    }
    Some(rooms)
}
