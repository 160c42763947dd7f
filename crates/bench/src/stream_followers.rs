//! The processes that hold `sse-soak`'s event streams.
//!
//! One process cannot hold as many streams as the node under test should (both sides need a
//! descriptor per stream, and the open-file limit is per process), so the coordinator hands
//! its waiting visitors to a few follower processes (`anteroom-bench sse-soak-streams`, this
//! program started again). A follower reads its tickets from standard input (`position token`
//! lines, then `go`), opens one stream per ticket at its share of the ramp, and reports on
//! standard output, one line per event:
//!
//! - `open` when a stream sent its first status, `closed` when an open stream ended,
//!   `failed <reason>` when one could not be opened;
//! - `serving <counter> <µs since the epoch>` when a stream shows a higher serving counter;
//! - `admitted <µs since the epoch>` when a stream says its visitor was admitted.
//!
//! Times are wall-clock microseconds: every process reads the same system clock, so the
//! coordinator subtracts the moment it made a change from the moment a follower saw it. A
//! follower stops when its standard input closes (the coordinator ended or killed it).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use parking_lot::Mutex;

use crate::event_stream::{
    Shared, StreamEvents, StreamRequest, StreamTarget, Target, follow_stream, source_address,
};

/// Options of `anteroom-bench sse-soak-streams` (started by `sse-soak`).
#[derive(Debug, Args)]
pub(crate) struct FollowerArgs {
    #[command(flatten)]
    stream: StreamTarget,
    /// Streams this process opens per second.
    #[arg(long)]
    ramp: u32,
    /// Source addresses to rotate over: 127.0.0.1 … 127.0.0.N.
    #[arg(long)]
    source_addresses: u8,
}

/// What the coordinator tells a follower besides its tickets.
pub(crate) struct FollowerPlan<'a> {
    pub(crate) stream: &'a StreamTarget,
    pub(crate) ramp: u32,
    pub(crate) source_addresses: u8,
}

/// The running followers; stopped when dropped.
pub(crate) struct Followers {
    children: Vec<Child>,
    /// Their inputs, kept open: a follower stops when its input closes.
    inputs: Vec<ChildStdin>,
}

impl Followers {
    /// Starts `processes` followers, hands each its share of `tickets` (`(position, token)`,
    /// dealt round-robin) and feeds what they report into `shared`.
    pub(crate) fn start(
        processes: usize,
        plan: &FollowerPlan<'_>,
        tickets: &[(u64, String)],
        shared: &Arc<Shared>,
    ) -> anyhow::Result<Followers> {
        let processes = processes.clamp(1, tickets.len().max(1));
        let program = std::env::current_exe().context("finding this program to start followers")?;
        let ramp = (plan.ramp / u32::try_from(processes).unwrap_or(u32::MAX)).max(1);
        let mut followers = Followers {
            children: Vec::with_capacity(processes),
            inputs: Vec::with_capacity(processes),
        };
        for index in 0..processes {
            let mut command = Command::new(&program);
            command
                .arg("sse-soak-streams")
                .args(["--target", &plan.stream.target, "--room", &plan.stream.room])
                .args(["--ramp", &ramp.to_string()])
                .args(["--source-addresses", &plan.source_addresses.to_string()]);
            if let Some(ca_file) = &plan.stream.ca_file {
                command.arg("--ca-file").arg(ca_file);
            }
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting a stream follower")?;
            let stdout = child.stdout.take().context("a follower's output")?;
            let mut stdin = child.stdin.take().context("a follower's input")?;
            followers.children.push(child);
            let mut lines = String::new();
            for (position, token) in tickets.iter().skip(index).step_by(processes) {
                lines.push_str(&format!("{position} {token}\n"));
            }
            lines.push_str("go\n");
            stdin.write_all(lines.as_bytes())?;
            stdin.flush()?;
            followers.inputs.push(stdin);
            let shared = shared.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Err(error) = apply(&line, &shared) {
                        shared.fail(format!("follower said {line:?}: {error}"));
                    }
                }
            });
        }
        Ok(followers)
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        self.inputs.clear();
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Applies one line of a follower's report to `shared`.
fn apply(line: &str, shared: &Shared) -> anyhow::Result<()> {
    let mut words = line.splitn(2, ' ');
    let kind = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default();
    match kind {
        "open" => shared.opened(),
        "closed" => shared.closed(),
        "failed" => shared.fail(rest.to_owned()),
        "serving" => {
            let (serving, at) = rest
                .split_once(' ')
                .ok_or_else(|| anyhow!("no time after the counter"))?;
            shared.observe(serving.parse()?, from_micros(at.parse()?));
        }
        "admitted" => shared.observe_admitted(from_micros(rest.parse()?)),
        _ => bail!("unknown report"),
    }
    Ok(())
}

fn from_micros(micros: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(micros)
}

fn micros(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

/// A follower's reports, written to standard output one line at a time.
struct Reports {
    out: Mutex<std::io::Stdout>,
}

impl Reports {
    fn say(&self, line: std::fmt::Arguments<'_>) {
        let mut out = self.out.lock();
        // The coordinator gone, nobody reads the reports: the follower stops on its input.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl StreamEvents for Reports {
    fn opened(&self) {
        self.say(format_args!("open"));
    }

    fn closed(&self) {
        self.say(format_args!("closed"));
    }

    fn fail(&self, reason: String) {
        // One line per report: a reason never spans two.
        let reason = reason.replace('\n', " ");
        self.say(format_args!("failed {reason}"));
    }

    fn observe(&self, serving: u64, at: SystemTime) {
        self.say(format_args!("serving {serving} {}", micros(at)));
    }

    fn observe_admitted(&self, at: SystemTime) {
        self.say(format_args!("admitted {}", micros(at)));
    }
}

/// One follower process: reads its tickets, opens their streams, reports until its input closes.
pub(crate) fn run(args: FollowerArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.stream.target, args.stream.ca_file.as_deref())?;
    let mut stdin = std::io::stdin().lock();
    let mut tickets = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if stdin.read_line(&mut line)? == 0 {
            bail!("the coordinator did not say go");
        }
        let line = line.trim();
        if line == "go" {
            break;
        }
        let (position, token) = line
            .split_once(' ')
            .ok_or_else(|| anyhow!("not a ticket line: {line:?}"))?;
        tickets.push((position.parse::<u64>()?, token.to_owned()));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let reports = Arc::new(Reports {
        out: Mutex::new(std::io::stdout()),
    });
    runtime.spawn(open_streams(args, target, tickets, reports));
    // Until the coordinator closes the input.
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stdin, &mut rest);
    Ok(())
}

/// Opens one stream per ticket, `args.ramp` a second.
async fn open_streams(
    args: FollowerArgs,
    target: Target,
    tickets: Vec<(u64, String)>,
    reports: Arc<Reports>,
) {
    let batch = (args.ramp / 100).max(1) as usize;
    let mut ticks = tokio::time::interval(Duration::from_millis(10));
    for (index, (position, ticket)) in tickets.into_iter().enumerate() {
        if index % batch == 0 {
            ticks.tick().await;
        }
        let source: Option<IpAddr> = source_address(index, args.source_addresses);
        let request = StreamRequest {
            target: target.clone(),
            source,
            room: args.stream.room.clone(),
            ticket,
            position,
        };
        tokio::spawn(follow_stream(request, reports.clone()));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_followers_lines_reach_the_coordinators_figures() {
        let shared = Shared::default();
        let changed_at = from_micros(1_000_000);
        shared.begin_change(7, changed_at);
        apply("open", &shared).unwrap();
        apply("open", &shared).unwrap();
        apply("closed", &shared).unwrap();
        apply("failed connect: refused", &shared).unwrap();
        apply("serving 6 1000100", &shared).unwrap();
        apply("serving 7 1250000", &shared).unwrap();
        apply("admitted 1300000", &shared).unwrap();
        assert_eq!(shared.connected(), 2);
        assert_eq!(shared.open_now(), 1);
        assert_eq!(shared.failed(), 1);
        assert_eq!(shared.delays(7), vec![Duration::from_millis(250)]);
        assert!(apply("serving 7", &shared).is_err());
        assert!(apply("hello", &shared).is_err());
    }
}
