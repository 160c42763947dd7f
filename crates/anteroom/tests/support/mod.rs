//! What the end-to-end tests share: a scratch directory with a config file, the real
//! `anteroom` binary started on a free port and killed when its guard drops, and small
//! readers for the public API's JSON and the passes' claims.
//!
//! Every test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub(crate) mod proxies;

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The service key every test config accepts.
pub(crate) const SERVICE_KEY: &str = "e2e-service-key";

/// How long a server may take to answer its health check: RSA key generation in a debug
/// build on a busy machine takes seconds.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A port nobody listens on right now, below the kernel's ephemeral range (32768 and up): a
/// port from that range can be handed to some test's outgoing connection as its source port
/// before the server meant for it binds it (the connection-flood tests open more than a
/// thousand at once).
pub(crate) fn free_port() -> u16 {
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    loop {
        let port: u16 = rng.gen_range(10_000..30_000);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `sha256:<hex>` of `key`, the form `[auth]` takes.
pub(crate) fn key_hash(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    format!("sha256:{hex}")
}

/// A TOML string literal for a path.
pub(crate) fn toml_string(path: &Path) -> String {
    let text = path.to_str().expect("utf-8 path");
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A scratch directory holding one server's config file, store and keys.
pub(crate) struct Site {
    dir: tempfile::TempDir,
    /// The public listener's port.
    pub(crate) port: u16,
}

impl Site {
    /// A new scratch directory with a free port picked.
    pub(crate) fn new() -> Site {
        Site {
            dir: tempfile::tempdir().expect("temporary directory"),
            port: free_port(),
        }
    }

    /// The scratch directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The embedded store's file.
    pub(crate) fn store_path(&self) -> PathBuf {
        self.path().join("anteroom.redb")
    }

    /// The key directory.
    pub(crate) fn keys_dir(&self) -> PathBuf {
        self.path().join("keys")
    }

    /// The config file.
    pub(crate) fn config_path(&self) -> PathBuf {
        self.path().join("anteroom.toml")
    }

    /// `http://127.0.0.1:<port>`, the public URL and the passes' issuer.
    pub(crate) fn public_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Writes the config file: server, embedded store, keys with `algorithm`, the service
    /// key, then `rooms` (TOML `[[room]]` tables) as given.
    pub(crate) fn write_config(&self, algorithm: &str, rooms: &str) -> PathBuf {
        let text = format!(
            "[server]\n\
             listen = \"127.0.0.1:{port}\"\n\
             admin_listen = \"127.0.0.1:0\"\n\
             public_url = \"{url}\"\n\
             http_engine = \"{engine}\"\n\
             # The tests join many times from one address; rate_limits.rs checks this limit.\n\
             join_rate_limit = false\n\
             \n\
             [store]\n\
             backend = \"embedded\"\n\
             path = {store}\n\
             \n\
             [keys]\n\
             dir = {keys}\n\
             algorithm = \"{algorithm}\"\n\
             \n\
             [auth]\n\
             service_keys = [\"{service}\"]\n\
             \n\
             {rooms}\n",
            port = self.port,
            url = self.public_url(),
            store = toml_string(&self.store_path()),
            keys = toml_string(&self.keys_dir()),
            service = key_hash(SERVICE_KEY),
            engine = test_engine(),
        );
        let path = self.config_path();
        std::fs::write(&path, text).expect("write the config file");
        path
    }

    /// Starts `anteroom serve` on this site's config; see [`Server`].
    pub(crate) fn start(&self) -> Server {
        Server::start(self, anteroom())
    }

    /// [`Site::start`] with the log filtered by `filter` (`ANTEROOM_LOG`; `warn` otherwise).
    pub(crate) fn start_with_log(&self, filter: &str) -> Server {
        let mut command = anteroom();
        command.env("ANTEROOM_LOG", filter);
        Server::start(self, command)
    }

    /// [`Site::start`] with the process allowed `open_files` descriptors at most (soft and
    /// hard limit, set by util-linux's `prlimit`, which then runs the binary in its place).
    pub(crate) fn start_limited(&self, open_files: u64) -> Server {
        let mut command = anteroom_command("prlimit");
        command
            .arg(format!("--nofile={open_files}:{open_files}"))
            .arg(env!("CARGO_BIN_EXE_anteroom"));
        Server::start(self, command)
    }
}

/// The `[server] http_engine` the started servers use: `ANTEROOM_TEST_HTTP_ENGINE` (`own`
/// when unset), so one suite checks both engines (scripts/test runs the gateway suites under
/// each).
pub(crate) fn test_engine() -> &'static str {
    match std::env::var("ANTEROOM_TEST_HTTP_ENGINE").as_deref() {
        Err(_) | Ok("own") => "own",
        Ok("hyper") => "hyper",
        Ok(other) => panic!("ANTEROOM_TEST_HTTP_ENGINE={other:?}: expected own or hyper"),
    }
}

/// A command running the `anteroom` binary with a clean environment: no `ANTEROOM_…`
/// variable of the caller leaks into the config.
pub(crate) fn anteroom() -> Command {
    anteroom_command(env!("CARGO_BIN_EXE_anteroom"))
}

/// `program` with the environment [`anteroom`] gives the binary (for a wrapper that runs it).
pub(crate) fn anteroom_command(program: &str) -> Command {
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

/// Runs `anteroom <args>` to completion.
pub(crate) fn run(args: &[&str]) -> Output {
    anteroom()
        .args(args)
        .output()
        .expect("run the anteroom binary")
}

/// A running `anteroom serve`; killed (SIGKILL) and reaped when dropped.
pub(crate) struct Server {
    child: Child,
    /// The public listener's port.
    pub(crate) port: u16,
    log: PathBuf,
    /// Where its standard output (the access log) goes.
    stdout: PathBuf,
}

impl Server {
    fn start(site: &Site, mut command: Command) -> Server {
        let log = site.path().join(format!("server-{}.log", unique_suffix()));
        let log_file = std::fs::File::create(&log).expect("create the server log");
        let stdout = log.with_extension("out");
        let stdout_file = std::fs::File::create(&stdout).expect("create the server's output");
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(site.config_path())
            .stdout(stdout_file)
            .stderr(log_file)
            .spawn()
            .expect("start anteroom serve");
        Server {
            child,
            port: site.port,
            log,
            stdout,
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the server wrote to stderr so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the server wrote to stdout so far (the access log).
    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Polls `/_anteroom/healthz` until it answers 200; panics with the server's log if the
    /// process exits or [`READY_TIMEOUT`] passes first.
    pub(crate) async fn wait_ready(&mut self, client: &reqwest::Client) {
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
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
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
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

/// An HTTP client for the tests: no proxy from the environment, bounded waits.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("HTTP client")
}

/// The fields of the status JSON (SPEC §6.1) the tests look at.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct StatusJson {
    pub(crate) room: String,
    pub(crate) state: String,
    pub(crate) ticket: String,
    pub(crate) position: u64,
    pub(crate) pass: Option<String>,
}

/// `POST /_anteroom/v1/rooms/{room}/join` as a new visitor; the status JSON of a 200.
pub(crate) async fn join(client: &reqwest::Client, base: &str, room: &str) -> StatusJson {
    let response = client
        .post(format!("{base}/_anteroom/v1/rooms/{room}/join"))
        .send()
        .await
        .expect("join");
    assert_eq!(response.status(), reqwest::StatusCode::OK, "join answered");
    response.json().await.expect("status JSON")
}

/// The payload of a JWT, decoded without checking anything.
pub(crate) fn jwt_claims(token: &str) -> serde_json::Value {
    jwt_part(token, 1)
}

/// The header of a JWT (`alg`, `kid`), decoded without checking anything.
pub(crate) fn jwt_header(token: &str) -> serde_json::Value {
    jwt_part(token, 0)
}

fn jwt_part(token: &str, index: usize) -> serde_json::Value {
    let part = token.split('.').nth(index).expect("a JWT has three parts");
    let bytes = URL_SAFE_NO_PAD.decode(part).expect("the part is base64url");
    serde_json::from_slice(&bytes).expect("the part is JSON")
}

/// The kid `anteroom keys generate` printed: `active key <kid> (<alg>) in <dir>`.
pub(crate) fn printed_kid(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|line| line.starts_with("active key "))
        .unwrap_or_else(|| panic!("no active key line in: {text}"));
    line["active key ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// The ticket id a ticket token names (`t1.<room>.<ticket_id>.<position>.<generation>.<mac>`).
pub(crate) fn ticket_id_of(token: &str) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 6, "ticket token shape: {token}");
    parts[2].to_owned()
}

/// The same JWT with one character of its payload changed.
pub(crate) fn tamper_payload(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    assert_eq!(parts.len(), 3, "a JWT has three parts");
    let payload = &mut parts[1];
    // Change a character in the middle (not the last, whose low bits may be padding).
    let index = payload.len() / 2;
    let old = payload.as_bytes()[index];
    let new = if old == b'A' { 'B' } else { 'A' };
    payload.replace_range(index..=index, &new.to_string());
    parts.join(".")
}

/// Serves `app` over TLS with `config` on a loopback port for as long as the test runs, and
/// returns the port (origins and event receivers that speak HTTPS). A client that does not
/// trust the certificate ends the handshake: there is nothing to serve then.
pub(crate) async fn serve_tls(config: rustls::ServerConfig, app: axum::Router) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind a loopback port");
    let port = listener.local_addr().expect("a bound address").port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            });
        }
    });
    port
}
