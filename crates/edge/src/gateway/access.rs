//! The gateway's access log step: what is kept of a request while it is served, and its line
//! once the response head is ready (see `access_log.rs` for the formats and the writer).

use std::net::IpAddr;
use std::time::Instant;

use anteroom_core::Timestamp;

use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::response::Response;
use http_body::Body as _;

use crate::access_log::{AccessLog, AccessRecord, Decided, UpstreamPart, millis};

use crate::correlation::Correlation;

/// A request's parts the access log needs after the request was handed on.
pub(super) struct Asked {
    time: Timestamp,
    started: Instant,
    client: IpAddr,
    method: Method,
    /// The path without its query string.
    path: String,
    user_agent: Option<String>,
    referer: Option<String>,
}

impl Asked {
    /// What to log of the request `parts` from `client`.
    pub(super) fn of(parts: &Parts, client: IpAddr, now: Timestamp) -> Asked {
        let text = |name| {
            parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        Asked {
            time: now,
            started: Instant::now(),
            client,
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            user_agent: text(header::USER_AGENT),
            referer: text(header::REFERER),
        }
    }

    /// Logs the request with its `response`.
    pub(super) fn log(self, log: &AccessLog, correlation: &Correlation, response: &Response) {
        let decided = response.extensions().get::<Decided>();
        let upstream = response.extensions().get::<UpstreamPart>();
        let request_id = correlation.request_id.to_str().unwrap_or("-");
        let trace_id = correlation.trace.trace_id_hex();
        log.record(&AccessRecord {
            time: self.time,
            request_id,
            trace_id: &trace_id,
            client: self.client,
            method: &self.method,
            path: &self.path,
            status: response.status().as_u16(),
            room: decided.and_then(|decided| decided.room.as_ref()),
            decision: decided.map(|decided| decided.decision),
            upstream_status: upstream.map(|upstream| upstream.status),
            duration_ms: millis(self.started.elapsed()),
            upstream_duration_ms: upstream.map(|upstream| millis(upstream.took)),
            bytes: response.body().size_hint().exact(),
            user_agent: self.user_agent.as_deref(),
            referer: self.referer.as_deref(),
        });
    }
}
