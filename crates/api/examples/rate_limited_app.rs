//! An axum app behind anteroom's `RateLimitLayer`, with the limits kept in process memory.
//!
//! ```sh
//! cargo run -p anteroom-api --example rate_limited_app           # listens on 127.0.0.1:3000
//! # Two orders a minute per key: the third is refused with 429 and the rate-limit headers.
//! for i in 1 2 3; do curl -si -X POST -H 'X-Api-Key: k1' localhost:3000/api/orders; done
//! # Five requests per 10 s per client on /api/**: the sixth is refused.
//! for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' localhost:3000/api/hello; done
//! # From the trusted proxy (this machine), X-Forwarded-For names the client.
//! curl -s -H 'X-Forwarded-For: 198.51.100.7' localhost:3000/api/hello
//! ```
//!
//! Three rules show the main shapes:
//! - `api-per-ip`: 5 requests per 10 s per client address on `/api/**` (token bucket);
//! - `orders-per-key`: 2 orders per minute per `X-Api-Key` (fixed window); requests without
//!   the header are not counted by it, only by `api-per-ip`;
//! - `everything-shadow`: a dry run of a tighter global limit: it never refuses, its
//!   would-be refusals are logged and counted (printed here on each order).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Extension, State};
use axum::routing::{get, post};

use anteroom_api::ratelimit::{ClientIp, RateLimitOptions, RateLimiter};
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::{
    Action, KeyPart, RateLimitRule, RequestMatcher, default_params,
};
use anteroom_core::{Clock, Timestamp};
use anteroom_store::limit::{LimitStore, LocalLimitConfig, LocalLimitStore};

/// Wall-clock time, for the limit store.
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

fn rules() -> Result<Vec<RateLimitRule>, Box<dyn std::error::Error>> {
    let mut api = RateLimitRule::new(
        "api-per-ip",
        default_params(Algorithm::TokenBucket, 5, Duration::from_secs(10)),
    );
    api.matcher = Some(RequestMatcher::default().with_paths(["/api/**"])?);

    let mut orders = RateLimitRule::new(
        "orders-per-key",
        default_params(Algorithm::FixedWindow, 2, Duration::from_secs(60)),
    );
    orders.matcher = Some(
        RequestMatcher::default()
            .with_paths(["/api/orders"])?
            .with_methods(["POST"])?,
    );
    orders.key = vec![KeyPart::Header("x-api-key".to_owned())];

    let mut shadow = RateLimitRule::new(
        "everything-shadow",
        default_params(Algorithm::SlidingWindow, 3, Duration::from_secs(10)),
    );
    shadow.action = Action::Shadow;
    Ok(vec![api, orders, shadow])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(LocalLimitStore::new(
        Arc::new(SystemClock),
        LocalLimitConfig::default(),
    ));
    // Keys whose state no longer matters are dropped every minute.
    store.spawn_sweeper(Duration::from_secs(60));
    let shared: Arc<dyn LimitStore> = store;
    let options = RateLimitOptions {
        // Believe X-Forwarded-For only from a proxy on this machine.
        trusted_proxies: vec!["127.0.0.1/32".parse()?],
        ..RateLimitOptions::default()
    };
    let limiter = RateLimiter::with_options(rules()?, shared, options)?;

    let app =
        Router::new()
            .route(
                "/api/hello",
                get(|Extension(ClientIp(ip)): Extension<ClientIp>| async move {
                    format!("hello, {ip}\n")
                }),
            )
            .route("/api/orders", post(order))
            .route(
                "/",
                get(|| async { "not rate limited, except by the shadow rule\n" }),
            )
            .layer(limiter.layer())
            .with_state(limiter);

    let address: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned())
        .parse()?;
    let listener = tokio::net::TcpListener::bind(address).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    // The layer reads the peer address from ConnectInfo.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// Takes an order, and reports what the shadow rule would have done so far.
async fn order(State(limiter): State<RateLimiter>) -> String {
    let shadow = limiter
        .metrics()
        .rule("everything-shadow")
        .unwrap_or_default();
    format!(
        "order taken (the shadow rule would have refused {} request(s) so far)\n",
        shadow.shadow_rejected
    )
}
