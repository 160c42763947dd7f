//! The gateway end to end (SPEC §7): the real binary in front of a real local upstream, through
//! the real config parser. Each test starts what it uses.
#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod correlation;
mod nginx;
mod spans;
mod streaming;
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, COOKIE, HeaderMap, SET_COOKIE};
use serde_json::Value;

use support::{SERVICE_KEY, Server, Site, jwt_claims};
use upstream::Upstream;

const HTML: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";
const JSON: &str = "application/json";

/// A gateway in front of an upstream.
pub(crate) struct Gate {
    /// Holds the scratch directory while the server runs.
    _site: Site,
    pub(crate) server: Server,
    _upstream: Upstream,
    pub(crate) client: reqwest::Client,
}

impl Gate {
    /// Starts an upstream, then anteroom with `[upstream] url` pointing at it and `extra`
    /// (rooms, routes, …; `{upstream}` is replaced by the upstream's URL).
    pub(crate) async fn start(extra: &str) -> Gate {
        Gate::start_with("", extra).await
    }

    /// [`Gate::start`] with `server` added to the config's `[server]` section.
    pub(crate) async fn start_with(server: &str, extra: &str) -> Gate {
        let upstream = Upstream::start().await;
        let site = Site::new();
        let text = extra.replace("{upstream}", &upstream.url());
        let path = site.write_config("EdDSA", &text);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replacen("[server]\n", &format!("[server]\n{server}\n"), 1),
        )
        .unwrap();
        let mut server = site.start();
        let client = client();
        server.wait_ready(&client).await;
        Gate {
            _site: site,
            server,
            _upstream: upstream,
            client,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// A request with `jar`'s cookies and `accept`; the jar takes the answer's cookies.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        jar: &mut Jar,
        accept: &str,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self
            .client
            .request(method, self.url(path))
            .header(ACCEPT, accept);
        if let Some(cookies) = jar.header() {
            request = request.header(COOKIE, cookies);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        jar.absorb(response.headers());
        response
    }

    async fn get(&self, path: &str, jar: &mut Jar, accept: &str) -> reqwest::Response {
        self.send(reqwest::Method::GET, path, jar, accept, &[])
            .await
    }

    /// The public summary of `room`.
    async fn summary(&self, room: &str) -> Value {
        self.client
            .get(self.url(&format!("/_anteroom/v1/rooms/{room}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A client that follows no redirect and keeps no cookie (tests keep them in a [`Jar`]).
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// One visitor's cookies.
#[derive(Debug, Default, Clone)]
pub(crate) struct Jar(BTreeMap<String, String>);

impl Jar {
    pub(crate) fn absorb(&mut self, headers: &HeaderMap) {
        for value in headers.get_all(SET_COOKIE) {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if text.contains("Max-Age=0") {
                self.0.remove(name);
            } else {
                self.0.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    pub(crate) fn header(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| {
            self.0
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub(crate) fn without(&self, name: &str) -> Jar {
        let mut jar = self.clone();
        jar.0.remove(name);
        jar
    }
}

/// Whether a response came from the upstream (its echo), and the echo.
async fn echoed(response: reqwest::Response) -> Option<Value> {
    let text = response.text().await.unwrap();
    serde_json::from_str::<Value>(&text)
        .ok()
        .filter(|body| body["upstream"] == true)
}

const ONE_ROOM: &str = r#"
[upstream]
url = "{upstream}"

[[room]]
id = "shop"
max_active = 1
session_ttl = "10m"

[[route]]
name = "health"
paths = ["/healthz"]
bypass = true

[[route]]
paths = ["/r/**"]
rooms = ["shop"]
page = "redirect"

[[route]]
paths = ["/**"]
rooms = ["shop"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_through_while_the_room_has_room_and_queues_when_full() {
    let gate = Gate::start(ONE_ROOM).await;

    // The first visitor is admitted on the spot and proxied, with forwarding headers.
    let mut first = Jar::default();
    let response = gate.get("/products?page=2", &mut first, HTML).await;
    assert_eq!(response.status(), StatusCode::OK);
    let echo = echoed(response).await.expect("proxied to the upstream");
    assert_eq!(echo["path"], "/products?page=2");
    let headers = &echo["headers"];
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["host"], format!("127.0.0.1:{}", gate.server.port));
    assert!(
        headers["forwarded"]
            .as_str()
            .unwrap()
            .starts_with("for=127.0.0.1;proto=http")
    );
    assert!(first.get("anteroom_p_shop").is_some(), "pass cookie set");

    // Bypass routes need nothing.
    let mut nobody = Jar::default();
    let response = gate.get("/healthz", &mut nobody, HTML).await;
    assert!(echoed(response).await.is_some());
    assert!(nobody.get("anteroom_p_shop").is_none());

    // The room is full: the second visitor gets the waiting page inline, with a ticket.
    let mut second = Jar::default();
    let response = gate.get("/products", &mut second, HTML).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = response.text().await.unwrap();
    assert!(!page.contains("\"upstream\""), "not proxied");
    assert!(second.get("anteroom_t_shop").is_some(), "ticket cookie set");
    assert!(second.get("anteroom_p_shop").is_none());
    assert_eq!(gate.summary("shop").await["waiting"], 1);

    // With page = "redirect" the navigation is sent to the waiting page.
    let response = gate.get("/r/item?x=1", &mut second, HTML).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(
        response.headers()["location"],
        "/_anteroom/wait/shop?return=/r/item%3Fx%3D1"
    );

    // The first visitor keeps going through on their pass.
    let response = gate.get("/again", &mut first, HTML).await;
    assert!(echoed(response).await.is_some());

    // The first session ends (the site's backend completes it): the second visitor's ticket is
    // admitted within a second, and their pass gets them through.
    let pass = first.get("anteroom_p_shop").unwrap().to_owned();
    let session = jwt_claims(&pass)["sub"].as_str().unwrap().to_owned();
    let completed = gate
        .client
        .post(gate.url(&format!(
            "/_anteroom/v1/rooms/shop/sessions/{session}/complete"
        )))
        .bearer_auth(SERVICE_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(completed.status(), StatusCode::OK);
    let ended = Instant::now();
    loop {
        let status: Value = gate
            .get("/_anteroom/v1/rooms/shop/status", &mut second, JSON)
            .await
            .json()
            .await
            .unwrap();
        if status["state"] == "admitted" {
            break;
        }
        assert!(ended.elapsed() < Duration::from_secs(2), "still {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let response = gate.get("/products", &mut second, HTML).await;
    assert!(
        echoed(response).await.is_some(),
        "the admitted visitor is proxied"
    );

    // The ended pass no longer gets through (revocation within a second).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let response = gate.get("/products", &mut first, JSON).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_calls_without_a_pass_get_429_json() {
    let gate = Gate::start(ONE_ROOM).await;
    let mut holder = Jar::default();
    assert!(
        echoed(gate.get("/", &mut holder, HTML).await)
            .await
            .is_some()
    );

    let mut api = Jar::default();
    let response = gate
        .send(reqwest::Method::POST, "/api/orders", &mut api, JSON, &[])
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "waiting_room");
    assert_eq!(body["status"], 429);
    assert_eq!(body["join_url"], "/_anteroom/v1/rooms/shop/join");
    assert_eq!(body["wait_url"], "/_anteroom/wait/shop?return=/api/orders");
    // A client keeping no cookie leaves no ticket behind.
    for _ in 0..5 {
        let response = gate
            .send(
                reqwest::Method::GET,
                "/api/orders",
                &mut Jar::default(),
                JSON,
                &[],
            )
            .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(gate.summary("shop").await["waiting"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_tier_route_needs_both_passes() {
    let gate = Gate::start(
        r#"
[upstream]
url = "{upstream}"

[[room]]
id = "site"
max_active = 1

[[room]]
id = "checkout"
max_active = 1
requires = ["site"]

[[route]]
paths = ["/checkout/**"]
rooms = ["site", "checkout"]

[[route]]
paths = ["/**"]
rooms = ["site"]
"#,
    )
    .await;
    // The first visitor is let into both tiers at once.
    let mut visitor = Jar::default();
    let response = gate.get("/checkout/cart", &mut visitor, HTML).await;
    assert!(echoed(response).await.is_some());
    assert!(visitor.get("anteroom_p_site").is_some());
    assert!(visitor.get("anteroom_p_checkout").is_some());

    // Both rooms are now full. Each pass alone is not enough for the checkout route.
    // (The ticket cookies go too: a ticket that holds a session gets its pass back.)
    let mut only_checkout = visitor
        .without("anteroom_p_site")
        .without("anteroom_t_site");
    let response = gate.get("/checkout/cart", &mut only_checkout, JSON).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["room"], "site");

    let mut only_site = visitor
        .without("anteroom_p_checkout")
        .without("anteroom_t_checkout");
    let response = gate.get("/checkout/cart", &mut only_site, JSON).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["room"], "checkout");
    // The tier-1 pass still opens the rest of the site.
    let response = gate.get("/catalogue", &mut only_site, JSON).await;
    assert!(echoed(response).await.is_some());

    // Both passes together go through.
    let response = gate.get("/checkout/pay", &mut visitor, JSON).await;
    assert!(echoed(response).await.is_some());
}

/// The forwarding headers a client sent, as the site sees them behind a gateway whose `[server]`
/// section has `server` (the test's requests come from 127.0.0.1).
async fn forwarding_seen_by_the_site(server: &str) -> Value {
    let gate = Gate::start_with(
        server,
        r#"
[upstream]
url = "{upstream}"
"#,
    )
    .await;
    let sent = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("x-forwarded-proto", "https"),
        // What other proxies tell a site about the visitor: planted by a client, a site
        // behind the gateway would believe them as the gateway's.
        ("x-real-ip", "10.0.0.1"),
        ("x-forwarded-prefix", "//evil.example"),
        ("x-forwarded-port", "443"),
        ("x-original-uri", "/admin"),
        ("true-client-ip", "10.0.0.2"),
    ];
    let response = gate
        .send(reqwest::Method::GET, "/", &mut Jar::default(), HTML, &sent)
        .await;
    let echo = echoed(response).await.expect("proxied to the upstream");
    echo["headers"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_are_believed_only_from_the_node_s_trusted_proxies() {
    // From a peer outside `[server] trusted_proxies` the planted chain is dropped.
    let headers = forwarding_seen_by_the_site("").await;
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    for planted in [
        "x-real-ip",
        "x-forwarded-prefix",
        "x-forwarded-port",
        "x-original-uri",
        "true-client-ip",
    ] {
        assert!(headers.get(planted).is_none(), "{planted}: {headers}");
    }
    assert!(
        headers["forwarded"]
            .as_str()
            .unwrap()
            .starts_with("for=127.0.0.1;proto=http")
    );

    // From a trusted proxy its chain is kept and the peer appended.
    let headers = forwarding_seen_by_the_site(r#"trusted_proxies = ["127.0.0.1/32"]"#).await;
    assert_eq!(headers["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "https");
    assert_eq!(headers["x-real-ip"], "10.0.0.1");
    assert_eq!(headers["x-forwarded-prefix"], "//evil.example");
    assert_eq!(headers["x-original-uri"], "/admin");
    assert!(
        headers["forwarded"]
            .as_str()
            .unwrap()
            .starts_with("for=203.0.113.9, for=127.0.0.1;proto=http")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uid_mismatch_is_refused_on_mutating_requests() {
    // The identity header comes from the site's proxy (here: the test, on 127.0.0.1).
    let gate = Gate::start_with(
        r#"trusted_proxies = ["127.0.0.1/32"]"#,
        r#"
[upstream]
url = "{upstream}"

[[room]]
id = "account"
identity = "header:X-User-Id"

[[route]]
paths = ["/account/**"]
rooms = ["account"]
"#,
    )
    .await;
    let mut alice = Jar::default();
    let response = gate
        .send(
            reqwest::Method::GET,
            "/account/me",
            &mut alice,
            JSON,
            &[("x-user-id", "alice")],
        )
        .await;
    assert!(echoed(response).await.is_some());
    let pass = alice.get("anteroom_p_account").unwrap().to_owned();
    assert_eq!(jwt_claims(&pass)["uid"], "alice");

    let mut stolen = alice.clone();
    let response = gate
        .send(
            reqwest::Method::POST,
            "/account/transfer",
            &mut stolen,
            JSON,
            &[("x-user-id", "mallory")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "identity_mismatch");
    // Sent as `post` (which some origins read as POST), it is checked all the same.
    let response = gate
        .send(
            reqwest::Method::from_bytes(b"post").unwrap(),
            "/account/transfer",
            &mut stolen,
            JSON,
            &[("x-user-id", "mallory")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    let response = gate
        .send(
            reqwest::Method::POST,
            "/account/transfer",
            &mut alice,
            JSON,
            &[("x-user-id", "alice")],
        )
        .await;
    let echo = echoed(response).await.expect("the owner's POST is proxied");
    assert_eq!(echo["method"], "POST");
    // Reading is not bound to the identity.
    let response = gate
        .send(
            reqwest::Method::GET,
            "/account/me",
            &mut stolen,
            JSON,
            &[("x-user-id", "mallory")],
        )
        .await;
    assert!(echoed(response).await.is_some());

    // Sent straight to the node by a peer that is not a trusted proxy, the owner's name is
    // nobody's word: the stolen pass does not become the sender's.
    let direct = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let response = direct
        .post(gate.url("/account/transfer"))
        .header(ACCEPT, JSON)
        .header(COOKIE, format!("anteroom_p_account={pass}"))
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "untrusted_proxy");

    // A proxy that appends its value behind the client's copy: neither is believed.
    let response = gate
        .send(
            reqwest::Method::POST,
            "/account/transfer",
            &mut stolen,
            JSON,
            &[("x-user-id", "alice"), ("x-user-id", "mallory")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "identity_invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_extends_the_session() {
    let gate = Gate::start(
        r#"
[upstream]
url = "{upstream}"

[[room]]
id = "shop"
max_active = 5
session_ttl = "4s"

[[route]]
paths = ["/**"]
rooms = ["shop"]
"#,
    )
    .await;
    let mut visitor = Jar::default();
    let started = Instant::now();
    assert!(
        echoed(gate.get("/", &mut visitor, HTML).await)
            .await
            .is_some()
    );
    let first = visitor.get("anteroom_p_shop").unwrap().to_owned();
    let first_exp = jwt_claims(&first)["exp"].as_u64().unwrap();

    // Before half the ttl: no renewal.
    let response = gate.get("/", &mut visitor, HTML).await;
    assert!(response.headers().get(SET_COOKIE).is_none());
    assert!(echoed(response).await.is_some());

    // Past half the ttl: a new pass expiring later.
    tokio::time::sleep(Duration::from_millis(2600).saturating_sub(started.elapsed())).await;
    let response = gate.get("/", &mut visitor, HTML).await;
    assert!(response.headers().get(SET_COOKIE).is_some(), "renewed");
    assert!(echoed(response).await.is_some());
    let renewed = visitor.get("anteroom_p_shop").unwrap().to_owned();
    assert_ne!(renewed, first);
    let renewed_exp = jwt_claims(&renewed)["exp"].as_u64().unwrap();
    assert!(renewed_exp >= first_exp + 2, "{renewed_exp} vs {first_exp}");

    // After the first expiry the session is still active, and the pass still works.
    tokio::time::sleep(Duration::from_millis(5200).saturating_sub(started.elapsed())).await;
    assert_eq!(gate.summary("shop").await["active"], 1);
    let response = gate.get("/", &mut visitor, JSON).await;
    assert!(
        echoed(response).await.is_some(),
        "the renewed session holds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anteroom_release_frees_the_slot() {
    let gate = Gate::start(ONE_ROOM).await;
    let mut first = Jar::default();
    assert!(
        echoed(gate.get("/", &mut first, HTML).await)
            .await
            .is_some()
    );
    let mut second = Jar::default();
    let joined: Value = gate
        .send(
            reqwest::Method::POST,
            "/_anteroom/v1/rooms/shop/join",
            &mut second,
            JSON,
            &[],
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(joined["state"], "waiting");

    let response = gate.get("/release", &mut first, HTML).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers().get("anteroom-release").is_none(),
        "stripped"
    );
    assert!(
        first.get("anteroom_p_shop").is_none(),
        "pass cookie cleared"
    );
    let released = Instant::now();
    loop {
        let status: Value = gate
            .get("/_anteroom/v1/rooms/shop/status", &mut second, JSON)
            .await
            .json()
            .await
            .unwrap();
        if status["state"] == "admitted" {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(1),
            "not admitted within a second: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gate.summary("shop").await["active"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_from_visitors_504_for_a_slow_upstream_502_for_a_dead_one() {
    let gate = Gate::start(
        r#"
[upstream]
url = "{upstream}"
header_timeout = "500ms"
"#,
    )
    .await;
    // HTTP/2 from the visitor (prior knowledge), HTTP/1.1 to the site with the visitor's host.
    let h2 = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = h2.get(gate.url("/over-h2")).send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let echo = echoed(response).await.expect("proxied");
    assert_eq!(echo["path"], "/over-h2");
    assert_eq!(
        echo["headers"]["host"],
        format!("127.0.0.1:{}", gate.server.port)
    );

    let started = Instant::now();
    let response = gate.get("/slow", &mut Jar::default(), JSON).await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        elapsed >= Duration::from_millis(450) && elapsed < Duration::from_millis(2500),
        "{elapsed:?}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "upstream_timeout");

    // h2c to the upstream when configured.
    let h2c = Gate::start("[upstream]\nurl = \"{upstream}\"\nhttp2 = true\n").await;
    let response = h2c.get("/over-h2c?x=1", &mut Jar::default(), JSON).await;
    let echo = echoed(response).await.expect("proxied over h2c");
    // Over HTTP/2 the origin sees the full target (scheme and authority of the upstream).
    assert!(
        echo["path"].as_str().unwrap().ends_with("/over-h2c?x=1"),
        "{echo}"
    );
    assert_eq!(
        echo["headers"]["x-forwarded-host"],
        format!("127.0.0.1:{}", h2c.server.port)
    );

    let dead = Site::new();
    dead.write_config(
        "EdDSA",
        &format!(
            "[upstream]\nurl = \"http://127.0.0.1:{}\"\n",
            support::free_port()
        ),
    );
    let mut server = dead.start();
    let client = client();
    server.wait_ready(&client).await;
    let response = client
        .get(format!("{}/", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "upstream_unreachable");
}

/// A room that asks for a proof of work before a join (SPEC §12).
const GUARDED_ROOM: &str = r#"
[upstream]
url = "{upstream}"

[[room]]
id = "guarded"
routes = ["/**"]
challenge = { kind = "pow", difficulty = 8 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_asking_for_a_proof_of_work_joins_nobody_at_the_gateway() {
    let gate = Gate::start(GUARDED_ROOM).await;

    // Even an empty room admits nobody on the spot: navigations go to the waiting page, which
    // solves the challenge before it joins.
    let mut visitor = Jar::default();
    let response = gate.get("/products?x=1", &mut visitor, HTML).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(
        response.headers()["location"],
        "/_anteroom/wait/guarded?return=/products%3Fx%3D1"
    );
    let page = gate
        .get(
            "/_anteroom/wait/guarded?return=/products",
            &mut visitor,
            HTML,
        )
        .await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("data-state=\"challenge\"")
    );

    // Other requests get 429 `waiting_room`.
    let response = gate.get("/api/orders", &mut visitor, JSON).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "waiting_room");

    assert!(visitor.get("anteroom_t_guarded").is_none(), "no ticket");
    let summary = gate.summary("guarded").await;
    assert_eq!(summary["serving"], 0, "{summary}");
    assert_eq!(summary["waiting"], 0, "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_has_at_most_four_of_its_passes_examined() {
    let gate = Gate::start(ONE_ROOM).await;
    let mut holder = Jar::default();
    let response = gate.get("/products", &mut holder, HTML).await;
    assert!(echoed(response).await.is_some(), "admitted on the spot");
    let pass = holder.get("anteroom_p_shop").unwrap().to_owned();
    // A forged token costs a signature check each: only the first four are looked at, so a
    // valid pass behind four forged ones is not seen, and the full room holds the request.
    let forged = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln";
    let presented = |forged_before: usize| {
        let mut headers = vec![("x-anteroom-pass", forged); forged_before];
        headers.push(("x-anteroom-pass", pass.as_str()));
        headers
    };
    let response = gate
        .send(
            reqwest::Method::GET,
            "/products",
            &mut Jar::default(),
            JSON,
            &presented(3),
        )
        .await;
    assert!(echoed(response).await.is_some(), "the fourth is examined");
    let response = gate
        .send(
            reqwest::Method::GET,
            "/products",
            &mut Jar::default(),
            JSON,
            &presented(4),
        )
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "waiting_room", "{body}");
}
