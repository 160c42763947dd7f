//! TLS (SPEC §14.5): the public listener's server side, and the client side towards an
//! `https://` upstream.
//!
//! The server side is a [`TlsServer`]: one `rustls` server configuration (ring, TLS 1.2 and 1.3
//! or 1.3 only, ALPN `h2` then `http/1.1`) whose certificate is picked per handshake by a
//! resolver. The resolver answers the SNI name with the `[[server.tls.certificate]]` valid for
//! it (by the DNS names of its subjectAltName, `*.example.com` covering one label), and
//! anything else with the default `[server.tls]` certificate. Its certificates sit behind one
//! lock as a whole set: [`TlsServer::reload`] loads every file again and swaps the set in one
//! step, or keeps the old set when any file is missing or wrong. A handshake takes the set at
//! its start, so open connections never notice a reload and the one acceptor from
//! [`TlsServer::acceptor`] stays valid for the life of the process.
//! [`follow_certificate_files`] reloads when a file's size or modification time changes (a
//! renewal writing new files); the binary also reloads on SIGHUP.
//!
//! The client side, [`upstream_tls`], trusts the `[upstream] ca_file` bundle, or the system's
//! certificate authorities without one, and checks the site's certificate against
//! `server_name` or the URL's host.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anteroom_core::config::{CertificateFiles, TlsConfig, TlsVersion, UpstreamConfig};
use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How often [`follow_certificate_files`] looks at the certificate files.
pub const CERTIFICATE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The ALPN protocols the public listener offers, in order of preference.
const SERVER_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why TLS cannot be set up; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid PEM.
    #[error("{} is not a valid PEM file: {reason}", .path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM reader found wrong.
        reason: String,
    },
    /// A certificate file holds no certificate.
    #[error("{} holds no PEM certificate (\"BEGIN CERTIFICATE\")", .path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A key file holds no private key.
    #[error("{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", .path.display())]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// The private key is of a kind rustls cannot sign with.
    #[error("the private key in {} cannot be used: {reason}", .path.display())]
    UnusableKey {
        /// The key file.
        path: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// The private key is not the key of the chain's first certificate.
    #[error("the private key in {} does not match the certificate in {}", .key_file.display(), .cert_file.display())]
    KeyMismatch {
        /// The certificate file.
        cert_file: PathBuf,
        /// The key file.
        key_file: PathBuf,
    },
    /// The first certificate of a file cannot be parsed.
    #[error("the first certificate in {} cannot be parsed: {reason}", .path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// An SNI certificate names no host, so no client could ever be served it.
    #[error("the certificate in {} has no DNS name in its subjectAltName, so no SNI name selects it", .path.display())]
    NoDnsName {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of the CA file cannot be trusted as a root.
    #[error("a certificate in {} cannot be trusted as a root: {reason}", .path.display())]
    BadRoot {
        /// The CA file.
        path: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// No `ca_file`, and the system has no certificate authority to trust.
    #[error(
        "no certificate authority found on this system to check the upstream's certificate; set [upstream] ca_file"
    )]
    NoSystemRoots,
    /// The upstream's name cannot be checked in a certificate.
    #[error("{name:?} is not a DNS name or IP address a certificate can be checked against")]
    ServerName {
        /// The name.
        name: String,
    },
    /// The upstream is not reached over TLS.
    #[error("the upstream {url} is not https://")]
    NotHttps {
        /// The upstream's URL.
        url: String,
    },
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The public listener's TLS: one acceptor whose certificates can be reloaded. Cheap to clone;
/// clones share the certificates.
#[derive(Clone)]
pub struct TlsServer {
    inner: Arc<ServerInner>,
}

struct ServerInner {
    files: TlsConfig,
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertificateResolver>,
    config: Arc<rustls::ServerConfig>,
    /// The files' sizes and modification times when they were last loaded (or failed to).
    seen: Mutex<Vec<FileStamp>>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("files", &self.inner.files)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Loads every certificate and key of `files`; any missing or wrong file is an error.
    pub fn new(files: &TlsConfig) -> Result<TlsServer, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let seen = file_stamps(files);
        let set = CertificateSet::load(files, &provider)?;
        let resolver = Arc::new(CertificateResolver {
            set: RwLock::new(Arc::new(set)),
        });
        let versions: &[&rustls::SupportedProtocolVersion] = match files.min_version {
            TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = SERVER_ALPN.iter().map(|name| name.to_vec()).collect();
        Ok(TlsServer {
            inner: Arc::new(ServerInner {
                files: files.clone(),
                provider,
                resolver,
                config: Arc::new(config),
                seen: Mutex::new(seen),
            }),
        })
    }

    /// The acceptor of the public listener: `acceptor.accept(tcp_stream).await` completes the
    /// handshake. It keeps working across reloads (each handshake takes the current
    /// certificates).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.inner.config.clone())
    }

    /// The server configuration behind [`acceptor`](Self::acceptor).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.inner.config.clone()
    }

    /// Loads every certificate and key file again and, when all of them are good, serves the
    /// new set to every following handshake. On an error the previous set stays in use.
    /// Reads files: call it off the async threads (`spawn_blocking`).
    pub fn reload(&self) -> Result<(), TlsSetupError> {
        self.reload_with(file_stamps(&self.inner.files))
    }

    /// [`reload`](Self::reload) when a file's size or modification time changed since the last
    /// load; `None` when none did.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsSetupError>> {
        let stamps = file_stamps(&self.inner.files);
        if *self.inner.seen.lock() == stamps {
            return None;
        }
        Some(self.reload_with(stamps))
    }

    /// Loads the set; `stamps` were taken before reading, so a change during the read is seen
    /// by the next look. They are kept whatever the outcome: a bad file is reported once, not
    /// at every look, and the next change tries again.
    fn reload_with(&self, stamps: Vec<FileStamp>) -> Result<(), TlsSetupError> {
        *self.inner.seen.lock() = stamps;
        let set = CertificateSet::load(&self.inner.files, &self.inner.provider)?;
        *self.inner.resolver.set.write() = Arc::new(set);
        Ok(())
    }
}

/// Looks at the certificate files every `interval` and reloads them when one changed, logging
/// each reload and each failure once. Runs until dropped.
pub async fn follow_certificate_files(tls: TlsServer, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let server = tls.clone();
        match tokio::task::spawn_blocking(move || server.reload_if_changed()).await {
            Ok(None) => {}
            Ok(Some(Ok(()))) => {
                tracing::info!("TLS certificates reloaded: their files changed");
            }
            Ok(Some(Err(error))) => {
                tracing::error!(%error, "TLS certificates not reloaded; the previous ones are still served");
            }
            Err(error) => tracing::warn!(%error, "TLS certificate check did not finish"),
        }
    }
}

/// How an `https://` upstream is spoken to: the client configuration (its trusted
/// authorities, ALPN `http/1.1` only: the upstream clients speak HTTP/1.1 over TLS) and the
/// name its certificate is checked against. Cheap to clone.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

impl UpstreamTls {
    /// A connector for one more connection.
    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }

    /// The name the certificate must be valid for, also sent as SNI.
    pub(crate) fn server_name(&self) -> ServerName<'static> {
        self.server_name.clone()
    }

    /// The client configuration, for hyper's connector.
    pub(crate) fn client_config(&self) -> &rustls::ClientConfig {
        &self.config
    }
}

/// How an `https://` upstream is spoken to (see [`UpstreamTls`]). Reads `ca_file` (or the
/// system's certificate store): call it once at start, not per connection.
pub fn upstream_tls(config: &UpstreamConfig) -> Result<UpstreamTls, TlsSetupError> {
    if !config.is_https() {
        return Err(TlsSetupError::NotHttps {
            url: config.url.clone(),
        });
    }
    let name = config
        .server_name
        .clone()
        .unwrap_or_else(|| config.host().to_owned());
    let server_name =
        ServerName::try_from(name.clone()).map_err(|_| TlsSetupError::ServerName { name })?;
    let roots = match &config.ca_file {
        Some(path) => roots_from_file(path)?,
        None => system_roots()?,
    };
    let mut client = client_builder()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(UpstreamTls {
        config: Arc::new(client),
        server_name,
    })
}

/// A client configuration trusting nobody: what hyper's connector holds for a plain
/// `http://` upstream, where it never speaks TLS.
pub(crate) fn plain_upstream_config() -> Result<rustls::ClientConfig, TlsSetupError> {
    Ok(client_builder()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

fn client_builder()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?)
}

/// Every certificate of a PEM bundle, as trusted roots; at least one.
fn roots_from_file(path: &Path) -> Result<rustls::RootCertStore, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in read_certificates(path)? {
        roots
            .add(certificate)
            .map_err(|error| TlsSetupError::BadRoot {
                path: path.to_owned(),
                reason: error.to_string(),
            })?;
    }
    Ok(roots)
}

fn system_roots() -> Result<rustls::RootCertStore, TlsSetupError> {
    let system = rustls_native_certs::load_native_certs();
    for error in &system.errors {
        tracing::debug!(%error, "a system certificate authority did not load");
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(system.certs);
    if roots.is_empty() {
        return Err(TlsSetupError::NoSystemRoots);
    }
    Ok(roots)
}

/// Picks each handshake's certificate from the current set.
#[derive(Debug)]
struct CertificateResolver {
    /// Replaced whole by a reload; a handshake clones the `Arc` and lets go of the lock.
    set: RwLock<Arc<CertificateSet>>,
}

impl ResolvesServerCert for CertificateResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let set = self.set.read().clone();
        Some(set.choose(client_hello.server_name()))
    }
}

/// The certificates of one load: the default, and the SNI ones by the names they are for.
#[derive(Debug)]
struct CertificateSet {
    default: Arc<CertifiedKey>,
    /// Exact names, lower case.
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` as `example.com`: covers any one label in front of it.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl CertificateSet {
    fn load(files: &TlsConfig, provider: &CryptoProvider) -> Result<CertificateSet, TlsSetupError> {
        let default = load_certified_key(&files.default, provider)?;
        let mut set = CertificateSet {
            default: Arc::new(default),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        for pair in &files.certificates {
            let key = Arc::new(load_certified_key(pair, provider)?);
            let names = dns_names(&key, &pair.cert_file)?;
            if names.is_empty() {
                return Err(TlsSetupError::NoDnsName {
                    path: pair.cert_file.clone(),
                });
            }
            for name in names {
                // The first certificate listed for a name serves it.
                let slot = match name.strip_prefix("*.") {
                    Some(parent) => set.wildcard.entry(parent.to_owned()),
                    None => set.exact.entry(name),
                };
                slot.or_insert_with(|| key.clone());
            }
        }
        Ok(set)
    }

    /// The certificate for an SNI name: an exact name, else a wildcard over its parent, else
    /// the default.
    fn choose(&self, server_name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = server_name else {
            return self.default.clone();
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return key.clone();
        }
        name.split_once('.')
            .filter(|(label, _)| !label.is_empty())
            .and_then(|(_, parent)| self.wildcard.get(parent))
            .unwrap_or(&self.default)
            .clone()
    }
}

/// The DNS names (wildcards included) of the subjectAltName of the chain's first certificate,
/// lower case. webpki, which rustls already verifies with, reads them; that is a name list
/// for choosing what to present, and the client still does its own verification.
fn dns_names(key: &CertifiedKey, path: &Path) -> Result<Vec<String>, TlsSetupError> {
    let bad = |reason: String| TlsSetupError::BadCertificate {
        path: path.to_owned(),
        reason,
    };
    let first = key
        .end_entity_cert()
        .map_err(|error| bad(error.to_string()))?;
    let certificate =
        webpki::EndEntityCert::try_from(first).map_err(|error| bad(error.to_string()))?;
    Ok(certificate
        .valid_dns_names()
        .map(|name| name.trim_end_matches('.').to_ascii_lowercase())
        .collect())
}

/// The chain of `cert_file` with the key of `key_file`, checked to belong together.
fn load_certified_key(
    files: &CertificateFiles,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsSetupError> {
    let chain = read_certificates(&files.cert_file)?;
    let key = read_private_key(&files.key_file)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| TlsSetupError::UnusableKey {
            path: files.key_file.clone(),
            reason: error.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // ring always knows the public key of a key it loaded; "unknown" cannot happen here,
        // and would only mean the check cannot be made.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsSetupError::KeyMismatch {
                cert_file: files.cert_file.clone(),
                key_file: files.key_file.clone(),
            })
        }
        Err(error) => Err(TlsSetupError::BadCertificate {
            path: files.cert_file.clone(),
            reason: error.to_string(),
        }),
    }
}

/// Every certificate of a PEM file, in order; at least one.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = read_file(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| pem_error(path, error))?;
    if certificates.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certificates)
}

/// The first private key of a PEM file.
fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let bytes = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| match error {
        rustls_pki_types::pem::Error::NoItemsFound => TlsSetupError::NoPrivateKey {
            path: path.to_owned(),
        },
        error => pem_error(path, error),
    })
}

fn pem_error(path: &Path, error: rustls_pki_types::pem::Error) -> TlsSetupError {
    TlsSetupError::Pem {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|source| TlsSetupError::Read {
        path: path.to_owned(),
        source,
    })
}

/// What a look at one file saw: its size and modification time, or nothing (missing).
type FileStamp = Option<(u64, Option<SystemTime>)>;

fn file_stamps(files: &TlsConfig) -> Vec<FileStamp> {
    files
        .all_files()
        .flat_map(|pair| [&pair.cert_file, &pair.key_file])
        .map(|path| {
            let metadata = std::fs::metadata(path).ok()?;
            Some((metadata.len(), metadata.modified().ok()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
