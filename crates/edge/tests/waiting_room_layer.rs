//! `WaitingRoomLayer` in a real axum app, requests sent with `oneshot`, on the embedded store
//! (redb in a temporary file) and on a real `redis-server`: routes not covered go through
//! untouched, a room with room admits at once with a pass cookie, a valid pass reaches the
//! inner service and is renewed past half its `session_ttl`, visitors without a usable pass
//! (none, forged, for another room, expired, revoked, of an older generation) are held back with a 302 to the waiting
//! page or 429 `waiting_room` and never reach the inner service, the inner service's
//! `Anteroom-Release` ends the session, ambiguous paths are refused, and an unreachable store
//! follows each room's `on_store_error`.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::routing::{any, get};
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use tempfile::TempDir;
use tower::ServiceExt;

use anteroom_api::ratelimit::RateLimiter;
use anteroom_api::{AppState, NodeOptions, PublicSettings};
use anteroom_core::config::{PageMode, RouteConfig, parse_config};
use anteroom_core::engine::SessionEnd;
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::{RateLimitRule, RequestMatcher, default_params};
use anteroom_core::room::{RoomConfig, StoreErrorPolicy};
use anteroom_core::{Clock, ManualClock, RoomId, SessionId, Timestamp};
use anteroom_edge::{WaitingRoom, WaitingRoomSetupError};
use anteroom_store::limit::{LimitStore, LocalLimitConfig, LocalLimitStore};
use anteroom_store::{RedbStore, RedisConfig, RedisStore, RoomStore};
use anteroom_test_support::redis::{RedisServer, shared_server, unique_prefix};
use anteroom_token::{KeySet, SigningAlgorithm};

/// Where every test's clock starts.
const START: Timestamp = Timestamp(1_700_000_000_000);

/// Which store the rooms live in.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Embedded,
    Redis,
}

fn id(text: &str) -> RoomId {
    RoomId::new(text).unwrap()
}

/// `launch` takes one visitor at a time (a minute's session); `other` takes everybody.
fn rooms() -> Vec<RoomConfig> {
    vec![
        RoomConfig {
            max_active: 1,
            session_ttl: Duration::from_secs(60),
            ..RoomConfig::with_defaults(id("launch"))
        },
        RoomConfig::with_defaults(id("other")),
    ]
}

/// A site: an axum app whose `/shop/**` needs a pass of `launch` and `/other/**` one of
/// `other`, with `/free` open, behind the layer, serving the waiting page's routes too.
struct Site {
    app: Router,
    waiting_room: WaitingRoom,
    store: Arc<dyn RoomStore>,
    clock: Arc<ManualClock>,
    /// How often the inner service was called on a protected route.
    protected_calls: Arc<AtomicUsize>,
    _dir: TempDir,
}

impl Site {
    async fn new(backend: Backend, rooms: Vec<RoomConfig>) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(START));
        let store = open_store(backend, &dir, clock.clone(), None);
        Site::on_store(store, clock, dir, rooms).await
    }

    async fn on_store(
        store: Arc<dyn RoomStore>,
        clock: Arc<ManualClock>,
        dir: TempDir,
        rooms: Vec<RoomConfig>,
    ) -> Site {
        let shared_clock: Arc<dyn Clock> = clock.clone();
        let mut builder = WaitingRoom::builder(store.clone(), shared_clock)
            .key_dir(dir.path().join("keys"))
            .public_url("https://shop.example");
        for room in rooms {
            builder = builder.room(room);
        }
        let waiting_room = builder
            .protect(["/shop/**"], &id("launch"))
            .protect(["/other/**"], &id("other"))
            .build()
            .await
            .unwrap();
        let protected_calls = Arc::new(AtomicUsize::new(0));
        Site {
            app: app(&waiting_room, protected_calls.clone()),
            waiting_room,
            store,
            clock,
            protected_calls,
            _dir: dir,
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    fn calls(&self) -> usize {
        self.protected_calls.load(Ordering::SeqCst)
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    async fn active(&self, room: &str) -> u64 {
        self.store.snapshot(&id(room)).await.unwrap().active
    }
}

fn open_store(
    backend: Backend,
    dir: &TempDir,
    clock: Arc<ManualClock>,
    redis_url: Option<String>,
) -> Arc<dyn RoomStore> {
    match backend {
        Backend::Embedded => {
            Arc::new(RedbStore::open(&dir.path().join("rooms.redb"), clock).unwrap())
        }
        Backend::Redis => {
            let url = redis_url.unwrap_or_else(|| shared_server().url());
            let config = RedisConfig::standalone(url)
                .with_key_prefix(unique_prefix())
                .with_timeout(Duration::from_millis(500));
            Arc::new(RedisStore::new(config, Some(clock)).unwrap())
        }
    }
}

/// The service's own routes behind the layer, beside the waiting page's routes.
fn app(waiting_room: &WaitingRoom, protected_calls: Arc<AtomicUsize>) -> Router {
    let counted = move |answer: &'static str| {
        let calls = protected_calls.clone();
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { answer }
        }
    };
    let peer = SocketAddr::from(([203, 0, 113, 7], 50_000));
    let site = Router::new()
        .route("/shop/done", any(released))
        .route("/shop/{*item}", any(counted("shop")))
        .route("/other/{*item}", any(counted("other")))
        .route("/free", get(|| async { "free" }));
    waiting_room.around(site).layer(MockConnectInfo(peer))
}

/// The origin says the visitor is done (SPEC §7.2).
async fn released() -> ([(&'static str, &'static str); 1], &'static str) {
    ([("anteroom-release", "1")], "done")
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The value of the `anteroom_p_<room>` cookie this answer sets.
    fn pass(&self, room: &str) -> Option<String> {
        let prefix = format!("anteroom_p_{room}=");
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(|cookie| cookie.strip_prefix(&prefix))
            .map(|rest| rest.split(';').next().unwrap_or_default().to_owned())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// A page navigation (GET accepting HTML), with the `cookie` header when given.
fn navigation(path: &str, cookie: Option<&str>) -> Request<Body> {
    request(path, "text/html,application/xhtml+xml,*/*;q=0.8", cookie)
}

/// An API call (GET accepting JSON), with the `cookie` header when given.
fn api(path: &str, cookie: Option<&str>) -> Request<Body> {
    request(path, "application/json", cookie)
}

fn request(path: &str, accept: &str, cookie: Option<&str>) -> Request<Body> {
    let mut builder = Request::get(path)
        .header(header::HOST, "shop.example")
        .header(header::ACCEPT, accept);
    if let Some(cookie) = cookie {
        builder = builder.header(header::COOKIE, cookie);
    }
    builder.body(Body::empty()).unwrap()
}

fn launch_cookie(pass: &str) -> String {
    format!("anteroom_p_launch={pass}")
}

/// The session a pass names (its `sub` claim).
fn session_of(pass: &str) -> SessionId {
    anteroom_test_support::jwt::subject(pass).parse().unwrap()
}

/// Takes `launch`'s one slot: the pass of the visitor who holds it.
async fn fill_launch(site: &Site) -> String {
    let reply = site.send(api("/shop/first", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.pass("launch").expect("a pass for the first visitor")
}

/// `launch` is full: a request with `cookie` is held back, and never reaches the service.
async fn assert_held_back(site: &Site, cookie: Option<&str>) {
    assert_held_back_at(site, "/shop/item", "launch", cookie).await;
}

/// A request to `path` with `cookie` is held back by `room` (429 `waiting_room`, no pass), and
/// never reaches the service.
async fn assert_held_back_at(site: &Site, path: &str, room: &str, cookie: Option<&str>) {
    let calls = site.calls();
    let reply = site.send(api(path, cookie)).await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.body
    );
    assert_eq!(reply.json()["code"], "waiting_room");
    assert_eq!(reply.pass(room), None);
    assert_eq!(site.calls(), calls, "the inner service was called");
}

async fn uncovered_routes_go_through_untouched(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    fill_launch(&site).await;
    let reply = site.send(navigation("/free", None)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "free");
    assert!(reply.headers.get(header::SET_COOKIE).is_none());
    // The service's own fallback still answers unknown paths.
    let reply = site.send(api("/nowhere", None)).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.body, "");
    let snapshot = site.store.snapshot(&id("launch")).await.unwrap();
    assert_eq!(snapshot.last_position, 1, "only the first visitor joined");
    // The waiting page is served beside the service's routes.
    let reply = site.send(navigation("/_anteroom/wait/launch", None)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains("<html"), "{}", reply.body);
}

async fn a_room_with_room_admits_and_the_pass_lets_through(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let reply = site.send(navigation("/shop/item", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body, "shop");
    let pass = reply.pass("launch").expect("admitted at once, with a pass");
    assert_eq!(site.active("launch").await, 1);
    let cookie = launch_cookie(&pass);
    for _ in 0..3 {
        let reply = site.send(api("/shop/item", Some(&cookie))).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert_eq!(
            reply.pass("launch"),
            None,
            "not renewed before half its ttl"
        );
    }
    assert_eq!(site.calls(), 4);
    assert_eq!(site.active("launch").await, 1, "one session, however used");
}

async fn without_a_pass_a_full_room_holds_back(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    fill_launch(&site).await;
    let calls = site.calls();
    let reply = site.send(navigation("/shop/item?size=m", None)).await;
    assert_eq!(reply.status, StatusCode::FOUND);
    assert_eq!(
        reply.header("location"),
        Some("/_anteroom/wait/launch?return=/shop/item%3Fsize%3Dm")
    );
    let reply = site.send(api("/shop/item", None)).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(reply.json()["join_url"], "/_anteroom/v1/rooms/launch/join");
    let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after));
    assert_eq!(site.calls(), calls);
    // The same path spelled otherwise is the same route.
    let reply = site.send(navigation("//shop/item", None)).await;
    assert_eq!(reply.status, StatusCode::FOUND);
    let reply = site.send(navigation("/%73hop/item", None)).await;
    assert_eq!(reply.status, StatusCode::FOUND);
    // A path servers read differently is refused outright.
    let reply = site.send(api("/free/../shop/item", None)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["code"], "ambiguous_path");
    assert_eq!(site.calls(), calls);
}

async fn passes_are_renewed_past_half_their_ttl(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    site.advance(Duration::from_secs(31));
    let reply = site
        .send(api("/shop/item", Some(&launch_cookie(&pass))))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let renewed = reply.pass("launch").expect("a renewed pass");
    assert_ne!(renewed, pass);
    assert_eq!(session_of(&renewed), session_of(&pass), "the same session");
    // The renewed pass outlives the first one's minute.
    site.advance(Duration::from_secs(50));
    let reply = site
        .send(api("/shop/item", Some(&launch_cookie(&renewed))))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(site.active("launch").await, 1);
}

async fn forged_and_other_room_passes_are_refused(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    // The signature changed: the claims no longer verify.
    let mut forged = pass.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert_held_back(&site, Some(&launch_cookie(&forged))).await;
    assert_held_back(&site, Some("anteroom_p_launch=not.a.pass")).await;
    // A pass of `other` is no pass of `launch`, in its cookie or in the header.
    let reply = site.send(api("/other/x", None)).await;
    let other = reply.pass("other").expect("admitted to other");
    assert_held_back(&site, Some(&launch_cookie(&other))).await;
    let calls = site.calls();
    let mut request = api("/shop/item", None);
    request
        .headers_mut()
        .insert("x-anteroom-pass", other.parse().unwrap());
    let reply = site.send(request).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(site.calls(), calls);
    // The real pass still works.
    let reply = site
        .send(api("/shop/item", Some(&launch_cookie(&pass))))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

async fn expired_passes_are_refused(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    // Past the session's minute and the verification leeway, unused: expired.
    site.advance(Duration::from_secs(60 + 31));
    site.store.tick(&id("launch")).await.unwrap();
    // The freed slot goes to the next visitor.
    let reply = site.send(api("/shop/next", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(reply.pass("launch").is_some());
    assert_held_back(&site, Some(&launch_cookie(&pass))).await;
}

async fn revoked_passes_are_refused_within_a_second(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    site.store
        .end_session(&id("launch"), session_of(&pass), SessionEnd::Completed)
        .await
        .unwrap();
    site.advance(Duration::from_secs(1));
    let reply = site.send(api("/shop/next", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(reply.pass("launch").is_some(), "the slot was freed");
    assert_held_back(&site, Some(&launch_cookie(&pass))).await;
}

async fn passes_of_an_older_generation_are_refused(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    site.store.reset(&id("launch"), false).await.unwrap();
    // The layer's copy of the room is read again after a second; the new generation's slot
    // goes to the next visitor.
    site.advance(Duration::from_secs(1));
    let reply = site.send(api("/shop/next", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(reply.pass("launch").is_some());
    assert_held_back(&site, Some(&launch_cookie(&pass))).await;
}

async fn the_inner_service_releases_the_session(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    let pass = fill_launch(&site).await;
    let reply = site
        .send(api("/shop/done", Some(&launch_cookie(&pass))))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "done");
    assert_eq!(reply.header("anteroom-release"), None, "stripped");
    assert_eq!(
        reply.pass("launch").as_deref(),
        Some(""),
        "the cookie is cleared"
    );
    assert_eq!(site.active("launch").await, 0);
    assert_held_back(&site, Some(&launch_cookie(&pass))).await;
}

/// The whole way in: joined while the room is full, admitted by `WaitingRoom::run`'s ticker
/// once the holder's session expires, and through with the pass the status answer carries.
async fn a_waiting_visitor_is_let_in_when_a_session_ends(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    fill_launch(&site).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let background = site.waiting_room.clone();
    let running = tokio::spawn(async move {
        background
            .run(async {
                let _ = stopped.await;
            })
            .await;
    });
    let join = Request::post("/_anteroom/v1/rooms/launch/join")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let joined = site.send(join).await;
    assert_eq!(joined.json()["state"], "waiting", "{}", joined.body);
    let ticket = joined.json()["ticket"].as_str().unwrap().to_owned();
    // The first visitor's session runs out; only the ticker notices.
    site.advance(Duration::from_secs(61));
    let mut pass = None;
    for _ in 0..50 {
        let status = Request::get("/_anteroom/v1/rooms/launch/status")
            .header("x-anteroom-ticket", &ticket)
            .body(Body::empty())
            .unwrap();
        let status = site.send(status).await.json();
        if let Some(token) = status["pass"].as_str() {
            pass = Some(token.to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pass = pass.expect("admitted by the ticker within five seconds");
    let calls = site.calls();
    let reply = site
        .send(api("/shop/item", Some(&launch_cookie(&pass))))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(site.calls(), calls + 1);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("run ends with its shutdown")
        .unwrap();
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::Embedded).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::Redis).await;
                }
            )*
        }
    };
}

/// `other` is given `requires = ["launch"]` at run time (as the admin API does), after a
/// visitor got its pass: the node's list of the route's rooms, made from the configured rooms
/// and its copies, does not know the requirement. Must hold: the copy read from the store
/// names it, and the visitor without a `launch` pass is held back by the full `launch`, never
/// let through on the `other` pass alone.
async fn a_requirement_given_at_run_time_is_checked_before_a_pass(backend: Backend) {
    let site = Site::new(backend, rooms()).await;
    fill_launch(&site).await;
    let reply = site.send(api("/other/first", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let other = format!("anteroom_p_other={}", reply.pass("other").unwrap());
    let reply = site.send(api("/other/item", Some(&other))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let required = RoomConfig {
        requires: vec![id("launch")],
        ..RoomConfig::with_defaults(id("other"))
    };
    site.store.put_room(required).await.unwrap();
    // The node's copy of `other` is read again.
    site.advance(Duration::from_secs(2));
    assert_held_back_at(&site, "/other/item", "launch", Some(&other)).await;
}

on_every_store!(
    uncovered_routes_go_through_untouched,
    a_room_with_room_admits_and_the_pass_lets_through,
    without_a_pass_a_full_room_holds_back,
    passes_are_renewed_past_half_their_ttl,
    forged_and_other_room_passes_are_refused,
    expired_passes_are_refused,
    revoked_passes_are_refused_within_a_second,
    passes_of_an_older_generation_are_refused,
    the_inner_service_releases_the_session,
    a_waiting_visitor_is_let_in_when_a_session_ends,
    a_requirement_given_at_run_time_is_checked_before_a_pass,
);

/// With Redis gone, a visitor holding a pass still goes through (unless the node already
/// heard that its session ended); one without is held back with 503 while the store answered
/// for the room within the last 5 s, then follows the room's `on_store_error` (SPEC §9.4):
/// `open` lets them through, `closed` answers 503.
#[tokio::test]
async fn an_unreachable_store_follows_on_store_error() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let store = open_store(Backend::Redis, &dir, clock.clone(), Some(server.url()));
    let mut rooms = rooms();
    rooms[0].max_active = 0;
    rooms[1].on_store_error = StoreErrorPolicy::Closed;
    let site = Site::on_store(store, clock, dir, rooms).await;
    let pass = site
        .send(api("/shop/first", None))
        .await
        .pass("launch")
        .unwrap();
    let other_pass = site
        .send(api("/other/first", None))
        .await
        .pass("other")
        .unwrap();
    let other_cookie = format!("anteroom_p_other={other_pass}");
    // The node keeps a copy of the room (the join made it read the room again).
    let reply = site.send(api("/other/item", Some(&other_cookie))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    drop(server);
    site.advance(Duration::from_secs(2));
    let reply = site
        .send(api("/shop/item", Some(&launch_cookie(&pass))))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    // The store answered for the room two seconds ago: a failure now may be a store too busy
    // for the crowd, and `open` would let the crowd through. Held back.
    let calls = site.calls();
    let reply = site.send(api("/shop/item", None)).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "within 5 s of the store's last answer: {}",
        reply.body
    );
    assert_eq!(site.calls(), calls);
    // Five seconds without an answer: the store is gone, and the room is `open`.
    site.advance(Duration::from_secs(4));
    let reply = site.send(api("/shop/item", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "open: {}", reply.body);
    assert_eq!(reply.pass("launch"), None);
    let calls = site.calls();
    let reply = site.send(api("/other/item", None)).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
    let reply = site.send(navigation("/other/item", None)).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.body.contains("<html"), "the page's unavailable state");
    assert_eq!(site.calls(), calls);
    // A pass of `other` goes through; once the node hears its session ended (another node
    // said so before the outage), it is refused though the store cannot be asked.
    let reply = site.send(api("/other/item", Some(&other_cookie))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    site.waiting_room
        .state()
        .revocations()
        .record(session_of(&other_pass));
    let reply = site.send(api("/other/item", Some(&other_cookie))).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
}

/// The store answers for the room but cannot take a join in time (a crowd's joins past their
/// bound in the node's queue; here Redis stopped just after the room was read). Must hold: a
/// visitor without a pass whom `other` (taking everybody) would admit at once is held back
/// with 503 though the room is `open`, never let through without a pass; once the store
/// answers again, the room admits as before.
#[tokio::test]
async fn a_join_the_store_cannot_take_in_time_is_held_back_in_an_open_room() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let store = open_store(Backend::Redis, &dir, clock.clone(), Some(server.url()));
    let site = Site::on_store(store, clock, dir, rooms()).await;
    let reply = site.send(api("/other/first", None)).await;
    let cookie = format!("anteroom_p_other={}", reply.pass("other").unwrap());
    // The node reads the room again (the join marked its copy changed).
    let reply = site.send(api("/other/item", Some(&cookie))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let paused = server.pause();
    let calls = site.calls();
    let reply = site.send(api("/other/item", None)).await;
    RedisServer::resume(paused);
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
    assert_eq!(reply.json()["code"], "store_unavailable");
    assert_eq!(site.calls(), calls, "the inner service was called");
    let reply = site.send(api("/other/item", None)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(reply.pass("other").is_some(), "admitted again");
}

/// Rooms and routes from a config file: a room's `routes` shorthand shows the waiting page
/// inline to a navigation it holds back, as the gateway does.
#[tokio::test]
async fn rooms_and_routes_from_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let source = format!(
        "[server]\npublic_url = \"https://shop.example\"\n\n[keys]\ndir = {keys:?}\n\n\
         [[room]]\nid = \"launch\"\nroutes = [\"/shop/**\"]\nmax_active = 1\n"
    );
    let config = parse_config(&source, &[]).unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let store = open_store(Backend::Embedded, &dir, clock.clone(), None);
    let shared_clock: Arc<dyn Clock> = clock;
    let waiting_room = WaitingRoom::builder(store, shared_clock)
        .config(&config)
        .build()
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let app = app(&waiting_room, calls.clone());
    let send = |request| app.clone().oneshot(request);
    let first = send(api("/shop/a", None)).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let held = send(navigation("/shop/a", None)).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK, "the page, inline");
    assert!(held.headers().get(header::SET_COOKIE).is_some(), "a ticket");
    let page = held.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&page).contains("<html"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        keys.read_dir().unwrap().count() > 0,
        "keys made in the config's [keys] dir"
    );
}

/// An app state given whole brings its rate limiter: a route's own rate limits apply before
/// its rooms, as in the gateway.
#[tokio::test]
async fn a_given_app_state_brings_its_route_rate_limits() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let shared_clock: Arc<dyn Clock> = clock.clone();
    let store = open_store(Backend::Embedded, &dir, clock, None);
    let keys =
        KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START.as_secs()).unwrap();
    let per_ip = RateLimitRule::new(
        "per-ip",
        default_params(Algorithm::FixedWindow, 1, Duration::from_secs(60)),
    );
    let limits: Arc<dyn LimitStore> = Arc::new(LocalLimitStore::new(
        shared_clock.clone(),
        LocalLimitConfig::default(),
    ));
    let options = NodeOptions {
        rate_limiter: Some(RateLimiter::new(vec![per_ip], limits).unwrap()),
        ..NodeOptions::default()
    };
    let settings = PublicSettings {
        public_url: "https://shop.example".to_owned(),
        issuer: "https://shop.example".to_owned(),
        service_keys: Vec::new(),
        trusted_proxies: Vec::new(),
    };
    let state = AppState::with_options(store, keys, shared_clock, settings, options);
    let waiting_room = WaitingRoom::builder_with_state(state)
        .room(RoomConfig::with_defaults(id("launch")))
        .route(RouteConfig {
            name: "limited".to_owned(),
            matcher: RequestMatcher::default().with_paths(["/shop/**"]).unwrap(),
            rooms: vec![id("launch")],
            rate_limits: vec!["per-ip".to_owned()],
            bypass: false,
            page: PageMode::Redirect,
        })
        .build()
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let app = app(&waiting_room, calls.clone());
    let first = app.clone().oneshot(api("/shop/a", None)).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit-policy"], "\"per-ip\";q=1;w=60");
    let second = app.clone().oneshot(api("/shop/a", None)).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(second.headers().contains_key("retry-after"));
    // Not a room's refusal: the rate limit's, before any pass is looked at.
    let body = second.into_body().collect().await.unwrap().to_bytes();
    assert_ne!(
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()["code"],
        "waiting_room"
    );
    let free = app.oneshot(api("/free", None)).await.unwrap();
    assert_eq!(
        free.status(),
        StatusCode::OK,
        "other routes are not limited"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Mistakes are reported by `build`, before anything serves.
#[tokio::test]
async fn setup_mistakes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let store = open_store(Backend::Embedded, &dir, clock.clone(), None);
    let shared_clock: Arc<dyn Clock> = clock;
    let builder = || {
        WaitingRoom::builder(store.clone(), shared_clock.clone())
            .key_dir(dir.path().join("keys"))
            .public_url("https://shop.example")
    };
    let unknown = builder().protect(["/x/**"], &id("nowhere")).build().await;
    assert!(matches!(
        unknown,
        Err(WaitingRoomSetupError::UnknownRoom { .. })
    ));
    let bad_glob = builder()
        .room(RoomConfig::with_defaults(id("launch")))
        .protect(["no-slash"], &id("launch"))
        .build()
        .await;
    assert!(matches!(bad_glob, Err(WaitingRoomSetupError::Route { .. })));
    let no_url = WaitingRoom::builder(store.clone(), shared_clock.clone())
        .key_dir(dir.path().join("keys"))
        .build()
        .await;
    assert!(matches!(no_url, Err(WaitingRoomSetupError::NoPublicUrl)));
    let bad_url = builder().public_url("shop.example").build().await;
    assert!(matches!(bad_url, Err(WaitingRoomSetupError::PublicUrl(_))));
    let missing_tier = builder()
        .room(RoomConfig {
            requires: vec![id("site")],
            ..RoomConfig::with_defaults(id("checkout"))
        })
        .build()
        .await;
    let Err(error) = missing_tier else {
        panic!("a required room that does not exist");
    };
    assert_eq!(
        error.to_string(),
        "room checkout's `requires` names room site, which is neither given to the builder nor in the store"
    );
    // An app state given whole has its own keys and public URL.
    let made = builder().build().await.unwrap();
    let twice = WaitingRoom::builder_with_state(made.state().clone())
        .public_url("https://other.example")
        .build()
        .await;
    assert!(matches!(
        twice,
        Err(WaitingRoomSetupError::StateGiven("public_url"))
    ));
}
