//! One waiter's event stream, followed: the node to connect to ([`Target`]), the stream read
//! event by event ([`follow_stream`]), and what streams report ([`StreamEvents`], tallied by
//! the coordinator's [`Shared`]). Used by the `sse-soak` coordinator and by the follower
//! processes that hold its streams.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpSocket;

/// What a stream reports as it goes (to the coordinator's [`Shared`], through a follower
/// process's output).
pub(crate) trait StreamEvents: Send + Sync + 'static {
    /// The stream answered 200 and sent its first status.
    fn opened(&self);
    /// An opened stream ended.
    fn closed(&self);
    /// The stream could not be opened, for `reason`.
    fn fail(&self, reason: String);
    /// The stream showed the serving counter `serving`, higher than before, at `at`.
    fn observe(&self, serving: u64, at: SystemTime);
    /// The stream said its visitor was admitted, at `at`.
    fn observe_admitted(&self, at: SystemTime);
}

/// What the streams report to the coordinator.
#[derive(Default)]
pub(crate) struct Shared {
    /// Streams that answered 200 and sent their first status.
    connected: AtomicUsize,
    /// Streams open now.
    open: AtomicUsize,
    /// Streams that could not be opened.
    failed: AtomicUsize,
    /// Why streams failed, counted by reason.
    pub(crate) errors: Mutex<HashMap<String, usize>>,
    /// The change being measured: the serving counter it leads to, and when it was made
    /// (wall-clock time, which the follower processes share).
    change: Mutex<Option<(u64, SystemTime)>>,
    /// For each serving value, when each stream first showed it (delay from the change).
    first_seen: Mutex<HashMap<u64, Vec<Duration>>>,
    /// How long the admitted visitor's stream took to say `admitted`, for the latest change.
    pub(crate) admitted_delay: Mutex<Option<Duration>>,
    /// Status events received, all streams together.
    events: AtomicU64,
}

impl Shared {
    /// From now, streams showing `serving` or more count towards the change made `at`.
    pub(crate) fn begin_change(&self, serving: u64, at: SystemTime) {
        *self.change.lock() = Some((serving, at));
    }

    /// Streams that opened so far.
    pub(crate) fn connected(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }

    /// Streams open now.
    pub(crate) fn open_now(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Streams that could not be opened.
    pub(crate) fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    pub(crate) fn seen(&self, serving: u64) -> usize {
        self.first_seen.lock().get(&serving).map_or(0, Vec::len)
    }

    pub(crate) fn delays(&self, serving: u64) -> Vec<Duration> {
        let mut delays = self
            .first_seen
            .lock()
            .get(&serving)
            .cloned()
            .unwrap_or_default();
        delays.sort();
        delays
    }
}

impl StreamEvents for Shared {
    fn opened(&self) {
        self.connected.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    fn fail(&self, reason: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *self.errors.lock().entry(reason).or_default() += 1;
    }

    /// Records the delay if `serving` is that of the change being measured (or later).
    fn observe(&self, serving: u64, at: SystemTime) {
        self.events.fetch_add(1, Ordering::Relaxed);
        let Some((target, changed_at)) = *self.change.lock() else {
            return;
        };
        if serving >= target {
            self.first_seen
                .lock()
                .entry(target)
                .or_default()
                .push(at.duration_since(changed_at).unwrap_or_default());
        }
    }

    fn observe_admitted(&self, at: SystemTime) {
        if let Some((_, changed_at)) = *self.change.lock() {
            *self.admitted_delay.lock() = Some(at.duration_since(changed_at).unwrap_or_default());
        }
    }
}

/// The system clock: the coordinator and the follower processes measure a change's delay
/// across processes, and it is the clock they share.
pub(crate) fn wall_clock() -> SystemTime {
    #[allow(clippy::disallowed_methods)]
    SystemTime::now()
}

/// One stream to open: where, from which source address, for which ticket.
pub(crate) struct StreamRequest {
    pub(crate) target: Target,
    pub(crate) source: Option<IpAddr>,
    pub(crate) room: String,
    pub(crate) ticket: String,
    pub(crate) position: u64,
}

/// One visitor's event stream: open it, then report every new serving counter it shows.
pub(crate) async fn follow_stream<E: StreamEvents>(request: StreamRequest, shared: Arc<E>) {
    let stream = match connect(&request.target, request.source).await {
        Ok(stream) => stream,
        Err(error) => return shared.fail(format!("connect: {}", error.kind())),
    };
    let (mut sender, connection) = match http1::handshake(TokioIo::new(stream)).await {
        Ok(parts) => parts,
        Err(error) => return shared.fail(format!("handshake: {error}")),
    };
    let mut connection = pin!(connection);
    let http_request =
        match hyper::Request::get(format!("/_anteroom/v1/rooms/{}/events", request.room))
            .header(hyper::header::HOST, request.target.address.to_string())
            .header(hyper::header::ACCEPT, "text/event-stream")
            .header("x-anteroom-ticket", &request.ticket)
            .body(Empty::<Bytes>::new())
        {
            Ok(http_request) => http_request,
            Err(error) => return shared.fail(format!("request: {error}")),
        };
    let response = tokio::select! {
        response = sender.send_request(http_request) => response,
        _ = &mut connection => return shared.fail("closed before answering".to_owned()),
    };
    let response = match response {
        Ok(response) => response,
        Err(error) => return shared.fail(format!("request: {error}")),
    };
    if response.status() != hyper::StatusCode::OK {
        return shared.fail(format!("status {}", response.status().as_u16()));
    }
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    let mut last_serving = 0;
    let mut connected = false;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = &mut connection => break,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let at = wall_clock();
        buffer.extend_from_slice(&data);
        while let Some(end) = find(&buffer, b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            match event_kind(&event) {
                Some(EventKind::Status) => {
                    if !connected {
                        connected = true;
                        shared.opened();
                    }
                    if let Some(serving) = number_field(&event, b"\"serving\":")
                        && serving > last_serving
                    {
                        last_serving = serving;
                        shared.observe(serving, at);
                    }
                }
                Some(EventKind::Admitted) => shared.observe_admitted(at),
                Some(EventKind::Other) | None => {}
            }
        }
    }
    if connected {
        shared.closed();
    } else {
        shared.fail(format!(
            "stream of {} ended before its first status",
            request.position
        ));
    }
}

enum EventKind {
    Status,
    Admitted,
    Other,
}

fn event_kind(event: &[u8]) -> Option<EventKind> {
    let line = event
        .split(|&byte| byte == b'\n')
        .find(|line| line.starts_with(b"event:"))?;
    let name = line[b"event:".len()..].trim_ascii();
    Some(match name {
        b"status" => EventKind::Status,
        b"admitted" => EventKind::Admitted,
        _ => EventKind::Other,
    })
}

/// The unsigned number after `key` in a JSON text, without parsing the rest.
fn number_field(text: &[u8], key: &[u8]) -> Option<u64> {
    let start = find(text, key)? + key.len();
    let digits: Vec<u8> = text[start..]
        .iter()
        .copied()
        .skip_while(u8::is_ascii_whitespace)
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A connection to the listener: plain TCP, or TLS over it.
pub(crate) trait Connection: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Connection for T {}

pub(crate) async fn connect(
    target: &Target,
    source: Option<IpAddr>,
) -> std::io::Result<Box<dyn Connection>> {
    let socket = TcpSocket::new_v4()?;
    if let Some(source) = source {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(target.address))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    stream.set_nodelay(true)?;
    match &target.tls {
        None => Ok(Box::new(stream)),
        Some(tls) => {
            let name = ServerName::IpAddress(target.address.ip().into());
            Ok(Box::new(tls.connect(name, stream).await?))
        }
    }
}

/// Where the event streams go: `--target`, `--ca-file`, `--room` of `sse-soak` and of the
/// follower processes it starts.
#[derive(Debug, Args)]
pub(crate) struct StreamTarget {
    /// The anteroom public listener, `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    #[arg(long)]
    pub(crate) target: String,
    /// For an `https://` target: the PEM certificate (or authority) its certificate is checked
    /// against, for the address 127.0.0.1.
    #[arg(long)]
    pub(crate) ca_file: Option<std::path::PathBuf>,
    /// The room the tickets wait in (for `sse-soak`: empty, `max_active = 1`,
    /// `admit_per_minute = 0`, a long `ticket_idle_ttl`).
    #[arg(long)]
    pub(crate) room: String,
}

/// Where the joins and streams go: the listener's address, and TLS for an `https://` target.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) address: SocketAddr,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Target {
    /// `target` (`http(s)://IP:PORT`), an `https://` one checked against `ca_file`.
    pub(crate) fn parse(target: &str, ca_file: Option<&std::path::Path>) -> anyhow::Result<Target> {
        let (rest, https) = match target.strip_prefix("https://") {
            Some(rest) => (rest, true),
            None => (
                target
                    .strip_prefix("http://")
                    .ok_or_else(|| anyhow!("--target must be http(s)://IP:PORT"))?,
                false,
            ),
        };
        let address = rest
            .trim_end_matches('/')
            .parse()
            .with_context(|| format!("--target {target}: expected http(s)://IP:PORT"))?;
        let tls = match (https, ca_file) {
            (false, _) => None,
            (true, None) => bail!("an https:// --target needs --ca-file"),
            (true, Some(path)) => Some(tls_connector(path)?),
        };
        Ok(Target { address, tls })
    }
}

/// A TLS client trusting the certificates of `path`, speaking HTTP/1.1.
fn tls_connector(path: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        roots.add(certificate.with_context(|| format!("{} is not PEM", path.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// `127.0.0.1 … 127.0.0.N` in turn; `None` (any) when N is 1 or less.
pub(crate) fn source_address(index: usize, addresses: u8) -> Option<IpAddr> {
    if addresses <= 1 {
        return None;
    }
    let host = 1 + (index % usize::from(addresses)) as u8;
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_serving_counter_of_a_status_event() {
        let event = b"event: status\ndata: {\"room\":\"r\",\"serving\": 1177,\"waiting\":9}\n\n";
        assert!(matches!(event_kind(event), Some(EventKind::Status)));
        assert_eq!(number_field(event, b"\"serving\":"), Some(1177));
        assert!(matches!(
            event_kind(b"retry: 3000\nevent: admitted\ndata: {}\n\n"),
            Some(EventKind::Admitted)
        ));
        assert!(event_kind(b": keep-alive\n\n").is_none());
    }

    #[test]
    fn rotates_source_addresses() {
        assert_eq!(source_address(0, 1), None);
        assert_eq!(source_address(5, 4), Some("127.0.0.2".parse().unwrap()));
    }
}
