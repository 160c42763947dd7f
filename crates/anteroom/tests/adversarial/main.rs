//! The adversarial suite (SPEC §14.1-§14.3): the real binary tried as an attacker would try
//! it, one test per way in which an earlier build could be walked past or stalled. Each test
//! says what the attacker does and what must hold; each failed on the build before the
//! hardening. Requests that a well-behaved client library would refuse to send go over raw
//! sockets ([`raw_exchange`]).
//!
//! One module per kind of attack; every module starts what it uses.
#![allow(clippy::unwrap_used)]
// Each module uses part of the harness.
#![allow(dead_code)]

#[path = "../support/mod.rs"]
mod support;

#[path = "../gateway/upstream.rs"]
mod upstream;

mod limits;
mod origins;
mod pages;
mod paths;
mod secrets;

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use support::{Server, Site};
use upstream::Upstream;

mod connections;
mod differential;
mod flood;
mod join_gate;
mod proxies;
mod trust;

/// A gateway in front of the echoing upstream (`upstream.rs`).
pub(crate) struct Gate {
    /// Holds the scratch directory while the server runs.
    pub(crate) site: Site,
    pub(crate) server: Server,
    pub(crate) upstream: Upstream,
    pub(crate) client: reqwest::Client,
}

impl Gate {
    /// Starts the upstream, then anteroom with `extra` appended to the test config
    /// (`{upstream}` is replaced by the upstream's URL).
    pub(crate) async fn start(extra: &str) -> Gate {
        Gate::start_with("", extra).await
    }

    /// [`Gate::start`] with `server` (lines such as `trusted_proxies = [...]`) added to the
    /// config's `[server]` section (`join_rate_limit = true` replaces the harness's `false`).
    pub(crate) async fn start_with(server: &str, extra: &str) -> Gate {
        Gate::start_edited(extra, |text| with_server_lines(&text, server)).await
    }

    /// [`Gate::start`] with `edit` applied to the whole config text before the server starts.
    pub(crate) async fn start_edited(extra: &str, edit: impl FnOnce(String) -> String) -> Gate {
        Gate::start_limited(None, extra, edit).await
    }

    /// [`Gate::start_edited`] with the process allowed `open_files` descriptors at most.
    pub(crate) async fn start_limited(
        open_files: Option<u64>,
        extra: &str,
        edit: impl FnOnce(String) -> String,
    ) -> Gate {
        let upstream = Upstream::start().await;
        let site = Site::new();
        let path = site.write_config("EdDSA", &extra.replace("{upstream}", &upstream.url()));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, edit(text)).unwrap();
        let mut server = match open_files {
            Some(open_files) => site.start_limited(open_files),
            None => site.start(),
        };
        let client = support::client();
        server.wait_ready(&client).await;
        Gate {
            site,
            server,
            upstream,
            client,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// `127.0.0.1:<port>`, for raw sockets.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.site.port)
    }
}

/// Sends `request` as it is on a fresh connection and reads until the server closes it or
/// `Connection: close` is honoured (the request should ask for it); at most 5 s.
pub(crate) async fn raw_exchange(addr: &str, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The harness's config text with `server` added to its `[server]` section
/// (`join_rate_limit = true` replaces the harness's `false`).
pub(crate) fn with_server_lines(text: &str, server: &str) -> String {
    let text = if server.contains("join_rate_limit") {
        text.replacen("join_rate_limit = false\n", "", 1)
    } else {
        text.to_owned()
    };
    text.replacen("[server]\n", &format!("[server]\n{server}\n"), 1)
}

/// The harness's config text served by `engine` (`own` or `hyper`) whatever the suite's
/// engine is.
pub(crate) fn on_engine(text: &str, engine: &str) -> String {
    text.replacen(
        &format!("http_engine = \"{}\"", support::test_engine()),
        &format!("http_engine = \"{engine}\""),
        1,
    )
}

/// The harness's config text with its embedded store replaced by the Redis at `url`.
pub(crate) fn on_redis(text: &str, url: &str) -> String {
    let start = text.find("[store]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    format!(
        "{}[store]\nbackend = \"redis\"\nurl = \"{url}\"{}",
        &text[..start],
        &text[end..]
    )
}

/// The status code of a raw HTTP/1.1 answer (0 when there is none).
pub(crate) fn raw_status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}
