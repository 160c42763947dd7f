//! TLS at the edge and to the origin (SPEC §14.5), through the real binary with certificates
//! made by the test (rcgen): curl over HTTPS with ALPN choosing h2 or HTTP/1.1, SNI choosing
//! between two certificates, a certificate replaced on disk served without a restart while an
//! open connection keeps working, `Secure` cookies under TLS, and an `https://` upstream signed
//! by a private authority (trusted through `ca_file`, refused without it).
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use support::slow_origin::{Fate, SLOW_BODY, SlowOrigin};
use support::{Server, Site, toml_string};

/// The name the node's default certificate is for.
const SHOP: &str = "shop.test";

/// The name of the second certificate, chosen by SNI.
const OTHER: &str = "other.test";

/// A certificate authority that signs leaves.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Authority {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf for `name`, written as `<stem>.pem` (leaf then authority) and `<stem>.key` in
    /// `dir`; its DER.
    fn leaf(&self, dir: &Path, stem: &str, name: &str) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let certificate = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        write_atomically(
            &dir.join(format!("{stem}.pem")),
            &format!("{}{}", certificate.pem(), self.pem),
        );
        write_atomically(&dir.join(format!("{stem}.key")), &key.serialize_pem());
        certificate.der().clone()
    }

    /// Writes the authority's certificate as `<stem>.pem` in `dir`.
    fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

/// Replaces a file in one step, as a certificate manager renewing it would.
fn write_atomically(path: &Path, text: &str) {
    let staging = path.with_extension("new");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(staging, path).unwrap();
}

/// A node serving TLS with a default certificate for [`SHOP`] and one for [`OTHER`], with
/// `extra` added to its config.
struct TlsNode {
    site: Site,
    server: Server,
    authority: Authority,
    authority_file: PathBuf,
    shop: CertificateDer<'static>,
    other: CertificateDer<'static>,
}

impl TlsNode {
    async fn start(extra: &str) -> TlsNode {
        let site = Site::new();
        let authority = Authority::new("anteroom test authority");
        let authority_file = authority.write(site.path(), "authority");
        let shop = authority.leaf(site.path(), "shop", SHOP);
        let other = authority.leaf(site.path(), "other", OTHER);
        let tls = format!(
            "[server.tls]\ncert_file = {}\nkey_file = {}\n\n[[server.tls.certificate]]\ncert_file = {}\nkey_file = {}\n\n{extra}",
            toml_string(&site.path().join("shop.pem")),
            toml_string(&site.path().join("shop.key")),
            toml_string(&site.path().join("other.pem")),
            toml_string(&site.path().join("other.key")),
        );
        site.write_config("EdDSA", &tls);
        let server = site.start();
        let node = TlsNode {
            site,
            server,
            authority,
            authority_file,
            shop,
            other,
        };
        node.wait_ready().await;
        node
    }

    fn port(&self) -> u16 {
        self.site.port
    }

    /// `https://shop.test:<port><path>`.
    fn url(&self, path: &str) -> String {
        format!("https://{SHOP}:{}{path}", self.port())
    }

    /// curl trusting the test authority, with `shop.test` resolved to loopback.
    fn curl(&self) -> Command {
        let mut curl = Command::new("curl");
        curl.args(["--silent", "--show-error", "--max-time", "10", "--cacert"])
            .arg(&self.authority_file)
            .arg("--resolve")
            .arg(format!("{SHOP}:{}:127.0.0.1", self.port()))
            .arg("--resolve")
            .arg(format!("{OTHER}:{}:127.0.0.1", self.port()));
        curl
    }

    /// Polls `healthz` over HTTPS until it answers; panics with the log if it never does.
    async fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let output = self
                .curl()
                .args(["--output", "/dev/null", "--write-out", "%{http_code}"])
                .arg(self.url("/_anteroom/healthz"))
                .output()
                .unwrap();
            if output.stdout == b"200" {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no HTTPS answer; log:\n{}",
                self.server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A TLS client trusting the test authority and offering `protocols` by ALPN.
    fn connector(&self, protocols: &[&[u8]]) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        let authority = CertificateDer::from_pem_slice(self.authority.pem.as_bytes());
        roots.add(authority.unwrap()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = protocols.iter().map(|protocol| protocol.to_vec()).collect();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// A TLS connection to the node naming `name` by SNI.
    async fn connect(&self, name: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port()))
            .await
            .unwrap();
        self.connector(&[b"http/1.1"])
            .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
            .await
            .unwrap()
    }
}

/// The certificate the node presented on `stream`.
fn presented(
    stream: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

/// Sends a keep-alive `GET path` on `stream` and reads one answer's status and body (the
/// answers here carry a `Content-Length`).
async fn get(
    stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    path: &str,
) -> (u16, String) {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {SHOP}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert!(read > 0, "the connection closed before the answer ended");
        answer.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap();
            if body.len() >= length {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return (status, body[..length].to_owned());
            }
        }
    }
}

#[tokio::test]
async fn alpn_chooses_h2_or_http_1_1_and_cookies_are_secure() {
    let node = TlsNode::start("[[room]]\nid = \"sale\"\n").await;
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let output = node
            .curl()
            .args([
                flag,
                "--output",
                "/dev/null",
                "--write-out",
                "%{http_version}",
            ])
            .arg(node.url("/_anteroom/healthz"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), version, "{flag}");
    }
    // The public URL says http (the harness's), yet the listener is TLS: cookies are Secure.
    let output = node
        .curl()
        .args(["--http2", "--include", "--request", "POST"])
        .arg(node.url("/_anteroom/v1/rooms/sale/join"))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&output.stdout).to_lowercase();
    assert!(answer.starts_with("http/2 200"), "{answer}");
    let cookies: Vec<&str> = answer
        .lines()
        .filter(|line| line.starts_with("set-cookie:"))
        .collect();
    assert!(!cookies.is_empty(), "{answer}");
    for cookie in cookies {
        assert!(cookie.contains("; secure"), "{cookie}");
    }
}

#[tokio::test]
async fn sni_chooses_the_certificate() {
    let node = TlsNode::start("").await;
    assert_eq!(presented(&node.connect(SHOP).await), node.shop);
    assert_eq!(presented(&node.connect(OTHER).await), node.other);
    // A name the node has no certificate for gets the default one (and the client refuses it).
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", node.port()))
        .await
        .unwrap();
    let refused = node
        .connector(&[b"http/1.1"])
        .connect(ServerName::try_from("unknown.test").unwrap(), tcp)
        .await;
    assert!(
        refused.is_err(),
        "a certificate for another name was accepted"
    );
}

#[tokio::test]
async fn a_certificate_replaced_on_disk_is_served_without_a_restart() {
    let node = TlsNode::start("").await;
    let mut kept = node.connect(SHOP).await;
    assert_eq!(get(&mut kept, "/_anteroom/healthz").await.0, 200);
    let renewed = node.authority.leaf(node.site.path(), "shop", SHOP);
    assert_ne!(renewed, node.shop);
    let started = Instant::now();
    loop {
        if presented(&node.connect(SHOP).await) == renewed {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the renewed certificate was not picked up; log:\n{}",
            node.server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The connection opened before the renewal is still served.
    assert_eq!(get(&mut kept, "/_anteroom/healthz").await.0, 200);
    assert_eq!(presented(&kept), node.shop);
}

/// An origin speaking HTTPS with a certificate for `name` signed by `authority`: answers
/// `origin over tls: <path>` to everything.
async fn https_origin(authority: &Authority, dir: &Path, name: &str) -> u16 {
    authority.leaf(dir, "origin", name);
    let chain = std::fs::read(dir.join("origin.pem")).unwrap();
    let key = std::fs::read(dir.join("origin.key")).unwrap();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain)
        .map(Result::unwrap)
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    // The answer names the scheme the node told the origin the visitor used.
    let app = axum::Router::new().fallback(
        |uri: axum::http::Uri, headers: axum::http::HeaderMap| async move {
            let proto = headers
                .get("x-forwarded-proto")
                .and_then(|value| value.to_str().ok())
                .unwrap_or("-")
                .to_owned();
            format!("origin over tls: {} ({proto})", uri.path())
        },
    );
    support::serve_tls(config, app).await
}

// The origin runs on this test's runtime while curl blocks one of its threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_reached_through_a_private_authority() {
    let origin_dir = tempfile::tempdir().unwrap();
    let private = Authority::new("origin authority");
    let private_file = private.write(origin_dir.path(), "private");
    let port = https_origin(&private, origin_dir.path(), "origin.internal").await;
    let upstream = |ca_file: &Path| {
        format!(
            "[upstream]\nurl = \"https://127.0.0.1:{port}\"\nserver_name = \"origin.internal\"\nca_file = {}\n",
            toml_string(ca_file)
        )
    };
    let node = TlsNode::start(&upstream(&private_file)).await;
    // Over HTTP/2 (hyper's server) and HTTP/1.1 (the own engine's lane) alike, the origin is
    // told the visitor came over TLS.
    for version in ["--http2", "--http1.1"] {
        let output = node
            .curl()
            .arg(version)
            .arg(node.url("/tickets/42"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "origin over tls: /tickets/42 (https)",
            "{version}: {}",
            node.server.log()
        );
    }
    // Trusting another authority, the node refuses the origin's certificate: 502, never the
    // origin's answer.
    let stranger = Authority::new("someone else");
    let stranger_file = stranger.write(origin_dir.path(), "stranger");
    let wary = TlsNode::start(&upstream(&stranger_file)).await;
    let output = wary
        .curl()
        .args(["--write-out", "\n%{http_code}"])
        .arg(wary.url("/tickets/42"))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(answer.ends_with("\n502"), "{answer}");
    assert!(!answer.contains("origin over tls"), "{answer}");
}

/// Over TLS, where only a read sees the client's close: a proxied request whose client sends
/// its next request while the first waits for the origin is answered, then the next (the byte
/// read while watching is kept); one whose client leaves, with a `close_notify` or without, is
/// dropped at the origin.
#[tokio::test]
async fn over_tls_a_client_that_leaves_is_not_answered_and_a_pipelined_request_is() {
    let origin = SlowOrigin::start(Duration::from_millis(1500)).await;
    let node = TlsNode::start(&format!("[upstream]\nurl = \"{}\"\n", origin.url())).await;

    let mut stream = node.connect(SHOP).await;
    let slow = format!("GET /slow HTTP/1.1\r\nHost: {SHOP}\r\n\r\n");
    stream.write_all(slow.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let healthz = format!("GET /_anteroom/healthz HTTP/1.1\r\nHost: {SHOP}\r\n\r\n");
    stream.write_all(healthz.as_bytes()).await.unwrap();
    // Both answers, in one read or more.
    let mut answers = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answers.ends_with(b"\r\n\r\nok") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert!(
            read > 0,
            "closed early: {}",
            String::from_utf8_lossy(&answers)
        );
        answers.extend_from_slice(&buffer[..read]);
    }
    let answers = String::from_utf8_lossy(&answers).into_owned();
    assert_eq!(answers.matches("HTTP/1.1 200 ").count(), 2, "{answers}");
    assert!(answers.find(SLOW_BODY).unwrap() < answers.rfind("HTTP/1.1 200 ").unwrap());
    // The connection goes on.
    assert_eq!(
        get(&mut stream, "/_anteroom/healthz").await,
        (200, "ok".to_owned())
    );

    for close_notify in [true, false] {
        let mut stream = node.connect(SHOP).await;
        stream
            .write_all(format!("GET /slow HTTP/1.1\r\nHost: {SHOP}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        if close_notify {
            stream.shutdown().await.unwrap();
        }
        drop(stream);
    }
    assert_eq!(
        origin.fates(3, Duration::from_secs(5)).await,
        vec![Fate::Answered, Fate::ClosedBefore, Fate::ClosedBefore],
        "log:\n{}",
        node.server.log()
    );
}
