//! `sse-soak`: many concurrent SSE waiters on one anteroom process (SPEC §6.2).
//!
//! The client joins `--connections` visitors to a room that admits one at a time, opens one
//! event stream per visitor (one task per stream, at a bounded rate, spreading source addresses
//! over `127.0.0.x` so local ports do not run short, the streams held by a few follower
//! processes of their own: `stream_followers.rs`; one stream is followed by `event_stream.rs`), then moves the line a few times by
//! completing the admitted visitor's session with the service key: the server admits the next
//! visitor and every waiting stream must show the new serving counter. For every stream it
//! measures the delay from the change to the `status` event that shows it; for the server
//! process it reads resident memory before and after the streams opened and CPU time around each
//! change (from `/proc/<pid>/`). It stops by itself after each phase's time limit, and fails
//! when a stream could not be opened, missed a change, or the memory per stream passed
//! `--max-kib-per-stream`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use crate::event_stream::{Shared, StreamTarget, Target, connect, wall_clock};
use crate::stream_followers::{FollowerPlan, Followers};

/// Options of `anteroom-bench sse-soak`.
#[derive(Debug, Args)]
pub(crate) struct SseSoakArgs {
    #[command(flatten)]
    stream: StreamTarget,
    /// Concurrent event streams (one waiting visitor each).
    #[arg(long, default_value_t = 15_000)]
    connections: usize,
    /// Processes the streams are spread over (each needs a descriptor per stream).
    #[arg(long, default_value_t = 4)]
    stream_processes: usize,
    /// Fail when the server's resident memory grew by more than this per open stream (KiB).
    #[arg(long)]
    max_kib_per_stream: Option<f64>,
    /// A key of `[auth] service_keys`, to complete sessions.
    #[arg(long)]
    service_key: String,
    /// The anteroom process, for memory and CPU figures from `/proc`.
    #[arg(long)]
    pid: u32,
    /// Streams opened per second.
    #[arg(long, default_value_t = 1_000)]
    ramp: u32,
    /// Keep-alive connections the joins are spread over.
    #[arg(long, default_value_t = 16)]
    join_connections: usize,
    /// Serving changes to measure.
    #[arg(long, default_value_t = 5)]
    changes: usize,
    /// Source addresses to rotate over: 127.0.0.1 … 127.0.0.N.
    #[arg(long, default_value_t = 4)]
    source_addresses: u8,
    /// How long to wait for every stream to show a change before counting it missing.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    change_timeout: Duration,
    /// CPU is read over this long after a change, and over as long just before it.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    cpu_window: Duration,
    /// The whole run stops after this long, whatever the phase.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    deadline: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" | "" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number * 60)),
        _ => Err(format!("not a duration: {text} (use ms, s or m)")),
    }
}

/// Runs the soak on a runtime of its own.
pub(crate) fn run(args: SseSoakArgs) -> anyhow::Result<()> {
    // One worker: the client shares the machine with the server it measures, and a client
    // spread over every core would slow the server down more than it needs to.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let deadline = args.deadline;
    runtime.block_on(async move {
        match tokio::time::timeout(deadline, soak(args)).await {
            Ok(result) => result,
            Err(_) => bail!("the soak did not finish within {deadline:?}"),
        }
    })
}

async fn soak(args: SseSoakArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.stream.target, args.stream.ca_file.as_deref())?;
    let process = Process::new(args.pid)?;
    let started = Instant::now();
    let rss_at_start = process.rss_kib()?;

    let mut control = HttpConnection::open(target.clone(), None).await?;
    let session = admit_first(&mut control, &args.stream.room).await?;
    let (tickets, join_seconds) = join_visitors(&target, &args).await?;
    // Let the joins' writes and the ticker settle before the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = process.rss_kib()?;
    let fds_before = process.open_files();

    let shared = Arc::new(Shared::default());
    let opened_at = Instant::now();
    let followers = start_followers(&args, &tickets, &shared)?;
    let connected = wait_connected(&shared, tickets.len(), args.ramp).await;
    let open_seconds = opened_at.elapsed().as_secs_f64();
    eprintln!(
        "{connected} streams open after {open_seconds:.1} s, {} failed",
        shared.failed()
    );
    if connected == 0 {
        bail!("no stream opened: {:?}", shared.errors.lock());
    }
    // Keep-alives, first touches and allocator warm-up come and go; measure when they are done.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_after = process.rss_kib()?;
    let fds_after = process.open_files();

    let changes =
        measure_changes(&process, &shared, &mut control, &args, &tickets, session).await?;
    let report = Report {
        connections: tickets.len(),
        connected,
        failed: shared.failed(),
        errors: shared.errors.lock().clone(),
        join_seconds,
        open_seconds,
        rss_at_start,
        rss_before,
        rss_after,
        fds_before,
        fds_after,
        changes,
        elapsed: started.elapsed(),
        source_addresses: args.source_addresses,
        ramp: args.ramp,
        cpu_window: args.cpu_window,
    };
    drop(followers);
    report.print();
    report.verdict(args.max_kib_per_stream)
}

/// Joins the first visitor, who takes the room's one slot (everybody after waits); its
/// session is the first to complete.
async fn admit_first(control: &mut HttpConnection, room: &str) -> anyhow::Result<String> {
    let first = control.join(room).await?;
    if first.state != "admitted" {
        bail!(
            "the first visitor was not admitted ({}): the room must be empty with max_active = 1",
            first.state
        );
    }
    first.session()
}

/// Joins every visitor after the first; their tickets and how long the joins took (s).
async fn join_visitors(target: &Target, args: &SseSoakArgs) -> anyhow::Result<(Vec<Ticket>, f64)> {
    let joined_at = Instant::now();
    let tickets = join_all(target, args).await?;
    let join_seconds = joined_at.elapsed().as_secs_f64();
    eprintln!(
        "joined {} visitors in {join_seconds:.1} s ({:.0}/s)",
        tickets.len(),
        tickets.len() as f64 / join_seconds
    );
    Ok((tickets, join_seconds))
}

/// Starts the follower processes that open one stream per ticket between them.
fn start_followers(
    args: &SseSoakArgs,
    tickets: &[Ticket],
    shared: &Arc<Shared>,
) -> anyhow::Result<Followers> {
    let plan = FollowerPlan {
        stream: &args.stream,
        ramp: args.ramp,
        source_addresses: args.source_addresses,
    };
    let shares: Vec<(u64, String)> = tickets
        .iter()
        .map(|ticket| (ticket.position, ticket.token.clone()))
        .collect();
    Followers::start(args.stream_processes, &plan, &shares, shared)
}

/// Waits until each of `count` streams opened or failed (the ramp's own time at `ramp` a
/// second, and a minute for the stragglers); how many opened.
async fn wait_connected(shared: &Shared, count: usize, ramp: u32) -> usize {
    let ramp_time = Duration::from_secs_f64(count as f64 / f64::from(ramp.max(1)));
    let connect_limit = Instant::now() + ramp_time + Duration::from_secs(60);
    while shared.connected() + shared.failed() < count && Instant::now() < connect_limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shared.connected()
}

/// Makes `args.changes` changes one after the other, each admitting the next visitor in line
/// by completing the session `session` and then the one it admitted.
async fn measure_changes(
    process: &Process,
    shared: &Shared,
    control: &mut HttpConnection,
    args: &SseSoakArgs,
    tickets: &[Ticket],
    mut session: String,
) -> anyhow::Result<Vec<ChangeReport>> {
    let mut changes = Vec::new();
    for (index, next) in tickets.iter().take(args.changes).enumerate() {
        let change = Change {
            number: index + 1,
            next,
            session: &session,
        };
        let (report, next_session) = measure_change(process, shared, control, args, change).await?;
        changes.push(report);
        session = next_session;
    }
    Ok(changes)
}

/// One change to measure: its number, the visitor it admits and the session it completes.
struct Change<'a> {
    number: usize,
    next: &'a Ticket,
    session: &'a str,
}

/// Completes the session so that `change.next` is admitted, measures how quickly the open
/// streams show it and what it costs the server in CPU (against an idle window of the same
/// length just before); hands back the admitted visitor's session, the next to complete.
async fn measure_change(
    process: &Process,
    shared: &Shared,
    control: &mut HttpConnection,
    args: &SseSoakArgs,
    change: Change<'_>,
) -> anyhow::Result<(ChangeReport, String)> {
    let next = change.next;
    let idle_before = process.cpu_seconds()?;
    tokio::time::sleep(args.cpu_window).await;
    let idle_cpu = process.cpu_seconds()? - idle_before;

    let expected = shared.open_now().saturating_sub(1);
    let cpu_before = process.cpu_seconds()?;
    let changed_at = Instant::now();
    shared.begin_change(next.position, wall_clock());
    control
        .complete(&args.stream.room, change.session, &args.service_key)
        .await?;
    let wait_limit = changed_at + args.change_timeout;
    while shared.seen(next.position) < expected && Instant::now() < wait_limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu_window_end = changed_at + args.cpu_window;
    tokio::time::sleep_until(cpu_window_end.max(Instant::now()).into()).await;
    let change_cpu = process.cpu_seconds()? - cpu_before;

    let report = ChangeReport {
        number: change.number,
        serving: next.position,
        expected,
        delays: shared.delays(next.position),
        admitted_delay: *shared.admitted_delay.lock(),
        change_cpu,
        idle_cpu,
    };
    eprintln!("change {} measured", change.number);
    // The admitted visitor claims the pass; its session is the next one to complete.
    let admitted = control.status(&args.stream.room, &next.token).await?;
    if admitted.state != "admitted" {
        bail!(
            "visitor {} was not admitted after the change",
            next.position
        );
    }
    Ok((report, admitted.session()?))
}

/// A waiting visitor's ticket.
struct Ticket {
    position: u64,
    token: String,
}

/// Joins `connections` visitors over a few keep-alive connections, in position order.
async fn join_all(target: &Target, args: &SseSoakArgs) -> anyhow::Result<Vec<Ticket>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.join_connections.max(1) {
        let next = next.clone();
        let room = args.stream.room.clone();
        let total = args.connections;
        let target = target.clone();
        workers.push(tokio::spawn(async move {
            let mut connection = HttpConnection::open(target, None).await?;
            let mut tickets = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let status = connection.join(&room).await?;
                if status.state != "waiting" {
                    bail!("a joining visitor is {}, not waiting", status.state);
                }
                tickets.push(Ticket {
                    position: status.position,
                    token: status.ticket,
                });
            }
            anyhow::Ok(tickets)
        }));
    }
    let mut tickets = Vec::with_capacity(args.connections);
    for worker in workers {
        tickets.extend(worker.await??);
    }
    tickets.sort_by_key(|ticket| ticket.position);
    Ok(tickets)
}

/// The parts of the status JSON the coordinator reads.
#[derive(Debug, serde::Deserialize)]
struct Status {
    state: String,
    #[serde(default)]
    position: u64,
    #[serde(default)]
    ticket: String,
    pass: Option<String>,
}

impl Status {
    /// The session id of an admitted visitor: the pass's `sub`.
    fn session(&self) -> anyhow::Result<String> {
        use base64::Engine as _;
        let pass = self.pass.as_deref().ok_or_else(|| anyhow!("no pass"))?;
        let payload = pass.split('.').nth(1).ok_or_else(|| anyhow!("not a JWT"))?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload)?;
        let claims: serde_json::Value = serde_json::from_slice(&bytes)?;
        claims["sub"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the pass has no sub"))
    }
}

/// One keep-alive HTTP/1.1 connection for the coordinator's and the joiners' requests. The
/// server closes a connection that stays idle for 30 s (the coordinator's while the streams
/// open, on a slow machine): a closed one is opened again before the next request.
struct HttpConnection {
    target: Target,
    source: Option<IpAddr>,
    sender: http1::SendRequest<Full<Bytes>>,
}

impl HttpConnection {
    async fn open(target: Target, source: Option<IpAddr>) -> anyhow::Result<HttpConnection> {
        let stream = connect(&target, source).await?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(HttpConnection {
            target,
            source,
            sender,
        })
    }

    async fn send(
        &mut self,
        method: hyper::Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.target.address.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new()))?;
        if self.sender.is_closed() {
            *self = HttpConnection::open(self.target.clone(), self.source).await?;
        }
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    async fn join(&mut self, room: &str) -> anyhow::Result<Status> {
        let path = format!("/_anteroom/v1/rooms/{room}/join");
        let (status, body) = self.send(hyper::Method::POST, &path, &[]).await?;
        if status != hyper::StatusCode::OK {
            bail!("join answered {status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(serde_json::from_slice(&body)?)
    }

    async fn status(&mut self, room: &str, ticket: &str) -> anyhow::Result<Status> {
        let path = format!("/_anteroom/v1/rooms/{room}/status");
        let (status, body) = self
            .send(hyper::Method::GET, &path, &[("x-anteroom-ticket", ticket)])
            .await?;
        if status != hyper::StatusCode::OK {
            bail!(
                "status answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(serde_json::from_slice(&body)?)
    }

    async fn complete(&mut self, room: &str, session: &str, key: &str) -> anyhow::Result<()> {
        let path = format!("/_anteroom/v1/rooms/{room}/sessions/{session}/complete");
        let bearer = format!("Bearer {key}");
        let (status, body) = self
            .send(hyper::Method::POST, &path, &[("authorization", &bearer)])
            .await?;
        if status != hyper::StatusCode::OK {
            bail!(
                "complete answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }
}

/// The measured process, read through `/proc/<pid>/`.
struct Process {
    pid: u32,
    ticks_per_second: f64,
}

impl Process {
    fn new(pid: u32) -> anyhow::Result<Process> {
        let process = Process {
            pid,
            ticks_per_second: clock_ticks_per_second(),
        };
        process
            .rss_kib()
            .with_context(|| format!("reading /proc/{pid}: is --pid the anteroom process?"))?;
        Ok(process)
    }

    /// Resident memory, KiB (`VmRSS`).
    fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| anyhow!("no VmRSS in /proc/{}/status", self.pid))
    }

    /// User plus system CPU time so far, seconds.
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        // Fields after the command name (which may hold spaces) start with the state.
        let after_name = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .ok_or_else(|| anyhow!("unexpected /proc/{}/stat", self.pid))?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        Ok((utime + stime) as f64 / self.ticks_per_second)
    }

    fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid)).map_or(0, Iterator::count)
    }
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

struct ChangeReport {
    number: usize,
    serving: u64,
    expected: usize,
    delays: Vec<Duration>,
    admitted_delay: Option<Duration>,
    change_cpu: f64,
    idle_cpu: f64,
}

struct Report {
    connections: usize,
    connected: usize,
    failed: usize,
    errors: HashMap<String, usize>,
    join_seconds: f64,
    open_seconds: f64,
    rss_at_start: u64,
    rss_before: u64,
    rss_after: u64,
    fds_before: usize,
    fds_after: usize,
    changes: Vec<ChangeReport>,
    elapsed: Duration,
    source_addresses: u8,
    ramp: u32,
    cpu_window: Duration,
}

impl Report {
    /// The server's resident memory grown per open stream, KiB.
    fn kib_per_stream(&self) -> f64 {
        (self.rss_after.saturating_sub(self.rss_before)) as f64 / self.connected.max(1) as f64
    }

    /// An error naming what failed: streams not opened, changes missed, memory per stream
    /// past `max_kib_per_stream`.
    fn verdict(&self, max_kib_per_stream: Option<f64>) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        if self.connected < self.connections {
            problems.push(format!(
                "{} of {} streams did not open",
                self.connections - self.connected,
                self.connections
            ));
        }
        for change in &self.changes {
            let missing = change.expected.saturating_sub(change.delays.len());
            if missing > 0 {
                problems.push(format!("{missing} streams missed change {}", change.number));
            }
        }
        let per_stream = self.kib_per_stream();
        if let Some(max) = max_kib_per_stream
            && per_stream > max
        {
            problems.push(format!(
                "{per_stream:.1} KiB of server memory per stream, over the limit of {max} KiB"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }

    #[allow(clippy::print_stdout)]
    fn print(&self) {
        let per_connection = self.kib_per_stream();
        println!();
        println!("| figure | value |");
        println!("|---|---|");
        println!(
            "| streams open / asked | {} / {} ({} failed{}) |",
            self.connected,
            self.connections,
            self.failed,
            if self.errors.is_empty() {
                String::new()
            } else {
                format!(": {:?}", self.errors)
            }
        );
        println!(
            "| joins | {:.1} s ({:.0}/s) |",
            self.join_seconds,
            self.connections as f64 / self.join_seconds.max(1e-9)
        );
        println!(
            "| streams opened in | {:.1} s (ramp {}/s over {} source addresses) |",
            self.open_seconds, self.ramp, self.source_addresses
        );
        println!(
            "| server open files | {} before, {} with the streams |",
            self.fds_before, self.fds_after
        );
        println!(
            "| server RSS | {} KiB at start, {} KiB after the joins, {} KiB with the streams |",
            self.rss_at_start, self.rss_before, self.rss_after
        );
        println!("| **RSS per stream** | **{per_connection:.1} KiB** |");
        println!();
        println!(
            "| change | serving | streams expected | shown | p50 | p99 | max | over 2 s | missing | `admitted` event | server CPU, {:.1} s from the change | same length just before (idle) | CPU of the broadcast |",
            self.cpu_window.as_secs_f64()
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for change in &self.changes {
            let shown = change.delays.len();
            let over = change
                .delays
                .iter()
                .filter(|delay| **delay > Duration::from_secs(2))
                .count();
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} ms | {:.0} ms | {:.0} ms |",
                change.number,
                change.serving,
                change.expected,
                shown,
                millis(percentile(&change.delays, 0.50)),
                millis(percentile(&change.delays, 0.99)),
                millis(change.delays.last().copied()),
                over,
                change.expected.saturating_sub(shown),
                millis(change.admitted_delay),
                change.change_cpu * 1000.0,
                change.idle_cpu * 1000.0,
                (change.change_cpu - change.idle_cpu).max(0.0) * 1000.0,
            );
        }
        println!();
        println!("run took {:.0} s", self.elapsed.as_secs_f64());
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

fn millis(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "–".to_owned(), |d| format!("{} ms", d.as_millis()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_sorted_delays() {
        let delays: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&delays, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&delays, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn durations_on_the_command_line() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
