//! A gigabyte each way through the gateway keeps its memory bounded: bodies stream, they are
//! never held whole. The gateway's resident set is read from `/proc/<pid>/status` while the
//! bytes flow; the bytes are generated and counted on the fly at both ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Gate, Jar};

const GIB: u64 = 1 << 30;
const RSS_LIMIT_KIB: u64 = 100 * 1024;

const CONFIG: &str = r#"
[upstream]
url = "{upstream}"
max_request_body = "2GiB"
"#;

/// Samples the process's VmRSS (KiB) every 50 ms until stopped; the largest seen.
fn watch_rss(pid: u32) -> (Arc<AtomicBool>, Arc<AtomicU64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let (stop_flag, peak_seen) = (stop.clone(), peak.clone());
    std::thread::spawn(move || {
        while !stop_flag.load(Ordering::Relaxed) {
            if let Some(kib) = rss_kib(pid) {
                peak_seen.fetch_max(kib, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (stop, peak)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_each_way_keeps_the_gateway_under_100_mib() {
    let gate = Gate::start(CONFIG).await;
    let (stop, peak) = watch_rss(gate.server.pid());

    // Download: read and count, keep nothing.
    let mut response = gate
        .get(&format!("/big?bytes={GIB}"), &mut Jar::default(), "*/*")
        .await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let mut received: u64 = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        received += chunk.len() as u64;
    }
    assert_eq!(received, GIB);

    // Upload: a raw HTTP/1.1 request written 256 KiB at a time.
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", gate.server.port))
        .await
        .unwrap();
    let head = format!(
        "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {GIB}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'y'; 256 * 1024];
    let mut sent: u64 = 0;
    while sent < GIB {
        stream.write_all(&chunk).await.unwrap();
        sent += chunk.len() as u64;
    }
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with(&GIB.to_string()),
        "the upstream counted: {answer}"
    );

    stop.store(true, Ordering::Relaxed);
    let peak_kib = peak.load(Ordering::Relaxed);
    assert!(peak_kib > 0, "VmRSS was read");
    assert!(
        peak_kib < RSS_LIMIT_KIB,
        "the gateway's resident set reached {} MiB",
        peak_kib / 1024
    );
    eprintln!(
        "peak VmRSS while streaming 1 GiB each way: {} MiB",
        peak_kib / 1024
    );
}
