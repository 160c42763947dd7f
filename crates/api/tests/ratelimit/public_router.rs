//! The configured rules in front of the public API: a per-IP join limit refuses before the
//! join reaches the store, and leaves the other endpoints alone.

use std::sync::Arc;

use http::{Method, StatusCode};

use anteroom_api::ratelimit::RateLimitOptions;
use anteroom_api::{AppState, NodeOptions, PublicSettings, public_router};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_store::{MemoryStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm};

use crate::join_rule;
use crate::support::{TestStore, get_from, limiter, request, send};

#[tokio::test]
async fn configured_rules_guard_the_public_api() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
    let rooms: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(clock.clone()));
    let launch = RoomId::new("launch").unwrap();
    rooms
        .put_room(RoomConfig::with_defaults(launch.clone()))
        .await
        .unwrap();
    let key_dir = tempfile::tempdir().unwrap();
    let keys =
        KeySet::load_or_generate(key_dir.path(), SigningAlgorithm::EdDsa, 1_700_000_000).unwrap();
    let settings = PublicSettings {
        public_url: "https://shop.example".to_owned(),
        issuer: "https://shop.example".to_owned(),
        service_keys: Vec::new(),
        trusted_proxies: Vec::new(),
    };
    let limits = Arc::new(TestStore::default());
    let options = NodeOptions {
        rate_limiter: Some(limiter(
            vec![join_rule(2)],
            &limits,
            RateLimitOptions::default(),
        )),
        ..NodeOptions::default()
    };
    let state = AppState::with_options(rooms.clone(), keys, clock, settings, options);
    let app = public_router(state);
    let join = || {
        request(
            Method::POST,
            "/_anteroom/v1/rooms/launch/join",
            "203.0.113.7:1",
        )
    };

    for remaining in ["1", "0"] {
        let joined = send(&app, join()).await;
        assert_eq!(joined.status, StatusCode::OK, "{}", joined.body);
        assert_eq!(joined.json()["room"], "launch");
        assert_eq!(joined.header("x-ratelimit-remaining"), Some(remaining));
    }
    let refused = send(&app, join()).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.json()["code"], "rate_limited");
    assert_eq!(refused.header("retry-after"), Some("60"));
    assert_eq!(
        refused.header("ratelimit"),
        Some("\"join-per-ip\";r=0;t=60")
    );
    // The refused join never reached the store: two tickets, not three.
    assert_eq!(rooms.snapshot(&launch).await.unwrap().last_position, 2);

    // Other endpoints are not limited by the join rule and carry no rate-limit headers.
    for path in ["/_anteroom/v1/rooms/launch", "/.well-known/jwks.json"] {
        let answer = send(&app, get_from(path, "203.0.113.7:1")).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        assert_eq!(answer.header("ratelimit"), None, "{path}");
    }
    // Unknown paths keep their problem+json 404.
    let missing = send(&app, get_from("/_anteroom/nothing", "203.0.113.7:1")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}
