//! Tests of the TLS building blocks with certificates made on the spot (rcgen) and real
//! handshakes over in-memory pipes.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::config::{CertificateFiles, TlsConfig, TlsVersion, UpstreamConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::{ClientConfig, ProtocolVersion, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

use super::{CertificateSet, TlsServer, TlsSetupError, upstream_tls};

/// A certificate authority that signs leaves.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn authority(name: &str) -> Authority {
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

/// A leaf for `names`: its chain (leaf, then the authority) and key as PEM, and its DER.
struct Leaf {
    chain_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
}

fn leaf(authority: &Authority, names: &[&str]) -> Leaf {
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let key = KeyPair::generate().unwrap();
    let certificate = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &authority.issuer)
        .unwrap();
    Leaf {
        chain_pem: format!("{}{}", certificate.pem(), authority.pem),
        key_pem: key.serialize_pem(),
        der: certificate.der().clone(),
    }
}

/// Writes `leaf` as `<stem>.pem` and `<stem>.key` in `dir`.
fn write_leaf(dir: &Path, stem: &str, leaf: &Leaf) -> CertificateFiles {
    let files = CertificateFiles {
        cert_file: dir.join(format!("{stem}.pem")),
        key_file: dir.join(format!("{stem}.key")),
    };
    std::fs::write(&files.cert_file, &leaf.chain_pem).unwrap();
    std::fs::write(&files.key_file, &leaf.key_pem).unwrap();
    files
}

/// A listener's files: a default certificate for `default.example`, one for `a.example` and
/// one for `*.b.example`, all signed by one authority.
struct Setup {
    dir: tempfile::TempDir,
    authority: Authority,
    default: Leaf,
    a: Leaf,
    b: Leaf,
    config: TlsConfig,
}

fn setup(min_version: TlsVersion) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let authority = authority("test authority");
    let default = leaf(&authority, &["default.example"]);
    let a = leaf(&authority, &["a.example"]);
    let b = leaf(&authority, &["*.b.example"]);
    let config = TlsConfig {
        default: write_leaf(dir.path(), "default", &default),
        certificates: vec![
            write_leaf(dir.path(), "a", &a),
            write_leaf(dir.path(), "b", &b),
        ],
        min_version,
    };
    Setup {
        dir,
        authority,
        default,
        a,
        b,
        config,
    }
}

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
const TLS12_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];

fn client_config(
    authority_pem: &str,
    versions: &[&'static SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(authority_pem.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|name| name.to_vec()).collect();
    Arc::new(config)
}

type Connection = (
    client::TlsStream<DuplexStream>,
    server::TlsStream<DuplexStream>,
);

/// A handshake of `connector` (checking the certificate for `name`) with `acceptor`.
async fn handshake(
    acceptor: &TlsAcceptor,
    connector: &TlsConnector,
    name: &str,
) -> std::io::Result<Connection> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let both = async {
        tokio::join!(
            connector.connect(name, client_io),
            acceptor.accept(server_io)
        )
    };
    let (client, server) = tokio::time::timeout(Duration::from_secs(10), both)
        .await
        .expect("the handshake ends");
    Ok((client?, server?))
}

fn served_certificate(connection: &Connection) -> CertificateDer<'static> {
    let certificates = connection.0.get_ref().1.peer_certificates().unwrap();
    certificates[0].clone().into_owned()
}

/// Sends a few bytes each way over an established connection.
async fn exchange(connection: &mut Connection) {
    let (client, server) = connection;
    client.write_all(b"ping").await.unwrap();
    client.flush().await.unwrap();
    let mut buffer = [0u8; 4];
    server.read_exact(&mut buffer).await.unwrap();
    assert_eq!(&buffer, b"ping");
    server.write_all(b"pong").await.unwrap();
    server.flush().await.unwrap();
    client.read_exact(&mut buffer).await.unwrap();
    assert_eq!(&buffer, b"pong");
}

#[test]
fn the_sni_name_picks_the_certificate_and_anything_else_gets_the_default() {
    let setup = setup(TlsVersion::Tls12);
    let provider = rustls::crypto::ring::default_provider();
    let set = CertificateSet::load(&setup.config, &provider).unwrap();
    let check = |name: Option<&str>, expected: &Leaf| {
        assert_eq!(set.choose(name).cert[0], expected.der, "for {name:?}");
    };
    check(Some("a.example"), &setup.a);
    check(Some("A.Example."), &setup.a);
    check(Some("x.b.example"), &setup.b);
    // A wildcard covers exactly one label.
    check(Some("b.example"), &setup.default);
    check(Some("y.x.b.example"), &setup.default);
    check(Some("unknown.example"), &setup.default);
    check(Some("default.example"), &setup.default);
    check(None, &setup.default);
}

#[tokio::test]
async fn handshakes_serve_the_sni_certificate_and_prefer_h2() {
    let setup = setup(TlsVersion::Tls12);
    let acceptor = TlsServer::new(&setup.config).unwrap().acceptor();
    let both_protocols = client_config(&setup.authority.pem, BOTH, &[b"http/1.1", b"h2"]);
    let connector = TlsConnector::from(both_protocols.clone());

    let connection = handshake(&acceptor, &connector, "a.example").await.unwrap();
    assert_eq!(served_certificate(&connection), setup.a.der);
    assert_eq!(connection.0.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(connection.1.get_ref().1.server_name(), Some("a.example"));

    let connection = handshake(&acceptor, &connector, "shop.b.example")
        .await
        .unwrap();
    assert_eq!(served_certificate(&connection), setup.b.der);

    let http1 = TlsConnector::from(client_config(&setup.authority.pem, BOTH, &[b"http/1.1"]));
    let connection = handshake(&acceptor, &http1, "a.example").await.unwrap();
    assert_eq!(
        connection.0.get_ref().1.alpn_protocol(),
        Some(&b"http/1.1"[..])
    );

    // Without SNI the default certificate answers (the client still checks it for its name).
    let mut no_sni = (*both_protocols).clone();
    no_sni.enable_sni = false;
    let no_sni = TlsConnector::from(Arc::new(no_sni));
    let connection = handshake(&acceptor, &no_sni, "default.example")
        .await
        .unwrap();
    assert_eq!(served_certificate(&connection), setup.default.der);
    assert_eq!(connection.1.get_ref().1.server_name(), None);
}

#[tokio::test]
async fn tls12_clients_are_served_unless_the_minimum_is_13() {
    let setup = setup(TlsVersion::Tls12);
    let tls12 = TlsConnector::from(client_config(&setup.authority.pem, TLS12_ONLY, &[b"h2"]));
    let acceptor = TlsServer::new(&setup.config).unwrap().acceptor();
    let connection = handshake(&acceptor, &tls12, "a.example").await.unwrap();
    assert_eq!(
        connection.0.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );
    assert_eq!(connection.0.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let strict = TlsConfig {
        min_version: TlsVersion::Tls13,
        ..setup.config.clone()
    };
    let acceptor = TlsServer::new(&strict).unwrap().acceptor();
    assert!(handshake(&acceptor, &tls12, "a.example").await.is_err());
    let modern = TlsConnector::from(client_config(&setup.authority.pem, BOTH, &[]));
    let connection = handshake(&acceptor, &modern, "a.example").await.unwrap();
    assert_eq!(
        connection.0.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );
}

#[tokio::test]
async fn a_reload_serves_new_handshakes_and_leaves_open_connections_alone() {
    let setup = setup(TlsVersion::Tls12);
    let tls = TlsServer::new(&setup.config).unwrap();
    let acceptor = tls.acceptor();
    let connector = TlsConnector::from(client_config(&setup.authority.pem, BOTH, &[]));
    let mut before = handshake(&acceptor, &connector, "a.example").await.unwrap();
    assert_eq!(tls.reload_if_changed().map(|result| result.is_ok()), None);

    let renewed = leaf(&setup.authority, &["a.example", "www.a.example"]);
    write_leaf(setup.dir.path(), "a", &renewed);
    assert!(matches!(tls.reload_if_changed(), Some(Ok(()))));
    assert!(
        tls.reload_if_changed().is_none(),
        "reloaded once per change"
    );

    let after = handshake(&acceptor, &connector, "www.a.example")
        .await
        .unwrap();
    assert_eq!(served_certificate(&after), renewed.der);
    assert_eq!(served_certificate(&before), setup.a.der);
    exchange(&mut before).await;

    // A reload on demand (SIGHUP) with unchanged files loads the same certificates. A fresh
    // client: one that resumes its session is not sent a certificate at all.
    tls.reload().unwrap();
    let fresh = TlsConnector::from(client_config(&setup.authority.pem, BOTH, &[]));
    let again = handshake(&acceptor, &fresh, "a.example").await.unwrap();
    assert_eq!(served_certificate(&again), renewed.der);
}

#[tokio::test]
async fn a_bad_file_keeps_the_served_certificates_and_is_named() {
    let setup = setup(TlsVersion::Tls12);
    let tls = TlsServer::new(&setup.config).unwrap();
    let acceptor = tls.acceptor();
    let connector = TlsConnector::from(client_config(&setup.authority.pem, BOTH, &[]));
    let a_key = setup.config.certificates[0].key_file.clone();
    let a_cert = setup.config.certificates[0].cert_file.clone();
    let check_refused = |expected: &str, path: &Path| {
        let error = tls.reload().unwrap_err();
        let message = error.to_string();
        assert!(message.contains(expected), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
    };

    // Another certificate's key: the pair does not belong together.
    std::fs::write(&a_key, &setup.b.key_pem).unwrap();
    check_refused("does not match the certificate", &a_key);
    std::fs::write(&a_key, "not a key").unwrap();
    check_refused("holds no PEM private key", &a_key);
    std::fs::write(&a_cert, "").unwrap();
    check_refused("holds no PEM certificate", &a_cert);
    std::fs::remove_file(&a_cert).unwrap();
    check_refused("cannot read", &a_cert);
    // A change the watcher sees is reported once.
    std::fs::write(&a_cert, "still not a certificate").unwrap();
    assert!(matches!(
        tls.reload_if_changed(),
        Some(Err(TlsSetupError::NoCertificate { .. }))
    ));
    assert!(tls.reload_if_changed().is_none());

    let connection = handshake(&acceptor, &connector, "a.example").await.unwrap();
    assert_eq!(served_certificate(&connection), setup.a.der);
}

#[test]
fn loading_refuses_unusable_files() {
    let setup = setup(TlsVersion::Tls12);
    let dir = setup.dir.path();
    let missing = TlsConfig {
        default: CertificateFiles {
            cert_file: dir.join("missing.pem"),
            key_file: setup.config.default.key_file.clone(),
        },
        ..setup.config.clone()
    };
    assert!(matches!(
        TlsServer::new(&missing),
        Err(TlsSetupError::Read { path, .. }) if path == dir.join("missing.pem")
    ));
    // An SNI certificate for an address only could never be chosen.
    let address_only = leaf(&setup.authority, &["127.0.0.1"]);
    let mut unreachable = setup.config.clone();
    unreachable
        .certificates
        .push(write_leaf(dir, "address", &address_only));
    let error = TlsServer::new(&unreachable).unwrap_err();
    assert!(matches!(error, TlsSetupError::NoDnsName { .. }), "{error}");
    assert!(error.to_string().contains("address.pem"), "{error}");
}

/// An upstream config for `https://127.0.0.1:8443` checked with `ca_file` for `server_name`.
fn upstream(ca_file: Option<PathBuf>, server_name: Option<&str>) -> UpstreamConfig {
    let mut config = UpstreamConfig::new("https://127.0.0.1:8443");
    config.ca_file = ca_file;
    config.server_name = server_name.map(str::to_owned);
    config
}

#[tokio::test]
async fn the_upstream_connector_trusts_its_ca_file_only() {
    let setup = setup(TlsVersion::Tls12);
    let site = TlsServer::new(&setup.config).unwrap().acceptor();
    let own_ca = setup.dir.path().join("ca.pem");
    std::fs::write(&own_ca, &setup.authority.pem).unwrap();
    let other_ca = setup.dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, authority("another authority").pem).unwrap();

    let tls = upstream_tls(&upstream(Some(own_ca.clone()), Some("a.example"))).unwrap();
    let (connector, name) = (tls.connector(), tls.server_name());
    assert_eq!(name, ServerName::try_from("a.example").unwrap());
    let name = name.to_str().into_owned();
    let connection = handshake(&site, &connector, &name).await.unwrap();
    assert_eq!(served_certificate(&connection), setup.a.der);
    // The upstream clients speak HTTP/1.1, whatever the site offers.
    assert_eq!(
        connection.0.get_ref().1.alpn_protocol(),
        Some(&b"http/1.1"[..])
    );

    let tls = upstream_tls(&upstream(Some(other_ca), Some("a.example"))).unwrap();
    let (stranger, name) = (tls.connector(), tls.server_name());
    let name = name.to_str().into_owned();
    assert!(handshake(&site, &stranger, &name).await.is_err());

    // Without server_name the URL's host is checked, which no certificate here is for.
    let tls = upstream_tls(&upstream(Some(own_ca), None)).unwrap();
    let (connector, name) = (tls.connector(), tls.server_name());
    assert_eq!(name, ServerName::try_from("127.0.0.1").unwrap());
    let name = name.to_str().into_owned();
    assert!(handshake(&site, &connector, &name).await.is_err());
}

/// Why `upstream_tls` refuses `config`.
fn refusal(config: &UpstreamConfig) -> TlsSetupError {
    match upstream_tls(config) {
        Ok(_) => panic!("{} was accepted", config.url),
        Err(error) => error,
    }
}

#[test]
fn the_upstream_connector_refuses_what_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let error = refusal(&upstream(Some(empty), None));
    assert!(
        matches!(error, TlsSetupError::NoCertificate { .. }),
        "{error}"
    );
    let error = refusal(&upstream(Some(dir.path().join("none.pem")), None));
    assert!(matches!(error, TlsSetupError::Read { .. }), "{error}");
    let error = refusal(&UpstreamConfig::new("http://127.0.0.1:3000"));
    assert!(matches!(error, TlsSetupError::NotHttps { .. }), "{error}");
}

#[test]
fn a_tls_listener_makes_the_cookies_secure_whatever_the_public_url() {
    use anteroom_core::{Clock, ManualClock, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(0)));
    let state = |public_url: &str, tls: bool| {
        let keys = anteroom_token::KeySet::load_or_generate(
            dir.path(),
            anteroom_token::SigningAlgorithm::EdDsa,
            0,
        )
        .unwrap();
        let settings = anteroom_api::PublicSettings {
            public_url: public_url.to_owned(),
            issuer: public_url.to_owned(),
            service_keys: Vec::new(),
            trusted_proxies: Vec::new(),
        };
        let options = anteroom_api::NodeOptions {
            tls,
            ..anteroom_api::NodeOptions::default()
        };
        let store = Arc::new(anteroom_store::MemoryStore::new(clock.clone()));
        anteroom_api::AppState::with_options(store, keys, clock.clone(), settings, options)
    };
    assert!(state("http://queue.example", true).cookies().secure);
    assert!(state("https://queue.example", false).cookies().secure);
    assert!(!state("http://queue.example", false).cookies().secure);
}
