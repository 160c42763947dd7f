//! One path, matched and forwarded (SPEC §14.3), and one `Host` per request (§14.4): an
//! attacker spells a protected path so that anteroom reads it as another route while the
//! origin (Tomcat, IIS, Express, nginx behind us) reads it as the protected one; deletes a
//! room that a route still protects; or sends requests without a clear `Host`.
//!
//! Paths go over raw sockets: reqwest (like browsers) would resolve dot segments and
//! re-encode the path before sending it.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{Gate, raw_exchange, raw_status};
use anteroom_test_support::redis::RedisServer;

const ADMIN_KEY: &str = "paths-admin-key-0123456789abcdef";

/// A sold-out event: `/events/{id}/book/**` needs a pass of `tickets`, which queues everyone;
/// `/static/**` bypasses; every other path goes straight to the origin.
const ROUTES: &str = r#"
[upstream]
url = "{upstream}"

[[room]]
id = "tickets"
mode = "queue_all"

[[room]]
id = "spare"

[[route]]
name = "static"
paths = ["/static/**"]
bypass = true

[[route]]
name = "book"
paths = ["/events/*/book/**"]
rooms = ["tickets"]
"#;

/// [`ROUTES`] and a back office on an IIS-like origin that reads paths in any case.
const CASE_ROUTES: &str = r#"
[[room]]
id = "backoffice"
mode = "queue_all"

[[route]]
name = "backoffice"
paths = ["/admin/**"]
rooms = ["backoffice"]
case_insensitive = true
"#;

/// Starts the echoing upstream and anteroom with `extra` (as [`Gate::start`]), loopback as a
/// trusted proxy (the verify endpoint's caller), and `edit` applied to the config text.
async fn start_with(extra: &str, edit: impl FnOnce(String) -> String) -> Gate {
    Gate::start_edited(extra, |text| {
        edit(text.replacen(
            "[server]\n",
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            1,
        ))
    })
    .await
}

/// A raw answer: status, the problem's `code` (if any), and the path the origin received
/// (if the request reached it).
#[derive(Debug)]
struct Seen {
    status: u16,
    code: Option<String>,
    origin_path: Option<String>,
}

/// `GET target` as sent, over a raw socket, asking for JSON.
async fn raw_get(gate: &Gate, target: &str) -> Seen {
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: shop.example\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    seen(&raw_exchange(&gate.addr(), request.as_bytes()).await)
}

fn seen(answer: &str) -> Seen {
    let body: Value = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    Seen {
        status: raw_status(answer),
        code: body["code"].as_str().map(str::to_owned),
        origin_path: (body["upstream"] == true)
            .then(|| body["path"].as_str().unwrap_or_default().to_owned()),
    }
}

/// Each target is answered 400 `ambiguous_path` and never reaches the origin.
async fn check_refused(gate: &Gate, targets: &[&str]) {
    for target in targets {
        let seen = raw_get(gate, target).await;
        assert_eq!(
            (
                seen.status,
                seen.code.as_deref(),
                seen.origin_path.as_deref()
            ),
            (400, Some("ambiguous_path"), None),
            "{target}: {seen:?}"
        );
    }
}

/// The attacker appends `;params` to a protected path (`/events/1/book;x=1`) or climbs out of
/// a bypassed one with `..;` (`/static/..;/events/1/book`): Tomcat and Spring strip the
/// parameters and serve the booking page. Every `;` in a path, literal or encoded, is refused
/// with 400 `ambiguous_path`, and nothing reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_parameters_never_reach_the_origin() {
    let gate = Gate::start(ROUTES).await;
    check_refused(
        &gate,
        &[
            "/events/1/book;x=1",
            "/events/1/book;jsessionid=0A1B/seat",
            "/static/..;/events/1/book",
            "/static;/../events/1/book",
            "/events/1/book%3Bx=1",
        ],
    )
    .await;
    // A plain path on the same route is still held back, and other paths still pass.
    assert_eq!(raw_get(&gate, "/events/1/book").await.status, 429);
    assert_eq!(
        raw_get(&gate, "/events/1/info")
            .await
            .origin_path
            .as_deref(),
        Some("/events/1/info")
    );
}

/// The attacker hides a segment boundary where only some servers see one: IIS reads `\` as
/// `/`, and origins that keep `%2F` undecoded see `/events/1/book/x%2F..%2F..` as a booking
/// page while a decoding reader resolves it to `/events/1`. Literal `\`, and `%2F` or `%5C`
/// in any hex case, are refused with 400 `ambiguous_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_slashes_and_backslashes_are_refused() {
    let gate = Gate::start(ROUTES).await;
    check_refused(
        &gate,
        &[
            "/events/1\\book",
            "/events/1%5cbook",
            "/events/1%5Cbook",
            "/events/1/book/x%2F..%2F..",
            "/events/1/book/x%2f..%2f..",
            "/static%2F..%2Fevents/1/book",
        ],
    )
    .await;
}

/// The attacker sends dot segments a client library would have resolved: Express matches
/// `/events/1/book/../x` against `/events/:id/book/*` without resolving it, while a resolving
/// reader sees `/events/1/x`. Plain and percent-encoded dot segments (`%2e%2E`, `.%2e`) are
/// refused with 400 `ambiguous_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_are_refused() {
    let gate = Gate::start(ROUTES).await;
    check_refused(
        &gate,
        &[
            "/events/1/book/../x",
            "/events/1/book/%2e%2E/x",
            "/events/1/book/.%2e/x",
            "/events/1/book/./seat",
            "/static/%2e%2e/events/1/book",
            "/static/./x",
        ],
    )
    .await;
}

/// What else different servers read differently: an encoded `%` (origins that decode twice
/// see `%62ook` as `book`), `%00` and encoded control characters (C-based servers cut the
/// path there), malformed encodings (`%u0062`, IIS's own), and encodings of invalid UTF-8
/// (overlong `%c0%ae` is `.` to some decoders). All are refused with 400 `ambiguous_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encodings_other_servers_decode_differently_are_refused() {
    let gate = Gate::start(ROUTES).await;
    check_refused(
        &gate,
        &[
            "/events/1/%2562ook",
            "/events/1/book%00.css",
            "/events/1/book%0d%0aX:1",
            "/events/1/%u0062ook",
            "/events/1/book%",
            "/events/1/book/%c0%ae%c0%ae/x",
            "/events/1/%ff",
        ],
    )
    .await;
}

/// The origin receives the path anteroom matched, in one encoding: empty segments merged,
/// encoded unreserved characters decoded, other encodings upper-cased, the query as it came.
/// Before, the raw spelling went on and each origin resolved it its own way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_receives_the_path_that_was_matched() {
    let gate = Gate::start(ROUTES).await;
    for (sent, forwarded) in [
        (
            "//pub///a/%7euser/caf%c3%a9/?q=%2F..;x",
            "/pub/a/~user/caf%C3%A9/?q=%2F..;x",
        ),
        ("/%65vents/1/info", "/events/1/info"),
        ("/pub/%41%2d%5F", "/pub/A-_"),
        ("/pub/a%20b", "/pub/a%20b"),
    ] {
        let seen = raw_get(&gate, sent).await;
        assert_eq!(
            seen.origin_path.as_deref(),
            Some(forwarded),
            "{sent}: {seen:?}"
        );
    }
    // A path that decodes to a protected one is held back, whatever its spelling (`1%3F` is
    // an event id `1?` to the origin; it was once cut at the decoded `?`).
    for sent in ["//events/1/%62ook", "/events//1/book/", "/events/1%3F/book"] {
        assert_eq!(raw_get(&gate, sent).await.status, 429, "{sent}");
    }
}

/// On an IIS-like origin the attacker changes the case (`/ADMIN/users`): with
/// `case_insensitive = true` the route matches in any ASCII case and the request is held back;
/// routes without it stay case-sensitive (`/EVENTS/1/BOOK` is another page to a
/// case-sensitive origin, and reaches it unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_is_ignored_where_the_route_says_so() {
    let gate = Gate::start(&format!("{ROUTES}{CASE_ROUTES}")).await;
    for target in ["/admin/users", "/ADMIN/users", "/Admin/%55sers", "/aDmIn"] {
        let seen = raw_get(&gate, target).await;
        assert_eq!(
            (seen.status, seen.code.as_deref()),
            (429, Some("waiting_room")),
            "{target}: {seen:?}"
        );
    }
    let seen = raw_get(&gate, "/EVENTS/1/BOOK").await;
    assert_eq!(seen.origin_path.as_deref(), Some("/EVENTS/1/BOOK"));
}

/// The verify endpoint names the visitor's path for a proxy that forwards the raw path
/// itself: an ambiguous one is answered 400 `ambiguous_path` (never 200), and a plain one on
/// a protected route is still held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verify_endpoint_refuses_ambiguous_paths() {
    let gate = start_with(ROUTES, |text| text).await;
    let verify = |uri: &str| {
        gate.client
            .get(gate.url("/_anteroom/verify"))
            .header("x-original-uri", uri)
            .header("accept", "application/json")
            .send()
    };
    for uri in [
        "/events/1/book;x=1",
        "/static/..;/events/1/book",
        "/events/1\\book",
        "/events/1/book/%2e%2e/x",
    ] {
        let response = verify(uri).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "ambiguous_path", "{uri}");
    }
    let held = verify("/events/1/book").await.unwrap();
    assert_eq!(held.status(), StatusCode::UNAUTHORIZED);
}

/// The store loses its data (a Redis flushed or failed over to an empty replica): the rooms
/// the routes name are gone. Protection must not switch off: the routes answer 503 (the
/// "temporarily unavailable" page for navigations, problem+json otherwise, 503 from the
/// verify endpoint) instead of passing everyone through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_the_store_lost_closes_its_routes() {
    let redis = RedisServer::start();
    let gate = start_with(ROUTES, |text| super::on_redis(&text, &redis.url())).await;
    assert_eq!(raw_get(&gate, "/events/1/book").await.status, 429);
    redis.cli(&["FLUSHALL"]);
    // The gateway's copy of the room is at most a second old.
    let started = Instant::now();
    let seen = loop {
        let seen = raw_get(&gate, "/events/1/book").await;
        if seen.status != 429 || started.elapsed() > Duration::from_secs(10) {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (
            seen.status,
            seen.code.as_deref(),
            seen.origin_path.as_deref()
        ),
        (503, Some("store_unavailable"), None),
        "{seen:?}"
    );
    let page = gate
        .client
        .get(gate.url("/events/1/book"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.text().await.unwrap().contains("<html"));
    let verified = gate
        .client
        .get(gate.url("/_anteroom/verify"))
        .header("x-original-uri", "/events/1/book")
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        gate.server
            .log()
            .contains("names a room the store does not have")
    );
}

/// An operator (or a stolen admin key) deletes the room a route protects, which would switch
/// its protection off: refused with 409 naming the route. A room another room `requires` is
/// refused the same way; a room nothing names can still be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_room_still_named_is_refused() {
    let admin_port = super::support::free_port();
    let extra = format!(
        "admin_keys = [\"{}\"]\n{ROUTES}\n[[room]]\nid = \"vip\"\nrequires = [\"spare\"]\n",
        super::support::key_hash(ADMIN_KEY)
    );
    let gate = start_with(&extra, |text| {
        text.replacen(
            "admin_listen = \"127.0.0.1:0\"",
            &format!("admin_listen = \"127.0.0.1:{admin_port}\""),
            1,
        )
    })
    .await;
    let delete = |room: &str| {
        gate.client
            .request(
                Method::DELETE,
                format!("http://127.0.0.1:{admin_port}/admin/v1/rooms/{room}"),
            )
            .bearer_auth(ADMIN_KEY)
            .send()
    };
    let refused = delete("tickets").await.unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "room_required");
    assert!(body["detail"].as_str().unwrap().contains("book"), "{body}");
    assert_eq!(raw_get(&gate, "/events/1/book").await.status, 429);
    let refused = delete("spare").await.unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let body: Value = refused.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("vip"), "{body}");
    assert_eq!(
        delete("vip").await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
}

/// The attacker sends an HTTP/1.1 request with no `Host`, or two (`Host: shop.example` then
/// `Host: admin.internal`), so that anteroom's route and the origin's virtual host differ.
/// Both engines answer 400 and close the connection: the node's own loop, and hyper (which
/// serves a connection once it carried a chunked body). HTTP/1.0 needs no `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_exactly_one_host_are_refused() {
    let gate = Gate::start(ROUTES).await;
    let refused = |answer: &str| {
        assert_eq!(raw_status(answer), 400, "{answer}");
        assert!(answer.contains("invalid_host"), "{answer}");
        assert!(!answer.contains("\"upstream\""), "{answer}");
    };
    // No `Connection: close`: the server must close the connection itself.
    refused(&raw_exchange(&gate.addr(), b"GET /pub HTTP/1.1\r\n\r\n").await);
    refused(
        &raw_exchange(
            &gate.addr(),
            b"GET /pub HTTP/1.1\r\nHost: shop.example\r\nHost: admin.internal\r\n\r\n",
        )
        .await,
    );
    // A chunked body hands the connection to hyper, which serves the next request.
    let answer = raw_exchange(
        &gate.addr(),
        b"POST /pub HTTP/1.1\r\nHost: shop.example\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
          GET /pub HTTP/1.1\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let second = answer
        .match_indices("HTTP/1.1 ")
        .nth(1)
        .map(|(at, _)| &answer[at..])
        .unwrap_or_default();
    refused(second);
    // A connection that opens with an event stream is served by its own loop: same rule.
    refused(
        &raw_exchange(
            &gate.addr(),
            b"GET /_anteroom/v1/rooms/tickets/events HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n",
        )
        .await,
    );
    let old = raw_exchange(&gate.addr(), b"GET /pub HTTP/1.0\r\n\r\n").await;
    assert_eq!(seen(&old).origin_path.as_deref(), Some("/pub"), "{old}");
}
