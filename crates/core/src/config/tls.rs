//! `[server.tls]` (SPEC §14.5): the certificate files the public listener serves TLS with. The
//! top-level `cert_file`/`key_file` pair answers clients without SNI or naming no other
//! certificate; each `[[server.tls.certificate]]` is chosen by the names it is valid for. Only
//! the paths are read here: the files are loaded (and reloaded) by the HTTP crate.

use std::path::PathBuf;

use super::tree::{Entry, Origin, Problems, Table, Value};

const TLS_KEYS: &[&str] = &["cert_file", "key_file", "min_version", "certificate"];
const CERTIFICATE_KEYS: &[&str] = &["cert_file", "key_file"];

/// `[server.tls]`: TLS on the public listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate for clients without SNI, or naming a host no other certificate is for.
    pub default: CertificateFiles,
    /// `[[server.tls.certificate]]`: chosen by the DNS names of their subjectAltName, in file
    /// order (the first one valid for a name serves it).
    pub certificates: Vec<CertificateFiles>,
    /// The oldest protocol version accepted.
    pub min_version: TlsVersion,
}

impl TlsConfig {
    /// Every certificate pair: the default first, then the SNI ones in file order.
    pub fn all_files(&self) -> impl Iterator<Item = &CertificateFiles> {
        std::iter::once(&self.default).chain(&self.certificates)
    }
}

/// A certificate and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The full chain: the server's certificate first, then the intermediates.
    pub cert_file: PathBuf,
    /// The private key of the first certificate (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// `[server.tls] min_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

pub(super) fn read_tls(entry: &Entry, problems: &mut Problems) -> Option<TlsConfig> {
    let table = entry.table(problems)?;
    problems.unknown_keys(table, TLS_KEYS, "[server.tls]");
    let default = read_pair(table, &entry.key_origin, "[server.tls]", problems);
    let min_version = table
        .get("min_version")
        .and_then(|entry| read_version(entry, problems))
        .unwrap_or_default();
    let certificates = match table.get("certificate") {
        None => Vec::new(),
        Some(list) => read_certificates(list, problems),
    };
    Some(TlsConfig {
        default: default?,
        certificates,
        min_version,
    })
}

fn read_certificates(list: &Entry, problems: &mut Problems) -> Vec<CertificateFiles> {
    let Value::Array(items) = &list.item.value else {
        problems.add(
            &list.key_origin,
            "`certificate` must be written as [[server.tls.certificate]] tables",
        );
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let Value::Table(table) = &item.value else {
                problems.add(
                    &item.origin,
                    "each [[server.tls.certificate]] must be a table with `cert_file` and `key_file`",
                );
                return None;
            };
            problems.unknown_keys(table, CERTIFICATE_KEYS, "[[server.tls.certificate]]");
            read_pair(table, &item.origin, "[[server.tls.certificate]]", problems)
        })
        .collect()
}

/// `cert_file` and `key_file` of `table`, both required and not empty.
fn read_pair(
    table: &Table,
    origin: &Origin,
    place: &str,
    problems: &mut Problems,
) -> Option<CertificateFiles> {
    let path = |key: &str, problems: &mut Problems| {
        let Some(entry) = table.get(key) else {
            problems.add(
                origin,
                format!("{place} needs `{key}`: a PEM file of the server's certificate and its private key"),
            );
            return None;
        };
        match entry.string(problems) {
            Some(text) if text.trim().is_empty() => {
                problems.add(&entry.key_origin, format!("`{key}` must not be empty"));
                None
            }
            text => text.map(PathBuf::from),
        }
    };
    let cert_file = path("cert_file", problems);
    let key_file = path("key_file", problems);
    Some(CertificateFiles {
        cert_file: cert_file?,
        key_file: key_file?,
    })
}

/// `"1.2"` or `"1.3"`; written as a bare number, TOML reads a float, taken alike.
fn read_version(entry: &Entry, problems: &mut Problems) -> Option<TlsVersion> {
    let text = match (&entry.item.value, &entry.item.env_text) {
        (Value::String(text) | Value::Float(text), _) => text.trim().to_owned(),
        (_, Some(text)) => text.trim().to_owned(),
        _ => {
            // Reports the wrong type ("must be a string, found …").
            entry.string(problems);
            return None;
        }
    };
    match text.as_str() {
        "1.2" => Some(TlsVersion::Tls12),
        "1.3" => Some(TlsVersion::Tls13),
        _ => {
            problems.add(
                &entry.key_origin,
                format!("`min_version` must be \"1.2\" or \"1.3\", found {text:?}"),
            );
            None
        }
    }
}
