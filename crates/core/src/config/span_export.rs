//! `[tracing]` (SPEC §14.6): where spans are exported over OTLP.

use super::tree::{Entry, Problems};

const TRACING_KEYS: &[&str] = &["otlp_endpoint"];

/// `[tracing]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingConfig {
    /// `otlp_endpoint`: the OTLP/HTTP traces URL (such as
    /// `http://collector:4318/v1/traces`); `None`: no span is made or exported.
    pub otlp_endpoint: Option<String>,
}

pub(super) fn read_tracing(section: Option<&Entry>, problems: &mut Problems) -> TracingConfig {
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return TracingConfig::default();
    };
    problems.unknown_keys(table, TRACING_KEYS, "[tracing]");
    let otlp_endpoint = table.get("otlp_endpoint").and_then(|entry| {
        let text = entry.string(problems)?;
        let url = text.trim();
        let host = url
            .strip_prefix("http://")
            .map(|rest| rest.split('/').next());
        if matches!(host, Some(Some(host)) if !host.is_empty() && !host.contains(['@', '?', '#'])) {
            Some(url.to_owned())
        } else {
            problems.add(
                &entry.key_origin,
                format!("`otlp_endpoint` must be an http:// URL with a host, found {text:?}"),
            );
            None
        }
    });
    TracingConfig { otlp_endpoint }
}
