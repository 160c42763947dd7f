//! The admission ticker runs at `[server] tick_interval` (SPEC §5.1): with time paused, a slot
//! freed by an expired session is refilled at the first tick after it, and not before.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use anteroom_api::{AppState, NodeOptions, PublicSettings, run_ticker};
use anteroom_core::config::TickerIntervals;
use anteroom_core::engine::{Entry, JoinRequest};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_store::{MemoryStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm};

const START: Timestamp = Timestamp(1_700_000_000_000);

/// A room of one slot, taken, with one visitor waiting; the node's ticker set to `tick`.
async fn full_room_ticked_every(
    tick: Duration,
) -> (AppState, Arc<ManualClock>, RoomId, tempfile::TempDir) {
    let clock = Arc::new(ManualClock::new(START));
    let shared_clock: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(shared_clock.clone()));
    let room = RoomId::new("shop").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 1;
    // Shorter than the waiting ticket's idle limit, so the visitor is still there to admit.
    config.session_ttl = Duration::from_secs(60);
    assert!(config.session_ttl < config.ticket_idle_ttl);
    store.put_room(config).await.unwrap();
    let first = store.join(&room, JoinRequest::default()).await.unwrap();
    assert!(
        matches!(first, Entry::Admitted(_)),
        "the first takes the slot"
    );
    let second = store.join(&room, JoinRequest::default()).await.unwrap();
    assert!(matches!(second, Entry::Waiting(_)), "the second waits");
    let keys_dir = tempfile::tempdir().unwrap();
    let keys = KeySet::load_or_generate(keys_dir.path(), SigningAlgorithm::EdDsa, START.as_secs())
        .unwrap();
    let settings = PublicSettings {
        public_url: "http://127.0.0.1".to_owned(),
        issuer: "http://127.0.0.1".to_owned(),
        service_keys: Vec::new(),
        trusted_proxies: Vec::new(),
    };
    let options = NodeOptions {
        ticker: TickerIntervals {
            tick,
            ..TickerIntervals::default()
        },
        ..NodeOptions::default()
    };
    let state = AppState::with_options(store, keys, shared_clock, settings, options);
    (state, clock, room, keys_dir)
}

async fn serving(state: &AppState, room: &RoomId) -> u64 {
    state.store().snapshot(room).await.unwrap().serving
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_waits_for_the_configured_tick() {
    let tick = Duration::from_secs(1);
    let (state, clock, room, _keys) = full_room_ticked_every(tick).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let ticker = tokio::spawn(run_ticker(state.clone(), async move {
        let _ = stopped.await;
    }));
    // The first tick runs at once; the slot is still taken then.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = serving(&state, &room).await;

    // The session expires; the default interval (500 ms) would have ticked by 900 ms.
    let session_ttl = state.store().room(&room).await.unwrap().session_ttl;
    clock.advance(session_ttl + Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(890)).await;
    assert_eq!(
        serving(&state, &room).await,
        before,
        "no tick before tick_interval"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        serving(&state, &room).await,
        before + 1,
        "the tick at tick_interval lets the next visitor in"
    );
    stop.send(()).unwrap();
    ticker.await.unwrap();
}
