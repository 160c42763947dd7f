//! The memory an open event stream costs the node, measured on the real binary: 1,000
//! waiting visitors each hold a stream (SPEC §6.2), and the node's resident memory may grow by
//! at most 16 KiB per stream. `bench/sse-soak` measures the same at 19,000 streams on a
//! release build (about 3 KiB each); this smaller check keeps a regression from reaching a
//! release unnoticed (the figure was once 30 KiB).
#![allow(clippy::unwrap_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// Streams held open at once.
const STREAMS: usize = 1_000;

/// The most resident memory one stream may add, KiB.
const MAX_KIB_PER_STREAM: f64 = 16.0;

/// Source addresses the streams come from (127.0.0.1 …): each stays under the node's default
/// bound of 64 streams per address.
const SOURCE_ADDRESSES: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_costs_the_node_at_most_16_kib() {
    tokio::time::timeout(Duration::from_secs(240), run())
        .await
        .expect("the check finishes within four minutes");
}

async fn run() {
    let site = support::Site::new();
    site.write_config(
        "EdDSA",
        "[[room]]\nid = \"hold\"\nmax_active = 1\nadmit_per_minute = 0\n\
         session_ttl = \"1h\"\nticket_idle_ttl = \"1h\"\n",
    );
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let base = site.public_url();
    // The first visitor takes the one place; everyone after waits.
    assert_eq!(
        support::join(&client, &base, "hold").await.state,
        "admitted"
    );
    let tickets = join_waiting(&client, &base, STREAMS).await;
    // The joins' writes and the allocator settle before the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(server.pid());

    let address: SocketAddr = format!("127.0.0.1:{}", site.port).parse().unwrap();
    let mut streams = Vec::with_capacity(STREAMS);
    for (index, ticket) in tickets.iter().enumerate() {
        streams.push(open_stream(address, index % SOURCE_ADDRESSES, ticket).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(server.pid());

    let per_stream = after.saturating_sub(before) as f64 / STREAMS as f64;
    eprintln!("RSS {before} KiB → {after} KiB with {STREAMS} streams: {per_stream:.1} KiB each");
    assert!(
        per_stream <= MAX_KIB_PER_STREAM,
        "an event stream costs the node {per_stream:.1} KiB (at most {MAX_KIB_PER_STREAM})"
    );
    drop(streams);
}

/// Joins `count` visitors over a few connections at a time; their ticket tokens.
async fn join_waiting(client: &reqwest::Client, base: &str, count: usize) -> Vec<String> {
    let mut tickets = Vec::with_capacity(count);
    for _ in 0..count / 50 {
        let batch = (0..50).map(|_| support::join(client, base, "hold"));
        for status in futures_util::future::join_all(batch).await {
            assert_eq!(status.state, "waiting");
            tickets.push(status.ticket);
        }
    }
    tickets
}

/// Opens `ticket`'s event stream from 127.0.0.(1 + `source`) and reads until its first
/// status event: the stream is then held by the node.
async fn open_stream(address: SocketAddr, source: usize, ticket: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    let host = u8::try_from(1 + source).unwrap();
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)),
            0,
        ))
        .unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    let request = format!(
        "GET /_anteroom/v1/rooms/hold/events HTTP/1.1\r\nHost: {address}\r\n\
         Accept: text/event-stream\r\nX-Anteroom-Ticket: {ticket}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0; 2048];
    while !contains(&seen, b"event: status") && !contains(&seen, b"event:status") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("the stream's first status within 10 s")
            .unwrap();
        assert!(
            read > 0,
            "the node closed the stream: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..read]);
    }
    assert!(
        seen.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&seen)
    );
    stream
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The process's resident memory, KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
