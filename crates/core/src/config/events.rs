//! `[[events.sink]]`: where live events go (SPEC §8.4).
//!
//! ```toml
//! [[events.sink]]
//! kind = "log"                      # one JSON line per event in the log
//!
//! [[events.sink]]
//! kind = "webhook"
//! name = "crm"                      # progress is kept per name [the kind]
//! url = "https://hooks.example/anteroom"      # https:// (system roots) or http://
//! ca_file = "/etc/anteroom/hooks-ca.pem"       # more trusted roots, PEM [none]
//! secret_file = "/etc/anteroom/webhook.secret"   # or secret = "…": the HMAC-SHA256 key
//! types = ["ticket.admitted", "room.updated"]    # all events when absent
//! batch = 100                       # events per request [100]
//! timeout = "10s"                   # per request [10s]
//! ```

use std::path::PathBuf;
use std::time::Duration;

use super::tree::{Entry, Origin, Problems, Table, Value, closest};
use crate::duration::parse_duration;

/// One event sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSinkConfig {
    /// Unique name; the outbox keeps each sink's progress under it.
    pub name: String,
    /// Only these event types; every type when empty.
    pub types: Vec<String>,
    /// What the sink does.
    pub kind: EventSinkKind,
}

/// What a sink does with events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSinkKind {
    /// Logs each event as one line (JSON with `ANTEROOM_LOG_FORMAT=json`).
    Log,
    /// POSTs batches of events, signed with HMAC-SHA256.
    Webhook(WebhookConfig),
}

/// `kind = "webhook"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where the batches go (`https://` or `http://`).
    pub url: String,
    /// A PEM file of certificates trusted as roots for an `https://` receiver, besides the
    /// system's (a private CA, or the receiver's own self-signed certificate).
    pub ca_file: Option<PathBuf>,
    /// The HMAC key.
    pub secret: SecretSource,
    /// Events per request at most.
    pub batch: usize,
    /// Bound on one request.
    pub timeout: Duration,
}

/// A secret written in the config, or the file holding it (read by the binary at start).
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `secret = "…"`.
    Inline(String),
    /// `secret_file = "…"`: the file's content, trimmed.
    File(PathBuf),
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Inline(_) => f.write_str("Inline(<redacted>)"),
            SecretSource::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

const SINK_KEYS: &[&str] = &[
    "kind",
    "name",
    "types",
    "url",
    "secret",
    "secret_file",
    "ca_file",
    "batch",
    "timeout",
];
const KINDS: &[&str] = &["log", "webhook"];
const DEFAULT_BATCH: usize = 100;
const MAX_BATCH: u64 = 10_000;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads `[events]`: only its `[[events.sink]]` array.
pub(super) fn read_events(
    section: Option<&Entry>,
    problems: &mut Problems,
) -> Vec<EventSinkConfig> {
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return Vec::new();
    };
    problems.unknown_keys(table, &["sink"], "[events]");
    let Some(sinks) = table.get("sink") else {
        return Vec::new();
    };
    let Value::Array(elements) = &sinks.item.value else {
        problems.add(
            &sinks.key_origin,
            "`sink` must be an array of tables, written [[events.sink]]",
        );
        return Vec::new();
    };
    let mut configs: Vec<EventSinkConfig> = Vec::new();
    for element in elements {
        let Value::Table(sink) = &element.value else {
            problems.add(
                &element.origin,
                "each sink must be a table, written [[events.sink]]",
            );
            continue;
        };
        let Some(config) = read_sink(sink, &element.origin, problems) else {
            continue;
        };
        if configs.iter().any(|existing| existing.name == config.name) {
            let origin = sink.get("name").map_or(&element.origin, |e| &e.key_origin);
            problems.add(
                origin,
                format!(
                    "two sinks are named {:?}; give each a unique `name`",
                    config.name
                ),
            );
            continue;
        }
        configs.push(config);
    }
    configs
}

/// One `[[events.sink]]` table, written at `origin`.
fn read_sink(sink: &Table, origin: &Origin, problems: &mut Problems) -> Option<EventSinkConfig> {
    problems.unknown_keys(sink, SINK_KEYS, "[[events.sink]]");
    let Some(kind_entry) = sink.get("kind") else {
        problems.add(
            origin,
            "[[events.sink]] needs a `kind`: \"log\" or \"webhook\"",
        );
        return None;
    };
    let kind_text = kind_entry.string(problems)?;
    let name = sink
        .get("name")
        .and_then(|entry| entry.string(problems))
        .unwrap_or_else(|| kind_text.clone());
    let types = sink
        .get("types")
        .and_then(|entry| entry.strings(problems))
        .unwrap_or_default()
        .into_iter()
        .map(|(text, _)| text)
        .collect();
    let kind = match kind_text.as_str() {
        "log" => EventSinkKind::Log,
        "webhook" => EventSinkKind::Webhook(read_webhook(sink, origin, problems)?),
        other => {
            let mut message =
                format!("unknown sink kind {other:?}: expected \"log\" or \"webhook\"");
            if let Some(suggestion) = closest(other, KINDS.iter().copied()) {
                message.push_str(&format!("; did you mean {suggestion:?}?"));
            }
            problems.add(&kind_entry.key_origin, message);
            return None;
        }
    };
    Some(EventSinkConfig { name, types, kind })
}

fn read_webhook(sink: &Table, origin: &Origin, problems: &mut Problems) -> Option<WebhookConfig> {
    let url = read_webhook_url(sink, origin, problems);
    let ca_file = read_ca_file(sink, url.as_deref(), problems);
    let secret = read_secret(sink, origin, problems);
    let batch = read_batch(sink, problems);
    let timeout = read_timeout(sink, problems);
    Some(WebhookConfig {
        url: url?,
        ca_file: ca_file?,
        secret: secret?,
        batch: batch?,
        timeout: timeout?,
    })
}

fn read_webhook_url(sink: &Table, origin: &Origin, problems: &mut Problems) -> Option<String> {
    let Some(entry) = sink.get("url") else {
        problems.add(origin, "a webhook sink needs a `url`");
        return None;
    };
    let url = entry.string(problems)?;
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    if rest.is_some_and(|rest| !rest.is_empty()) {
        Some(url)
    } else {
        problems.add(
            &entry.key_origin,
            format!("`url` must be an https:// or http:// URL, found {url:?}"),
        );
        None
    }
}

/// `Some(None)`: absent. `None`: present but wrong (reported).
fn read_ca_file(
    sink: &Table,
    url: Option<&str>,
    problems: &mut Problems,
) -> Option<Option<PathBuf>> {
    let Some(entry) = sink.get("ca_file") else {
        return Some(None);
    };
    match entry.string(problems) {
        Some(path) if url.is_some_and(|url| url.starts_with("http://")) => {
            problems.add(
                &entry.key_origin,
                format!("`ca_file` needs an https:// `url` (found {path:?} for plain http)"),
            );
            None
        }
        Some(path) if !path.is_empty() => Some(Some(PathBuf::from(path))),
        Some(_) => {
            problems.add(&entry.key_origin, "`ca_file` must name a file");
            None
        }
        None => None,
    }
}

fn read_secret(sink: &Table, origin: &Origin, problems: &mut Problems) -> Option<SecretSource> {
    match (sink.get("secret"), sink.get("secret_file")) {
        (Some(entry), None) => entry.string(problems).and_then(|secret| {
            if secret.len() < 16 {
                problems.add(&entry.key_origin, "`secret` must be at least 16 characters");
                None
            } else {
                Some(SecretSource::Inline(secret))
            }
        }),
        (None, Some(entry)) => entry
            .string(problems)
            .map(|path| SecretSource::File(PathBuf::from(path))),
        (Some(entry), Some(_)) => {
            problems.add(
                &entry.key_origin,
                "give `secret` or `secret_file`, not both",
            );
            None
        }
        (None, None) => {
            problems.add(
                origin,
                "a webhook sink needs a `secret` (or `secret_file`) to sign its requests",
            );
            None
        }
    }
}

fn read_batch(sink: &Table, problems: &mut Problems) -> Option<usize> {
    let Some(entry) = sink.get("batch") else {
        return Some(DEFAULT_BATCH);
    };
    let batch = entry.unsigned(problems)?;
    if (1..=MAX_BATCH).contains(&batch) {
        usize::try_from(batch).ok()
    } else {
        problems.add(
            &entry.key_origin,
            format!("`batch` must be 1 to {MAX_BATCH}, found {batch}"),
        );
        None
    }
}

fn read_timeout(sink: &Table, problems: &mut Problems) -> Option<Duration> {
    let Some(entry) = sink.get("timeout") else {
        return Some(DEFAULT_TIMEOUT);
    };
    let text = entry.duration_text(problems)?;
    match parse_duration(&text) {
        Ok(timeout) if !timeout.is_zero() => Some(timeout),
        Ok(_) => {
            problems.add(&entry.key_origin, "`timeout` must be longer than zero");
            None
        }
        Err(error) => {
            problems.add(&entry.key_origin, format!("`timeout`: {error}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::parse_config;

    #[test]
    fn sinks_are_read_with_their_defaults() {
        let source = r#"
[[events.sink]]
kind = "log"

[[events.sink]]
kind = "webhook"
name = "crm"
url = "http://127.0.0.1:9000/hook"
secret = "0123456789abcdef"
types = ["room.updated"]
"#;
        let config = parse_config(source, &[]).unwrap();
        assert_eq!(
            config.events,
            [
                EventSinkConfig {
                    name: "log".to_owned(),
                    types: vec![],
                    kind: EventSinkKind::Log,
                },
                EventSinkConfig {
                    name: "crm".to_owned(),
                    types: vec!["room.updated".to_owned()],
                    kind: EventSinkKind::Webhook(WebhookConfig {
                        url: "http://127.0.0.1:9000/hook".to_owned(),
                        ca_file: None,
                        secret: SecretSource::Inline("0123456789abcdef".to_owned()),
                        batch: 100,
                        timeout: Duration::from_secs(10),
                    }),
                },
            ]
        );
    }

    #[test]
    fn every_sink_problem_is_reported_with_its_line() {
        let source = r#"
[[events.sink]]
kind = "hook"

[[events.sink]]
kind = "webhook"
url = "ftp://x"
secret = "short"
batch = 0
timeout = "soon"
colour = "red"

[[events.sink]]
kind = "log"

[[events.sink]]
kind = "log"
"#;
        let errors = parse_config(source, &[]).unwrap_err().to_string();
        for expected in [
            "line 3: unknown sink kind \"hook\"",
            "line 7: `url` must be an https:// or http:// URL",
            "line 8: `secret` must be at least 16 characters",
            "line 9: `batch` must be 1 to 10000",
            "line 10: `timeout`",
            "line 11: unknown key `colour`",
            "two sinks are named \"log\"",
        ] {
            assert!(errors.contains(expected), "{expected:?} in:\n{errors}");
        }
    }

    #[test]
    fn webhooks_take_https_with_extra_roots_and_refuse_roots_for_plain_http() {
        let source = r#"
[[events.sink]]
kind = "webhook"
url = "https://hooks.example/anteroom"
ca_file = "/etc/anteroom/hooks-ca.pem"
secret = "0123456789abcdef"
"#;
        let config = parse_config(source, &[]).unwrap();
        let EventSinkKind::Webhook(webhook) = &config.events[0].kind else {
            panic!("a webhook sink");
        };
        assert_eq!(webhook.url, "https://hooks.example/anteroom");
        assert_eq!(
            webhook.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/anteroom/hooks-ca.pem"))
        );
        let plain = source.replace("https://", "http://");
        let errors = parse_config(&plain, &[]).unwrap_err().to_string();
        assert!(
            errors.contains("line 5: `ca_file` needs an https:// `url`"),
            "{errors}"
        );
    }
}
