//! One request matched by local rules and redis rules, on a real `redis-server` and a real
//! 3-master Redis Cluster: refused by either store, it consumes nothing from the other; a
//! redis failure follows each rule's `on_store_error` without leaving local counters consumed
//! by a request that was refused.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;

use anteroom_api::ratelimit::RateLimitOptions;
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::{LimitBackend, OnStoreError, RateLimitRule};
use anteroom_store::limit::{LimitStore, RedisLimitConfig, RedisLimitStore};
use anteroom_test_support::redis::{shared_cluster, shared_server, unique_prefix};

use crate::support::{TestStore, app, get_from, limiter, rule, send, statuses};

const CLIENT: &str = "203.0.113.7:50000";

/// A redis store under a key prefix of its own on the shared server, or the shared cluster.
fn redis_store(cluster: bool) -> Arc<dyn LimitStore> {
    let config = if cluster {
        RedisLimitConfig::cluster(shared_cluster().urls())
    } else {
        RedisLimitConfig::new(shared_server().url())
    };
    let config = RedisLimitConfig {
        timeout: Duration::from_secs(5),
        key_prefix: unique_prefix(),
        ..config
    };
    Arc::new(RedisLimitStore::connect(config).unwrap())
}

/// `rule` on the redis store, counted as a sliding log: the redis store runs on Redis's clock
/// (real time), where a fixed window would roll at the top of a minute in mid-test.
fn on_redis(mut rule: RateLimitRule) -> RateLimitRule {
    rule.store = LimitBackend::Redis;
    rule.params.algorithm = Algorithm::SlidingLog;
    rule
}

async fn sent(app: &axum::Router, paths: &[&str]) -> Vec<u16> {
    statuses(
        app,
        paths.iter().map(|path| get_from(path, CLIENT)).collect(),
    )
    .await
}

/// Refused by the redis rules, a request hands back what the local rule took; the local rule
/// then has exactly the room one allowed request left.
async fn refused_by_redis_consumes_nothing_locally(cluster: bool) {
    let local = Arc::new(TestStore::default());
    // On a Cluster the two redis rules' keys are in different slots: the redis call is itself
    // reserved then refunded.
    let rules = vec![
        rule("local", 3, 60, &["/api/**", "/local/**"]),
        on_redis(rule("redis-roomy", 5, 60, &["/api/**", "/roomy/**"])),
        on_redis(rule("redis-tight", 1, 60, &["/api/**"])),
    ];
    let options = RateLimitOptions {
        redis_store: Some(redis_store(cluster)),
        ..RateLimitOptions::default()
    };
    let limiter = limiter(rules, &local, options);
    let app = app(&limiter);
    let api = ["/api/a", "/api/b", "/api/c", "/api/d"];
    assert_eq!(sent(&app, &api).await, vec![200, 429, 429, 429]);
    let refused = send(&app, get_from("/api/e", CLIENT)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.json()["code"], "rate_limited");
    assert!(
        refused.json()["detail"]
            .as_str()
            .unwrap()
            .contains("redis-tight")
    );
    // The local rule counted the one request that passed: two left, not none.
    let local_only = ["/local/a", "/local/b", "/local/c"];
    assert_eq!(sent(&app, &local_only).await, vec![200, 200, 429]);
    // The roomy redis rule too: four left.
    let roomy = ["/roomy/a", "/roomy/b", "/roomy/c", "/roomy/d", "/roomy/e"];
    assert_eq!(sent(&app, &roomy).await, vec![200, 200, 200, 200, 429]);
    assert!(local.refunds.load(Ordering::SeqCst) >= 4);
}

/// Refused by the local rule, a request never reaches redis: the redis rule keeps its room.
async fn refused_locally_consumes_nothing_in_redis(cluster: bool) {
    let local = Arc::new(TestStore::default());
    let rules = vec![
        rule("local-tight", 1, 60, &["/api/**"]),
        on_redis(rule("redis", 3, 60, &["/api/**", "/shared/**"])),
    ];
    let options = RateLimitOptions {
        redis_store: Some(redis_store(cluster)),
        ..RateLimitOptions::default()
    };
    let limiter = limiter(rules, &local, options);
    let app = app(&limiter);
    assert_eq!(
        sent(&app, &["/api/a", "/api/b", "/api/c", "/api/d"]).await,
        vec![200, 429, 429, 429]
    );
    assert_eq!(
        sent(&app, &["/shared/a", "/shared/b", "/shared/c"]).await,
        vec![200, 200, 429]
    );
    assert_eq!(limiter.metrics().rule("redis").unwrap().rejected, 1);
}

#[tokio::test]
async fn a_request_refused_by_redis_consumes_nothing_locally() {
    refused_by_redis_consumes_nothing_locally(false).await;
}

#[tokio::test]
async fn a_request_refused_locally_consumes_nothing_in_redis() {
    refused_locally_consumes_nothing_in_redis(false).await;
}

#[tokio::test]
async fn on_a_cluster_a_request_refused_by_redis_consumes_nothing_locally() {
    refused_by_redis_consumes_nothing_locally(true).await;
}

#[tokio::test]
async fn on_a_cluster_a_request_refused_locally_consumes_nothing_in_redis() {
    refused_locally_consumes_nothing_in_redis(true).await;
}

/// Redis down: a `deny` redis rule refuses the request (503) and the local rule gets back what
/// it took; an `allow` redis rule lets it through, and the local rule counts it.
#[tokio::test]
async fn a_redis_failure_follows_on_store_error_and_refunds_a_denied_request() {
    let local = Arc::new(TestStore::default());
    let redis = Arc::new(TestStore::default());
    redis.failing.store(true, Ordering::SeqCst);
    let mut deny = on_redis(rule("redis-deny", 10, 60, &["/denied/**"]));
    deny.on_store_error = OnStoreError::Deny;
    let allow = on_redis(rule("redis-allow", 10, 60, &["/allowed/**"]));
    let rules = vec![
        rule("local", 2, 60, &["/denied/**", "/allowed/**", "/local/**"]),
        deny,
        allow,
    ];
    let options = RateLimitOptions {
        redis_store: Some(redis.clone() as Arc<dyn LimitStore>),
        ..RateLimitOptions::default()
    };
    let limiter = limiter(rules, &local, options);
    let app = app(&limiter);
    let denied = send(&app, get_from("/denied/a", CLIENT)).await;
    assert_eq!(denied.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(denied.json()["code"], "store_unavailable");
    assert_eq!(
        sent(&app, &["/denied/b", "/denied/c"]).await,
        vec![503, 503]
    );
    assert_eq!(local.refunds.load(Ordering::SeqCst), 3);
    // Nothing was counted locally by the three refused requests.
    assert_eq!(sent(&app, &["/allowed/a"]).await, vec![200]);
    assert_eq!(sent(&app, &["/local/a", "/local/b"]).await, vec![200, 429]);
    assert_eq!(local.refunds.load(Ordering::SeqCst), 3);
    assert_eq!(
        limiter.metrics().rule("redis-deny").unwrap().store_errors,
        3
    );
    assert_eq!(
        limiter.metrics().rule("redis-allow").unwrap().store_errors,
        1
    );
}
