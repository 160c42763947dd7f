//! What the public API tests share: a router over an in-memory store and a manual clock, a
//! request builder, and one `check` that sends a request and hands back status, headers and
//! the JSON body.
//!
//! Each request goes through a real HTTP engine: the router is served on a loopback socket by
//! the engine `ANTEROOM_TEST_HTTP_ENGINE` names (`own`, the default, or `hyper`), so one suite
//! checks both engines (scripts/test runs it under each). `direct` hands requests straight to
//! the router with `oneshot`, without a socket.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::connect_info::MockConnectInfo;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use tower::ServiceExt;

use anteroom_api::{AppState, PublicSettings, public_router};
use anteroom_core::config::{HttpEngine, KeyHash};
use anteroom_core::engine::{RoomTotals, TickReport};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_edge::PublicApp;
use anteroom_store::{MemoryStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm};

/// Where every test's clock starts (14 November 2023, a whole second).
pub(crate) const START: Timestamp = Timestamp(1_700_000_000_000);

/// The `iss` of every pass the harness issues.
pub(crate) const ISSUER: &str = "https://shop.example";

/// The address every harness request comes from: the site's own proxy, in
/// `trusted_proxies`.
pub(crate) const SITE_PROXY: &str = "192.0.2.10";

/// The one backend key the harness accepts on the session endpoints.
pub(crate) const SERVICE_KEY: &str = "backend-service-key-0123456789";

/// A room id, for the store's methods.
pub(crate) fn room_id(text: &str) -> RoomId {
    RoomId::new(text).unwrap()
}

/// A room with every field at its default (unlimited, `queue`, anonymous).
pub(crate) fn room(id: &str) -> RoomConfig {
    RoomConfig::with_defaults(room_id(id))
}

/// A `queue` room holding at most `max_active` sessions.
pub(crate) fn capped_room(id: &str, max_active: u64) -> RoomConfig {
    RoomConfig {
        max_active,
        ..room(id)
    }
}

/// The SHA-256 of a key, as the settings hold it.
pub(crate) fn key_hash(key: &str) -> KeyHash {
    KeyHash(Sha256::digest(key.as_bytes()).into())
}

/// One public router with everything behind it.
pub(crate) struct Harness {
    pub(crate) app: Router,
    pub(crate) state: AppState,
    pub(crate) store: Arc<dyn RoomStore>,
    pub(crate) clock: Arc<ManualClock>,
    _key_dir: TempDir,
}

impl Harness {
    /// A harness behind `https://shop.example` holding `rooms`.
    ///
    /// Requests come from [`SITE_PROXY`], a trusted proxy.
    pub(crate) async fn new(rooms: Vec<RoomConfig>) -> Harness {
        Harness::with_public_url("https://shop.example", rooms).await
    }

    /// A harness whose public base URL is `public_url`, holding `rooms`.
    pub(crate) async fn with_public_url(public_url: &str, rooms: Vec<RoomConfig>) -> Harness {
        let clock = Arc::new(ManualClock::new(START));
        let shared_clock: Arc<dyn Clock> = clock.clone();
        let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(shared_clock.clone()));
        for config in rooms {
            store.put_room(config).await.unwrap();
        }
        let key_dir = tempfile::tempdir().unwrap();
        let keys =
            KeySet::load_or_generate(key_dir.path(), SigningAlgorithm::EdDsa, START.as_secs())
                .unwrap();
        let settings = PublicSettings {
            public_url: public_url.to_owned(),
            issuer: ISSUER.to_owned(),
            service_keys: vec![key_hash(SERVICE_KEY)],
            // Every request comes from the site's proxy, which identity rooms believe.
            trusted_proxies: vec![SITE_PROXY.parse().unwrap()],
        };
        let state = AppState::new(store.clone(), keys, shared_clock, settings);
        let from_proxy = MockConnectInfo(SocketAddr::new(SITE_PROXY.parse().unwrap(), 443));
        Harness {
            app: public_router(state.clone()).layer(from_proxy),
            state,
            store,
            clock,
            _key_dir: key_dir,
        }
    }

    /// Sends one request and reads the whole answer. No request, good or bad, may be answered
    /// with a 500.
    pub(crate) async fn check(&self, call: Call) -> Reply {
        let request = call.builder.body(call.body).unwrap();
        let described = format!("{} {}", request.method(), request.uri());
        let response = match test_engine() {
            None => self.app.clone().oneshot(request).await.unwrap(),
            Some(engine) => through_engine(self.app.clone(), engine, request).await,
        };
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        assert_ne!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{described} answered 500: {body}"
        );
        Reply {
            status,
            headers,
            body,
        }
    }

    /// The room's counters as the store sees them now.
    pub(crate) async fn counters(&self, room: &str) -> Counters {
        let snapshot = self.store.snapshot(&room_id(room)).await.unwrap();
        Counters {
            generation: snapshot.generation,
            last_position: snapshot.last_position,
            serving: snapshot.serving,
            waiting: snapshot.waiting,
            active: snapshot.active,
            admitted_unclaimed: snapshot.admitted_unclaimed,
            totals: snapshot.totals,
        }
    }

    /// Runs the admitter of `room` once.
    pub(crate) async fn tick(&self, room: &str) -> TickReport {
        self.store.tick(&room_id(room)).await.unwrap()
    }

    /// Moves the clock forward.
    pub(crate) fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// The clock, in Unix seconds.
    pub(crate) fn now_secs(&self) -> u64 {
        self.clock.now().as_secs()
    }

    /// The key set the router signs with.
    pub(crate) fn keys(&self) -> KeySet {
        self.state.keys()
    }
}

/// The engine `ANTEROOM_TEST_HTTP_ENGINE` names (`own` when unset); `None` for `direct`.
pub(crate) fn test_engine() -> Option<HttpEngine> {
    match std::env::var("ANTEROOM_TEST_HTTP_ENGINE").as_deref() {
        Err(_) | Ok("own") => Some(HttpEngine::Own),
        Ok("hyper") => Some(HttpEngine::Hyper),
        Ok("direct") => None,
        Ok(other) => panic!("ANTEROOM_TEST_HTTP_ENGINE={other:?}: expected own, hyper or direct"),
    }
}

/// Serves `app` with `engine` on a loopback socket for one request, sends `request` over
/// HTTP/1.1 and reads the whole answer. The router still sees the harness's peer (the site's
/// proxy), as with `oneshot`.
async fn through_engine(app: Router, engine: HttpEngine, request: Request<Body>) -> Response<Body> {
    let peer = ConnectInfo(SocketAddr::new(SITE_PROXY.parse().unwrap(), 443));
    let app = app.layer(tower::util::MapRequestLayer::new(
        move |mut request: Request<Body>| {
            request.extensions_mut().insert(peer);
            request
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(anteroom_edge::serve(
        listener,
        PublicApp::from(app).with_engine(engine),
        async move {
            let _ = stopped.await;
        },
    ));
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let mut request = request;
    if !request.headers().contains_key(header::HOST) {
        request
            .headers_mut()
            .insert(header::HOST, HeaderValue::from_static("shop.example"));
    }
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    drop(sender);
    let _ = driver.await;
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    Response::from_parts(parts, Body::from(bytes))
}

/// What a room holds, in the figures a bad request must not move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) generation: u32,
    pub(crate) last_position: u64,
    pub(crate) serving: u64,
    pub(crate) waiting: u64,
    pub(crate) active: u64,
    pub(crate) admitted_unclaimed: u64,
    pub(crate) totals: RoomTotals,
}

/// A request being put together.
pub(crate) struct Call {
    builder: http::request::Builder,
    body: Body,
}

impl Call {
    fn new(method: Method, uri: &str) -> Call {
        Call {
            builder: Request::builder().method(method).uri(uri),
            body: Body::empty(),
        }
    }

    /// `GET uri`
    pub(crate) fn get(uri: &str) -> Call {
        Call::new(Method::GET, uri)
    }

    /// `POST uri`
    pub(crate) fn post(uri: &str) -> Call {
        Call::new(Method::POST, uri)
    }

    /// `DELETE uri`
    pub(crate) fn delete(uri: &str) -> Call {
        Call::new(Method::DELETE, uri)
    }

    /// Any method.
    pub(crate) fn method(method: Method, uri: &str) -> Call {
        Call::new(method, uri)
    }

    /// Adds a header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Call {
        self.builder = self.builder.header(name, value);
        self
    }

    /// Adds a `Cookie` header with one cookie.
    pub(crate) fn cookie(self, name: &str, value: &str) -> Call {
        self.header("cookie", &format!("{name}={value}"))
    }

    /// A JSON body.
    pub(crate) fn json(mut self, text: impl Into<String>) -> Call {
        self.builder = self
            .builder
            .header(header::CONTENT_TYPE, "application/json");
        self.body = Body::from(text.into());
        self
    }

    /// A body of raw bytes.
    pub(crate) fn bytes(mut self, bytes: Vec<u8>) -> Call {
        self.body = Body::from(bytes);
        self
    }
}

/// What came back.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// The body as JSON; `Null` when empty, a JSON string when not JSON.
    pub(crate) body: Value,
}

impl Reply {
    /// A string member of the body.
    pub(crate) fn text(&self, member: &str) -> &str {
        self.body[member]
            .as_str()
            .unwrap_or_else(|| panic!("{member} is not a string in {}", self.body))
    }

    /// A number member of the body.
    pub(crate) fn number(&self, member: &str) -> u64 {
        self.body[member]
            .as_u64()
            .unwrap_or_else(|| panic!("{member} is not a number in {}", self.body))
    }

    /// The names of the body's members.
    pub(crate) fn members(&self) -> BTreeSet<String> {
        self.body
            .as_object()
            .unwrap_or_else(|| panic!("body is not an object: {}", self.body))
            .keys()
            .cloned()
            .collect()
    }

    /// A header as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    /// The whole `Set-Cookie` line for cookie `name`, if one was set.
    pub(crate) fn set_cookie(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}=");
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|value| value.to_str().unwrap())
            .find(|line| line.starts_with(&prefix))
    }

    /// Asserts an RFC 9457 problem with `status` and the stable `code`.
    #[track_caller]
    pub(crate) fn assert_problem(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{status} {code}"
        );
        assert_eq!(self.body["code"], code, "body: {}", self.body);
        assert_eq!(self.body["status"], status.as_u16(), "body: {}", self.body);
    }
}
