//! The rate-limit layer through `oneshot`: rejections and their headers, allowed responses,
//! `headers = false`, shadow and delay actions, several rules at once, trusted proxies, IPv6
//! prefixes, every kind of key, store failures, at-most-once evaluation, and all or nothing
//! across the local and redis stores (`across_stores.rs`), and the lone local rule's shortcut
//! against the general engine (`lone_rule.rs`).

#![allow(clippy::unwrap_used)]

mod across_stores;
mod lone_rule;
mod public_router;
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::time::Instant;

use anteroom_api::ratelimit::{
    RateLimitClaims, RateLimitOptions, RateLimitSetupError, RateLimiter, RuleMetrics,
};
use anteroom_core::config::Cidr;
use anteroom_core::ratelimit::rules::{
    Action, KeyPart, LimitBackend, OnStoreError, RequestMatcher,
};
use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_store::limit::LimitStore;

use support::{TestStore, app, get_from, limiter, request, rule, send, statuses};

const CLIENT: &str = "203.0.113.7:50000";

pub(crate) fn join_rule(limit: u64) -> anteroom_core::ratelimit::rules::RateLimitRule {
    let mut join = rule("join-per-ip", limit, 60, &["/_anteroom/v1/rooms/*/join"]);
    join.matcher = Some(
        RequestMatcher::default()
            .with_paths(["/_anteroom/v1/rooms/*/join"])
            .unwrap()
            .with_methods(["POST"])
            .unwrap(),
    );
    join
}

fn join(peer: &str) -> http::Request<axum::body::Body> {
    request(Method::POST, "/_anteroom/v1/rooms/launch/join", peer)
}

#[tokio::test]
async fn a_rejection_is_problem_json_with_every_header() {
    tokio::time::pause();
    let store = Arc::new(TestStore::default());
    let limiter = limiter(vec![join_rule(2)], &store, RateLimitOptions::default());
    let app = app(&limiter);

    let first = send(&app, join(CLIENT)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "joined");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"join-per-ip\";q=2;w=60")
    );
    assert_eq!(first.header("ratelimit"), Some("\"join-per-ip\";r=1;t=60"));
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(first.header("x-ratelimit-reset"), Some("60"));
    assert_eq!(first.header("retry-after"), None);

    tokio::time::advance(Duration::from_millis(11_500)).await;
    let second = send(&app, join(CLIENT)).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.header("ratelimit"), Some("\"join-per-ip\";r=0;t=49"));

    let refused = send(&app, join(CLIENT)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    // 48.5 s until the window ends, rounded up.
    assert_eq!(refused.header("retry-after"), Some("49"));
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"join-per-ip\";q=2;w=60")
    );
    assert_eq!(
        refused.header("ratelimit"),
        Some("\"join-per-ip\";r=0;t=49")
    );
    assert_eq!(refused.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(refused.header("x-ratelimit-reset"), Some("49"));
    let body = refused.json();
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["status"], 429);
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(
        body["detail"],
        "too many requests: rate limit \"join-per-ip\" allows 2 per 1m; retry in 49 s"
    );

    // Another client has its own counter; the window's end lets the first one in again.
    assert_eq!(
        send(&app, join("198.51.100.1:1")).await.status,
        StatusCode::OK
    );
    tokio::time::advance(Duration::from_secs(49)).await;
    assert_eq!(send(&app, join(CLIENT)).await.status, StatusCode::OK);

    assert_eq!(
        limiter.metrics().rule("join-per-ip"),
        Some(RuleMetrics {
            allowed: 4,
            rejected: 1,
            ..RuleMetrics::default()
        })
    );
}

#[tokio::test]
async fn only_requests_the_match_selects_are_limited() {
    let store = Arc::new(TestStore::default());
    let limiter = limiter(vec![join_rule(1)], &store, RateLimitOptions::default());
    let app = app(&limiter);
    // Other paths and other methods on the same path are not counted, and carry no headers.
    for _ in 0..3 {
        let other = send(&app, get_from("/_anteroom/v1/rooms/launch/status", CLIENT)).await;
        assert_eq!(other.status, StatusCode::OK);
        assert_eq!(other.header("ratelimit"), None);
        let wrong_method = send(&app, get_from("/_anteroom/v1/rooms/launch/join", CLIENT)).await;
        assert_eq!(wrong_method.header("ratelimit"), None);
    }
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        0,
        "no store call for unmatched requests"
    );
    assert_eq!(
        statuses(&app, vec![join(CLIENT), join(CLIENT)]).await,
        vec![200, 429]
    );
    // A spelling of the same path is the same path.
    let spelled = request(
        Method::POST,
        "/_anteroom//v1/rooms/launch/./%6Aoin/",
        CLIENT,
    );
    assert_eq!(
        send(&app, spelled).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn headers_false_hides_them_on_allowed_responses_only() {
    let store = Arc::new(TestStore::default());
    let quiet = {
        let mut quiet = rule("quiet", 1, 60, &[]);
        quiet.headers = false;
        quiet
    };
    let limiter = limiter(vec![quiet], &store, RateLimitOptions::default());
    let app = app(&limiter);
    let allowed = send(&app, get_from("/x", CLIENT)).await;
    assert_eq!(allowed.status, StatusCode::OK);
    for name in [
        "ratelimit-policy",
        "ratelimit",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert_eq!(allowed.header(name), None, "{name}");
    }
    // A rejection always says why and when to come back.
    let refused = send(&app, get_from("/x", CLIENT)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"quiet\";q=1;w=60")
    );
    assert_eq!(refused.header("ratelimit"), Some("\"quiet\";r=0;t=60"));
    assert_eq!(refused.header("retry-after"), Some("60"));
}

#[tokio::test]
async fn the_rejection_status_is_configurable() {
    let store = Arc::new(TestStore::default());
    let mut unavailable = rule("busy", 1, 60, &[]);
    unavailable.status = 503;
    let limiter = limiter(vec![unavailable], &store, RateLimitOptions::default());
    let app = app(&limiter);
    assert_eq!(
        statuses(&app, vec![get_from("/", CLIENT), get_from("/", CLIENT)]).await,
        vec![200, 503]
    );
    let refused = send(&app, get_from("/", CLIENT)).await;
    assert_eq!(refused.json()["status"], 503);
    assert_eq!(refused.json()["code"], "rate_limited");
}

#[tokio::test]
async fn shadow_rules_never_block_and_the_others_still_count() {
    let store = Arc::new(TestStore::default());
    let mut shadow = rule("would-limit", 1, 60, &[]);
    shadow.action = Action::Shadow;
    let enforcing = rule("enforced", 3, 60, &["/api/**"]);
    let limiter = limiter(vec![shadow, enforcing], &store, RateLimitOptions::default());
    let app = app(&limiter);

    // The shadow rule alone: every request passes, and shadow rules report no headers.
    for _ in 0..5 {
        let answer = send(&app, get_from("/page", CLIENT)).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit-policy"), None);
    }
    assert_eq!(
        limiter.metrics().rule("would-limit"),
        Some(RuleMetrics {
            allowed: 1,
            shadow_rejected: 4,
            ..RuleMetrics::default()
        })
    );

    // With an enforcing rule: the shadow rule's refusal does not stop the enforcing rule from
    // counting, so its fourth request is refused.
    let client = "198.51.100.20:1";
    let found = statuses(&app, (0..4).map(|_| get_from("/api/x", client)).collect()).await;
    assert_eq!(found, vec![200, 200, 200, 429]);
    let enforced = limiter.metrics().rule("enforced").unwrap();
    assert_eq!((enforced.allowed, enforced.rejected), (3, 1));
    let answer = send(&app, get_from("/api/x", "198.51.100.21:1")).await;
    assert_eq!(
        answer.header("ratelimit-policy"),
        Some("\"enforced\";q=3;w=60")
    );
}

#[tokio::test]
async fn delay_rules_hold_requests_until_the_limit_allows_them() {
    tokio::time::pause();
    let store = Arc::new(TestStore::default());
    let mut throttle = rule("throttle", 1, 2, &[]);
    throttle.action = Action::Delay;
    let options = RateLimitOptions {
        max_delay: Duration::from_secs(3),
        ..RateLimitOptions::default()
    };
    let limiter = limiter(vec![throttle], &store, options);
    let app = app(&limiter);

    let start = Instant::now();
    assert_eq!(
        send(&app, get_from("/", CLIENT)).await.status,
        StatusCode::OK
    );
    assert_waited(start, Duration::ZERO);
    // Held until the 2 s window ends, then let through.
    let held = send(&app, get_from("/", CLIENT)).await;
    assert_eq!(held.status, StatusCode::OK);
    assert_waited(start, Duration::from_secs(2));
    assert_eq!(held.header("ratelimit"), Some("\"throttle\";r=0;t=2"));
    assert_eq!(
        limiter.metrics().rule("throttle"),
        Some(RuleMetrics {
            allowed: 1,
            delayed: 1,
            ..RuleMetrics::default()
        })
    );

    // A wait longer than the bound is refused at once.
    let short = {
        let mut throttle = rule("throttle", 1, 60, &[]);
        throttle.action = Action::Delay;
        let options = RateLimitOptions {
            max_delay: Duration::from_secs(3),
            ..RateLimitOptions::default()
        };
        app_with(vec![throttle], options)
    };
    let start = Instant::now();
    assert_eq!(
        statuses(&short, vec![get_from("/", CLIENT), get_from("/", CLIENT)]).await,
        vec![200, 429]
    );
    assert_waited(start, Duration::ZERO);
}

/// The paused clock moved `expected` since `start` (tokio's timer rounds up to the next
/// millisecond).
fn assert_waited(start: Instant, expected: Duration) {
    let waited = start.elapsed();
    assert!(
        waited >= expected && waited <= expected + Duration::from_millis(2),
        "waited {waited:?}, expected {expected:?}"
    );
}

#[tokio::test]
async fn a_delay_rule_does_not_hold_a_request_that_can_never_pass() {
    tokio::time::pause();
    let mut heavy = rule("heavy", 1, 2, &[]);
    heavy.action = Action::Delay;
    heavy.cost = 2;
    let app = app_with(vec![heavy], RateLimitOptions::default());
    let start = Instant::now();
    let refused = send(&app, get_from("/", CLIENT)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_waited(start, Duration::ZERO);
}

fn app_with(
    rules: Vec<anteroom_core::ratelimit::rules::RateLimitRule>,
    options: RateLimitOptions,
) -> axum::Router {
    let store = Arc::new(TestStore::default());
    app(&limiter(rules, &store, options))
}

#[tokio::test]
async fn decisions_that_ask_for_a_delay_are_waited_out_within_the_bound() {
    tokio::time::pause();
    let store = Arc::new(TestStore::default());
    *store.allowed_delay.lock().unwrap() = Duration::from_millis(400);
    let options = RateLimitOptions {
        max_delay: Duration::from_millis(1000),
        ..RateLimitOptions::default()
    };
    let limiter = limiter(vec![rule("leaky", 10, 1, &[])], &store, options);
    let app = app(&limiter);
    let start = Instant::now();
    assert_eq!(
        send(&app, get_from("/", CLIENT)).await.status,
        StatusCode::OK
    );
    assert_waited(start, Duration::from_millis(400));
    assert_eq!(limiter.metrics().rule("leaky").unwrap().delayed, 1);

    // A delay past the bound is cut to the bound.
    *store.allowed_delay.lock().unwrap() = Duration::from_secs(5);
    let start = Instant::now();
    assert_eq!(
        send(&app, get_from("/", CLIENT)).await.status,
        StatusCode::OK
    );
    assert_waited(start, Duration::from_millis(1000));
}

#[tokio::test]
async fn the_nginx_two_stage_example_through_the_layer() {
    // rate=5r/s burst=12 delay=8, 20 simultaneous requests: 9 pass at once, 4 are held for
    // 200, 400, 600 and 800 ms, 7 are refused.
    tokio::time::pause();
    let mut leaky = rule("nginx", 5, 1, &[]);
    leaky.params = LimitParams {
        algorithm: Algorithm::LeakyBucket,
        limit: 5,
        period: Duration::from_secs(1),
        burst: 12,
        delay: 8,
        nodelay: false,
    };
    let store = Arc::new(TestStore::default());
    let limiter = limiter(vec![leaky], &store, RateLimitOptions::default());
    let app = app(&limiter);
    let start = Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let app = app.clone();
        requests.spawn(async move {
            let status = send(&app, get_from("/", CLIENT)).await.status;
            (status, start.elapsed())
        });
    }
    let mut passed = Vec::new();
    let mut refused = 0;
    while let Some(result) = requests.join_next().await {
        match result.unwrap() {
            (StatusCode::OK, waited) => passed.push(waited.as_millis()),
            (StatusCode::TOO_MANY_REQUESTS, _) => refused += 1,
            (other, _) => panic!("unexpected {other}"),
        }
    }
    passed.sort_unstable();
    // Held requests wake on tokio's next millisecond.
    let rounded: Vec<u128> = passed.iter().map(|millis| millis / 10 * 10).collect();
    assert_eq!(rounded, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 200, 400, 600, 800]);
    assert_eq!(refused, 7);
    assert_eq!(
        limiter.metrics().rule("nginx"),
        Some(RuleMetrics {
            allowed: 9,
            delayed: 4,
            rejected: 7,
            ..RuleMetrics::default()
        })
    );
}

#[tokio::test]
async fn a_request_refused_by_one_rule_consumes_nothing_from_the_others() {
    let store = Arc::new(TestStore::default());
    let per_ip = rule("per-ip", 5, 60, &["/api/**"]);
    let mut per_key = rule("per-key", 1, 60, &["/api/**"]);
    per_key.key = vec![KeyPart::Header("x-api-key".to_owned())];
    let limiter = limiter(vec![per_ip, per_key], &store, RateLimitOptions::default());
    let app = app(&limiter);
    let keyed = |key: &str| {
        let mut request = get_from("/api/items", CLIENT);
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
        request
    };
    // k1 passes once, then per-key refuses it three times: per-ip must not count those.
    let found = statuses(
        &app,
        vec![keyed("k1"), keyed("k1"), keyed("k1"), keyed("k1")],
    )
    .await;
    assert_eq!(found, vec![200, 429, 429, 429]);
    // So per-ip still has 4 of its 5 requests left.
    let found = statuses(
        &app,
        vec![
            keyed("k2"),
            keyed("k3"),
            keyed("k4"),
            keyed("k5"),
            keyed("k6"),
        ],
    )
    .await;
    assert_eq!(found, vec![200, 200, 200, 200, 429]);
    // Every rule's policy is listed; the rule closest to its limit is the one reported.
    let refused = send(&app, keyed("k7")).await;
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"per-ip\";q=5;w=60, \"per-key\";q=1;w=60")
    );
    assert_eq!(refused.header("ratelimit"), Some("\"per-ip\";r=0;t=60"));
    // Both rules went to the store together, one call per request.
    assert_eq!(store.calls.load(Ordering::SeqCst), 10);
}

#[tokio::test]
async fn allowed_responses_report_the_rule_closest_to_its_limit() {
    let store = Arc::new(TestStore::default());
    let rules = vec![rule("wide", 100, 60, &[]), rule("narrow", 3, 10, &[])];
    let limiter = limiter(rules, &store, RateLimitOptions::default());
    let app = app(&limiter);
    let answer = send(&app, get_from("/", CLIENT)).await;
    assert_eq!(
        answer.header("ratelimit-policy"),
        Some("\"wide\";q=100;w=60, \"narrow\";q=3;w=10")
    );
    assert_eq!(answer.header("ratelimit"), Some("\"narrow\";r=2;t=10"));
    assert_eq!(answer.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(answer.header("x-ratelimit-remaining"), Some("2"));
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    let store = Arc::new(TestStore::default());
    let options = RateLimitOptions {
        trusted_proxies: vec!["10.0.0.0/8".parse::<Cidr>().unwrap()],
        ..RateLimitOptions::default()
    };
    let limiter = limiter(vec![rule("per-ip", 1, 60, &[])], &store, options);
    let app = app(&limiter);
    let via = |peer: &str, forwarded_for: &str| {
        let mut request = get_from("/api/whoami", peer);
        request
            .headers_mut()
            .insert("x-forwarded-for", forwarded_for.parse().unwrap());
        request
    };
    // Behind the trusted proxy, each forwarded client has its own counter.
    let first = send(&app, via("10.0.0.2:1", "1.1.1.1, 203.0.113.7")).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "203.0.113.7")
    );
    let second = send(&app, via("10.0.0.2:1", "203.0.113.8")).await;
    assert_eq!(
        (second.status, second.body.as_str()),
        (StatusCode::OK, "203.0.113.8")
    );
    // The client cannot escape by writing its own X-Forwarded-For: the proxy appended the
    // real address, which is the one counted.
    let forged = send(&app, via("10.0.0.3:1", "9.9.9.9, 203.0.113.7")).await;
    assert_eq!(forged.status, StatusCode::TOO_MANY_REQUESTS);
    // The Forwarded header is read when there is no X-Forwarded-For.
    let mut forwarded = get_from("/api/whoami", "10.0.0.2:1");
    forwarded
        .headers_mut()
        .insert("forwarded", "for=\"[2001:db8:5::1]:443\"".parse().unwrap());
    let answer = send(&app, forwarded).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "2001:db8:5::1")
    );

    // From a peer that is not trusted, the header is ignored: the peer is the client.
    let untrusted = send(&app, via("192.0.2.1:1", "203.0.113.50")).await;
    assert_eq!(
        (untrusted.status, untrusted.body.as_str()),
        (StatusCode::OK, "192.0.2.1")
    );
    let again = send(&app, via("192.0.2.1:1", "203.0.113.51")).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
    // A malformed header from the trusted proxy falls back to the proxy's address.
    let malformed = send(&app, via("10.0.0.9:1", "not-an-address")).await;
    assert_eq!(
        (malformed.status, malformed.body.as_str()),
        (StatusCode::OK, "10.0.0.9")
    );
}

#[tokio::test]
async fn ipv6_clients_are_counted_by_their_64() {
    let store = Arc::new(TestStore::default());
    let mut wide = rule("per-48", 1, 60, &["/wide"]);
    wide.ipv6_prefix = 48;
    let limiter = limiter(
        vec![rule("per-ip", 1, 60, &["/"]), wide],
        &store,
        RateLimitOptions::default(),
    );
    let app = app(&limiter);
    let found = statuses(
        &app,
        vec![
            get_from("/", "[2001:db8:1:2::1]:1"),
            // Same /64, another address: the same client.
            get_from("/", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"),
            // The next /64: another client.
            get_from("/", "[2001:db8:1:3::1]:1"),
            // An IPv4-mapped peer is its IPv4 address.
            get_from("/", "[::ffff:192.0.2.9]:1"),
            get_from("/", "192.0.2.9:1"),
        ],
    )
    .await;
    assert_eq!(found, vec![200, 429, 200, 200, 429]);
    // A rule can key by a wider prefix.
    let found = statuses(
        &app,
        vec![
            get_from("/wide", "[2001:db8:1:2::1]:1"),
            get_from("/wide", "[2001:db8:1:3::1]:1"),
            get_from("/wide", "[2001:db8:2::1]:1"),
        ],
    )
    .await;
    assert_eq!(found, vec![200, 429, 200]);
}

#[tokio::test]
async fn keys_by_header_cookie_path_host_and_claim() {
    let keyed = |name: &str, part: &str| {
        let mut keyed = rule(name, 1, 60, &[&format!("/{name}/**")]);
        keyed.key = vec![part.parse().unwrap()];
        keyed
    };
    let store = Arc::new(TestStore::default());
    let rules = vec![
        keyed("header", "header:X-Api-Key"),
        keyed("cookie", "cookie:session"),
        keyed("path", "path"),
        keyed("host", "host"),
        keyed("claim", "claim:sub"),
    ];
    let limiter = limiter(rules, &store, RateLimitOptions::default());
    let app = app(&limiter);
    // Each request comes from a new address: only the rule's key can tie two together.
    let mut port = 1000;
    let mut next = |path: &str, name: &str, value: Option<&str>| {
        port += 1;
        let peer = format!("198.51.{}.{}:1", port / 250, port % 250);
        let mut request = get_from(path, &peer);
        match (name, value) {
            (_, None) => {}
            ("claim", Some(value)) => {
                request
                    .extensions_mut()
                    .insert(RateLimitClaims::default().with("sub", value));
            }
            (header, Some(value)) => {
                let header = http::HeaderName::from_bytes(header.as_bytes()).unwrap();
                request.headers_mut().insert(header, value.parse().unwrap());
            }
        }
        request
    };
    let cases = [
        ("/header/x", "x-api-key", "k1", "k2"),
        ("/cookie/x", "cookie", "session=s1; other=1", "session=s2"),
        ("/claim/x", "claim", "user-1", "user-2"),
        ("/host/x", "host", "a.example", "b.example"),
    ];
    for (path, name, value, other) in cases {
        let found = statuses(
            &app,
            vec![
                next(path, name, Some(value)),
                next(path, name, Some(value)),
                next(path, name, Some(other)),
                // Without the key part the rule does not count the request.
                next(path, name, None),
                next(path, name, None),
            ],
        )
        .await;
        let expected = if name == "host" {
            // Requests always carry a host (shop.example here).
            vec![200, 429, 200, 200, 429]
        } else {
            vec![200, 429, 200, 200, 200]
        };
        assert_eq!(found, expected, "key {name}");
    }
    let found = statuses(
        &app,
        vec![
            next("/path/a", "", None),
            next("/path/a/", "", None),
            next("/path/b", "", None),
        ],
    )
    .await;
    assert_eq!(found, vec![200, 429, 200], "key path");
}

#[tokio::test]
async fn store_failures_follow_each_rules_policy() {
    let store = Arc::new(TestStore::default());
    store.failing.store(true, Ordering::SeqCst);
    let open = rule("open", 1, 60, &["/open"]);
    let mut closed = rule("closed", 1, 60, &["/closed"]);
    closed.on_store_error = OnStoreError::Deny;
    let limiter = limiter(vec![open, closed], &store, RateLimitOptions::default());
    let app = app(&limiter);

    let through = send(&app, get_from("/open", CLIENT)).await;
    assert_eq!(through.status, StatusCode::OK);
    assert_eq!(through.header("ratelimit"), None);
    let denied = send(&app, get_from("/closed", CLIENT)).await;
    assert_eq!(denied.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(denied.json()["code"], "store_unavailable");
    assert_eq!(denied.header("retry-after"), Some("5"));
    assert_eq!(limiter.metrics().rule("open").unwrap().store_errors, 1);
    assert_eq!(limiter.metrics().rule("closed").unwrap().store_errors, 1);

    // Recovery needs nothing.
    store.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        send(&app, get_from("/closed", CLIENT)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_rule_applies_at_most_once_per_request_and_routes_add_theirs() {
    let store = Arc::new(TestStore::default());
    let everywhere = rule("everywhere", 3, 60, &[]);
    let mut checkout = rule("checkout", 1, 60, &[]);
    checkout.matcher = None;
    let limiter = limiter(
        vec![everywhere, checkout],
        &store,
        RateLimitOptions::default(),
    );
    // The same limiter as an outer layer and as a route layer naming the route-only rule.
    let app = axum::Router::new()
        .route(
            "/checkout",
            axum::routing::get(|| async { "paid" }).layer(limiter.route_layer(["checkout"])),
        )
        .fallback(|| async { "ok" })
        .layer(limiter.layer());
    // Were "everywhere" counted by both layers, the second /other request would fail.
    let first = send(&app, get_from("/checkout", CLIENT)).await;
    assert_eq!(first.status, StatusCode::OK);
    // The outer layer's headers stay off a response the route layer already reported on.
    assert_eq!(first.header("ratelimit"), Some("\"checkout\";r=0;t=60"));
    let second = send(&app, get_from("/checkout", CLIENT)).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.header("ratelimit"), Some("\"checkout\";r=0;t=60"));
    // The route-only rule applies nowhere else.
    assert_eq!(
        send(&app, get_from("/other", CLIENT)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, get_from("/other", CLIENT)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        limiter.metrics().rule("everywhere"),
        Some(RuleMetrics {
            allowed: 3,
            rejected: 1,
            ..RuleMetrics::default()
        })
    );
}

#[tokio::test]
async fn without_a_peer_address_requests_share_one_counter() {
    let store = Arc::new(TestStore::default());
    let limiter = limiter(
        vec![rule("per-ip", 1, 60, &[])],
        &store,
        RateLimitOptions::default(),
    );
    let app = app(&limiter);
    let bare = || {
        http::Request::builder()
            .uri("/api/whoami")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let first = send(&app, bare()).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "0.0.0.0")
    );
    assert_eq!(
        send(&app, bare()).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn rules_are_checked_when_installed_and_can_be_replaced() {
    let store: Arc<dyn LimitStore> = Arc::new(TestStore::default());
    let duplicate = RateLimiter::new(
        vec![rule("a", 1, 1, &[]), rule("a", 2, 1, &[])],
        store.clone(),
    );
    assert_eq!(
        duplicate.unwrap_err(),
        RateLimitSetupError::DuplicateName("a".to_owned())
    );
    let mut shared = rule("shared", 1, 1, &[]);
    shared.store = LimitBackend::Redis;
    let error = RateLimiter::new(vec![shared.clone()], store.clone()).unwrap_err();
    assert_eq!(
        error,
        RateLimitSetupError::NoRedisStore("shared".to_owned())
    );
    assert_eq!(
        error.to_string(),
        "rate limit \"shared\" uses the redis store, and no redis store is configured"
    );
    // With a redis store, redis rules count there.
    let redis = Arc::new(TestStore::default());
    let options = RateLimitOptions {
        redis_store: Some(redis.clone() as Arc<dyn LimitStore>),
        ..RateLimitOptions::default()
    };
    let local = Arc::new(TestStore::default());
    let both = limiter(vec![shared, rule("local", 5, 60, &[])], &local, options);
    let app = app(&both);
    assert_eq!(
        send(&app, get_from("/", CLIENT)).await.status,
        StatusCode::OK
    );
    assert_eq!(redis.calls.load(Ordering::SeqCst), 1);
    assert_eq!(local.calls.load(Ordering::SeqCst), 1);
    // A reload lowers the local limit to the one request already counted: refused locally,
    // and redis is not asked.
    let mut shared_again = rule("shared", 1, 1, &[]);
    shared_again.store = LimitBackend::Redis;
    both.replace_rules(vec![shared_again, rule("local", 1, 60, &[])])
        .unwrap();
    assert_eq!(
        send(&app, get_from("/", CLIENT)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(redis.calls.load(Ordering::SeqCst), 1);
    // Counters of a rule that keeps its name keep counting across a reload.
    assert_eq!(both.metrics().rule("local").unwrap().allowed, 1);
    assert_eq!(both.metrics().rule("local").unwrap().rejected, 1);
    assert_eq!(both.rules().len(), 2);
}
