//! `crowd`: a flash crowd of virtual visitors against one or several anteroom nodes, and a
//! report of what they saw (`bench/crowd-*`, `docs/benchmarks.md`).
//!
//! The coordinator reads the scenario, starts the origin the gateway proxies to (so sessions
//! are counted outside anteroom), and runs the visitors in worker processes: it re-executes
//! itself as `crowd-worker` once per `visitors_per_worker` visitors (a process may hold only
//! so many open files), waits until every worker is ready, tells them all to go at once (with
//! the start as wall-clock time, from which each process counts on its monotonic clock), and
//! merges the records they print. Visitor `i` belongs to worker `i mod workers` and talks to
//! target `i mod targets`. Then it analyses the
//! records ([`analysis`]) and writes the report ([`report`]). Exit status 2 means an invariant
//! broke (FIFO order, `ahead` increase, origin concurrency above `max_active`), so a CI job or
//! a rehearsal can gate on it. Targets and the origin must be loopback addresses; every visitor
//! stops at the scenario's time limit.

mod analysis;
mod client;
mod origin;
mod record;
mod report;
mod scenario;
mod visitor;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use tokio::time::Instant;

use self::client::Client;
use self::origin::Origin;
use self::record::{OriginLog, VisitorRecord, WorkerOutput};
use self::scenario::Scenario;
use self::visitor::Context;

/// Options of `anteroom-bench crowd`.
#[derive(Debug, Args)]
pub(crate) struct CrowdArgs {
    /// The scenario file (TOML; see `bench/scenarios/`).
    #[arg(long)]
    scenario: PathBuf,
    /// An anteroom node's public listener, `http://127.0.0.1:PORT`; several for several nodes
    /// (visitors are spread round-robin).
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Where the report goes.
    #[arg(long)]
    out: PathBuf,
    /// Where the origin listens (overrides the scenario's `[origin] listen`).
    #[arg(long)]
    origin: Option<SocketAddr>,
}

/// Options of the hidden `crowd-worker` (started by `crowd`).
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    scenario: PathBuf,
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// This worker's index.
    #[arg(long)]
    worker: usize,
    /// How many workers share the visitors.
    #[arg(long)]
    workers: usize,
}

/// Exit status when an invariant broke.
const INVARIANT_BROKEN: u8 = 2;

/// How long after the time limit the coordinator waits for workers' records.
const WORKER_GRACE: Duration = Duration::from_secs(60);

/// Runs the whole crowd and writes the report.
pub(crate) fn run(args: CrowdArgs) -> anyhow::Result<ExitCode> {
    let scenario = Scenario::load(&args.scenario)?;
    let targets = loopback_targets(&args.targets)?;
    let runtime = one_worker_runtime()?;
    runtime.block_on(coordinate(args, scenario, targets))
}

async fn coordinate(
    args: CrowdArgs,
    scenario: Scenario,
    targets: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let origin = start_origin(args.origin, &scenario).await?;
    let workers = scenario.workers();
    let mut children = Vec::with_capacity(workers);
    for worker in 0..workers {
        children.push(start_worker(&args.scenario, worker, workers, &targets).await?);
    }
    eprintln!(
        "crowd: {} visitors, {workers} worker(s), {} node(s): go",
        scenario.visitors,
        targets.len()
    );
    // Everyone starts now. Workers learn the start as wall-clock time and place it on their
    // own monotonic clock, so the processes' times agree to the system clock's precision
    // rather than to how quickly each one reads its input.
    let start = Instant::now();
    let start_wall = wall_clock_nanos()?;
    if let Some(origin) = &origin {
        origin.set_start(start);
    }
    let mut readers = Vec::new();
    for (mut child, stdout) in children {
        let mut stdin = child.stdin.take().context("a worker's input")?;
        stdin.write_all(format!("go {start_wall}\n").as_bytes())?;
        stdin.flush()?;
        readers.push(tokio::task::spawn_blocking(move || {
            read_output(stdout).map(|output| (output, child))
        }));
    }
    let wait_limit = start + scenario.time_limit + WORKER_GRACE;
    let records = collect_records(readers, scenario.visitors, wait_limit).await?;
    let origin_log = origin.map(Origin::finish);
    conclude(&args.out, &scenario, targets.len(), &records, origin_log)
}

/// The origin the scenario asks for, started on a loopback address (`--origin` first).
async fn start_origin(
    listen: Option<SocketAddr>,
    scenario: &Scenario,
) -> anyhow::Result<Option<Origin>> {
    if !scenario.origin.enabled {
        return Ok(None);
    }
    let listen = listen
        .or(scenario.origin.listen)
        .context("the origin needs an address: --origin or [origin] listen")?;
    if !listen.ip().is_loopback() {
        bail!("the origin must listen on a loopback address, not {listen}");
    }
    let origin = Origin::start(listen, scenario.origin.latency)
        .await
        .with_context(|| format!("starting the origin on {listen}"))?;
    Ok(Some(origin))
}

/// Starts worker process `worker` of `workers` (this program, `crowd-worker`) and waits for
/// it to say it is ready; hands back the process and its output.
async fn start_worker(
    scenario: &Path,
    worker: usize,
    workers: usize,
    targets: &[String],
) -> anyhow::Result<(Child, BufReader<ChildStdout>)> {
    let program = std::env::current_exe().context("finding this program to start workers")?;
    let mut command = Command::new(&program);
    command
        .arg("crowd-worker")
        .arg("--scenario")
        .arg(scenario)
        .args(["--worker", &worker.to_string()])
        .args(["--workers", &workers.to_string()]);
    for target in targets {
        command.args(["--target", target]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting a worker")?;
    let mut stdout = BufReader::new(child.stdout.take().context("a worker's output")?);
    let (line, stdout) = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        stdout.read_line(&mut line).map(|_| (line, stdout))
    })
    .await??;
    if line.trim() != "ready" {
        let _ = child.kill();
        bail!("worker {worker} did not start: {line:?}");
    }
    Ok((child, stdout))
}

/// Every worker's records once it exits (successfully, by `wait_limit`), ordered by visitor.
async fn collect_records(
    readers: Vec<tokio::task::JoinHandle<anyhow::Result<(WorkerOutput, Child)>>>,
    visitors: usize,
    wait_limit: Instant,
) -> anyhow::Result<Vec<VisitorRecord>> {
    let mut records: Vec<VisitorRecord> = Vec::with_capacity(visitors);
    for (worker, reader) in readers.into_iter().enumerate() {
        let (output, mut child) = tokio::time::timeout_at(wait_limit, reader)
            .await
            .with_context(|| format!("worker {worker} did not finish"))???;
        let status = child.wait()?;
        if !status.success() {
            bail!("worker {worker} failed ({status})");
        }
        records.extend(output.records);
    }
    records.sort_by_key(|record| record.id);
    if records.iter().all(|record| record.join.is_none()) {
        bail!(
            "no visitor could join (first errors: {:?})",
            records
                .iter()
                .flat_map(|record| &record.errors)
                .take(3)
                .collect::<Vec<_>>()
        );
    }
    Ok(records)
}

/// Analyses the run, writes the report to `out` and says how each check went; the exit
/// status says whether every invariant held.
fn conclude(
    out: &Path,
    scenario: &Scenario,
    nodes: usize,
    records: &[VisitorRecord],
    origin_log: Option<OriginLog>,
) -> anyhow::Result<ExitCode> {
    let (summary, series) = analysis::analyse(scenario, nodes, records, origin_log.as_ref());
    let command = std::iter::once("anteroom-bench".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    report::write(out, &summary, &series, &command)?;
    for check in &summary.checks {
        eprintln!(
            "{} {}: {}",
            if check.met { "ok  " } else { "FAIL" },
            check.name,
            check.detail
        );
    }
    eprintln!("report: {}", out.join("report.md").display());
    Ok(if summary.invariants_held() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(INVARIANT_BROKEN)
    })
}

/// The system clock, in nanoseconds since the epoch: only to agree on the start across
/// processes (every time recorded is measured on the monotonic clock from there).
fn wall_clock_nanos() -> anyhow::Result<u128> {
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    Ok(now.duration_since(std::time::UNIX_EPOCH)?.as_nanos())
}

fn read_output(mut stdout: BufReader<ChildStdout>) -> anyhow::Result<WorkerOutput> {
    let mut text = String::new();
    stdout.read_to_string(&mut text)?;
    serde_json::from_str(&text).context("a worker's records")
}

/// The targets, checked to be plain HTTP on loopback, without a trailing slash.
fn loopback_targets(targets: &[String]) -> anyhow::Result<Vec<String>> {
    targets
        .iter()
        .map(|target| {
            let url = reqwest::Url::parse(target)
                .with_context(|| format!("the target {target:?} is not a URL"))?;
            let host = url.host_str().unwrap_or_default();
            let loopback = host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if url.scheme() != "http" || !loopback {
                bail!("the target {target:?} is not http:// on a loopback address");
            }
            Ok(target.trim_end_matches('/').to_owned())
        })
        .collect()
}

/// The runtime of the coordinator and of each worker process: one worker thread, so the
/// processes, not threads, spread the crowd over the cores.
fn one_worker_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
}

/// One worker process: its share of the visitors, records to stdout.
pub(crate) fn run_worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let scenario = Scenario::load(&args.scenario)?;
    let targets = loopback_targets(&args.targets)?;
    let runtime = one_worker_runtime()?;
    let output = runtime.block_on(work(args, scenario, targets))?;
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &output)?;
    stdout.write_all(b"\n")?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

async fn work(
    args: WorkerArgs,
    scenario: Scenario,
    targets: Vec<String>,
) -> anyhow::Result<WorkerOutput> {
    // Workers connect from different loopback addresses, so each has its own local ports.
    let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + (args.worker % 8) as u8));
    let client = Client::new(&targets, source)
        .await
        .context("resolving the targets")?;
    let plans: Vec<_> = (0..scenario.visitors)
        .filter(|id| id % args.workers.max(1) == args.worker)
        .map(|id| scenario.plan(id, targets.len()))
        .collect();
    let start = wait_for_go().await?;
    let deadline = start + scenario.time_limit;
    let context = Arc::new(Context {
        client,
        room: scenario.room.id.clone(),
        behaviour: scenario.behaviour.clone(),
        start,
    });
    let tasks: Vec<_> = plans
        .into_iter()
        .map(|plan| {
            let context = context.clone();
            tokio::spawn(async move {
                let mut record = VisitorRecord {
                    id: plan.id,
                    node: plan.node,
                    arrival: plan.arrival.as_secs_f64(),
                    ..VisitorRecord::default()
                };
                let _ =
                    tokio::time::timeout_at(deadline, visitor::visit(&context, &plan, &mut record))
                        .await;
                record
            })
        })
        .collect();
    let mut records = Vec::with_capacity(tasks.len());
    for task in tasks {
        records.push(task.await?);
    }
    Ok(WorkerOutput { records })
}

/// Says `ready` to the coordinator, waits for its `go <wall-clock nanos>` and places that
/// start on this process's monotonic clock.
async fn wait_for_go() -> anyhow::Result<Instant> {
    {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(b"ready\n")?;
        stdout.flush()?;
    }
    let mut line = String::new();
    let line = tokio::task::spawn_blocking(move || {
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await??;
    let start_wall: u128 = line
        .trim()
        .strip_prefix("go ")
        .and_then(|nanos| nanos.parse().ok())
        .context("the coordinator did not say go")?;
    let since_start = Duration::from_nanos(
        u64::try_from(wall_clock_nanos()?.saturating_sub(start_wall)).unwrap_or(u64::MAX),
    );
    let now = Instant::now();
    Ok(now.checked_sub(since_start).unwrap_or(now))
}
