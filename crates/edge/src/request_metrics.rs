//! The request series of the listeners (`anteroom_http_requests_total`,
//! `anteroom_http_request_duration_seconds`, `anteroom_http_requests_abandoned_total`), counted
//! by the HTTP engine where each answer's head is ready, or where a request whose client left
//! is dropped unanswered. Handles are resolved once per listener, so counting a request is an
//! atomic add and a histogram record, no name lookup.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, counter, histogram};

/// Which listener answered a request: the `listener` label of the request series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The public listener (`[server] listen`).
    Public,
    /// The admin listener (`[server] admin_listen`).
    Admin,
}

/// The request series of one listener, resolved once: counting a request is an atomic add
/// and a histogram record, no name lookup.
pub(crate) struct RequestMetrics {
    /// Answers by status class, `1xx` to `5xx`.
    by_class: [Counter; 5],
    duration: Histogram,
    /// Requests dropped unanswered because their client closed the connection first.
    abandoned: Counter,
}

impl RequestMetrics {
    /// The series of `listener`, resolved on first use (after the recorder is installed).
    pub(crate) fn of(listener: Listener) -> &'static RequestMetrics {
        static PUBLIC: OnceLock<RequestMetrics> = OnceLock::new();
        static ADMIN: OnceLock<RequestMetrics> = OnceLock::new();
        let (cell, label) = match listener {
            Listener::Public => (&PUBLIC, "public"),
            Listener::Admin => (&ADMIN, "admin"),
        };
        cell.get_or_init(|| {
            RequestMetrics {
            by_class: ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|class| {
                counter!("anteroom_http_requests_total", "listener" => label, "class" => class)
            }),
            duration: histogram!("anteroom_http_request_duration_seconds", "listener" => label),
            abandoned: counter!("anteroom_http_requests_abandoned_total", "listener" => label),
        }
        })
    }

    /// Counts one answer with `status`, its head ready `since` the request's head was read.
    pub(crate) fn answered(&self, status: axum::http::StatusCode, since: std::time::Instant) {
        // A status is 100..=999; anything past 5xx counts as 5xx.
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.by_class[class].increment(1);
        self.duration.record(since.elapsed().as_secs_f64());
    }

    /// Counts one request dropped unanswered: its client closed the connection before the
    /// answer was ready (nginx logs these as 499).
    pub(crate) fn abandoned(&self) {
        self.abandoned.increment(1);
    }
}
