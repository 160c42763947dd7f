//! What the simulator records: one record per visitor (written by the worker processes and
//! merged by the coordinator) and the origin's log of the sessions it served.
//!
//! Times are seconds since the run's start, on each process's monotonic clock from a start the
//! processes agree on through the system clock.

use serde::{Deserialize, Serialize};

/// One visitor, start to end.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct VisitorRecord {
    pub(crate) id: usize,
    /// Index of the target (node) the visitor talked to.
    pub(crate) node: usize,
    pub(crate) arrival: f64,
    pub(crate) join: Option<Join>,
    /// Every status seen while waiting (join answer excluded), in the order received.
    pub(crate) observations: Vec<Observation>,
    /// Joined the queue (was not admitted by the join itself).
    pub(crate) waited: bool,
    /// Followed the line over SSE at least once.
    pub(crate) sse: bool,
    /// The node refused the event stream at its connection limit (503 `too_many_connections`);
    /// the visitor polled.
    pub(crate) sse_refused: bool,
    /// First time the visitor saw itself admitted (with its pass).
    pub(crate) admitted: Option<f64>,
    /// When it stopped waiting without admission (gave up, or its ticket ended).
    pub(crate) gave_up: Option<f64>,
    /// Requests through the gateway with the pass, and how many of them failed.
    pub(crate) requests: u32,
    pub(crate) request_failures: u32,
    /// When the session ended (last request answered).
    pub(crate) ended: Option<f64>,
    pub(crate) outcome: Outcome,
    /// What went wrong, one entry per failure (`"join: HTTP 503 room_closed"`).
    pub(crate) errors: Vec<String>,
}

/// The join request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Join {
    pub(crate) sent: f64,
    pub(crate) received: f64,
    pub(crate) position: u64,
    /// `ahead` in the join answer.
    pub(crate) ahead: u64,
    pub(crate) eta: Option<u64>,
}

/// A status the visitor saw while waiting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Observation {
    /// When the poll was sent; for an SSE event, when it arrived.
    pub(crate) sent: f64,
    pub(crate) received: f64,
    pub(crate) sse: bool,
    /// A poll answered from a node's view of the line (the answer had an `Age` header): it
    /// shows the line as the view read it, not as it was when the poll was sent.
    #[serde(default)]
    pub(crate) from_view: bool,
    pub(crate) ahead: u64,
    pub(crate) serving: u64,
    pub(crate) waiting: u64,
    pub(crate) eta: Option<u64>,
}

/// How a visit ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// The run's time limit came first.
    #[default]
    Unfinished,
    /// Used the site and ended the session with a release.
    Completed,
    /// Used the site and went silent; the session expires.
    Expired,
    /// Gave up waiting and said so (`DELETE` of the ticket).
    Left,
    /// Gave up waiting silently.
    Abandoned,
    /// Could not go on (join refused, ticket ended, repeated errors).
    Failed,
}

impl Outcome {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Outcome::Unfinished => "unfinished",
            Outcome::Completed => "completed",
            Outcome::Expired => "expired",
            Outcome::Left => "left",
            Outcome::Abandoned => "abandoned",
            Outcome::Failed => "failed",
        }
    }
}

/// What the origin saw: one span per session (from its first request to its release or its
/// last request), and counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct OriginLog {
    pub(crate) spans: Vec<Span>,
    pub(crate) requests: u64,
    /// Requests that reached the origin without a pass.
    pub(crate) without_pass: u64,
    /// Most sessions with a request in flight at the same moment.
    pub(crate) max_in_flight: usize,
}

/// One session as the origin saw it.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) first: f64,
    pub(crate) last: f64,
    /// Ended by the origin's `Anteroom-Release` answer.
    pub(crate) released: bool,
}

/// What a worker process hands to the coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct WorkerOutput {
    pub(crate) records: Vec<VisitorRecord>,
}
