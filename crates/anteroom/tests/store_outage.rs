//! A node on a Redis that goes away (SPEC §9.4): while the store cannot be reached every
//! request is answered within the store's timeout, each room as its `on_store_error` says
//! once the store has failed for 5 s (`open`: visitors coming from a protected page are sent
//! back to it without a pass; `closed`: 503 with the "temporarily unavailable" page; before
//! that both as `closed`), nothing panics, and service comes back by itself once Redis does,
//! with every ticket and pass it had.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anteroom_test_support::redis::RedisServer;
use support::{SERVICE_KEY, Server, Site, key_hash, toml_string};

/// Every store call is bounded by the redis store's timeout (2 s by default), and a request
/// makes at most two store calls (the room, when this node's copy is stale,
/// then the operation); slack for a debug build on a busy machine.
const ANSWER_WITHIN: Duration = Duration::from_millis(2 * 2_000 + 1_500);
/// How long the store stays away: past the 5 s after which an `open` room lets visitors
/// through, with time to see it.
const OUTAGE: Duration = Duration::from_secs(12);
/// How soon after the store is back a join must succeed again.
const RECOVERY_WITHIN: Duration = Duration::from_secs(10);

const ROOMS: &str = r#"
[[room]]
id = "open-room"
max_active = 1
on_store_error = "open"

[[room]]
id = "closed-room"
max_active = 1
on_store_error = "closed"
"#;

fn write_config(site: &Site, redis_port: u16) {
    let text = format!(
        "[server]\n\
         listen = \"127.0.0.1:{port}\"\n\
         public_url = \"{url}\"\n\
         join_rate_limit = false\n\
         \n\
         [store]\n\
         backend = \"redis\"\n\
         url = \"redis://127.0.0.1:{redis_port}\"\n\
         \n\
         [keys]\n\
         dir = {keys}\n\
         algorithm = \"EdDSA\"\n\
         \n\
         [auth]\n\
         service_keys = [\"{service}\"]\n\
         \n\
         {ROOMS}\n",
        port = site.port,
        url = site.public_url(),
        keys = toml_string(&site.keys_dir()),
        service = key_hash(SERVICE_KEY),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

/// One answer: status, `code` of a problem, `Retry-After`, `Location`, body, and how long
/// it took.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    code: Option<String>,
    retry_after: Option<String>,
    location: Option<String>,
    body: String,
    took: Duration,
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let started = Instant::now();
    let response = request
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let location = header("location");
    let body = response.text().await.unwrap_or_default();
    let code = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|json| json["code"].as_str().map(str::to_owned));
    Answer {
        status,
        code,
        retry_after,
        location,
        body,
        took: started.elapsed(),
    }
}

/// A client that does not follow redirects (the open room's page answers with one).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn join(client: &reqwest::Client, base: &str, room: &str) -> reqwest::RequestBuilder {
    client.post(format!("{base}/_anteroom/v1/rooms/{room}/join"))
}

fn status(
    client: &reqwest::Client,
    base: &str,
    room: &str,
    ticket: &str,
) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/_anteroom/v1/rooms/{room}/status"))
        .header("x-anteroom-ticket", ticket)
}

fn page(client: &reqwest::Client, base: &str, room: &str) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/_anteroom/wait/{room}?return=/shop/cart"))
        .header("accept", "text/html")
}

/// What each room holds before the outage: a visitor with a pass and one waiting.
struct Held {
    holder_ticket: String,
    holder_session: String,
    waiter_ticket: String,
    waiter_position: u64,
}

async fn fill(client: &reqwest::Client, base: &str, room: &str) -> Held {
    let holder = send(join(client, base, room)).await;
    assert_eq!(holder.status, 200, "{}", holder.body);
    let holder: serde_json::Value = serde_json::from_str(&holder.body).unwrap();
    assert_eq!(holder["state"], "admitted");
    let waiter = send(join(client, base, room)).await;
    let waiter: serde_json::Value = serde_json::from_str(&waiter.body).unwrap();
    assert_eq!(waiter["state"], "waiting");
    Held {
        holder_ticket: holder["ticket"].as_str().unwrap().to_owned(),
        holder_session: support::jwt_claims(holder["pass"].as_str().unwrap())["sub"]
            .as_str()
            .unwrap()
            .to_owned(),
        waiter_ticket: waiter["ticket"].as_str().unwrap().to_owned(),
        waiter_position: waiter["position"].as_u64().unwrap(),
    }
}

/// Each room still has what it held: the pass (same session) and the waiting place.
async fn check_kept(client: &reqwest::Client, base: &str, room: &str, held: &Held) {
    let holder = send(status(client, base, room, &held.holder_ticket)).await;
    assert_eq!(
        holder.status, 200,
        "{room}: the pass survives: {}",
        holder.body
    );
    let holder: serde_json::Value = serde_json::from_str(&holder.body).unwrap();
    assert_eq!(holder["state"], "admitted");
    assert_eq!(
        support::jwt_claims(holder["pass"].as_str().unwrap())["sub"].as_str(),
        Some(held.holder_session.as_str())
    );
    let waiter = send(status(client, base, room, &held.waiter_ticket)).await;
    assert_eq!(
        waiter.status, 200,
        "{room}: the place survives: {}",
        waiter.body
    );
    let waiter: serde_json::Value = serde_json::from_str(&waiter.body).unwrap();
    assert_eq!(waiter["state"], "waiting");
    assert_eq!(waiter["position"].as_u64(), Some(held.waiter_position));
}

/// The documented answers while the store cannot be reached, before it has failed for 5 s
/// (`gone`: after): until then the open room holds a visitor without a pass back as the
/// closed one does, since a store that answered moments ago may only be too busy. The
/// requests go at once (each may wait out the store's timeout), so all are answered within
/// the phase they are sent in.
async fn check_outage_answers(client: &reqwest::Client, base: &str, held: &[Held; 2], gone: bool) {
    let (open_join, closed_join, waiting, open, closed, health, ready) = tokio::join!(
        send(join(client, base, "open-room")),
        send(join(client, base, "closed-room")),
        send(status(client, base, "closed-room", &held[1].waiter_ticket)),
        send(page(client, base, "open-room")),
        send(page(client, base, "closed-room")),
        send(client.get(format!("{base}/_anteroom/healthz"))),
        send(client.get(format!("{base}/_anteroom/readyz"))),
    );
    for (room, answer) in [("open-room", open_join), ("closed-room", closed_join)] {
        assert_eq!(answer.status, 503, "{room} join: {answer:?}");
        assert_eq!(
            answer.code.as_deref(),
            Some("store_unavailable"),
            "{answer:?}"
        );
        assert!(answer.retry_after.is_some(), "{room}: Retry-After");
        assert!(
            answer.took < ANSWER_WITHIN,
            "{room} join took {:?}",
            answer.took
        );
        let says_open = answer.body.contains("without a pass");
        assert_eq!(
            says_open,
            gone && room == "open-room",
            "{room}: {}",
            answer.body
        );
    }
    assert_eq!(waiting.status, 503, "{waiting:?}");
    assert!(waiting.took < ANSWER_WITHIN);

    // The open room sends a visitor back to the protected page, without a pass, once the
    // store is gone; until then it shows the "temporarily unavailable" state.
    if gone {
        assert!(
            open.status == 302 || open.status == 303 || open.status == 307,
            "open room's page: {open:?}"
        );
        assert_eq!(open.location.as_deref(), Some("/shop/cart"));
    } else {
        assert_eq!(open.status, 503, "open room's page: {open:?}");
        assert!(
            open.body.contains("Temporarily unavailable"),
            "{}",
            open.body
        );
    }
    assert!(open.took < ANSWER_WITHIN);
    // The closed room shows the page's "temporarily unavailable" state.
    assert_eq!(closed.status, 503, "closed room's page: {closed:?}");
    assert!(
        closed.body.contains("Temporarily unavailable"),
        "{}",
        closed.body
    );
    assert!(closed.retry_after.is_some());
    assert!(closed.took < ANSWER_WITHIN);

    assert_eq!(health.status, 200);
    // Alive, but not ready: a load balancer should send visitors elsewhere (SPEC §14.6).
    assert_eq!(ready.status, 503, "{ready:?}");
    assert_eq!(ready.code.as_deref(), Some("not_ready"));
    assert!(
        ready.body.contains("the store does not answer"),
        "{ready:?}"
    );
    assert!(ready.took < ANSWER_WITHIN);
}

/// `readyz`'s status.
async fn readiness(client: &reqwest::Client, base: &str) -> u16 {
    send(client.get(format!("{base}/_anteroom/readyz")))
        .await
        .status
}

/// Joins until one succeeds in both rooms; how long that took. `installing`: the rooms may
/// not exist yet (404) while the node installs them.
async fn wait_recovered(client: &reqwest::Client, base: &str, installing: bool) -> Duration {
    let started = Instant::now();
    for room in ["open-room", "closed-room"] {
        loop {
            let answer = send(join(client, base, room)).await;
            if answer.status == 200 {
                break;
            }
            let expected = answer.status == 503 || (installing && answer.status == 404);
            assert!(expected, "{room} while recovering: {answer:?}");
            assert!(
                started.elapsed() < RECOVERY_WITHIN,
                "{room} did not recover within {RECOVERY_WITHIN:?}: {answer:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    started.elapsed()
}

/// Background visitors joining both rooms all along; every answer is a 200 or a prompt 503
/// `store_unavailable`.
struct Load {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Answer>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: &reqwest::Client, base: &str, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..workers)
            .map(|index| {
                let (client, base) = (client.clone(), base.to_owned());
                let (stop, answers) = (stop.clone(), answers.clone());
                tokio::spawn(async move {
                    let room = if index % 2 == 0 {
                        "open-room"
                    } else {
                        "closed-room"
                    };
                    while !stop.load(Ordering::SeqCst) {
                        let answer = send(join(&client, &base, room)).await;
                        answers.lock().unwrap().push(answer);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            answers,
            tasks,
        }
    }

    async fn finish(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.answers.lock().unwrap().clone()
    }
}

fn check_load(answers: &[Answer]) -> (usize, usize, Duration) {
    let mut served = 0;
    let mut refused = 0;
    let mut slowest = Duration::ZERO;
    for answer in answers {
        match answer.status {
            200 => served += 1,
            503 => {
                assert_eq!(
                    answer.code.as_deref(),
                    Some("store_unavailable"),
                    "{answer:?}"
                );
                assert!(answer.retry_after.is_some(), "{answer:?}");
                refused += 1;
            }
            _ => panic!("unexpected answer under load: {answer:?}"),
        }
        assert!(
            answer.took < ANSWER_WITHIN,
            "an answer took {:?}",
            answer.took
        );
        slowest = slowest.max(answer.took);
    }
    (served, refused, slowest)
}

fn check_log(server: &Server) -> usize {
    let log = server.log();
    assert!(!log.contains("panicked"), "the node panicked:\n{log}");
    let errors = log
        .lines()
        .filter(|line| line.contains("store unavailable"))
        .count();
    // One line per room (and one for the room listing) per LOG_EVERY (10 s), not one per
    // request: the outage lasts a little over 10 s.
    assert!(
        errors <= 9,
        "store errors are logged at a bounded rate ({errors} lines):\n{log}"
    );
    assert!(
        log.contains("store answers again"),
        "the recovery is logged:\n{log}"
    );
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_follow_on_store_error_while_redis_is_stopped_and_recover() {
    let redis = RedisServer::start();
    let site = Site::new();
    write_config(&site, redis.port());
    let client = client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let base = server.url();
    assert_eq!(readiness(&client, &base).await, 200);
    let held = [
        fill(&client, &base, "open-room").await,
        fill(&client, &base, "closed-room").await,
    ];

    let load = Load::start(&client, &base, 6);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = redis.pause();
    let outage_started = Instant::now();
    // Past the second readiness's last store answer stands.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    check_outage_answers(&client, &base, &held, false).await;
    // The first failures are recorded when the first calls time out, up to 2 s in.
    let gone_at = anteroom_api::STORE_GONE_AFTER + Duration::from_millis(2_500);
    tokio::time::sleep(gone_at.saturating_sub(outage_started.elapsed())).await;
    check_outage_answers(&client, &base, &held, true).await;
    tokio::time::sleep(OUTAGE.saturating_sub(outage_started.elapsed())).await;
    RedisServer::resume(pid);
    let recovered_after = wait_recovered(&client, &base, false).await;
    assert_eq!(readiness(&client, &base).await, 200, "ready again");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answers = load.finish().await;

    let (served, refused, slowest) = check_load(&answers);
    assert!(
        served > 0 && refused > 0,
        "{served} served, {refused} refused"
    );
    for (room, held) in ["open-room", "closed-room"].iter().zip(&held) {
        check_kept(&client, &base, room, held).await;
    }
    // A session can still be completed: no stuck state behind the outage.
    let completed = send(
        client
            .post(format!(
                "{base}/_anteroom/v1/rooms/closed-room/sessions/{}/complete",
                held[1].holder_session
            ))
            .bearer_auth(SERVICE_KEY),
    )
    .await;
    assert_eq!(completed.status, 200, "{completed:?}");
    let errors = check_log(&server);
    eprintln!(
        "store outage (SIGSTOP {OUTAGE:?}): {served} joins served, {refused} answered 503 \
         store_unavailable, slowest answer {slowest:?}; joins succeed again {recovered_after:?} \
         after SIGCONT; {errors} store error lines logged"
    );
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_redis_killed_and_restarted_loses_nothing() {
    let data = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let redis = RedisServer::start_durable(port, data.path());
    let site = Site::new();
    write_config(&site, port);
    let client = client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let base = server.url();
    let held = [
        fill(&client, &base, "open-room").await,
        fill(&client, &base, "closed-room").await,
    ];

    let load = Load::start(&client, &base, 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.kill();
    // Past the second readiness's last store answer stands.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    check_outage_answers(&client, &base, &held, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _redis = RedisServer::start_durable(port, data.path());
    let recovered_after = wait_recovered(&client, &base, false).await;
    let answers = load.finish().await;
    let (served, refused, slowest) = check_load(&answers);
    for (room, held) in ["open-room", "closed-room"].iter().zip(&held) {
        check_kept(&client, &base, room, held).await;
    }
    assert!(!server.log().contains("panicked"));
    eprintln!(
        "redis killed and restarted on its append-only file: {served} joins served, {refused} \
         refused, slowest {slowest:?}; recovered {recovered_after:?} after the restart"
    );
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_starts_while_redis_is_down_and_installs_its_rooms_later() {
    let port = support::free_port();
    let site = Site::new();
    write_config(&site, port);
    let client = client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let base = server.url();

    let answer = send(join(&client, &base, "closed-room")).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.code.as_deref(), Some("store_unavailable"));
    assert!(answer.took < ANSWER_WITHIN);
    assert_eq!(readiness(&client, &base).await, 503);
    // The rooms' on_store_error is known from the config file before the store ever answered.
    let open = send(page(&client, &base, "open-room")).await;
    assert_eq!(open.location.as_deref(), Some("/shop/cart"), "{open:?}");
    let closed = send(page(&client, &base, "closed-room")).await;
    assert_eq!(closed.status, 503);
    assert!(closed.body.contains("Temporarily unavailable"));

    let _redis = RedisServer::start_on(port);
    let recovered_after = wait_recovered(&client, &base, true).await;
    // Ready once the store answers and the configured rooms are installed.
    assert_eq!(readiness(&client, &base).await, 200);
    // Joining works again: the node installed its configured rooms by itself.
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!("node started without redis; rooms usable {recovered_after:?} after redis came up");
    server.kill();
}
