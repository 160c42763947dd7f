//! `[log]` (SPEC §14.6): the access log's format.

use super::tree::{Entry, Problems};

const LOG_KEYS: &[&str] = &["access"];

/// `[log]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// `access`: one line per request to the protected site, or none.
    pub access: AccessLogFormat,
}

/// How access log lines are written (to standard output).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// One JSON object per line.
    Json,
    /// The Apache/nginx "combined" format, with the request id, room, decision and durations
    /// appended.
    Combined,
    /// No access log (the default: nothing is formatted or written).
    #[default]
    Off,
}

pub(super) fn read_log(section: Option<&Entry>, problems: &mut Problems) -> LogConfig {
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return LogConfig::default();
    };
    problems.unknown_keys(table, LOG_KEYS, "[log]");
    let access = match table.get("access") {
        None => AccessLogFormat::Off,
        Some(entry) => match entry.string(problems).as_deref().map(str::trim) {
            None => AccessLogFormat::Off,
            Some("json") => AccessLogFormat::Json,
            Some("combined") => AccessLogFormat::Combined,
            Some("off") => AccessLogFormat::Off,
            Some(other) => {
                problems.add(
                    &entry.key_origin,
                    format!("unknown access log format {other:?}: expected json, combined or off"),
                );
                AccessLogFormat::Off
            }
        },
    };
    LogConfig { access }
}
