//! Real Redis for tests: a standalone `redis-server`, or a 3-master Redis Cluster made with
//! `redis-cli --cluster create`, on free loopback ports.
//!
//! Each server runs under a small shell holding a pipe from the test process: when the handle
//! is dropped, or the test process exits in any way (a static is never dropped), the pipe
//! closes and the shell kills the server (resuming it first, in case a test paused it) and
//! deletes its scratch directory. Servers write no snapshots; a server given a data directory
//! of its own (for a restart on the same data) keeps an append-only file there, fsynced on
//! every write.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ports::free_port_pair;

/// Runs the server in the background, waits for the test process to close our stdin, then
/// stops the server (and removes its directory when it is a scratch one).
const WATCHDOG: &str = r#"redis-server "$@" </dev/null >/dev/null 2>&1 &
server=$!
cat >/dev/null
kill -CONT "$server" 2>/dev/null
kill -KILL "$server" 2>/dev/null
wait "$server"
if [ -n "$SCRATCH_DIR" ]; then rm -rf "$SCRATCH_DIR"; fi"#;

/// No snapshots and no append-only file.
const EPHEMERAL: [&str; 2] = ["--appendonly", "no"];

/// One `redis-server` process.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    scratch: bool,
    watchdog: Child,
}

impl RedisServer {
    /// A standalone server without persistence on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server without persistence, with `extra` arguments; retried on other ports if the
    /// chosen ones were taken meanwhile. The port's cluster bus port is free too.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        require_redis();
        let mut failures = Vec::new();
        for _ in 0..5 {
            let arguments = [&EPHEMERAL[..], extra].concat();
            match RedisServer::try_start(free_port_pair(), &scratch_dir(), true, &arguments) {
                Ok(server) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server did not start:\n{}", failures.join("\n---\n"));
    }

    /// A server without persistence on `port` (free, chosen beforehand, or the port of a
    /// server dropped before, for restart tests).
    pub fn start_on(port: u16) -> RedisServer {
        require_redis();
        RedisServer::try_start(port, &scratch_dir(), true, &EPHEMERAL)
            .unwrap_or_else(|failure| panic!("{failure}"))
    }

    /// A server on `port` keeping an append-only file in `dir` (fsynced on every write), so
    /// a server started again on the same directory has every acknowledged write.
    pub fn start_durable(port: u16, dir: &Path) -> RedisServer {
        require_redis();
        RedisServer::try_start(
            port,
            dir,
            false,
            &["--appendonly", "yes", "--appendfsync", "always"],
        )
        .unwrap_or_else(|failure| panic!("{failure}"))
    }

    fn try_start(
        port: u16,
        dir: &Path,
        scratch: bool,
        extra: &[&str],
    ) -> Result<RedisServer, String> {
        let log = dir.join("redis.log");
        let port_text = port.to_string();
        let mut args: Vec<&str> = vec![
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            dir.to_str().expect("utf-8 path"),
            "--logfile",
            log.to_str().expect("utf-8 path"),
        ];
        args.extend_from_slice(extra);
        let scratch_dir = if scratch {
            dir.as_os_str()
        } else {
            "".as_ref()
        };
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("redis-watchdog")
            .args(&args)
            .env("SCRATCH_DIR", scratch_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the redis watchdog");
        let mut server = RedisServer {
            port,
            dir: dir.to_owned(),
            scratch,
            watchdog,
        };
        server.wait_answering(&log).map(|()| server)
    }

    /// Waits until this server (not another process that took the port meanwhile) answers
    /// PING; stops it and hands back its log when it cannot bind its port or does not answer
    /// within ten seconds.
    fn wait_answering(&mut self, log: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let (started_pid, failed) = last_start(&log);
            if !failed
                && let Some(own_pid) = started_pid
                && cli(self.port, &["INFO", "server"]).is_some_and(|info| {
                    info.lines()
                        .filter_map(|line| line.strip_prefix("process_id:"))
                        .any(|pid| pid.trim() == own_pid)
                })
            {
                return Ok(());
            }
            if Instant::now() > deadline || failed {
                self.stop();
                return Err(format!("redis-server on port {}:\n{log}", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a `redis-cli` command against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// The server's process id (from `INFO server`).
    pub fn pid(&self) -> u32 {
        let info = self.cli(&["INFO", "server"]);
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .expect("INFO server names the process id")
    }

    /// Stops the process where it stands (SIGSTOP): its sockets stay open, nothing answers.
    pub fn pause(&self) -> u32 {
        let pid = self.pid();
        signal(pid, "-STOP");
        pid
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(pid: u32) {
        signal(pid, "-CONT");
    }

    /// Kills the server at once (SIGKILL, no shutdown save) and waits for it to be gone.
    pub fn kill(mut self) {
        signal(self.pid(), "-KILL");
        self.stop();
    }

    fn stop(&mut self) {
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
        if self.scratch {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Three masters holding all 16 384 slots, no replicas.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them into one cluster.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        create_cluster(&nodes);
        for node in &nodes {
            wait_cluster_ready(node);
        }
        RedisCluster { nodes }
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// `redis-cli --cluster create` over `nodes`, every slot to a master.
fn create_cluster(nodes: &[RedisServer]) {
    let addresses: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addresses.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    let output = Command::new("redis-cli")
        .args(&create)
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        output.status.success(),
        "redis-cli --cluster create failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until `node` sees the whole cluster serving every slot.
fn wait_cluster_ready(node: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = node.cli(&["CLUSTER", "INFO"]);
        if info.contains("cluster_state:ok")
            && info.contains("cluster_slots_ok:16384")
            && info.contains("cluster_known_nodes:3")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster did not become ready:\n{info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One standalone server shared by every test of this process (tests keep apart by key
/// prefix, see [`unique_prefix`]).
pub fn shared_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// One cluster shared by every test of this process.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A key prefix no other store of this test process uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "anteroom-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new scratch directory, kept on disk: the watchdog removes it with the server, even when
/// the test process ends without dropping the handle.
fn scratch_dir() -> PathBuf {
    tempfile::Builder::new()
        .prefix("anteroom-redis-")
        .tempdir()
        .expect("scratch directory")
        .keep()
}

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid}");
}

fn require_redis() {
    for tool in ["redis-server", "redis-cli"] {
        if let Err(error) = Command::new(tool).arg("--version").output() {
            panic!(
                "{tool} is needed by the Redis tests and could not be run ({error}): \
                 install Debian's redis-server package (scripts/test does it)"
            );
        }
    }
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut answer = String::new();
    child.stdout.take()?.read_to_string(&mut answer).ok()?;
    child.wait().ok()?.success().then_some(answer)
}

/// What the last start of a redis-server wrote to `log` (a durable server started again on its
/// directory appends to the same log): the process id it started as (`pid=1234, just
/// started`), and whether it failed to bind its port.
fn last_start(log: &str) -> (Option<&str>, bool) {
    let Some(start) = log.rfind("just started") else {
        return (None, false);
    };
    let line_start = log[..start].rfind('\n').map_or(0, |newline| newline + 1);
    let pid = log[line_start..start]
        .rfind("pid=")
        .and_then(|at| log[line_start + at + "pid=".len()..start].split(',').next());
    let after = &log[start..];
    let failed = after.contains("Could not create server") || after.contains("Failed listening");
    (pid, failed)
}
