//! What the end-to-end tests share: a scratch directory with a config file, the real
//! `anteroom` binary started on a free port (through `anteroom-test-support`'s [`Server`],
//! killed when its guard drops), and small readers for the public API's JSON and the passes'
//! claims.
//!
//! Every test file compiles this module on its own and uses only part of it.
#![allow(dead_code, unused_imports)]

pub(crate) mod proxies;
pub(crate) mod slow_origin;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) use anteroom_test_support::config_text::{key_hash, toml_string};
pub(crate) use anteroom_test_support::node::{
    READY_TIMEOUT, Server, anteroom_command, client, test_engine,
};
pub(crate) use anteroom_test_support::ports::free_port;
pub(crate) use anteroom_test_support::tls::serve_tls;

/// The service key every test config accepts.
pub(crate) const SERVICE_KEY: &str = "e2e-service-key";

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
        self.start_command(anteroom())
    }

    /// [`Site::start`] with the log filtered by `filter` (`ANTEROOM_LOG`; `warn` otherwise).
    pub(crate) fn start_with_log(&self, filter: &str) -> Server {
        let mut command = anteroom();
        command.env("ANTEROOM_LOG", filter);
        self.start_command(command)
    }

    /// [`Site::start`] with the process allowed `open_files` descriptors at most (soft and
    /// hard limit, set by util-linux's `prlimit`, which then runs the binary in its place).
    pub(crate) fn start_limited(&self, open_files: u64) -> Server {
        let mut command = anteroom_command("prlimit");
        command
            .arg(format!("--nofile={open_files}:{open_files}"))
            .arg(env!("CARGO_BIN_EXE_anteroom"));
        self.start_command(command)
    }

    /// `command serve --config <this site's config>`; see [`Server`].
    fn start_command(&self, command: Command) -> Server {
        Server::start(command, &self.config_path(), self.path(), self.port)
    }
}

/// A command running the `anteroom` binary with a clean environment: no `ANTEROOM_…`
/// variable of the caller leaks into the config.
pub(crate) fn anteroom() -> Command {
    anteroom_command(env!("CARGO_BIN_EXE_anteroom"))
}

/// Runs `anteroom <args>` to completion.
pub(crate) fn run(args: &[&str]) -> Output {
    anteroom()
        .args(args)
        .output()
        .expect("run the anteroom binary")
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

/// The text of `GET /metrics` on the admin listener at `admin_url` (`http://host:port`),
/// answered 200.
pub(crate) async fn scrape_metrics(client: &reqwest::Client, admin_url: &str) -> String {
    let response = client
        .get(format!("{admin_url}/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(
        response.status(),
        reqwest::StatusCode::OK,
        "/metrics answered"
    );
    response.text().await.expect("the metrics text")
}

pub(crate) use anteroom_test_support::jwt::{claims as jwt_claims, header as jwt_header};

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
