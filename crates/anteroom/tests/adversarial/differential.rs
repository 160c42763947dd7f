//! Both HTTP engines read a request the same way (SPEC §14.4): the same corpus of request
//! bytes (valid, edge and malformed, with every smuggling pattern this suite knows) goes to a
//! node served by its own HTTP/1 loop and to one served by hyper alone, in front of one
//! recording origin. Each case must end the same on both: the same answers, and the same
//! requests seen by the origin (or none, when both refuse). A request two engines frame
//! differently is how a smuggled request gets past one of them.
//!
//! Cases whose outcome the contract fixes (every smuggling pattern is refused with 400 and
//! reaches nobody) are checked against that outcome too, not only against each other.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::routing::any;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::on_engine;
use super::support::{Server, Site, client};

/// What the origin saw of one request: method, target, fields (sorted, the forwarding ones
/// included: both engines add the same) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    target: String,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

/// An origin that records every request and answers `seen <n>`.
struct RecordingOrigin {
    address: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RecordingOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RecordingOrigin {
    async fn start() -> RecordingOrigin {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .fallback(any(record))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordingOrigin {
            address,
            seen,
            task,
        }
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

async fn record(State(seen): State<Arc<Mutex<Vec<Seen>>>>, request: Request) -> String {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_else(|_| Bytes::from_static(b"<body failed>"));
    let mut fields: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (
                name.as_str().to_owned(),
                fresh_id_shape(name.as_str(), value),
            )
        })
        .collect();
    fields.sort();
    let mut seen = seen.lock().unwrap();
    seen.push(Seen {
        method: parts.method.to_string(),
        target: parts.uri.to_string(),
        fields,
        body: body.to_vec(),
    });
    format!("seen {}", seen.len())
}

/// The request id and trace context each node makes afresh per request, by their shape: the
/// engines must agree on what reaches the origin, not on random numbers.
fn fresh_id_shape(name: &str, value: String) -> String {
    let hex = |text: &str, length: usize| {
        text.len() == length && text.bytes().all(|byte| byte.is_ascii_hexdigit())
    };
    match name {
        "x-request-id" if hex(&value, 32) => "<32 hex digits>".to_owned(),
        "traceparent" => match value.split('-').collect::<Vec<_>>()[..] {
            ["00", trace, parent, flags] if hex(trace, 32) && hex(parent, 16) => {
                format!("00-<trace id>-<parent id>-{flags}")
            }
            _ => value,
        },
        _ => value,
    }
}

/// A node in front of `origin`, served by `engine`.
async fn node(origin: &RecordingOrigin, engine: &str) -> (Site, Server) {
    let site = Site::new();
    let path = site.write_config(
        "EdDSA",
        &format!("[upstream]\nurl = \"http://{}\"\n", origin.address),
    );
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, on_engine(&text, engine)).unwrap();
    let mut server = site.start();
    server.wait_ready(&client()).await;
    (site, server)
}

/// How one case ended on one engine: the status of each answer read, and what the origin saw.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    statuses: Vec<u16>,
    seen: Vec<Seen>,
}

impl Outcome {
    /// A short description: the statuses, then each request the origin saw with its fields
    /// cut to 40 characters.
    fn summary(&self) -> String {
        let seen: Vec<String> = self
            .seen
            .iter()
            .map(|seen| {
                let fields: Vec<String> = seen
                    .fields
                    .iter()
                    .map(|(name, value)| format!("{name}={}", &value[..value.len().min(40)]))
                    .collect();
                format!(
                    "{} {} [{}] body {:?}",
                    seen.method,
                    seen.target,
                    fields.join(" "),
                    String::from_utf8_lossy(&seen.body[..seen.body.len().min(40)])
                )
            })
            .collect();
        format!("{:?} {seen:?}", self.statuses)
    }

    /// Refused: answered 400 (or 431, or closed without an answer) and nothing reached the
    /// origin.
    fn refused(&self) -> bool {
        self.seen.is_empty()
            && self.statuses.len() <= 1
            && self
                .statuses
                .iter()
                .all(|status| matches!(status, 400 | 431))
    }
}

/// Sends `bytes` on a fresh connection and reads until the node closes it (or 2 s of quiet).
async fn send(address: &str, origin: &RecordingOrigin, bytes: &[u8]) -> Outcome {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) | Err(_) => break,
            Ok(Ok(read)) => answer.extend_from_slice(&buffer[..read]),
        }
    }
    // Give the origin's handler time to record a request still in flight.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Outcome {
        statuses: statuses(&answer),
        seen: origin.take(),
    }
}

/// The status of every answer head in `answer` (each starts a line with `HTTP/1.x NNN`).
fn statuses(answer: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(answer);
    let mut statuses = Vec::new();
    let mut rest = text.as_ref();
    while let Some(at) = rest.find("HTTP/1.") {
        let line = &rest[at..];
        let at_line_start = at == 0 || rest[..at].ends_with('\n');
        if at_line_start && let Some(code) = line.get(9..12).and_then(|code| code.parse().ok()) {
            statuses.push(code);
        }
        rest = &line[7..];
    }
    statuses
}

/// What the contract says about a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Whatever it is, both engines agree.
    Same,
    /// Both refuse it with 400 (or 431), and the origin sees nothing.
    Refused,
    /// Both serve it: every request reaches the origin.
    Served(usize),
    /// Both agree, and no request to `/smuggled` reaches the origin.
    NothingSmuggled,
}

/// The corpus: a name, the bytes, and what the contract says.
fn corpus() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let mut cases: Vec<(&'static str, Vec<u8>, Expect)> = vec![
        ("plain get", b"GET /a?b=c HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Served(1)),
        ("post with a length", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".to_vec(), Expect::Served(1)),
        ("chunked post", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n".to_vec(), Expect::Served(1)),
        ("chunked, any case", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(), Expect::Served(1)),
        ("two pipelined requests", b"GET /one HTTP/1.1\r\nHost: shop\r\n\r\nGET /two HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Served(2)),
        ("http/1.0 without a host", b"GET /old HTTP/1.0\r\n\r\n".to_vec(), Expect::Served(1)),
        ("lower-case method token", b"get /a HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Same),
        ("expect 100-continue", b"POST /form HTTP/1.1\r\nHost: shop\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc".to_vec(), Expect::Same),
        ("absolute-form target", b"GET http://elsewhere/a HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Same),
        ("head request", b"HEAD /a HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Served(1)),
        ("empty post", b"POST /form HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Served(1)),
        ("connection names a field", b"GET /a HTTP/1.1\r\nHost: shop\r\nConnection: x-secret\r\nConnection: close, x-other\r\nX-Secret: 1\r\nX-Other: 2\r\n\r\n".to_vec(), Expect::Served(1)),
        // Smuggling: framing two servers may read differently.
        ("length and chunked", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
        ("chunked and length", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
        ("two different lengths", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabcGET /smuggled HTTP/1.1\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
        ("a length list", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 3, 30\r\n\r\nabc".to_vec(), Expect::Refused),
        ("a signed length", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: +3\r\n\r\nabc".to_vec(), Expect::Refused),
        ("gzip then chunked", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("chunked twice", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("two coding lines", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("identity coding", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: identity\r\n\r\nabc".to_vec(), Expect::Refused),
        ("chunked not last", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("coding with a space in the name", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("coding split by a tab", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding:\tchunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("obs-fold", b"GET /a HTTP/1.1\r\nHost: shop\r\nX-Folded: a\r\n b\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("folded coding", b"POST /form HTTP/1.1\r\nHost: shop\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc".to_vec(), Expect::Refused),
        ("bare cr in a value", b"GET /a HTTP/1.1\r\nHost: shop\r\nX-A: a\rb\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("bare lf line ends", b"GET /a HTTP/1.1\nHost: shop\nConnection: close\n\n".to_vec(), Expect::Same),
        ("nul in a value", b"GET /a HTTP/1.1\r\nHost: shop\r\nX-A: a\0b\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("control character in a value", b"GET /a HTTP/1.1\r\nHost: shop\r\nX-A: a\x01b\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("no host", b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("two hosts", b"GET /a HTTP/1.1\r\nHost: shop\r\nHost: admin\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("space before the colon", b"GET /a HTTP/1.1\r\nHost: shop\r\nX-A : 1\r\nConnection: close\r\n\r\n".to_vec(), Expect::Refused),
        ("bad chunk size", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n".to_vec(), Expect::Same),
        ("chunk size in 0x form", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n".to_vec(), Expect::Same),
        ("chunk without its crlf", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabcX0\r\n\r\n".to_vec(), Expect::Same),
        ("a body longer than its length", b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 3\r\n\r\nabcGET /second HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n".to_vec(), Expect::Served(2)),
        // What follows an upgrade or `CONNECT` neither engine switches to, or a chunked body
        // hyper reads and the codec does not, is never read unchecked.
        ("smuggling after an upgrade not taken", b"GET /a HTTP/1.1\r\nHost: shop\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\nPOST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::Served(1)),
        ("smuggling after a connect", b"CONNECT shop:443 HTTP/1.1\r\nHost: shop:443\r\n\r\nPOST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::Refused),
        ("smuggling after a padded chunk size", b"POST /form HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\na\r\n0\r\n\r\nPOST /smuggled HTTP/1.1\r\nHost: shop\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), Expect::NothingSmuggled),
        ("not http", b"HELLO\r\n\r\n".to_vec(), Expect::Refused),
        ("http/2.0 in an http/1 line", b"GET / HTTP/2.0\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
        ("http/1.2", b"GET / HTTP/1.2\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
        ("space in the target", b"GET /a b HTTP/1.1\r\nHost: shop\r\n\r\n".to_vec(), Expect::Refused),
    ];
    let many_fields: String = (0..70).map(|n| format!("X-F{n}: v\r\n")).collect();
    cases.push((
        "too many fields",
        format!("GET /a HTTP/1.1\r\nHost: shop\r\n{many_fields}\r\n").into_bytes(),
        Expect::Refused,
    ));
    cases.push((
        "a head over 16 KiB",
        format!(
            "GET /a HTTP/1.1\r\nHost: shop\r\nX-Long: {}\r\n\r\n",
            "v".repeat(20 * 1024)
        )
        .into_bytes(),
        Expect::Refused,
    ));
    cases
}

#[tokio::test]
async fn both_engines_read_every_request_the_same_way() {
    let origin = RecordingOrigin::start().await;
    let (own_site, _own) = node(&origin, "own").await;
    let (hyper_site, _hyper) = node(&origin, "hyper").await;
    let own_address = format!("127.0.0.1:{}", own_site.port);
    let hyper_address = format!("127.0.0.1:{}", hyper_site.port);
    let mut failures = Vec::new();
    for (name, bytes, expect) in corpus() {
        let own = send(&own_address, &origin, &bytes).await;
        let hyper = send(&hyper_address, &origin, &bytes).await;
        let agreed = own == hyper;
        let as_expected = match expect {
            Expect::Same => true,
            Expect::Refused => own.refused() && hyper.refused(),
            Expect::NothingSmuggled => own.seen.iter().all(|seen| seen.target != "/smuggled"),
            Expect::Served(count) => {
                own.seen.len() == count && own.statuses.iter().all(|status| *status == 200)
            }
        };
        if !agreed || !as_expected {
            failures.push(format!(
                "{name} (expected {expect:?}):\n  own:   {}\n  hyper: {}",
                own.summary(),
                hyper.summary()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
