//! Several real `anteroom` nodes on one `redis-server` (SPEC §2, §6.2, §8.2, §9.3):
//!
//! - thousands of joins spread over three nodes while every node's ticker admits and visitors
//!   claim and complete passes on any node; the invariants are checked on the answers and on
//!   Redis itself, sampled continuously; one node is killed (SIGKILL) mid-run and the others
//!   carry on without losing an acknowledged ticket or pass;
//! - an SSE stream on one node tells its visitor of an admission made on another node well
//!   within a second (the room-change notices, not the ticker);
//! - a webhook receiver rebuilds every ticket's history from the per-visitor events of three
//!   nodes, one killed mid-run (SPEC §14.9).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anteroom_test_support::redis::RedisServer;
use rand::Rng;
use support::{SERVICE_KEY, Server, Site, jwt_claims, key_hash, ticket_id_of, toml_string};

/// Writes a node's config: the shared redis store and key directory, and `rooms`.
fn write_node_config(site: &Site, redis_url: &str, keys_dir: &Path, rooms: &str) {
    let text = format!(
        "[server]\n\
         listen = \"127.0.0.1:{port}\"\n\
         public_url = \"{url}\"\n\
         issuer = \"http://anteroom.test\"\n\
         join_rate_limit = false\n\
         # The verify calls come from the test itself, standing in for the site's proxy.\n\
         trusted_proxies = [\"127.0.0.1/32\"]\n\
         \n\
         [store]\n\
         backend = \"redis\"\n\
         url = \"{redis_url}\"\n\
         \n\
         [keys]\n\
         dir = {keys}\n\
         algorithm = \"EdDSA\"\n\
         \n\
         [auth]\n\
         service_keys = [\"{service}\"]\n\
         \n\
         {rooms}\n",
        port = site.port,
        url = site.public_url(),
        keys = toml_string(keys_dir),
        service = key_hash(SERVICE_KEY),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

/// Starts `count` nodes on one redis and one key directory (the first node creates the keys;
/// the others start once it is up, so they load the same ones).
async fn start_nodes(
    count: usize,
    redis: &RedisServer,
    keys_dir: &Path,
    rooms: &str,
    client: &reqwest::Client,
) -> (Vec<Site>, Vec<Server>) {
    let sites: Vec<Site> = (0..count).map(|_| Site::new()).collect();
    for site in &sites {
        write_node_config(site, &redis.url(), keys_dir, rooms);
    }
    let mut servers = Vec::new();
    for (index, site) in sites.iter().enumerate() {
        let mut server = site.start();
        if index == 0 {
            server.wait_ready(client).await;
        }
        servers.push(server);
    }
    for server in &mut servers {
        server.wait_ready(client).await;
    }
    (sites, servers)
}

fn assert_no_panic(servers: &[Server]) {
    for server in servers {
        let log = server.log();
        assert!(!log.contains("panicked"), "a node panicked:\n{log}");
    }
}

// Three nodes, one queue ---------------------------------------------------------------------

const ROOM: &str = "multi";
const MAX_ACTIVE: u64 = 40;
const PER_MINUTE: u64 = 2400;
const BURST: u64 = 10;
/// Joins acknowledged at least (some in flight on the killed node may fail).
const MIN_JOINS: usize = 5_000;
/// Joins the clients start in all.
const PLANNED_JOINS: usize = 5_400;
const JOIN_CLIENTS: usize = 45;
const POLLERS: usize = 4;
const COMPLETERS: usize = 2;
/// Node 2 is killed once this many joins were acknowledged and this many passes claimed.
const KILL_AFTER_JOINS: usize = 2_500;
const KILL_AFTER_PASSES: usize = 20;

/// Nothing ends by time during the test: every admission comes from a slot freed by a
/// completion (ticked in the same script) or from the admission bucket refilling (ticked by
/// every node's ticker).
fn multi_room() -> String {
    format!(
        r#"
[[room]]
id = "{ROOM}"
mode = "queue"
max_active = {MAX_ACTIVE}
admit_per_minute = {PER_MINUTE}
admit_burst = {BURST}
session_ttl = "10m"
claim_ttl = "2m"
ticket_idle_ttl = "5m"
"#
    )
}

#[derive(Debug, Clone)]
struct AckedJoin {
    node: usize,
    ticket: String,
    ticket_id: String,
    position: u64,
}

#[derive(Debug, Clone)]
struct Claimed {
    ticket: String,
    ticket_id: String,
    session: String,
    node: usize,
}

#[derive(Default)]
struct Observed {
    joins: Mutex<Vec<AckedJoin>>,
    /// Waiting tickets by position, for the pollers.
    waiting: Mutex<BTreeMap<u64, String>>,
    /// The `ahead` each polled ticket was last shown (I5).
    last_ahead: Mutex<HashMap<String, u64>>,
    /// Ticket id → session id of every pass received (I7).
    passes: Mutex<HashMap<String, String>>,
    claimed: Mutex<Vec<Claimed>>,
    completed: Mutex<HashSet<String>>,
    /// Sessions whose completion went to a node killed meanwhile: it may or may not have
    /// happened, so their tickets are not checked at the end.
    maybe_completed: Mutex<HashSet<String>>,
    joins_started: AtomicUsize,
    joins_acked: AtomicUsize,
    /// Requests to the killed node that failed after the kill.
    failed_on_killed: AtomicUsize,
    violations: Mutex<Vec<String>>,
    killed: [AtomicBool; 3],
    stop: AtomicBool,
}

impl Observed {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn live_node(&self, preferred: usize) -> usize {
        (0..3)
            .map(|offset| (preferred + offset) % 3)
            .find(|node| !self.killed[*node].load(Ordering::SeqCst))
            .unwrap()
    }

    /// A request to `node` failed: tolerated only once it is killed.
    fn failed(&self, node: usize, what: String) {
        if self.killed[node].load(Ordering::SeqCst) {
            self.failed_on_killed.fetch_add(1, Ordering::SeqCst);
        } else {
            self.violation(what);
        }
    }

    fn record_pass(&self, ticket_id: &str, pass: &str) -> String {
        let sub = jwt_claims(pass)["sub"].as_str().unwrap().to_owned();
        let previous = self
            .passes
            .lock()
            .unwrap()
            .insert(ticket_id.to_owned(), sub.clone());
        if let Some(previous) = previous
            && previous != sub
        {
            self.violation(format!(
                "I7: ticket {ticket_id} got session {sub} after {previous}"
            ));
        }
        sub
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_one_queue_and_survive_losing_one() {
    let test_started = Instant::now();
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let (_sites, mut servers) = start_nodes(3, &redis, keys.path(), &multi_room(), &client).await;
    let bases: Arc<Vec<String>> = Arc::new(servers.iter().map(Server::url).collect());
    let observed = Arc::new(Observed::default());

    let sampler = tokio::spawn(sample_redis(redis.url(), observed.clone()));
    let mut tasks = Vec::new();
    for index in 0..JOIN_CLIENTS {
        tasks.push(tokio::spawn(join_loop(
            index,
            client.clone(),
            bases.clone(),
            observed.clone(),
        )));
    }
    let mut helpers = Vec::new();
    for index in 0..POLLERS {
        helpers.push(tokio::spawn(poll_loop(
            index,
            client.clone(),
            bases.clone(),
            observed.clone(),
        )));
    }
    for index in 0..COMPLETERS {
        helpers.push(tokio::spawn(complete_loop(
            index,
            client.clone(),
            bases.clone(),
            observed.clone(),
        )));
    }

    let load_started = Instant::now();
    loop {
        let acked = observed.joins_acked.load(Ordering::SeqCst);
        let passes = observed.passes.lock().unwrap().len();
        if acked >= KILL_AFTER_JOINS && passes >= KILL_AFTER_PASSES {
            break;
        }
        assert!(
            load_started.elapsed() < Duration::from_secs(120),
            "load did not get going: {acked} joins, {passes} passes; violations: {:?}",
            observed.violations.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    observed.killed[2].store(true, Ordering::SeqCst);
    servers[2].kill();
    let killed_at = load_started.elapsed();
    let acked_at_kill = observed.joins_acked.load(Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    let joins_done_at = load_started.elapsed();
    // Let admissions and completions go on a little after the last join.
    tokio::time::sleep(Duration::from_secs(2)).await;
    observed.stop.store(true, Ordering::SeqCst);
    for helper in helpers {
        helper.await.unwrap();
    }
    let samples = sampler.await.unwrap();

    let violations = observed.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "violations: {violations:#?}");
    let joins = observed.joins.lock().unwrap().clone();
    assert!(
        joins.len() >= MIN_JOINS,
        "{} joins acknowledged, at least {MIN_JOINS} wanted",
        joins.len()
    );
    let per_node: Vec<usize> = (0..3)
        .map(|node| joins.iter().filter(|join| join.node == node).count())
        .collect();
    assert!(
        per_node.iter().all(|count| *count >= 300),
        "joins spread over the nodes: {per_node:?}"
    );

    // I1: no two acknowledged joins share a position, on whichever node they were made.
    let positions: HashSet<u64> = joins.iter().map(|join| join.position).collect();
    assert_eq!(positions.len(), joins.len(), "I1: positions are unique");

    // I3 over every pair of samples: admissions between them within the bucket's bound.
    let mut windows = 0u64;
    for (i, earlier) in samples.iter().enumerate() {
        for later in &samples[i + 1..] {
            let millis = later.at_ms.saturating_sub(earlier.at_ms);
            if millis > 60_000 {
                break;
            }
            let admitted = later.admitted_total - earlier.admitted_total;
            // Admissions in a window of W ms: at most rate·W + burst (+1 for the refill that
            // lands inside the window's last millisecond).
            let bound = PER_MINUTE * millis / 60_000 + BURST + 1;
            assert!(
                admitted <= bound,
                "I3: {admitted} admissions in {millis} ms (bound {bound})"
            );
            windows += 1;
        }
    }
    let admitted_total = samples.last().map_or(0, |sample| sample.admitted_total);
    assert!(
        admitted_total >= 100,
        "admission went on during the run: {admitted_total} admitted"
    );

    // Nothing acknowledged was lost: every ticket is still known on a surviving node, with
    // the pass it was given.
    let passes = observed.passes.lock().unwrap().clone();
    let completed = observed.completed.lock().unwrap().clone();
    let maybe_completed = observed.maybe_completed.lock().unwrap().clone();
    let answers = statuses(&client, &bases[0], &bases[1], &joins).await;
    let mut admitted_now = 0;
    for (join, (status, body)) in joins.iter().zip(&answers) {
        match passes.get(&join.ticket_id) {
            Some(session) if maybe_completed.contains(session) => {}
            Some(session) if completed.contains(session) => assert_eq!(
                *status, 410,
                "ticket {} whose session was completed is over: {body}",
                join.ticket_id
            ),
            Some(session) => {
                assert_eq!(
                    *status, 200,
                    "ticket {} kept its pass: {body}",
                    join.ticket_id
                );
                assert_eq!(body["state"], "admitted", "ticket {}", join.ticket_id);
                let pass = body["pass"].as_str().unwrap();
                assert_eq!(
                    jwt_claims(pass)["sub"].as_str(),
                    Some(session.as_str()),
                    "I7: ticket {} gets back its session",
                    join.ticket_id
                );
            }
            None => {
                assert_eq!(
                    *status, 200,
                    "ticket {} is still live: {body}",
                    join.ticket_id
                );
                assert_eq!(body["position"].as_u64(), Some(join.position));
                if body["state"] == "admitted" {
                    admitted_now += 1;
                }
            }
        }
    }
    assert_no_panic(&servers[..2]);

    let max_held = samples.iter().map(|sample| sample.held).max().unwrap_or(0);
    eprintln!(
        "multinode: {} joins acknowledged over 3 nodes {per_node:?} ({acked_at_kill} before \
         node 2 was killed at {killed_at:.2?}; joins done at {joins_done_at:.2?}); {} passes \
         claimed, {} sessions completed, {admitted_total} admissions; {} requests failed on \
         the killed node; {} Redis samples (I2 max held {max_held}/{MAX_ACTIVE}, I4, I8), \
         {windows} I3 windows; {admitted_now} more admitted by the end; whole test {:.2?}",
        joins.len(),
        passes.len(),
        completed.len(),
        observed.failed_on_killed.load(Ordering::SeqCst),
        samples.len(),
        test_started.elapsed()
    );
}

/// One visitor after another, each without a cookie, on this client's node (or the next
/// live one), until the plan is done.
async fn join_loop(
    index: usize,
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    observed: Arc<Observed>,
) {
    let mut last_position = 0;
    while observed.joins_started.fetch_add(1, Ordering::SeqCst) < PLANNED_JOINS {
        let node = observed.live_node(index % 3);
        let url = format!("{}/_anteroom/v1/rooms/{ROOM}/join", bases[node]);
        let body = match client.post(&url).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                match response.json::<serde_json::Value>().await {
                    Ok(body) => body,
                    Err(error) => {
                        observed.failed(node, format!("join body: {error}"));
                        continue;
                    }
                }
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                observed.violation(format!("join on node {node}: {status} {text}"));
                continue;
            }
            Err(error) => {
                observed.failed(node, format!("join on node {node}: {error}"));
                continue;
            }
        };
        let ticket = body["ticket"].as_str().unwrap().to_owned();
        let ticket_id = ticket_id_of(&ticket);
        let position = body["position"].as_u64().unwrap();
        // I1: this client's joins were acknowledged one after another.
        if position <= last_position {
            observed.violation(format!(
                "I1: client {index} got position {position} after {last_position}"
            ));
        }
        last_position = position;
        match body["state"].as_str() {
            Some("admitted") => {
                let session = observed.record_pass(&ticket_id, body["pass"].as_str().unwrap());
                observed.claimed.lock().unwrap().push(Claimed {
                    ticket: ticket.clone(),
                    ticket_id: ticket_id.clone(),
                    session,
                    node,
                });
            }
            _ => {
                observed
                    .waiting
                    .lock()
                    .unwrap()
                    .insert(position, ticket.clone());
            }
        }
        observed.joins.lock().unwrap().push(AckedJoin {
            node,
            ticket,
            ticket_id,
            position,
        });
        observed.joins_acked.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls waiting tickets near the front on random nodes: `ahead` never grows (I5), and an
/// admitted ticket claims its pass.
async fn poll_loop(
    index: usize,
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    observed: Arc<Observed>,
) {
    while !observed.stop.load(Ordering::SeqCst) {
        // Each poller has tickets of its own (by position), so one ticket's polls are
        // answered in the order they were asked: what I5 compares.
        let picked = {
            let waiting = observed.waiting.lock().unwrap();
            let mine = waiting
                .iter()
                .filter(|(position, _)| **position as usize % POLLERS == index);
            // Mostly the front of the line, sometimes a little further back.
            let skip = rand::thread_rng().gen_range(0..4usize);
            let mut nth = mine.clone().nth(skip);
            if nth.is_none() {
                nth = mine.clone().next();
            }
            nth.map(|(position, ticket)| (*position, ticket.clone()))
        };
        let Some((position, ticket)) = picked else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let node = observed.live_node(rand::thread_rng().gen_range(0..3));
        let response = client
            .get(format!("{}/_anteroom/v1/rooms/{ROOM}/status", bases[node]))
            .header("x-anteroom-ticket", &ticket)
            .send()
            .await;
        let body: serde_json::Value = match response {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                response.json().await.unwrap()
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                observed.violation(format!(
                    "status of {position} on node {node}: {status} {text}"
                ));
                continue;
            }
            Err(error) => {
                observed.failed(node, format!("status on node {node}: {error}"));
                continue;
            }
        };
        let ticket_id = ticket_id_of(&ticket);
        match body["state"].as_str() {
            Some("waiting") => {
                let ahead = body["ahead"].as_u64().unwrap();
                let previous = observed
                    .last_ahead
                    .lock()
                    .unwrap()
                    .insert(ticket_id.clone(), ahead);
                if let Some(previous) = previous
                    && ahead > previous
                {
                    observed.violation(format!(
                        "I5: ticket at {position} shown {ahead} ahead after {previous}"
                    ));
                }
            }
            Some("admitted") => {
                observed.waiting.lock().unwrap().remove(&position);
                let session = observed.record_pass(&ticket_id, body["pass"].as_str().unwrap());
                observed.claimed.lock().unwrap().push(Claimed {
                    ticket,
                    ticket_id,
                    session,
                    node,
                });
            }
            other => observed.violation(format!("status state {other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Asks again for each claimed pass on another node (I7), then completes the session through
/// the service endpoint of a third, freeing its slot.
async fn complete_loop(
    index: usize,
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    observed: Arc<Observed>,
) {
    while !observed.stop.load(Ordering::SeqCst) {
        let next = {
            let mut claimed = observed.claimed.lock().unwrap();
            (!claimed.is_empty()).then(|| claimed.remove(0))
        };
        let Some(claimed) = next else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let again_node = observed.live_node(claimed.node + 1);
        match client
            .get(format!(
                "{}/_anteroom/v1/rooms/{ROOM}/status",
                bases[again_node]
            ))
            .header("x-anteroom-ticket", &claimed.ticket)
            .send()
            .await
        {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                let body: serde_json::Value = response.json().await.unwrap();
                observed.record_pass(
                    &claimed.ticket_id,
                    body["pass"].as_str().unwrap_or("x.e30.x"),
                );
            }
            Ok(response) => {
                let status = response.status();
                observed.violation(format!("asking again for a pass: {status}"));
            }
            Err(error) => observed.failed(again_node, format!("asking again: {error}")),
        }
        let complete_node = observed.live_node(claimed.node + 2 + index);
        match client
            .post(format!(
                "{}/_anteroom/v1/rooms/{ROOM}/sessions/{}/complete",
                bases[complete_node], claimed.session
            ))
            .bearer_auth(SERVICE_KEY)
            .send()
            .await
        {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                observed
                    .completed
                    .lock()
                    .unwrap()
                    .insert(claimed.session.clone());
            }
            Ok(response) => {
                let status = response.status();
                observed.violation(format!("complete: {status}"));
            }
            Err(error) => {
                // The call may or may not have happened on a node killed meanwhile; its
                // ticket is then not checked at the end.
                observed.failed(complete_node, format!("complete: {error}"));
                observed
                    .maybe_completed
                    .lock()
                    .unwrap()
                    .insert(claimed.session.clone());
            }
        }
    }
}

/// TIME, ZCARD active, ZCARD admitted, HMGET serving/last_position/admitted, the regular
/// line's count hash (its masks of live positions, `m<bucket>`).
type SampleReply = (
    (u64, u64),
    u64,
    u64,
    (Option<u64>, Option<u64>, Option<u64>),
    Vec<(String, Vec<u8>)>,
);

/// The lowest live position of a line, from its count hash (the store's layout 3, room.lua):
/// `m<n>` is the mask of line bucket n's live positions, position n * 128 + k being bit k % 8
/// of byte k / 8.
fn lowest_waiting(counts: &[(String, Vec<u8>)]) -> Option<u64> {
    counts
        .iter()
        .filter_map(|(field, mask)| {
            let bucket: u64 = field.strip_prefix('m')?.parse().ok()?;
            let (byte, value) = mask.iter().enumerate().find(|(_, value)| **value != 0)?;
            Some(bucket * 128 + byte as u64 * 8 + u64::from(value.trailing_zeros()))
        })
        .min()
}

/// What one sample of the room's keys in Redis showed.
#[derive(Debug, Clone)]
struct Sample {
    at_ms: u64,
    admitted_total: u64,
    held: u64,
}

/// Reads the room's keys in Redis every few milliseconds in one MULTI (one instant) and
/// checks I2 (active + admitted ≤ max_active), I4 (no waiting ticket below the serving
/// counter in a fifo room) and I8 (serving ≤ last position) on each; returns the samples for
/// I3.
async fn sample_redis(url: String, observed: Arc<Observed>) -> Vec<Sample> {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let key = |part: &str| format!("anteroom:{{{ROOM}}}:{part}");
    let mut samples = Vec::new();
    while !observed.stop.load(Ordering::SeqCst) {
        let reply: redis::RedisResult<SampleReply> = redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("ZCARD")
            .arg(key("active"))
            .cmd("ZCARD")
            .arg(key("admitted"))
            .cmd("HMGET")
            .arg(key("meta"))
            .arg("serving")
            .arg("last_position")
            .arg("admitted")
            .cmd("HGETALL")
            .arg(key("waiting"))
            .query_async(&mut connection)
            .await;
        // A reply slower than the connection's response bound (a loaded machine) loses that
        // one sample, not the test: the checks hold on every sample that was taken, and the
        // caller requires enough of them.
        let Ok((time, active, admitted, meta, counts)) = reply else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (Some(serving), Some(last_position), Some(admitted_total)) = meta else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let held = active + admitted;
        if held > MAX_ACTIVE {
            observed.violation(format!(
                "I2: {active} active + {admitted} admitted > {MAX_ACTIVE}"
            ));
        }
        if let Some(lowest) = lowest_waiting(&counts)
            && lowest <= serving
        {
            observed.violation(format!(
                "I4: position {lowest} still waits while serving is {serving}"
            ));
        }
        if serving > last_position {
            observed.violation(format!("I8: serving {serving} > last {last_position}"));
        }
        samples.push(Sample {
            at_ms: time.0 * 1000 + time.1 / 1000,
            admitted_total,
            held,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    samples
}

/// The status of every ticket, asked of the surviving nodes in turn, 32 at a time.
async fn statuses(
    client: &reqwest::Client,
    first: &str,
    second: &str,
    joins: &[AckedJoin],
) -> Vec<(u16, serde_json::Value)> {
    let mut answers = Vec::with_capacity(joins.len());
    for (batch_index, batch) in joins.chunks(32).enumerate() {
        let requests = batch.iter().enumerate().map(|(index, join)| {
            let base = if (batch_index + index) % 2 == 0 {
                first
            } else {
                second
            };
            let request = client
                .get(format!("{base}/_anteroom/v1/rooms/{ROOM}/status"))
                .header("x-anteroom-ticket", &join.ticket)
                .send();
            async move {
                let response = request.await.unwrap();
                let status = response.status().as_u16();
                let body = response.json().await.unwrap_or_default();
                (status, body)
            }
        });
        answers.extend(futures_util::future::join_all(requests).await);
    }
    answers
}

// SSE across nodes -----------------------------------------------------------------------------

const SSE_ROOM: &str = "relay";
const SSE_ROUNDS: usize = 6;

/// One slot: each round the holder's session is completed on node A, which admits the next
/// visitor in the same script; that visitor's SSE stream is on node B.
const SSE_ROOM_CONFIG: &str = r#"
[[room]]
id = "relay"
mode = "queue"
max_active = 1
session_ttl = "10m"
claim_ttl = "2m"
ticket_idle_ttl = "5m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_hears_of_an_admission_made_on_another_node() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let (_sites, servers) = start_nodes(2, &redis, keys.path(), SSE_ROOM_CONFIG, &client).await;
    let (node_a, node_b) = (servers[0].url(), servers[1].url());

    // The first visitor takes the only slot at once.
    let first: serde_json::Value = client
        .post(format!("{node_a}/_anteroom/v1/rooms/{SSE_ROOM}/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["state"], "admitted", "{first}");
    let mut holder = jwt_claims(first["pass"].as_str().unwrap())["sub"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut latencies = Vec::new();
    for round in 0..SSE_ROUNDS {
        let waiting: serde_json::Value = client
            .post(format!("{node_b}/_anteroom/v1/rooms/{SSE_ROOM}/join"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(waiting["state"], "waiting", "round {round}: {waiting}");
        let ticket = waiting["ticket"].as_str().unwrap().to_owned();
        let mut stream = client
            .get(format!("{node_b}/_anteroom/v1/rooms/{SSE_ROOM}/events"))
            .header("x-anteroom-ticket", &ticket)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let mut events = SseReader::default();
        let (kind, _) = events.next(&mut stream).await;
        assert_eq!(
            kind, "status",
            "round {round}: the stream starts with the status"
        );
        // Past the one-event-a-second pacing and a few of node B's own ticks.
        tokio::time::sleep(Duration::from_millis(1_300)).await;

        let started = Instant::now();
        let completed = client
            .post(format!(
                "{node_a}/_anteroom/v1/rooms/{SSE_ROOM}/sessions/{holder}/complete"
            ))
            .bearer_auth(SERVICE_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(completed.status(), 200, "round {round}");
        let (kind, data) = loop {
            let (kind, data) =
                tokio::time::timeout(Duration::from_secs(5), events.next(&mut stream))
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: no admission event within 5 s"));
            if kind == "admitted" {
                break (kind, data);
            }
        };
        let latency = started.elapsed();
        assert_eq!(kind, "admitted");
        let admitted: serde_json::Value = serde_json::from_str(&data).unwrap();
        holder = jwt_claims(admitted["pass"].as_str().unwrap())["sub"]
            .as_str()
            .unwrap()
            .to_owned();
        latencies.push(latency);
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let max = *latencies.last().unwrap();
    eprintln!(
        "sse across nodes: admission seen on node B after {latencies:.0?} (median {median:.0?})"
    );
    assert!(
        max < Duration::from_secs(1),
        "every admission reaches the other node's stream within a second: {latencies:?}"
    );
    // Node B's ticker alone would show an admission after 250 ms on average (it refreshes
    // every 500 ms): the notices make it much sooner.
    assert!(
        median < Duration::from_millis(250),
        "admissions travel by notice, not by the next tick: {latencies:?}"
    );
    assert_no_panic(&servers);
}

/// Reads server-sent events from a streaming response.
#[derive(Default)]
struct SseReader {
    buffer: String,
}

impl SseReader {
    /// The next event's name and data.
    async fn next(&mut self, response: &mut reqwest::Response) -> (String, String) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut kind = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        kind = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if !kind.is_empty() {
                    return (kind, data);
                }
                continue;
            }
            let chunk = response
                .chunk()
                .await
                .unwrap()
                .expect("the stream stays open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

// Room changes and ended sessions across nodes --------------------------------------------------

const CHANGING_ROOM: &str = r#"
[[room]]
id = "changing"
max_active = 1
"#;

/// Node A's config is reloaded with the room closed; node B, which had the room's
/// configuration in its cache, refuses joins within a second. A session completed on node A
/// is over on node B at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_changes_and_ended_sessions_reach_the_other_node_within_a_second() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let (sites, servers) = start_nodes(2, &redis, keys.path(), CHANGING_ROOM, &client).await;
    let (node_a, node_b) = (servers[0].url(), servers[1].url());
    let join_on_b = || {
        client
            .post(format!("{node_b}/_anteroom/v1/rooms/changing/join"))
            .send()
    };

    // A pass claimed on B, completed on A: B answers for the ticket as over at once.
    let first: serde_json::Value = join_on_b().await.unwrap().json().await.unwrap();
    assert_eq!(first["state"], "admitted", "{first}");
    let session = jwt_claims(first["pass"].as_str().unwrap())["sub"]
        .as_str()
        .unwrap()
        .to_owned();
    let completed = client
        .post(format!(
            "{node_a}/_anteroom/v1/rooms/changing/sessions/{session}/complete"
        ))
        .bearer_auth(SERVICE_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(completed.status(), 200);
    let after = client
        .get(format!("{node_b}/_anteroom/v1/rooms/changing/status"))
        .header("x-anteroom-ticket", first["ticket"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        after.status(),
        410,
        "a completed session is over on every node"
    );

    // B has the room's configuration cached (it just served joins); A closes the room.
    assert_eq!(join_on_b().await.unwrap().status(), 200);
    write_node_config(
        &sites[0],
        &redis.url(),
        keys.path(),
        &CHANGING_ROOM.replace("max_active = 1", "max_active = 1\nmode = \"closed\""),
    );
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &servers[0].pid().to_string()])
        .status()
        .unwrap();
    assert!(hangup.success());
    // Closed once A applied the reload, which it does right away: B must follow within 1 s.
    let applied = Instant::now();
    let closed_on_a = loop {
        let answer = client
            .post(format!("{node_a}/_anteroom/v1/rooms/changing/join"))
            .send()
            .await
            .unwrap();
        if answer.status() == 503 {
            break Instant::now();
        }
        assert!(
            applied.elapsed() < Duration::from_secs(10),
            "node A reloads"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let closed_on_b = loop {
        let answer = join_on_b().await.unwrap();
        if answer.status() == 503 {
            let body: serde_json::Value = answer.json().await.unwrap();
            assert_eq!(body["code"], "room_closed");
            break closed_on_a.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            closed_on_a.elapsed() < Duration::from_secs(1),
            "node B still joins visitors a second after the room closed"
        );
    };
    eprintln!("room closed on node A; node B refused joins {closed_on_b:?} later");
    assert_no_panic(&servers);
}

/// A room of one whose `/shop/**` pages need its pass, for the verify endpoint.
const PROTECTED_ROOM: &str = r#"
[[room]]
id = "keyed"
routes = ["/shop/**"]
max_active = 1
"#;

/// The kids a node's JWKS lists.
async fn jwks_kids(client: &reqwest::Client, node: &str) -> Vec<String> {
    let jwks: serde_json::Value = client
        .get(format!("{node}/.well-known/jwks.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap().to_owned())
        .collect()
}

/// A key rotated in the shared key directory (here by `anteroom keys generate`, as the admin
/// API does on one node) is picked up by every running node within two seconds, without a
/// restart: both publish it, sign with it, and accept passes signed with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotated_in_the_shared_directory_reaches_every_node_within_two_seconds() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let (_sites, servers) = start_nodes(2, &redis, keys.path(), PROTECTED_ROOM, &client).await;
    let (node_a, node_b) = (servers[0].url(), servers[1].url());
    let before = jwks_kids(&client, &node_a).await;

    let rotated = std::process::Command::new(env!("CARGO_BIN_EXE_anteroom"))
        .args(["keys", "generate", "--algorithm", "ES256", "--dir"])
        .arg(keys.path())
        .output()
        .unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    let rotated_at = Instant::now();
    let new_kid = support::printed_kid(&rotated);
    assert!(!before.contains(&new_kid));

    for node in [&node_a, &node_b] {
        loop {
            let kids = jwks_kids(&client, node).await;
            if kids.contains(&new_kid) {
                for old in &before {
                    assert!(kids.contains(old), "{node} still publishes {old}");
                }
                break;
            }
            assert!(
                rotated_at.elapsed() < Duration::from_secs(2),
                "{node} does not publish the rotated key after {:?}",
                rotated_at.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "both nodes publish the rotated key {:?} after the rotation",
        rotated_at.elapsed()
    );

    // A pass node A signs now carries the new key, and node B lets it through.
    let joined: serde_json::Value = client
        .post(format!("{node_a}/_anteroom/v1/rooms/keyed/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pass = joined["pass"].as_str().unwrap();
    assert_eq!(support::jwt_header(pass)["kid"], new_kid.as_str());
    let verified = client
        .get(format!("{node_b}/_anteroom/verify"))
        .header("x-original-uri", "/shop/cart")
        .header("cookie", format!("anteroom_p_keyed={pass}"))
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status(), 200, "node B accepts the new key's pass");
    let unverified = client
        .get(format!("{node_b}/_anteroom/verify"))
        .header("x-original-uri", "/shop/cart")
        .header("cookie", "anteroom_p_keyed=not-a-pass")
        .send()
        .await
        .unwrap();
    assert_eq!(
        unverified.status(),
        401,
        "and still holds back a visitor without a pass (the room is full)"
    );
    assert_no_panic(&servers);
}

// Per-visitor events from three nodes, one killed ------------------------------------------

const JOURNEY_ROOM: &str = "journeys";
const JOURNEY_VISITORS: usize = 240;
const JOURNEY_CLIENTS: usize = 8;
/// Node 2 is killed once this many joins were acknowledged.
const JOURNEY_KILL_AFTER: usize = 90;

/// What the visitors did, as they were answered.
#[derive(Default)]
struct Journeys {
    /// Acknowledged joins: ticket id and position.
    joined: Mutex<BTreeMap<String, u64>>,
    /// Passes claimed: ticket id and session id.
    claimed: Mutex<BTreeMap<String, String>>,
    /// Tickets whose session was completed, as acknowledged.
    completed: Mutex<HashSet<String>>,
    /// Tickets that left, as acknowledged.
    left: Mutex<HashSet<String>>,
    /// Tickets whose last call may or may not have happened (its node died under it).
    uncertain: Mutex<HashSet<String>>,
    dead: [AtomicBool; 3],
}

impl Journeys {
    fn live_node(&self, preferred: usize) -> usize {
        (preferred..preferred + 3)
            .map(|node| node % 3)
            .find(|node| !self.dead[*node].load(Ordering::SeqCst))
            .unwrap()
    }
}

/// What the receiver got: every event of every request, in arrival order, duplicates
/// included, each with the node that posted it (each node posts to its own path).
type Delivered = Arc<Mutex<Vec<(usize, serde_json::Value)>>>;

async fn receive_events(
    axum::extract::State(delivered): axum::extract::State<Delivered>,
    axum::extract::Path(node): axum::extract::Path<usize>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let batch: serde_json::Value = serde_json::from_slice(&body).unwrap();
    delivered.lock().unwrap().extend(
        batch["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| (node, event.clone())),
    );
    axum::http::StatusCode::NO_CONTENT
}

/// The node that posted the latest delivery.
fn delivering_node(delivered: &Delivered) -> Option<usize> {
    delivered.lock().unwrap().last().map(|(node, _)| *node)
}

/// Each ticket's history rebuilt from the deliveries: duplicates removed by event id, order by
/// first arrival (a sink delivers a room's events in order and moves on only once they were
/// received, so first arrivals keep that order). Also answers how many duplicates came.
fn rebuild_histories(
    delivered: &[(usize, serde_json::Value)],
) -> (BTreeMap<String, Vec<serde_json::Value>>, usize) {
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    let mut histories: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (_, event) in delivered {
        let id = event["id"].as_str().unwrap().to_owned();
        if !seen.insert(id) {
            duplicates += 1;
            continue;
        }
        if let Some(ticket) = event["data"]["ticket"].as_str() {
            histories
                .entry(ticket.to_owned())
                .or_default()
                .push(event.clone());
        }
    }
    (histories, duplicates)
}

/// Whether a ticket's event types are a path it can take (joined, admitted, pass, renewals,
/// one end), and name one room, one position and at most one session.
fn is_consistent(history: &[serde_json::Value]) -> bool {
    let mut state = "new";
    for event in history {
        let kind = event["type"].as_str().unwrap_or_default();
        state = match (state, kind) {
            ("new", "ticket.joined") => "waiting",
            ("waiting", "ticket.admitted") => "admitted",
            ("admitted", "pass.issued") | ("session", "session.renewed") => "session",
            ("waiting" | "admitted", "ticket.left" | "ticket.reset")
            | ("waiting", "ticket.abandoned")
            | ("admitted", "ticket.no_show") => "ended",
            ("session", end) if end.starts_with("session.") => "ended",
            _ => return false,
        };
    }
    let one = |field: &dyn Fn(&serde_json::Value) -> serde_json::Value| {
        history
            .windows(2)
            .all(|pair| field(&pair[0]) == field(&pair[1]))
    };
    let sessions: HashSet<&str> = history
        .iter()
        .filter_map(|event| event["data"]["session"].as_str())
        .collect();
    one(&|event| event["room"].clone())
        && one(&|event| event["data"]["position"].clone())
        && sessions.len() <= 1
}

/// One visitor's way through the room: join, then leave while waiting (every fifth), or wait
/// for the pass and complete the session.
async fn journey(
    visitor: usize,
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    journeys: Arc<Journeys>,
) {
    let node = journeys.live_node(visitor % 3);
    let base = &bases[node];
    let Ok(response) = client
        .post(format!("{base}/_anteroom/v1/rooms/{JOURNEY_ROOM}/join"))
        .send()
        .await
    else {
        return; // On the killed node: the join may have happened; nobody holds its ticket.
    };
    assert_eq!(response.status(), 200, "join on node {node}");
    let body: serde_json::Value = response.json().await.unwrap();
    let ticket = body["ticket"].as_str().unwrap().to_owned();
    let ticket_id = ticket_id_of(&ticket);
    journeys
        .joined
        .lock()
        .unwrap()
        .insert(ticket_id.clone(), body["position"].as_u64().unwrap());
    if visitor.is_multiple_of(5) {
        let node = journeys.live_node(visitor + 1);
        let left = client
            .delete(format!(
                "{}/_anteroom/v1/rooms/{JOURNEY_ROOM}/ticket",
                bases[node]
            ))
            .header("x-anteroom-ticket", &ticket)
            .send()
            .await;
        match left {
            Ok(response) if response.status().is_success() => {
                journeys.left.lock().unwrap().insert(ticket_id);
            }
            Ok(response) => panic!("leave: {}", response.status()),
            Err(_) => {
                journeys.uncertain.lock().unwrap().insert(ticket_id);
            }
        }
        return;
    }
    let session = loop {
        let node = journeys.live_node(visitor + 2);
        let status = client
            .get(format!(
                "{}/_anteroom/v1/rooms/{JOURNEY_ROOM}/status",
                bases[node]
            ))
            .header("x-anteroom-ticket", &ticket)
            .send()
            .await;
        if let Ok(response) = status {
            assert_eq!(response.status(), 200, "status of {ticket_id}");
            let body: serde_json::Value = response.json().await.unwrap();
            if body["state"] == "admitted" {
                let pass = body["pass"].as_str().unwrap();
                break jwt_claims(pass)["sub"].as_str().unwrap().to_owned();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    journeys
        .claimed
        .lock()
        .unwrap()
        .insert(ticket_id.clone(), session.clone());
    let node = journeys.live_node(visitor + 1);
    let completed = client
        .post(format!(
            "{}/_anteroom/v1/rooms/{JOURNEY_ROOM}/sessions/{session}/complete",
            bases[node]
        ))
        .bearer_auth(SERVICE_KEY)
        .send()
        .await;
    match completed {
        Ok(response) if response.status().is_success() => {
            journeys.completed.lock().unwrap().insert(ticket_id);
        }
        Ok(response) => panic!("complete: {}", response.status()),
        Err(_) => {
            journeys.uncertain.lock().unwrap().insert(ticket_id);
        }
    }
}

/// A webhook receiver rebuilds every ticket's history from the events of three nodes sharing
/// Redis, the one delivering them killed (SIGKILL) mid-run (SPEC §14.9): each change's event
/// is written with the change by whichever node made it, delivered at least once (another
/// node takes the sink's lease over), and deduplicated here by its id. Every acknowledged
/// join, pass, completion and leave is in its ticket's history, and every history is a
/// consistent path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tickets_history_is_rebuilt_from_the_events_of_three_nodes_one_killed() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let delivered: Delivered = Arc::default();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let receiver = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/events/{node}", axum::routing::post(receive_events))
        .with_state(delivered.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = |node: usize| {
        format!(
            r#"
[[room]]
id = "{JOURNEY_ROOM}"
mode = "queue"
max_active = 8
admit_per_minute = 1200
admit_burst = 8
session_ttl = "10m"
claim_ttl = "2m"
ticket_idle_ttl = "5m"

[[events.sink]]
kind = "webhook"
name = "receiver"
url = "http://{receiver}/events/{node}"
secret = "journeys-secret-0123456789"
batch = 40
timeout = "2s"
"#
        )
    };
    let sites: Vec<Site> = (0..3).map(|_| Site::new()).collect();
    for (node, site) in sites.iter().enumerate() {
        write_node_config(site, &redis.url(), keys.path(), &config(node));
    }
    let mut servers: Vec<Server> = Vec::new();
    for site in &sites {
        let mut server = site.start();
        // The first node creates the keys the others load.
        server.wait_ready(&client).await;
        servers.push(server);
    }
    let bases: Arc<Vec<String>> = Arc::new(servers.iter().map(Server::url).collect());
    let journeys = Arc::new(Journeys::default());
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..JOURNEY_CLIENTS {
        let (client, bases, journeys, next) = (
            client.clone(),
            bases.clone(),
            journeys.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let visitor = next.fetch_add(1, Ordering::SeqCst);
                if visitor >= JOURNEY_VISITORS {
                    return;
                }
                journey(visitor, client.clone(), bases.clone(), journeys.clone()).await;
            }
        }));
    }
    let started = Instant::now();
    let killed = loop {
        if journeys.joined.lock().unwrap().len() >= JOURNEY_KILL_AFTER
            && let Some(node) = delivering_node(&delivered)
        {
            break node;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "joins go on");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    journeys.dead[killed].store(true, Ordering::SeqCst);
    servers[killed].kill();
    let delivered_before_kill = delivered.lock().unwrap().len();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the visitors get through")
            .unwrap();
    }

    let joined = journeys.joined.lock().unwrap().clone();
    let claimed = journeys.claimed.lock().unwrap().clone();
    let completed = journeys.completed.lock().unwrap().clone();
    let left = journeys.left.lock().unwrap().clone();
    let uncertain = journeys.uncertain.lock().unwrap().clone();
    // What each acknowledged ticket's history must end with.
    let wanted_end = |ticket: &str| -> Option<&'static str> {
        if uncertain.contains(ticket) {
            None
        } else if completed.contains(ticket) {
            Some("session.completed")
        } else if left.contains(ticket) {
            Some("left")
        } else {
            None
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (histories, duplicates) = loop {
        let (histories, duplicates) = rebuild_histories(&delivered.lock().unwrap());
        let missing: Vec<&String> = joined
            .keys()
            .filter(|ticket| {
                let Some(history) = histories.get(*ticket) else {
                    return true;
                };
                let last = history.last().unwrap()["type"].as_str().unwrap_or_default();
                match wanted_end(ticket) {
                    Some("left") => last != "ticket.left" && last != "session.abandoned",
                    Some(end) => last != end,
                    None => false,
                }
            })
            .collect();
        if missing.is_empty() {
            break (histories, duplicates);
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} acknowledged tickets lack their events, e.g. {:?}: {:?}",
            missing.len(),
            joined.len(),
            missing[0],
            histories.get(missing[0])
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    for (ticket, history) in &histories {
        assert!(is_consistent(history), "ticket {ticket}: {history:#?}");
        assert_eq!(history[0]["room"], JOURNEY_ROOM);
    }
    for (ticket, position) in &joined {
        let history = &histories[ticket];
        assert_eq!(history[0]["type"], "ticket.joined", "ticket {ticket}");
        assert_eq!(history[0]["data"]["position"], *position, "ticket {ticket}");
    }
    for (ticket, session) in &claimed {
        let issued = histories[ticket]
            .iter()
            .find(|event| event["type"] == "pass.issued")
            .unwrap_or_else(|| panic!("ticket {ticket} has its pass.issued"));
        assert_eq!(issued["data"]["session"], session.as_str());
    }
    assert!(
        claimed.len() >= JOURNEY_VISITORS / 2 && left.len() >= JOURNEY_VISITORS / 10,
        "the run went both ways: {} passes, {} left",
        claimed.len(),
        left.len()
    );
    let takers: HashSet<usize> = delivered.lock().unwrap()[delivered_before_kill..]
        .iter()
        .map(|(node, _)| *node)
        .collect();
    assert!(
        !takers.is_empty() && !takers.contains(&killed),
        "another node took the delivery over from node {killed}: {takers:?}"
    );
    let survivors: Vec<Server> = servers
        .into_iter()
        .enumerate()
        .filter(|(node, _)| *node != killed)
        .map(|(_, server)| server)
        .collect();
    assert_no_panic(&survivors);
    eprintln!(
        "journeys: node {killed} killed while delivering; {} joins acknowledged, {} passes, \
         {} completed, {} left, {} uncertain; {} histories rebuilt from {} deliveries \
         ({duplicates} duplicates removed), taken over by {takers:?}",
        joined.len(),
        claimed.len(),
        completed.len(),
        left.len(),
        uncertain.len(),
        histories.len(),
        delivered.lock().unwrap().len()
    );
}
