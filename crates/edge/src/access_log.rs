//! The access log (SPEC §14.6, `[log] access`): one line per request to the protected site,
//! as JSON or in the "combined" format, on standard output.
//!
//! A request never waits for the log: its line is formatted on the request's thread and handed
//! to a bounded queue that one writer thread empties into a buffered standard output. When
//! the queue is full (the output is slower than the traffic) the line is dropped and counted,
//! and a warning says how many were lost; slowing the gateway down to the speed of a terminal
//! or a full pipe would be worse. With `access = "off"` there is no [`AccessLog`] at all, so
//! nothing is measured or formatted.
//!
//! The path is logged without its query string: queries carry tokens, e-mail addresses and
//! one-time codes that do not belong in log files.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use axum::http::Method;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use anteroom_core::config::AccessLogFormat;
use anteroom_core::{RoomId, Timestamp};

/// Lines waiting for the writer at most; more are dropped.
const QUEUE_LINES: usize = 16_384;

/// What the gateway decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Decision {
    /// A valid pass let it through.
    Passed,
    /// Admitted on the spot: a pass was issued with this request.
    Admitted,
    /// Held back by a room (the waiting page, a redirect to it, or 429 `waiting_room`).
    Queued,
    /// Refused by a rate limit (429).
    Limited,
    /// A route that checks nothing (`bypass`, or no rooms).
    Bypass,
    /// Refused for another reason: a closed room, the store down for a room that fails
    /// closed, an identity mismatch.
    Refused,
}

impl Decision {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Decision::Passed => "passed",
            Decision::Admitted => "admitted",
            Decision::Queued => "queued",
            Decision::Limited => "limited",
            Decision::Bypass => "bypass",
            Decision::Refused => "refused",
        }
    }
}

/// The gateway's decision and the room it was about, carried in the response's extensions
/// from the step that decided to the line that logs it.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub(crate) decision: Decision,
    /// The room that decided (the first the route names when several let it through).
    pub(crate) room: Option<RoomId>,
}

/// The upstream's part of a request, in the response's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpstreamPart {
    /// The status the proxy step answered with (the gateway's own 502/504 when the upstream
    /// could not be reached or did not answer in time).
    pub(crate) status: u16,
    /// From sending the request upstream to the response head.
    pub(crate) took: Duration,
}

/// One request's line.
#[derive(Debug, Serialize)]
pub(crate) struct AccessRecord<'a> {
    #[serde(serialize_with = "rfc3339")]
    pub(crate) time: Timestamp,
    pub(crate) request_id: &'a str,
    pub(crate) trace_id: &'a str,
    pub(crate) client: IpAddr,
    #[serde(serialize_with = "method")]
    pub(crate) method: &'a Method,
    pub(crate) path: &'a str,
    pub(crate) status: u16,
    #[serde(serialize_with = "room")]
    pub(crate) room: Option<&'a RoomId>,
    pub(crate) decision: Option<Decision>,
    pub(crate) upstream_status: Option<u16>,
    /// From the request head read to the response head, in milliseconds.
    pub(crate) duration_ms: f64,
    pub(crate) upstream_duration_ms: Option<f64>,
    /// The response body's length when known before it is sent (not for streamed bodies).
    pub(crate) bytes: Option<u64>,
    pub(crate) user_agent: Option<&'a str>,
    pub(crate) referer: Option<&'a str>,
}

fn rfc3339<S: serde::Serializer>(time: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    let text = date_time(*time)
        .format(&Rfc3339)
        .map_err(serde::ser::Error::custom)?;
    serializer.serialize_str(&text)
}

/// `time` in UTC, to the millisecond.
fn date_time(time: Timestamp) -> OffsetDateTime {
    let nanos = i128::from(time.as_millis()) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn method<S: serde::Serializer>(method: &&Method, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(method.as_str())
}

fn room<S: serde::Serializer>(room: &Option<&RoomId>, serializer: S) -> Result<S::Ok, S::Error> {
    match room {
        Some(room) => serializer.serialize_str(room.as_str()),
        None => serializer.serialize_none(),
    }
}

/// Milliseconds with microsecond precision.
pub(crate) fn millis(duration: Duration) -> f64 {
    (duration.as_micros() as f64) / 1000.0
}

/// The access log's queue; cheap to clone.
#[derive(Clone)]
pub struct AccessLog {
    inner: Arc<Inner>,
}

struct Inner {
    format: AccessLogFormat,
    lines: SyncSender<Vec<u8>>,
    dropped: AtomicU64,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AccessLog")
            .field("format", &self.inner.format)
            .finish_non_exhaustive()
    }
}

impl AccessLog {
    /// The access log in `format` on standard output, with its writer thread; `None` when the
    /// format is `off` (or the thread cannot be started, which is logged).
    pub fn start(format: AccessLogFormat) -> Option<AccessLog> {
        if format == AccessLogFormat::Off {
            return None;
        }
        let (lines, queue) = std::sync::mpsc::sync_channel(QUEUE_LINES);
        let started = std::thread::Builder::new()
            .name("anteroom-access-log".to_owned())
            .spawn(move || write_lines(&queue));
        if let Err(error) = started {
            tracing::error!(%error, "the access log's writer cannot start; no access log");
            return None;
        }
        Some(AccessLog {
            inner: Arc::new(Inner {
                format,
                lines,
                dropped: AtomicU64::new(0),
            }),
        })
    }

    /// Queues `record`'s line; never waits.
    pub(crate) fn record(&self, record: &AccessRecord<'_>) {
        let line = match self.inner.format {
            AccessLogFormat::Json => json_line(record),
            AccessLogFormat::Combined => combined_line(record),
            AccessLogFormat::Off => return,
        };
        match self.inner.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                let dropped = self.inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                // A warning for the first loss and then once per 10,000: the warnings must not
                // become the flood the queue overflowed with.
                if dropped == 1 || dropped.is_multiple_of(10_000) {
                    tracing::warn!(
                        dropped,
                        "access log lines dropped: standard output is slower than the traffic"
                    );
                }
            }
        }
    }
}

/// The writer thread: lines into a buffered standard output, flushed whenever the queue is
/// empty, until every sender is gone.
fn write_lines(queue: &Receiver<Vec<u8>>) {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Ok(line) = queue.recv() {
        let mut written = out.write_all(&line);
        while let Ok(line) = queue.try_recv() {
            written = written.and_then(|()| out.write_all(&line));
        }
        if written.and_then(|()| out.flush()).is_err() {
            // Standard output is gone (closed pipe): the lines have nowhere to go.
            return;
        }
    }
}

fn json_line(record: &AccessRecord<'_>) -> Vec<u8> {
    let mut line = serde_json::to_vec(record).unwrap_or_default();
    line.push(b'\n');
    line
}

/// `client - - [time] "METHOD path" status bytes "referer" "user-agent"`, then
/// `request_id=… trace_id=… room=… decision=… upstream_status=… duration_ms=…
/// upstream_duration_ms=…`; absent values are `-`.
fn combined_line(record: &AccessRecord<'_>) -> Vec<u8> {
    use std::fmt::Write as _;
    let dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
    let time = date_time(record.time);
    let mut line = String::with_capacity(256);
    let _ = write!(
        line,
        "{} - - [{:02}/{}/{}:{:02}:{:02}:{:02} +0000] \"{} {}\" {} {} \"{}\" \"{}\"",
        record.client,
        time.day(),
        &format!("{:?}", time.month())[..3],
        time.year(),
        time.hour(),
        time.minute(),
        time.second(),
        record.method,
        quoted(record.path),
        record.status,
        dash(record.bytes.map(|bytes| bytes.to_string())),
        quoted(record.referer.unwrap_or("-")),
        quoted(record.user_agent.unwrap_or("-")),
    );
    let _ = writeln!(
        line,
        " request_id={} trace_id={} room={} decision={} upstream_status={} duration_ms={:.3} upstream_duration_ms={}",
        record.request_id,
        record.trace_id,
        dash(record.room.map(ToString::to_string)),
        record.decision.map_or("-", Decision::as_str),
        dash(record.upstream_status.map(|status| status.to_string())),
        record.duration_ms,
        dash(record.upstream_duration_ms.map(|ms| format!("{ms:.3}"))),
    );
    line.into_bytes()
}

/// `text` with `"`, `\` and control characters escaped, so a forged header cannot end the
/// quoted field or the line.
fn quoted(text: &str) -> String {
    text.escape_default().to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record<'a>(room: Option<&'a RoomId>, agent: &'a str) -> AccessRecord<'a> {
        AccessRecord {
            time: Timestamp(1_700_000_000_000),
            request_id: "abc",
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            client: "203.0.113.7".parse().unwrap(),
            method: &Method::GET,
            path: "/shop",
            status: 200,
            room,
            decision: Some(Decision::Admitted),
            upstream_status: Some(200),
            duration_ms: 1.5,
            upstream_duration_ms: Some(1.25),
            bytes: Some(42),
            user_agent: Some(agent),
            referer: None,
        }
    }

    #[test]
    fn json_lines_name_every_field() {
        let room: RoomId = "shop".parse().unwrap();
        let line = json_line(&record(Some(&room), "curl"));
        assert_eq!(line.last(), Some(&b'\n'));
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["time"], "2023-11-14T22:13:20Z");
        assert_eq!(value["client"], "203.0.113.7");
        assert_eq!(value["room"], "shop");
        assert_eq!(value["decision"], "admitted");
        assert_eq!(value["upstream_duration_ms"], 1.25);
        assert_eq!(value["referer"], serde_json::Value::Null);
    }

    #[test]
    fn combined_lines_escape_what_a_client_wrote() {
        let line = combined_line(&record(None, "evil\" \n200 forged"));
        let line = String::from_utf8(line).unwrap();
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(
            line.starts_with("203.0.113.7 - - [14/Nov/2023:22:13:20 +0000] \"GET /shop\" 200 42"),
            "{line}"
        );
        assert!(line.contains("\"evil\\\" \\n200 forged\""), "{line}");
        assert!(
            line.contains(" room=- decision=admitted upstream_status=200 "),
            "{line}"
        );
    }
}
