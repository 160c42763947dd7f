//! An axum shop behind anteroom's `WaitingRoomLayer`: `/shop/**` lets in two visitors at a
//! time, everybody else waits on the waiting page this app serves too.
//!
//! ```sh
//! cargo run -p anteroom-edge --example waiting_room_app           # listens on 127.0.0.1:3000
//! # The first two visitors get a pass cookie and the page; the third is sent to the waiting
//! # page (a browser), or told 429 `waiting_room` (an API client):
//! for i in 1 2 3; do curl -si -H 'Accept: text/html' localhost:3000/shop/cart | head -1; done
//! curl -s -H 'Accept: application/json' localhost:3000/shop/cart
//! # With the pass cookie of the first answer, the shop answers; POST /shop/checkout ends the
//! # session (the handler answers `Anteroom-Release: 1`) and the next visitor in line is let in.
//! # Several instances share one queue with a Redis store and one key directory:
//! ANTEROOM_EXAMPLE_REDIS=redis://127.0.0.1:6379 cargo run -p anteroom-edge --example waiting_room_app
//! ```
//!
//! In a browser, open <http://127.0.0.1:3000/shop/cart> in three private windows: the third
//! waits on the page and goes to the cart when one of the first two checks out (or its
//! two-minute session runs out).
//!
//! The rooms live in an embedded store (a redb file) in the system's temporary directory,
//! beside the signing keys; `ANTEROOM_EXAMPLE_REDIS` puts them in Redis instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::{get, post};

use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, RoomId, Timestamp};
use anteroom_edge::WaitingRoom;
use anteroom_store::{RedbStore, RedisConfig, RedisStore, RoomStore};

/// Wall-clock time, for the store and the passes.
struct SystemClock;

impl Clock for SystemClock {
    // An example runs against real time.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned())
        .parse()?;
    let data = std::env::temp_dir().join("anteroom-waiting-room-example");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store: Arc<dyn RoomStore> = match std::env::var("ANTEROOM_EXAMPLE_REDIS") {
        Ok(url) => Arc::new(RedisStore::new(RedisConfig::standalone(url), None)?),
        Err(_) => {
            std::fs::create_dir_all(&data)?;
            Arc::new(RedbStore::open(&data.join("rooms.redb"), clock.clone())?)
        }
    };

    let launch = RoomId::new("launch")?;
    let waiting_room = WaitingRoom::builder(store, clock)
        .key_dir(data.join("keys"))
        .public_url(format!("http://{address}"))
        .room(RoomConfig {
            max_active: 2,
            session_ttl: Duration::from_secs(120),
            ..RoomConfig::with_defaults(launch.clone())
        })
        .protect(["/shop/**"], &launch)
        .build()
        .await?;

    let shop = Router::new()
        .route("/", get(|| async { "the shop is at /shop/cart\n" }))
        .route("/shop/cart", get(|| async { "your cart: 1 ticket\n" }))
        .route("/shop/checkout", post(checkout));
    // The waiting page's routes, and the shop behind the layer.
    let app = waiting_room.around(shop);

    // The admitter lets the next visitors in as sessions end.
    let background = waiting_room.clone();
    tokio::spawn(async move { background.run(std::future::pending()).await });

    let listener = tokio::net::TcpListener::bind(address).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    // Rooms and rate limits read the peer address from ConnectInfo.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// Takes the order and frees the visitor's place for the next one in line.
async fn checkout() -> ([(&'static str, &'static str); 1], &'static str) {
    (
        [("anteroom-release", "1")],
        "order taken; your session is over\n",
    )
}
