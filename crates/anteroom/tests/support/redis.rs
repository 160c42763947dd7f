//! A real `redis-server` for the end-to-end tests, on a free loopback port.
//!
//! The server runs under a small shell holding a pipe from the test process: when the handle
//! is dropped, or the test process exits in any way, the pipe closes and the shell stops the
//! server. Servers write no snapshots; a server given a data directory of its own (for a
//! restart on the same data) keeps an append-only file there, fsynced on every write.
#![allow(dead_code)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the server in the background, waits for the test process to close our stdin, then
/// stops the server (and removes its directory when it is a scratch one).
const WATCHDOG: &str = r#"redis-server "$@" </dev/null >/dev/null 2>&1 &
server=$!
cat >/dev/null
kill -CONT "$server" 2>/dev/null
kill -KILL "$server" 2>/dev/null
wait "$server"
if [ -n "$SCRATCH_DIR" ]; then rm -rf "$SCRATCH_DIR"; fi"#;

/// One `redis-server` process.
pub(crate) struct RedisServer {
    port: u16,
    dir: PathBuf,
    scratch: bool,
    watchdog: Child,
}

impl RedisServer {
    /// A server on a free port, without persistence.
    pub(crate) fn start() -> RedisServer {
        require_redis();
        let mut failures = Vec::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("anteroom-e2e-redis-")
                .tempdir()
                .expect("scratch directory")
                .keep();
            match RedisServer::try_start(free_port(), &dir, true, &["--appendonly", "no"]) {
                Ok(server) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server did not start:\n{}", failures.join("\n---\n"));
    }

    /// A server without persistence on `port` (free, chosen beforehand).
    pub(crate) fn start_on(port: u16) -> RedisServer {
        require_redis();
        let dir = tempfile::Builder::new()
            .prefix("anteroom-e2e-redis-")
            .tempdir()
            .expect("scratch directory")
            .keep();
        RedisServer::try_start(port, &dir, true, &["--appendonly", "no"])
            .unwrap_or_else(|failure| panic!("{failure}"))
    }

    /// A server on `port` keeping an append-only file in `dir` (fsynced on every write), so
    /// a server started again on the same directory has every acknowledged write.
    pub(crate) fn start_durable(port: u16, dir: &Path) -> RedisServer {
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
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("redis-watchdog")
            .args(&args)
            .env(
                "SCRATCH_DIR",
                if scratch {
                    dir.as_os_str()
                } else {
                    "".as_ref()
                },
            )
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if cli(port, &["PING"]).is_some_and(|answer| answer.trim() == "PONG") {
                return Ok(server);
            }
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            if Instant::now() > deadline || log.contains("# Could not create server") {
                server.stop();
                return Err(format!("redis-server on port {port}:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a `redis-cli` command against this server.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// The server's process id (from `INFO server`).
    pub(crate) fn pid(&self) -> u32 {
        let info = self.cli(&["INFO", "server"]);
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .expect("INFO server names the process id")
    }

    /// Stops the process where it stands (SIGSTOP): its sockets stay open, nothing answers.
    pub(crate) fn pause(&self) -> u32 {
        let pid = self.pid();
        signal(pid, "-STOP");
        pid
    }

    /// Lets a paused process go on (SIGCONT).
    pub(crate) fn resume(pid: u32) {
        signal(pid, "-CONT");
    }

    /// Kills the server at once (SIGKILL, no shutdown save) and waits for it to be gone.
    pub(crate) fn kill(mut self) {
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

/// A free port below the ephemeral range (so nothing else is handed it meanwhile).
pub(crate) fn free_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    loop {
        let port: u16 = rng.gen_range(10_000..30_000);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
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
