//! Crash safety on the embedded store (SPEC §2 I1, I6, I8): the real binary is killed with
//! SIGKILL while thousands of joins are in flight; after a restart on the same data, every
//! join and every pass acknowledged before the kill is still there, and the redb file itself
//! holds a gap-free, duplicate-free run of positions.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anteroom_core::engine::{SessionState, TicketState};
use anteroom_core::{ManualClock, RoomId, Timestamp};
use anteroom_store::{RedbStore, RoomStore};

use support::{Site, StatusJson, jwt_claims, ticket_id_of};

const ROOM: &str = "crash";
/// Concurrent visitors joining.
const JOIN_CLIENTS: usize = 50;
/// Joins the clients fire in all, unless the kill stops them first.
const PLANNED_JOINS: usize = 2_400;
/// The process is killed once this many joins have been acknowledged…
const KILL_AFTER_JOINS: usize = 1_000;
/// …and this many passes were claimed through `status` (admissions by the ticker).
const KILL_AFTER_CLAIMS: usize = 5;
/// Tasks polling the waiting tickets nearest the front, so admitted ones claim passes.
const POLLERS: u64 = 4;

/// A small room: a burst of visitors enters at once, then the ticker admits ten per half
/// second until forty sessions are open; everybody else waits. Nothing ends during the test
/// (sessions last ten minutes, no-shows two, idle tickets five).
const ROOM_CONFIG: &str = r#"
[[room]]
id = "crash"
mode = "queue"
max_active = 40
admit_per_minute = 1200
admit_burst = 10
session_ttl = "10m"
claim_ttl = "2m"
ticket_idle_ttl = "5m"
"#;

/// One join acknowledged with a 200 and its status JSON.
#[derive(Debug, Clone)]
struct AckedJoin {
    client: usize,
    ticket: String,
    ticket_id: String,
    position: u64,
}

/// What the visitors saw before the kill.
#[derive(Default)]
struct Observed {
    joins: Mutex<Vec<AckedJoin>>,
    /// Waiting tickets by position, for the pollers.
    waiting: Mutex<BTreeMap<u64, String>>,
    /// Ticket id → session id (`sub`) of every pass received.
    passes: Mutex<HashMap<String, String>>,
    joins_started: AtomicUsize,
    joins_acked: AtomicUsize,
    claims_by_status: AtomicUsize,
    /// Requests that failed after the kill was decided.
    failed_in_flight: AtomicUsize,
    /// Requests that failed while the server was up: must stay empty.
    unexpected: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl Observed {
    fn record_pass(&self, ticket_id: &str, pass: &str) {
        let sub = jwt_claims(pass)["sub"].as_str().unwrap().to_owned();
        let previous = self
            .passes
            .lock()
            .unwrap()
            .insert(ticket_id.to_owned(), sub.clone());
        if let Some(previous) = previous {
            assert_eq!(previous, sub, "I7: asking again returns the same session");
        }
    }

    fn failed(&self, what: String) {
        if self.stop.load(Ordering::SeqCst) {
            self.failed_in_flight.fetch_add(1, Ordering::SeqCst);
        } else {
            self.unexpected.lock().unwrap().push(what);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_joins_and_passes_survive_sigkill() {
    kill_and_restart(None).await;
}

/// The same with a checkpoint every 4 KiB of log: the kill lands while the log is being
/// checkpointed into redb and its covered segments deleted, and recovery replays whatever
/// the last finished checkpoint does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_joins_and_passes_survive_sigkill_during_checkpoints() {
    kill_and_restart(Some(4096)).await;
}

/// The log segments beside the store file, by number.
fn log_segments(site: &Site) -> Vec<u64> {
    let prefix = "anteroom.redb.wal-";
    let mut numbers: Vec<u64> = std::fs::read_dir(site.path())
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_prefix(prefix)?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    numbers
}

async fn kill_and_restart(checkpoint_bytes: Option<u64>) {
    let test_started = Instant::now();
    let site = Site::new();
    let config = site.write_config("EdDSA", ROOM_CONFIG);
    if let Some(bytes) = checkpoint_bytes {
        let text = std::fs::read_to_string(&config).unwrap().replacen(
            "backend = \"embedded\"\n",
            &format!("backend = \"embedded\"\ncheckpoint_bytes = {bytes}\n"),
            1,
        );
        std::fs::write(&config, text).unwrap();
    }
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let base = server.url();

    let observed = Arc::new(Observed::default());
    let mut tasks = Vec::new();
    for client_index in 0..JOIN_CLIENTS {
        tasks.push(tokio::spawn(join_loop(
            client_index,
            client.clone(),
            base.clone(),
            observed.clone(),
        )));
    }
    for poller in 0..POLLERS {
        tasks.push(tokio::spawn(poll_loop(
            poller,
            client.clone(),
            base.clone(),
            observed.clone(),
        )));
    }

    // Kill while joins are in flight, once enough were acknowledged and the ticker's
    // admissions have been claimed through `status`.
    let load_started = Instant::now();
    loop {
        let acked = observed.joins_acked.load(Ordering::SeqCst);
        let claims = observed.claims_by_status.load(Ordering::SeqCst);
        if acked >= KILL_AFTER_JOINS && claims >= KILL_AFTER_CLAIMS {
            break;
        }
        assert!(
            load_started.elapsed() < Duration::from_secs(20),
            "load did not get going: {acked} joins, {claims} claims; unexpected failures: {:?}",
            observed.unexpected.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    observed.stop.store(true, Ordering::SeqCst);
    let started_at_kill = observed.joins_started.load(Ordering::SeqCst);
    let acked_at_kill = observed.joins_acked.load(Ordering::SeqCst);
    server.kill();
    let killed_after = load_started.elapsed();
    for task in tasks {
        task.await.unwrap();
    }
    let unexpected = observed.unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "requests failed before the kill: {unexpected:?}"
    );
    assert!(
        started_at_kill.min(PLANNED_JOINS) > acked_at_kill,
        "the kill must land while joins are in flight ({started_at_kill} started, \
         {acked_at_kill} acknowledged)"
    );

    let segments_at_kill = log_segments(&site);
    if checkpoint_bytes.is_some() {
        assert!(
            segments_at_kill.last().is_some_and(|newest| *newest >= 10),
            "the log was checkpointed many times under load: segments {segments_at_kill:?}"
        );
    }

    let joins = observed.joins.lock().unwrap().clone();
    let passes = observed.passes.lock().unwrap().clone();
    check_positions_as_acknowledged(&joins);

    // Restart on the same data and kill it again as soon as it answers: the restart serves
    // before the log it replayed is checkpointed into redb, so this kill may land before or
    // during that checkpoint, and the next restart replays the log again.
    let mut server = site.start();
    server.wait_ready(&client).await;
    server.kill();
    let segments_at_second_kill = log_segments(&site);

    // Restart once more and ask about every acknowledged ticket.
    let mut server = site.start();
    server.wait_ready(&client).await;
    let answers = status_of_all(&client, &server.url(), &joins).await;
    for (join, answer) in joins.iter().zip(&answers) {
        assert_eq!(
            answer.position, join.position,
            "I6: ticket {} kept its position",
            join.ticket_id
        );
        assert_eq!(answer.room, ROOM);
        match passes.get(&join.ticket_id) {
            Some(session) => {
                assert_eq!(
                    answer.state, "admitted",
                    "I6: ticket {} had a pass",
                    join.ticket_id
                );
                let pass = answer
                    .pass
                    .as_deref()
                    .expect("admitted status carries a pass");
                assert_eq!(
                    jwt_claims(pass)["sub"].as_str(),
                    Some(session.as_str()),
                    "I6/I7: ticket {} gets back the session it was acknowledged",
                    join.ticket_id
                );
            }
            None => assert!(
                answer.state == "waiting" || answer.state == "admitted",
                "ticket {} is live after the restart: {}",
                join.ticket_id,
                answer.state
            ),
        }
    }
    server.kill();

    // The file itself, read by the store's own code.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp(
        u64::try_from(now.as_millis()).unwrap(),
    )));
    let store = RedbStore::open(&site.store_path(), clock).unwrap();
    let room = RoomId::new(ROOM).unwrap();
    let records = store.records(&room).await.unwrap();
    let snapshot = store.snapshot(&room).await.unwrap();

    let mut positions: Vec<u64> = records.tickets.iter().map(|t| t.position).collect();
    positions.sort_unstable();
    let distinct: HashSet<u64> = positions.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        positions.len(),
        "I1: no two tickets share a position"
    );
    let ended: Vec<_> = records
        .tickets
        .iter()
        .filter(|t| matches!(t.state, TicketState::Ended { .. }))
        .collect();
    assert!(
        ended.is_empty(),
        "nothing ends in this test, so every ticket is still remembered: {ended:?}"
    );
    let expected: Vec<u64> = (1..=snapshot.last_position).collect();
    assert_eq!(
        positions, expected,
        "the store holds positions 1..={} without a gap",
        snapshot.last_position
    );
    assert!(
        snapshot.serving <= snapshot.last_position,
        "I8: serving {} ≤ last position {}",
        snapshot.serving,
        snapshot.last_position
    );

    let tickets_by_position: HashMap<u64, _> =
        records.tickets.iter().map(|t| (t.position, t)).collect();
    for join in &joins {
        let stored = tickets_by_position
            .get(&join.position)
            .unwrap_or_else(|| panic!("I6: acknowledged position {} is stored", join.position));
        assert_eq!(
            stored.id.to_string(),
            join.ticket_id,
            "position {} belongs to the ticket it was acknowledged to",
            join.position
        );
    }
    let sessions: HashMap<String, _> = records
        .sessions
        .iter()
        .map(|s| (s.id.to_string(), s))
        .collect();
    for (ticket_id, session_id) in &passes {
        let session = sessions
            .get(session_id)
            .unwrap_or_else(|| panic!("I6: acknowledged session {session_id} is stored"));
        assert_eq!(session.state, SessionState::Active, "session {session_id}");
        assert_eq!(
            session.ticket.map(|t| t.to_string()).as_deref(),
            Some(ticket_id.as_str()),
            "session {session_id} belongs to its ticket"
        );
    }
    let active = records
        .sessions
        .iter()
        .filter(|s| s.state == SessionState::Active)
        .count() as u64;
    assert!(
        active + snapshot.admitted_unclaimed <= 40,
        "I2 across the crash: {active} active + {} admitted",
        snapshot.admitted_unclaimed
    );

    eprintln!(
        "crash (checkpoint_bytes {checkpoint_bytes:?}, log segments at the kill {segments_at_kill:?}, \
         at the kill right after the restart {segments_at_second_kill:?}): \
         {} joins acknowledged ({} started) before SIGKILL at {:.2?}; \
         {} passes acknowledged ({} claimed through status); {} requests failed in flight; \
         store after restart: {} positions (last {}), serving {}, {} active sessions; \
         whole test {:.2?}",
        joins.len(),
        started_at_kill.min(PLANNED_JOINS),
        killed_after,
        passes.len(),
        observed.claims_by_status.load(Ordering::SeqCst),
        observed.failed_in_flight.load(Ordering::SeqCst),
        positions.len(),
        snapshot.last_position,
        snapshot.serving,
        active,
        test_started.elapsed()
    );
}

/// One visitor after another, each without a cookie, until the plan is done or the kill.
async fn join_loop(
    client_index: usize,
    client: reqwest::Client,
    base: String,
    observed: Arc<Observed>,
) {
    let url = format!("{base}/_anteroom/v1/rooms/{ROOM}/join");
    while !observed.stop.load(Ordering::SeqCst) {
        if observed.joins_started.fetch_add(1, Ordering::SeqCst) >= PLANNED_JOINS {
            return;
        }
        let status = match client.post(&url).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                match response.json::<StatusJson>().await {
                    Ok(status) => status,
                    Err(error) => {
                        observed.failed(format!("join body: {error}"));
                        continue;
                    }
                }
            }
            Ok(response) => {
                observed.failed(format!("join answered {}", response.status()));
                continue;
            }
            Err(error) => {
                observed.failed(format!("join: {error}"));
                continue;
            }
        };
        let ticket_id = ticket_id_of(&status.ticket);
        match status.state.as_str() {
            "admitted" => {
                let pass = status
                    .pass
                    .as_deref()
                    .expect("admitted join carries a pass");
                observed.record_pass(&ticket_id, pass);
            }
            "waiting" => {
                observed
                    .waiting
                    .lock()
                    .unwrap()
                    .insert(status.position, status.ticket.clone());
            }
            other => panic!("unexpected state after join: {other}"),
        }
        observed.joins.lock().unwrap().push(AckedJoin {
            client: client_index,
            ticket: status.ticket,
            ticket_id,
            position: status.position,
        });
        observed.joins_acked.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls the front of the line (the waiting tickets whose position is `poller` mod
/// [`POLLERS`], so no ticket is polled by two tasks at once) and claims the passes of those
/// the ticker admitted.
async fn poll_loop(poller: u64, client: reqwest::Client, base: String, observed: Arc<Observed>) {
    let url = format!("{base}/_anteroom/v1/rooms/{ROOM}/status");
    while !observed.stop.load(Ordering::SeqCst) {
        let front: Vec<(u64, String)> = observed
            .waiting
            .lock()
            .unwrap()
            .iter()
            .filter(|(position, _)| *position % POLLERS == poller)
            .take(4)
            .map(|(position, token)| (*position, token.clone()))
            .collect();
        for (position, token) in front {
            let answer = client
                .get(&url)
                .header("X-Anteroom-Ticket", &token)
                .send()
                .await;
            let status = match answer {
                Ok(response) if response.status() == reqwest::StatusCode::OK => {
                    match response.json::<StatusJson>().await {
                        Ok(status) => status,
                        Err(error) => {
                            observed.failed(format!("status body: {error}"));
                            continue;
                        }
                    }
                }
                Ok(response) => {
                    observed.failed(format!("status answered {}", response.status()));
                    continue;
                }
                Err(error) => {
                    observed.failed(format!("status: {error}"));
                    continue;
                }
            };
            assert_eq!(status.position, position, "status keeps the position");
            if status.state == "admitted" {
                let pass = status
                    .pass
                    .as_deref()
                    .expect("admitted status carries a pass");
                observed.record_pass(&ticket_id_of(&token), pass);
                observed.waiting.lock().unwrap().remove(&position);
                observed.claims_by_status.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// I1 as the visitors saw it: no position was handed out twice, and each visitor's own
/// joins (one after another) got increasing positions.
fn check_positions_as_acknowledged(joins: &[AckedJoin]) {
    let mut seen = HashSet::new();
    for join in joins {
        assert!(
            seen.insert(join.position),
            "I1: position {} acknowledged twice",
            join.position
        );
    }
    let mut last_by_client: HashMap<usize, u64> = HashMap::new();
    for join in joins {
        if let Some(last) = last_by_client.insert(join.client, join.position) {
            assert!(
                join.position > last,
                "I1: client {} joined after position {last} but got {}",
                join.client,
                join.position
            );
        }
    }
}

/// `status` of every ticket in `joins` (in order), a few requests at a time.
async fn status_of_all(
    client: &reqwest::Client,
    base: &str,
    joins: &[AckedJoin],
) -> Vec<StatusJson> {
    const WORKERS: usize = 8;
    let url = format!("{base}/_anteroom/v1/rooms/{ROOM}/status");
    let mut handles = Vec::new();
    for worker in 0..WORKERS {
        let tickets: Vec<(usize, String)> = joins
            .iter()
            .enumerate()
            .filter(|(index, _)| index % WORKERS == worker)
            .map(|(index, join)| (index, join.ticket.clone()))
            .collect();
        let client = client.clone();
        let url = url.clone();
        handles.push(tokio::spawn(async move {
            let mut answers = Vec::with_capacity(tickets.len());
            for (index, ticket) in tickets {
                let response = client
                    .get(&url)
                    .header("X-Anteroom-Ticket", &ticket)
                    .send()
                    .await
                    .unwrap();
                let code = response.status();
                let body = response.text().await.unwrap();
                assert_eq!(
                    code,
                    reqwest::StatusCode::OK,
                    "I6: an acknowledged ticket answers after the restart: {body}"
                );
                let status: StatusJson = serde_json::from_str(&body).unwrap();
                answers.push((index, status));
            }
            answers
        }));
    }
    let mut all: Vec<(usize, StatusJson)> = Vec::with_capacity(joins.len());
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    all.sort_by_key(|(index, _)| *index);
    all.into_iter().map(|(_, status)| status).collect()
}
