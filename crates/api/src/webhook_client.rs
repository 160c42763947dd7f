//! The HTTPS client anteroom makes outbound calls with: webhook sinks post events through it
//! and rooms with `identity = "jwt:<claim>"` fetch the site's JWKS through it. It lives in
//! this crate (not beside the sinks) because the site-identity check needs it too.

use bytes::Bytes;
use http_body_util::Full;

/// The HTTP(S) client a webhook sink posts with.
pub type WebhookClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// Why a webhook client cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum WebhookClientError {
    /// The extra roots are not PEM certificates.
    #[error("not a PEM certificate file: {0}")]
    Pem(String),
    /// A certificate is not usable as a root.
    #[error("a certificate cannot be trusted as a root: {0}")]
    Root(String),
    /// TLS could not be set up.
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// A client for webhook receivers: plain HTTP for `http://`, TLS 1.2/1.3 (rustls) for
/// `https://`, trusting the system's certificate authorities plus the certificates in
/// `extra_roots_pem` (a private CA, or a receiver's self-signed certificate).
pub fn webhook_client(extra_roots_pem: Option<&[u8]>) -> Result<WebhookClient, WebhookClientError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for error in &system.errors {
        tracing::debug!(%error, "a system certificate authority did not load");
    }
    roots.add_parsable_certificates(system.certs);
    if let Some(pem) = extra_roots_pem {
        let mut added = 0;
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate =
                certificate.map_err(|error| WebhookClientError::Pem(error.to_string()))?;
            roots
                .add(certificate)
                .map_err(|error| WebhookClientError::Root(error.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(WebhookClientError::Pem("no certificate in it".to_owned()));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| WebhookClientError::Tls(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}
