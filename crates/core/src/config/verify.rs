//! `[verify]` (SPEC §14.1): which proxy calls `/_anteroom/verify`, and so the one set of
//! headers that names the visitor's request. Reading "the first of several headers present"
//! let a visitor behind a proxy that passes the visitor's own headers on (Caddy, Traefik) add
//! the header the proxy does not set and name another path; here each proxy has exactly one
//! header per fact, and the shipped snippets overwrite or strip it.

use super::tree::{Entry, Problems};

const VERIFY_KEYS: &[&str] = &["proxy", "uri_header", "method_header", "host_header"];
const PROXIES: &[&str] = &["nginx", "envoy", "traefik", "caddy"];

/// Where the verify endpoint finds the visitor's URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginalUri {
    /// In this header (lower case).
    Header(String),
    /// Appended to `/_anteroom/verify` (Envoy's `path_prefix`).
    AppendedPath,
}

/// The proxy presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyProxy {
    /// nginx `auth_request`: `X-Original-URI`, `X-Original-Method`, `X-Forwarded-Host`.
    Nginx,
    /// Envoy `ext_authz` (HTTP): the path appended to the endpoint, the request's own method
    /// and `Host`.
    Envoy,
    /// Traefik `forwardAuth`: `X-Forwarded-Uri`, `X-Forwarded-Method`, `X-Forwarded-Host`.
    Traefik,
    /// Caddy `forward_auth`: `X-Forwarded-Uri`, `X-Forwarded-Method`, `X-Forwarded-Host`.
    Caddy,
}

impl VerifyProxy {
    /// The preset's name as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyProxy::Nginx => "nginx",
            VerifyProxy::Envoy => "envoy",
            VerifyProxy::Traefik => "traefik",
            VerifyProxy::Caddy => "caddy",
        }
    }

    fn parse(text: &str) -> Option<VerifyProxy> {
        match text {
            "nginx" => Some(VerifyProxy::Nginx),
            "envoy" => Some(VerifyProxy::Envoy),
            "traefik" => Some(VerifyProxy::Traefik),
            "caddy" => Some(VerifyProxy::Caddy),
            _ => None,
        }
    }

    /// The preset's headers.
    pub fn headers(self) -> VerifyConfig {
        let named = |uri: &str, method: &str, host: &str| VerifyConfig {
            proxy: self,
            uri: OriginalUri::Header(uri.to_owned()),
            method_header: Some(method.to_owned()),
            host_header: Some(host.to_owned()),
        };
        match self {
            VerifyProxy::Nginx => named("x-original-uri", "x-original-method", "x-forwarded-host"),
            VerifyProxy::Envoy => VerifyConfig {
                proxy: self,
                uri: OriginalUri::AppendedPath,
                method_header: None,
                host_header: None,
            },
            VerifyProxy::Traefik | VerifyProxy::Caddy => {
                named("x-forwarded-uri", "x-forwarded-method", "x-forwarded-host")
            }
        }
    }
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyProxy::Nginx.headers()
    }
}

pub(super) fn read_verify(section: Option<&Entry>, problems: &mut Problems) -> VerifyConfig {
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return VerifyConfig::default();
    };
    problems.unknown_keys(table, VERIFY_KEYS, "[verify]");
    let proxy = match table.get("proxy") {
        None => VerifyProxy::Nginx,
        Some(entry) => match entry.string(problems) {
            None => VerifyProxy::Nginx,
            Some(text) => VerifyProxy::parse(text.trim()).unwrap_or_else(|| {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "unknown proxy {text:?}: expected one of {}",
                        PROXIES.join(", ")
                    ),
                );
                VerifyProxy::Nginx
            }),
        },
    };
    let mut config = proxy.headers();
    if let Some(name) = header_name(table.get("uri_header"), problems) {
        config.uri = OriginalUri::Header(name);
    }
    if let Some(name) = header_name(table.get("method_header"), problems) {
        config.method_header = Some(name);
    }
    if let Some(name) = header_name(table.get("host_header"), problems) {
        config.host_header = Some(name);
    }
    config
}

/// A header name, lower-cased; a problem when it is not a valid field name.
fn header_name(entry: Option<&Entry>, problems: &mut Problems) -> Option<String> {
    let entry = entry?;
    let text = entry.string(problems)?;
    let name = text.trim().to_ascii_lowercase();
    let token = |byte: u8| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte);
    if name.is_empty() || !name.bytes().all(token) {
        problems.add(&entry.key_origin, format!("{text:?} is not a header name"));
        return None;
    }
    Some(name)
}

/// `[verify]` (SPEC §14.1): the one set of headers the verify endpoint reads the visitor's
/// request from (see [`VerifyProxy::headers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyConfig {
    /// The preset the headers came from (explicit header names may replace its own).
    pub proxy: VerifyProxy,
    /// Where the visitor's URI is.
    pub uri: OriginalUri,
    /// The header with the visitor's method (lower case); `None`: the request's own method.
    pub method_header: Option<String>,
    /// The header with the visitor's host (lower case); `None`, or when it is absent: `Host`.
    pub host_header: Option<String>,
}
