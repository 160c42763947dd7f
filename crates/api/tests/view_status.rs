//! Status polls answered from a node's view of the line (SPEC §6.1, I5, I7): two nodes share
//! one store, each with its own view read at its own time. A poll that says which `ahead` it
//! was last shown is answered from the node's view only when that view is fresh and shows no
//! more people ahead; anything else, an admitted ticket above all, is the store's to answer.
//!
//! Whether an answer came from a view is told by the figures: between a view's read and the
//! poll, a ticket ahead leaves in the store, so the view and the store say different things.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use anteroom_api::{AppState, NodeOptions, PublicSettings, public_router, run_ticker};
use anteroom_core::engine::{Entry, JoinRequest, SessionEnd, TicketRef};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, TicketId, Timestamp};
use anteroom_store::{MemoryStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm, TicketSigner};

const START: Timestamp = Timestamp(1_700_000_000_000);

/// Two nodes on one store, the room's single slot taken by a first visitor.
struct Nodes {
    store: Arc<dyn RoomStore>,
    clock: Arc<ManualClock>,
    a: Node,
    b: Node,
    room: RoomId,
    /// The session holding the slot.
    first_session: anteroom_core::SessionId,
    _keys: tempfile::TempDir,
}

struct Node {
    state: AppState,
    router: Router,
}

/// A visitor waiting in line, as its client knows it.
#[derive(Clone)]
struct Visitor {
    token: String,
    reference: TicketRef,
}

/// An answer to a poll.
struct Polled {
    status: StatusCode,
    body: serde_json::Value,
    /// The `Age` header: present on an answer from a view.
    age: Option<String>,
}

impl Polled {
    fn ahead(&self) -> u64 {
        assert_eq!(self.status, StatusCode::OK, "{}", self.body);
        assert_eq!(self.body["state"], "waiting", "{}", self.body);
        self.body["ahead"].as_u64().unwrap()
    }
}

/// The nodes, the room admitting at most `admit_per_minute` (a burst of a second's worth).
async fn nodes(ticket_idle_ttl: Duration, admit_per_minute: u64) -> Nodes {
    let clock = Arc::new(ManualClock::new(START));
    let shared_clock: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(shared_clock.clone()));
    let room = RoomId::new("launch").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 1;
    config.admit_per_minute = admit_per_minute;
    config.admit_burst = (admit_per_minute / 60).max(1);
    config.session_ttl = Duration::from_secs(3600);
    config.ticket_idle_ttl = ticket_idle_ttl;
    store.put_room(config).await.unwrap();
    let Entry::Admitted(first) = store.join(&room, JoinRequest::default()).await.unwrap() else {
        panic!("the first visitor takes the free slot");
    };
    let keys = tempfile::tempdir().unwrap();
    let node = || {
        let keys = KeySet::load_or_generate(keys.path(), SigningAlgorithm::EdDsa, START.as_secs())
            .unwrap();
        let settings = PublicSettings {
            public_url: "https://shop.example".to_owned(),
            issuer: "https://shop.example".to_owned(),
            service_keys: Vec::new(),
            trusted_proxies: Vec::new(),
        };
        let state = AppState::with_options(
            store.clone(),
            keys,
            shared_clock.clone(),
            settings,
            NodeOptions::default(),
        );
        Node {
            router: public_router(state.clone()),
            state,
        }
    };
    let (a, b) = (node(), node());
    Nodes {
        store,
        clock,
        a,
        b,
        room,
        first_session: first.session.id,
        _keys: keys,
    }
}

fn request(method: Method, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, "shop.example")
        .header(http::header::ACCEPT, "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::empty()).unwrap();
    let peer: SocketAddr = "203.0.113.7:1".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

async fn send(router: &Router, request: Request<Body>) -> Polled {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let age = response
        .headers()
        .get(http::header::AGE)
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    Polled { status, body, age }
}

impl Nodes {
    /// `count` visitors join through node A.
    async fn join(&self, count: usize) -> Vec<Visitor> {
        let mut visitors = Vec::new();
        for _ in 0..count {
            let joined = send(
                &self.a.router,
                request(Method::POST, "/_anteroom/v1/rooms/launch/join", &[]),
            )
            .await;
            assert_eq!(joined.status, StatusCode::OK, "{}", joined.body);
            let token = joined.body["ticket"].as_str().unwrap().to_owned();
            let claims = self
                .a
                .state
                .keys()
                .ticket_signer()
                .verify(&token, "launch", START.as_secs())
                .unwrap();
            visitors.push(Visitor {
                token,
                reference: TicketRef {
                    id: claims.ticket_id.parse::<TicketId>().unwrap(),
                    generation: claims.generation,
                },
            });
        }
        visitors
    }

    /// The visitor's poll through `node`, saying it was last shown `shown` ahead (no header
    /// when `None`).
    async fn poll(&self, node: &Node, visitor: &Visitor, shown: Option<&str>) -> Polled {
        let mut headers = vec![("x-anteroom-ticket", visitor.token.as_str())];
        if let Some(shown) = shown {
            headers.push(("x-anteroom-ahead", shown));
        }
        send(
            &node.router,
            request(Method::GET, "/_anteroom/v1/rooms/launch/status", &headers),
        )
        .await
    }

    /// Node `node` rereads its view of the room (the ticker and the change notices do it).
    async fn refresh(&self, node: &Node) {
        node.state.hub().refresh(&*self.store, &self.room).await;
    }

    /// The store's own `ahead` for the visitor (a store status, which is also contact).
    async fn store_ahead(&self, visitor: &Visitor) -> u64 {
        match self
            .store
            .status(&self.room, visitor.reference)
            .await
            .unwrap()
        {
            Entry::Waiting(view) => view.ahead,
            Entry::Admitted(_) => panic!("still waiting"),
        }
    }

    async fn leave(&self, visitor: &Visitor) {
        self.store
            .leave(&self.room, visitor.reference)
            .await
            .unwrap();
    }
}

/// I5 across nodes: a node whose view is older than the answer the visitor last saw sends the
/// poll to the store, and a newer view answers without one.
#[tokio::test(start_paused = true)]
async fn ahead_never_grows_across_nodes_with_views_of_different_ages() {
    let nodes = nodes(Duration::from_secs(300), 60).await;
    let line = nodes.join(8).await;
    let visitor = &line[7];
    // The first poll of a room marks it polled; it has no view yet, so the store answers.
    let first = nodes.poll(&nodes.b, visitor, Some("7")).await;
    assert_eq!(first.ahead(), 7);
    nodes.poll(&nodes.a, visitor, Some("7")).await;

    // Node B reads the line with 7 ahead; two leave; node A reads it with 5 ahead.
    nodes.refresh(&nodes.b).await;
    nodes.leave(&line[0]).await;
    nodes.leave(&line[1]).await;
    nodes.refresh(&nodes.a).await;
    // One more leaves after both reads: the store says 4, both views say more.
    nodes.leave(&line[2]).await;

    let from_a = nodes.poll(&nodes.a, visitor, Some("7")).await;
    assert_eq!(from_a.ahead(), 5, "node A's view answers: {}", from_a.body);
    assert_eq!(from_a.age.as_deref(), Some("0"), "and says how old it is");

    // Node B's view (7 ahead) is older than what the visitor was just shown (5): the store
    // answers, with the line as it is now.
    let from_b = nodes.poll(&nodes.b, visitor, Some("5")).await;
    assert_eq!(from_b.ahead(), 4, "the store answers: {}", from_b.body);
    assert_eq!(from_b.age, None);

    // Shown 4 now: neither view may answer (5 and 7 ahead), each poll goes to the store.
    for node in [&nodes.a, &nodes.b] {
        assert_eq!(nodes.poll(node, visitor, Some("4")).await.ahead(), 4);
    }

    // Once node A rereads the line, its view answers again.
    nodes.leave(&line[3]).await;
    nodes.refresh(&nodes.a).await;
    nodes.leave(&line[4]).await;
    assert_eq!(nodes.poll(&nodes.a, visitor, Some("4")).await.ahead(), 3);
    assert_eq!(nodes.store_ahead(visitor).await, 2);
}

/// The `ahead` a client sends only chooses between a view and the store: a stale (larger)
/// one is answered from a view that shows a line as it was moments ago, a forged smaller one
/// goes to the store; neither shows a figure no poll could have shown, and neither changes
/// the line. A value that is not a number is refused.
#[tokio::test(start_paused = true)]
async fn a_stale_or_forged_ahead_moves_nobody_and_shows_no_false_line() {
    let nodes = nodes(Duration::from_secs(300), 60).await;
    let line = nodes.join(5).await;
    let visitor = &line[4];
    nodes.poll(&nodes.a, visitor, Some("4")).await;
    nodes.refresh(&nodes.a).await;
    nodes.leave(&line[0]).await;

    // Stale: the view (4 ahead, read a moment ago) answers.
    let stale = nodes.poll(&nodes.a, visitor, Some("1000")).await;
    assert_eq!(stale.ahead(), 4);
    // Forged below the view: the store answers with the truth, 3, not the 0 asked for.
    let forged = nodes.poll(&nodes.a, visitor, Some("0")).await;
    assert_eq!(forged.ahead(), 3);
    assert_eq!(forged.body["position"], 6, "{}", forged.body);

    for bad in ["-1", "three", "1e3", "18446744073709551616"] {
        let refused = nodes.poll(&nodes.a, visitor, Some(bad)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(refused.body["code"], "invalid_ahead", "{bad}");
    }
    assert_eq!(nodes.store_ahead(visitor).await, 3, "nobody moved");
    let snapshot = nodes.store.snapshot(&nodes.room).await.unwrap();
    assert_eq!((snapshot.serving, snapshot.waiting), (1, 4));

    // A token placing the ticket at another position cannot be made without the node's
    // secret: one signed with another is refused before any view is read.
    let forged_token = TicketSigner::from_secret([7; 32]).sign_fields(
        "launch",
        &visitor.reference.id.to_string(),
        2,
        visitor.reference.generation,
    );
    let forged = Visitor {
        token: forged_token,
        reference: visitor.reference,
    };
    let refused = nodes.poll(&nodes.a, &forged, Some("1000")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.body["code"], "ticket_invalid", "{}", refused.body);
}

/// A view older than its bound answers nothing, however little it shows ahead (a room
/// admitting one a minute, so the front guard stays at 2 over these seconds).
#[tokio::test(start_paused = true)]
async fn a_view_past_its_age_bound_sends_the_poll_to_the_store() {
    let nodes = nodes(Duration::from_secs(300), 1).await;
    let line = nodes.join(3).await;
    let visitor = &line[2];
    nodes.poll(&nodes.a, visitor, Some("2")).await;
    nodes.refresh(&nodes.a).await;
    nodes.leave(&line[0]).await;
    tokio::time::advance(Duration::from_millis(4_900)).await;
    let answered = nodes.poll(&nodes.a, visitor, Some("2")).await;
    assert_eq!((answered.ahead(), answered.age.as_deref()), (2, Some("4")));
    tokio::time::advance(Duration::from_millis(200)).await;
    let answered = nodes.poll(&nodes.a, visitor, Some("2")).await;
    assert_eq!(
        (answered.ahead(), answered.age),
        (1, None),
        "the store answers"
    );
}

/// Passes only come from the store, and the front of the line always asks it: a ticket the
/// room may have admitted since the view was read (fewer people ahead than the room admits in
/// the view's age) is answered by the store, so an admitted visitor hears of it at its next
/// poll, with the same session every time (I7).
#[tokio::test(start_paused = true)]
async fn an_admitted_ticket_is_never_answered_from_a_view() {
    let nodes = nodes(Duration::from_secs(300), 60).await;
    let line = nodes.join(2).await;
    let visitor = &line[0];
    nodes.poll(&nodes.a, visitor, Some("0")).await;
    nodes.poll(&nodes.b, visitor, Some("0")).await;
    nodes.refresh(&nodes.a).await;
    nodes.refresh(&nodes.b).await;

    // The slot frees a second later (the admission bucket has refilled): ending the session
    // admits the visitor. Both views, read before, still show it waiting at the front.
    nodes.clock.advance(Duration::from_secs(1));
    nodes
        .store
        .end_session(&nodes.room, nodes.first_session, SessionEnd::Completed)
        .await
        .unwrap();
    let snapshot = nodes.store.snapshot(&nodes.room).await.unwrap();
    assert_eq!(snapshot.serving, 2, "the visitor is admitted");

    // The pass's claims (its session, `iat` its last renewal) are the same on every poll,
    // whichever node and whatever the client sends.
    let claims = |polled: &Polled| {
        assert_eq!(polled.status, StatusCode::OK, "{}", polled.body);
        assert_eq!(polled.body["state"], "admitted", "{}", polled.body);
        assert_eq!(polled.age, None, "the store answered");
        let pass = polled.body["pass"].as_str().unwrap();
        pass.split('.').nth(1).unwrap().to_owned()
    };
    let first_claims = claims(&nodes.poll(&nodes.b, visitor, Some("0")).await);
    for node in [&nodes.a, &nodes.b] {
        for shown in [Some("0"), Some("1000"), None] {
            let again = nodes.poll(node, visitor, shown).await;
            assert_eq!(claims(&again), first_claims, "the same session");
        }
    }
    let snapshot = nodes.store.snapshot(&nodes.room).await.unwrap();
    assert_eq!(snapshot.active + snapshot.admitted_unclaimed, 1, "one slot");
}

/// The view answers only behind what the room may admit in its age: at 600 a minute (a burst
/// of 10), a ticket with 7 ahead asks the store even from a view read just now.
#[tokio::test(start_paused = true)]
async fn the_front_of_the_line_asks_the_store() {
    let nodes = nodes(Duration::from_secs(300), 600).await;
    let line = nodes.join(14).await;
    let (near, far) = (&line[7], &line[13]);
    nodes.poll(&nodes.a, near, Some("7")).await;
    nodes.refresh(&nodes.a).await;
    nodes.leave(&line[0]).await;
    let answered = nodes.poll(&nodes.a, near, Some("7")).await;
    assert_eq!((answered.ahead(), answered.age), (6, None), "the store");
    let answered = nodes.poll(&nodes.a, far, Some("13")).await;
    assert_eq!(answered.ahead(), 13, "the view");
    assert_eq!(answered.age.as_deref(), Some("0"));
    // A second later the room may have admitted 10 more: 13 is not enough either.
    tokio::time::advance(Duration::from_millis(1_000)).await;
    let answered = nodes.poll(&nodes.a, far, Some("13")).await;
    assert_eq!((answered.ahead(), answered.age), (12, None), "the store");
}

/// A poll the view answers is contact (SPEC §5.2): the ticker touches the ticket, so a
/// visitor polled only through the view outlives `ticket_idle_ttl`, while one that stopped
/// polling is abandoned.
#[tokio::test(start_paused = true)]
async fn polls_answered_from_the_view_keep_the_ticket_alive() {
    let ttl = Duration::from_secs(60);
    let nodes = nodes(ttl, 60).await;
    let line = nodes.join(32).await;
    let (ahead_of_us, visitor, gone) = (&line[..30], &line[30], &line[31]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let ticker = tokio::spawn(run_ticker(nodes.a.state.clone(), async move {
        let _ = stopped.await;
    }));
    // The room becomes polled on node A; the ticker then keeps its view fresh.
    nodes.poll(&nodes.a, visitor, Some("30")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut shown = 30;
    for step in 0..26 {
        // Between the ticker's rounds (every 500 ms): the clock moves, the people ahead are
        // kept alive by the store, and one of them leaves after the view was read.
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        nodes.clock.advance(Duration::from_secs(5));
        nodes
            .store
            .touch(&nodes.room, &refs(&ahead_of_us[step..]))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        nodes.leave(&ahead_of_us[step]).await;
        let answer = nodes
            .poll(&nodes.a, visitor, Some(&shown.to_string()))
            .await;
        let ahead = answer.ahead();
        assert_eq!(ahead, shown, "step {step}: answered from the view");
        shown = ahead - 1;
        // The next round of the ticker reads the line without the one who left.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        nodes.clock.now().as_millis() - START.as_millis() > 2 * ttl.as_millis() as u64,
        "the visitor waited past its idle limit, answered by the view alone"
    );
    // Still waiting in the store; the visitor who stopped polling was abandoned.
    assert_eq!(nodes.store_ahead(visitor).await, 4);
    let abandoned = nodes.poll(&nodes.b, gone, None).await;
    assert_eq!(abandoned.status, StatusCode::GONE, "{}", abandoned.body);
    let _ = stop.send(());
    ticker.await.unwrap();
}

fn refs(visitors: &[Visitor]) -> Vec<TicketRef> {
    visitors.iter().map(|visitor| visitor.reference).collect()
}
