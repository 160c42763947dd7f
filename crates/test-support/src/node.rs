//! `anteroom serve` as the end-to-end tests run it: a command with a clean environment, the
//! process killed and reaped when its guard drops, its logs, and the wait for its health check.
//!
//! The binary's path is the caller's (`env!("CARGO_BIN_EXE_anteroom")` exists only in the
//! binary crate's own tests).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to answer its health check: RSA key generation in a debug
/// build on a busy machine takes seconds.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The `[server] http_engine` the started servers use: `ANTEROOM_TEST_HTTP_ENGINE` (`own`
/// when unset), so one suite checks both engines (scripts/test runs the gateway suites under
/// each).
pub fn test_engine() -> &'static str {
    match std::env::var("ANTEROOM_TEST_HTTP_ENGINE").as_deref() {
        Err(_) | Ok("own") => "own",
        Ok("hyper") => "hyper",
        Ok(other) => panic!("ANTEROOM_TEST_HTTP_ENGINE={other:?}: expected own or hyper"),
    }
}

/// `program` with a clean environment for the binary: no `ANTEROOM_…` variable of the caller
/// leaks into the config, the log filtered at `warn`, no stdin.
pub fn anteroom_command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name
            .to_string_lossy()
            .to_ascii_uppercase()
            .starts_with("ANTEROOM_")
        {
            command.env_remove(&name);
        }
    }
    command.env("ANTEROOM_LOG", "warn").stdin(Stdio::null());
    command
}

/// An HTTP client for the tests: no proxy from the environment, bounded waits.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("HTTP client")
}

/// A running `anteroom serve`; killed (SIGKILL) and reaped when dropped.
pub struct Server {
    child: Child,
    /// The public listener's port.
    pub port: u16,
    log: PathBuf,
    /// Where its standard output (the access log) goes.
    stdout: PathBuf,
}

impl Server {
    /// Runs `command serve --config <config>`, listening on `port`, its stderr and stdout
    /// written to files of their own in `dir`.
    pub fn start(mut command: Command, config: &Path, dir: &Path, port: u16) -> Server {
        let log = dir.join(format!("server-{}.log", unique_suffix()));
        let log_file = std::fs::File::create(&log).expect("create the server log");
        let stdout = log.with_extension("out");
        let stdout_file = std::fs::File::create(&stdout).expect("create the server's output");
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stdout(stdout_file)
            .stderr(log_file)
            .spawn()
            .expect("start anteroom serve");
        Server {
            child,
            port,
            log,
            stdout,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the server wrote to stdout so far (the access log).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Polls `/_anteroom/healthz` until it answers 200; panics with the server's log if the
    /// process exits or [`READY_TIMEOUT`] passes first.
    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
        let started = Instant::now();
        let url = format!("{}/_anteroom/healthz", self.url());
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server process") {
                panic!("anteroom exited early ({status}); log:\n{}", self.log());
            }
            let answer = client
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if answer.is_ok_and(|response| response.status().is_success()) {
                return;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "anteroom not ready after {READY_TIMEOUT:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server process") {
                return Some(status);
            }
            if started.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn unique_suffix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}
