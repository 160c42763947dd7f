//! Bounded state: a client who makes up keys fills one rule's budget and nothing else; a
//! ticket or an address cannot hold the node's event streams.

use std::time::Duration;

use reqwest::StatusCode;

use super::support;
use super::{Gate, raw_exchange, raw_status};

/// [`Gate::start_with`] `server`, with the built-in join limit on when `join_limit`.
pub(crate) async fn gate_with_server(server: &str, join_limit: bool, extra: &str) -> Gate {
    let server = if join_limit {
        format!("{server}\njoin_rate_limit = true")
    } else {
        server.to_owned()
    };
    Gate::start_with(&server, extra).await
}

/// A room where everyone waits, so streams stay open.
const ROOM: &str = "[[room]]\nid = \"shop\"\nmode = \"queue_all\"\n";

/// A rule keyed on a header the client picks, with a small budget.
const API_KEY_RULE: &str = "[[rate_limit]]\nname = \"api-key\"\nmatch = { paths = [\"/_anteroom/v1/rooms/*\"], methods = [\"GET\"] }\nkey = [\"header:X-Api-Key\"]\nlimit = 100\nperiod = \"1m\"\nmax_keys = 50\n";

/// The attacker sends a hundred made-up `X-Api-Key` values to a route a header-keyed rule
/// limits, filling that rule's budget. Must hold: the rule's own new keys are refused (429,
/// fail closed), a key it already holds still passes, and the built-in per-IP join limit (a
/// new key of another rule) still admits a join and still limits. Before: one shared cap for
/// every rule and the challenge marks (1,000,000, not configurable per rule), so a flood that
/// filled it refused every new client of every rule; this build refused `max_keys` as an
/// unknown key.
#[tokio::test]
async fn a_flooded_header_rule_starves_only_itself() {
    let gate = gate_with_server("", true, &format!("{ROOM}\n{API_KEY_RULE}")).await;
    let summary = gate.url("/_anteroom/v1/rooms/shop");
    let send = |key: String| gate.client.get(&summary).header("X-Api-Key", key).send();
    for n in 0..50 {
        let answer = send(format!("made-up-{n}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "key {n} fits the budget");
    }
    for n in 50..100 {
        let answer = send(format!("made-up-{n}")).await.unwrap();
        assert_eq!(
            answer.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "key {n} is over the budget"
        );
        assert!(answer.headers().contains_key("retry-after"));
    }
    assert_eq!(
        send("made-up-7".to_owned()).await.unwrap().status(),
        StatusCode::OK,
        "a key the rule holds keeps counting"
    );

    let join = gate.url("/_anteroom/v1/rooms/shop/join");
    let mut statuses = Vec::new();
    for _ in 0..11 {
        let answer = support::client().post(&join).send().await.unwrap();
        statuses.push(answer.status());
    }
    assert_eq!(
        statuses[..10],
        [StatusCode::OK; 10],
        "the join limit's new key was stored"
    );
    assert_eq!(
        statuses[10],
        StatusCode::TOO_MANY_REQUESTS,
        "and it still limits"
    );
}

/// The attacker floods a rule that lets new keys through when full (`on_keys_full =
/// "allow"`) and then solves a proof-of-work challenge. Must hold: the flood passes (fail
/// open, as configured) and the solved join is admitted once and its replay refused as
/// `challenge_used`: marks live apart from the rate-limit keys. Before: `on_keys_full` was an
/// unknown key, and marks shared the rate-limit store's cap.
#[tokio::test]
async fn challenges_work_while_a_rule_is_full() {
    let room = "[[room]]\nid = \"shop\"\nchallenge = { kind = \"pow\", difficulty = 6 }\n";
    let rule = API_KEY_RULE.replace("max_keys = 50", "max_keys = 5\non_keys_full = \"allow\"");
    let gate = gate_with_server("", false, &format!("{room}\n{rule}")).await;
    for n in 0..20 {
        let answer = gate
            .client
            .get(gate.url("/_anteroom/v1/rooms/shop"))
            .header("X-Api-Key", format!("made-up-{n}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "key {n} passes uncounted");
    }
    let challenge: serde_json::Value = gate
        .client
        .post(gate.url("/_anteroom/v1/rooms/shop/challenge"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = challenge["challenge"].as_str().unwrap().to_owned();
    let difficulty = u8::try_from(challenge["difficulty"].as_u64().unwrap()).unwrap();
    let counter = anteroom_core::challenge::solve(&token, difficulty);
    let body = serde_json::json!({"challenge": {"token": token, "counter": counter}});
    let join = gate.url("/_anteroom/v1/rooms/shop/join");
    let first = support::client()
        .post(&join)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let replay = support::client()
        .post(&join)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), StatusCode::FORBIDDEN);
    let problem: serde_json::Value = replay.json().await.unwrap();
    assert_eq!(problem["code"], "challenge_used");
}

/// Opens an event stream on a raw socket and reads its answer head; the socket stays open
/// (and the stream counted) while the returned stream lives.
async fn open_stream(
    addr: &str,
    ticket: &str,
    forwarded_for: Option<&str>,
) -> (u16, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let forwarded = forwarded_for
        .map(|address| format!("X-Forwarded-For: {address}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /_anteroom/v1/rooms/shop/events?ticket={ticket} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{forwarded}\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        if read == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (raw_status(&String::from_utf8_lossy(&head)), stream)
}

/// The attacker opens stream after stream on one ticket. Must hold: the fifth is refused with
/// 429 `Retry-After` while four are open, and a stream closed gives its place back. Before:
/// only the node-wide 18,000 bound existed, so one ticket could hold them all.
#[tokio::test]
async fn one_ticket_cannot_hold_the_nodes_streams() {
    let gate = Gate::start(ROOM).await;
    let ticket = support::join(&gate.client, &gate.server.url(), "shop")
        .await
        .ticket;
    let addr = gate.addr();
    let mut open = Vec::new();
    for n in 0..4 {
        let (status, stream) = open_stream(&addr, &ticket, None).await;
        assert_eq!(status, 200, "stream {n}");
        open.push(stream);
    }
    let (status, _) = open_stream(&addr, &ticket, None).await;
    assert_eq!(status, 429, "a fifth stream of one ticket");
    drop(open.pop());
    // The server notices the closed socket at its next read or write.
    let mut reopened = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, stream) = open_stream(&addr, &ticket, None).await;
        if status == 200 {
            reopened += 1;
            open.push(stream);
            break;
        }
    }
    assert_eq!(reopened, 1, "a closed stream gives its place back");
}

/// The attacker joins many times from one address and opens a stream per ticket. Must hold:
/// the address's streams stop at `sse_max_streams_per_ip` (429), while another address (a
/// trusted proxy's `X-Forwarded-For`) still gets its stream. Before: no per-address bound.
#[tokio::test]
async fn one_address_cannot_hold_the_nodes_streams() {
    let gate = gate_with_server(
        "sse_max_streams_per_ip = 3\ntrusted_proxies = [\"127.0.0.1/32\"]",
        false,
        ROOM,
    )
    .await;
    let addr = gate.addr();
    let mut open = Vec::new();
    for n in 0..3 {
        let ticket = support::join(&support::client(), &gate.server.url(), "shop")
            .await
            .ticket;
        let (status, stream) = open_stream(&addr, &ticket, Some("198.51.100.7")).await;
        assert_eq!(status, 200, "stream {n}");
        open.push(stream);
    }
    let ticket = support::join(&support::client(), &gate.server.url(), "shop")
        .await
        .ticket;
    let refused = raw_exchange(
        &addr,
        format!(
            "GET /_anteroom/v1/rooms/shop/events?ticket={ticket} HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-For: 198.51.100.7\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        raw_status(&refused),
        429,
        "a fourth stream from one address"
    );
    assert!(refused.contains("too_many_streams"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after"),
        "{refused}"
    );
    let (status, _stream) = open_stream(&addr, &ticket, Some("203.0.113.9")).await;
    assert_eq!(status, 200, "another address is not held back");
}

/// The operator lowers the node's stream cap (`[server] sse_max_streams`). Must hold: streams
/// of different tickets and addresses fill it, the next is refused with the documented answer
/// (503 `too_many_connections`, `Retry-After: 5`: the page falls back to polling), and a
/// stream closed gives its place back. Before: the cap was a constant of 18,000.
#[tokio::test]
async fn the_configured_stream_cap_refuses_the_next_stream() {
    let gate = gate_with_server(
        "sse_max_streams = 2\ntrusted_proxies = [\"127.0.0.1/32\"]",
        false,
        ROOM,
    )
    .await;
    let addr = gate.addr();
    let mut open = Vec::new();
    for (n, address) in ["198.51.100.1", "198.51.100.2"].into_iter().enumerate() {
        let ticket = support::join(&support::client(), &gate.server.url(), "shop")
            .await
            .ticket;
        let (status, stream) = open_stream(&addr, &ticket, Some(address)).await;
        assert_eq!(status, 200, "stream {n}");
        open.push(stream);
    }
    let ticket = support::join(&support::client(), &gate.server.url(), "shop")
        .await
        .ticket;
    let refused = raw_exchange(
        &addr,
        format!(
            "GET /_anteroom/v1/rooms/shop/events?ticket={ticket} HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-For: 198.51.100.3\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(raw_status(&refused), 503, "a third stream on the node");
    assert!(refused.contains("too_many_connections"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 5"),
        "{refused}"
    );
    drop(open.pop());
    let mut reopened = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, stream) = open_stream(&addr, &ticket, Some("198.51.100.3")).await;
        if status == 200 {
            open.push(stream);
            reopened = true;
            break;
        }
    }
    assert!(reopened, "a closed stream gives its place back");
}
