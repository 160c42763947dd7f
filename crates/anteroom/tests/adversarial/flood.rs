//! Floods against a room on Redis (SPEC §14.2, §9.3): cookieless page loads and protected
//! navigations from one address and from a thousand (behind the trusted proxy's
//! `X-Forwarded-For`) while real visitors wait, and a join Redis runs after the node gave up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::header::ACCEPT;
use serde_json::Value;

use super::Gate;
use anteroom_test_support::redis::RedisServer;

const HTML: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";

/// The room's admission pace in the flood test: 50 a second.
const ADMIT_PER_MINUTE: u64 = 3000;
/// Real visitors in line before the flood: more than the window admits.
const REAL_VISITORS: usize = 2000;
/// The flood: half from one address, half from a thousand.
const FLOOD: usize = 20_000;
const FLOOD_ADDRESSES: usize = 1000;
/// The built-in join limit: ten joins per address a minute.
const JOINS_PER_ADDRESS: usize = 10;

/// The room `sale` (`mode`), protecting `/shop/**`, on `redis`; the join limit on and the
/// test (127.0.0.1) trusted as the site's proxy.
async fn sale_on_redis(redis: &RedisServer, mode: &str) -> Gate {
    let server = "join_rate_limit = true\ntrusted_proxies = [\"127.0.0.1/32\"]";
    Gate::start_edited(&sale_config(mode), |text| {
        super::on_redis(&super::with_server_lines(&text, server), &redis.url())
    })
    .await
}

fn sale_config(mode: &str) -> String {
    format!(
        "[upstream]\nurl = \"{{upstream}}\"\n\n\
         [[room]]\nid = \"sale\"\nmode = \"{mode}\"\nmax_active = 1000000\n\
         admit_per_minute = {ADMIT_PER_MINUTE}\nadmit_burst = 50\nroutes = [\"/shop/**\"]\n"
    )
}

impl Gate {
    async fn sale(&self) -> Value {
        self.client
            .get(self.url("/_anteroom/v1/rooms/sale"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// `10.a.b.c` for the `n`-th address of group `a`.
fn address(group: u8, n: usize) -> String {
    format!("10.{group}.{}.{}", n / 250, n % 250 + 1)
}

/// 2,000 real visitors wait; then 20,000 cookieless page loads and protected navigations
/// arrive, 10,000 from one address and 10,000 from 1,000 addresses, while the room admits at
/// 50 a second. Admission goes on at the configured pace (within 5 %), and the line grows by
/// at most what the join limit lets through (ten per address). Before, every one of the
/// 20,000 requests made a ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_cookieless_visits_neither_fills_the_line_nor_slows_admission() {
    let redis = RedisServer::start();
    let gate = Arc::new(sale_on_redis(&redis, "queue_all").await);
    futures_util::stream::iter(0..REAL_VISITORS)
        .for_each_concurrent(16, |n| {
            let gate = gate.clone();
            async move {
                let answer = gate
                    .client
                    .post(gate.url("/_anteroom/v1/rooms/sale/join"))
                    .header("x-forwarded-for", address(1, n))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status(), 200);
            }
        })
        .await;
    assert_eq!(gate.sale().await["waiting"], REAL_VISITORS);

    // Open the room (SIGHUP reloads it) and flood it at once.
    let config = std::fs::read_to_string(gate.site.config_path())
        .unwrap()
        .replace("mode = \"queue_all\"", "mode = \"queue\"");
    std::fs::write(gate.site.config_path(), config).unwrap();
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &gate.server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hangup.success());

    let refused = Arc::new(AtomicU64::new(0));
    let flood_started = Instant::now();
    let flood = tokio::spawn({
        let (gate, refused) = (gate.clone(), refused.clone());
        async move {
            futures_util::stream::iter(0..FLOOD)
                .for_each_concurrent(32, |n| {
                    let (gate, refused) = (gate.clone(), refused.clone());
                    async move {
                        let path = if n % 2 == 0 {
                            "/_anteroom/wait/sale"
                        } else {
                            "/shop/tickets"
                        };
                        let mut request = gate.client.get(gate.url(path)).header(ACCEPT, HTML);
                        if n >= FLOOD / 2 {
                            request =
                                request.header("x-forwarded-for", address(2, n % FLOOD_ADDRESSES));
                        }
                        let status = request.send().await.unwrap().status().as_u16();
                        assert!(status == 200 || status == 429, "{status}");
                        if status == 429 {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await;
            flood_started.elapsed()
        }
    });

    // The pace while the flood lasts: serving (the highest admitted position) read every
    // 50 ms; the rate between the first and the last change seen, so the window starts and
    // ends on a tick.
    let mut changes: Vec<(Instant, u64)> = Vec::new();
    let mut last = 0;
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(25) {
        let serving = gate.sale().await["serving"].as_u64().unwrap();
        if serving != last {
            changes.push((Instant::now(), serving));
            last = serving;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let flood_finished = flood.is_finished();
    let flood_lasted = flood.await.unwrap();
    // Skip the first change: it spends the burst.
    let (first_at, first) = changes[1];
    let (last_at, last) = *changes.last().unwrap();
    let rate = (last - first) as f64 / last_at.duration_since(first_at).as_secs_f64();
    let expected = ADMIT_PER_MINUTE as f64 / 60.0;
    eprintln!(
        "admitted {last} in the window, {rate:.2}/s (expected {expected}/s); \
         the flood {} within it",
        if flood_finished {
            "ended"
        } else {
            "lasted beyond"
        }
    );
    assert!(
        (rate - expected).abs() <= expected * 0.05,
        "admission rate {rate:.2}/s during the flood, expected {expected}/s within 5 %"
    );
    assert!(
        last as usize <= REAL_VISITORS,
        "only real visitors were at the head"
    );

    // The line grew by at most what the join limit allows.
    let sale = gate.sale().await;
    let serving = sale["serving"].as_u64().unwrap() as usize;
    let waiting = sale["waiting"].as_u64().unwrap() as usize;
    let flood_tickets = waiting + serving - REAL_VISITORS;
    // Each address's bucket holds ten and refills one every six seconds: the one address that
    // kept asking got one more per six seconds of flood.
    let refilled = (flood_lasted.as_secs() / 6 + 1) as usize;
    let allowed = JOINS_PER_ADDRESS * (1 + FLOOD_ADDRESSES) + refilled;
    eprintln!(
        "the flood made {flood_tickets} tickets in {flood_lasted:?} (at most {allowed}); {} \
         requests refused",
        refused.load(Ordering::Relaxed)
    );
    assert!(flood_tickets <= allowed, "{flood_tickets} > {allowed}");
    assert!(refused.load(Ordering::Relaxed) as usize >= FLOOD - allowed);
}

/// Redis stops answering (SIGSTOP) while a visitor joins: the node answers 503 at its
/// deadline (two seconds), and when Redis wakes up the join, still queued in its socket, runs
/// after the deadline it carries and refuses. No ticket waits for a visitor who was told the
/// join failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_redis_runs_after_the_deadline_leaves_no_ticket() {
    let redis = RedisServer::start();
    let gate = sale_on_redis(&redis, "queue_all").await;
    // A first join lets the node learn the server's clock.
    let first = gate
        .client
        .post(gate.url("/_anteroom/v1/rooms/sale/join"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pid = redis.pause();
    let late = gate
        .client
        .post(gate.url("/_anteroom/v1/rooms/sale/join"))
        .header("x-forwarded-for", "10.9.9.9")
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 503);
    tokio::time::sleep(Duration::from_secs(1)).await;
    RedisServer::resume(pid);

    // Give Redis time to run what was queued, then count.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sale = gate.sale().await;
    assert_eq!(sale["waiting"], 1, "{sale}");
    assert!(
        !gate.server.log().contains("could not be cancelled"),
        "{}",
        gate.server.log()
    );
}
