//! What adaptive admission (SPEC §5.4) decided last on this node, per room: the admin stats
//! show it and the controller's gauges are set from it. The controller loop itself runs in
//! `anteroom-edge` (it reads the gateway's measurements); this record is kept in
//! the node's shared state (`AppState`), which every crate above this one reaches.

use std::collections::HashMap;

use metrics::{counter, gauge};
use parking_lot::Mutex;
use serde::Serialize;

use anteroom_core::RoomId;

/// The last controller run of a room on this node, as the admin stats show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AdaptiveStatus {
    /// The room's `admit_per_minute` after the run.
    pub rate_per_minute: u64,
    /// `increase`, `decrease`, `hold`, `idle` (nothing measured), `floor` (health unknown),
    /// or `other_node` (another node decided this interval).
    pub decision: &'static str,
    /// Where the inputs came from: `gateway`, `signal` or `none`.
    pub source: &'static str,
    /// The p95 latency of the interval, in milliseconds; `null` when nothing was measured (an
    /// idle interval, or health unknown), never a made-up 0.
    pub p95_ms: Option<f64>,
    /// The share of 5xx answers in the interval.
    pub error_rate: f64,
    /// Responses measured in the interval (0 for a pushed signal).
    pub responses: u64,
    /// Requests in flight to the upstream at the end of the interval (or as pushed).
    pub in_flight: u64,
    /// When the run happened, in milliseconds since the epoch.
    pub at_ms: u64,
    /// The room's `min_per_minute`.
    pub min_per_minute: u64,
    /// The room's `max_per_minute`.
    pub max_per_minute: u64,
    /// The room's `target_p95_ms`.
    pub target_p95_ms: u64,
}

/// This node's last controller runs, by room.
#[derive(Debug, Default)]
pub struct AdaptiveState {
    runs: Mutex<HashMap<RoomId, AdaptiveStatus>>,
}

impl AdaptiveState {
    /// The room's last run on this node.
    pub fn status(&self, room: &RoomId) -> Option<AdaptiveStatus> {
        self.runs.lock().get(room).cloned()
    }

    /// Keeps a room's run and sets its gauges and decision counter. A p95 not measured is
    /// NaN, Prometheus' "no value" (as a summary without observations has): a 0 would read as
    /// an origin answering at once.
    pub fn record(&self, room: &RoomId, status: AdaptiveStatus) {
        let label = room.to_string();
        let p95_ms = status.p95_ms.unwrap_or(f64::NAN);
        gauge!("anteroom_adaptive_rate_per_second", "room" => label.clone())
            .set(status.rate_per_minute as f64 / 60.0);
        gauge!("anteroom_adaptive_p95_seconds", "room" => label.clone()).set(p95_ms / 1000.0);
        gauge!("anteroom_adaptive_error_ratio", "room" => label.clone()).set(status.error_rate);
        // Deprecated aliases in the old units, removed in the next release.
        gauge!("anteroom_adaptive_rate_per_minute", "room" => label.clone())
            .set(status.rate_per_minute as f64);
        gauge!("anteroom_adaptive_p95_ms", "room" => label.clone()).set(p95_ms);
        gauge!("anteroom_adaptive_error_rate", "room" => label.clone()).set(status.error_rate);
        gauge!("anteroom_adaptive_in_flight", "room" => label.clone()).set(status.in_flight as f64);
        counter!("anteroom_adaptive_decisions_total", "room" => label, "decision" => status.decision)
            .increment(1);
        self.runs.lock().insert(room.clone(), status);
    }

    /// Forgets the runs of rooms no longer adaptive (or gone).
    pub fn forget_except(&self, rooms: &[RoomId]) {
        self.runs.lock().retain(|room, _| rooms.contains(room));
    }
}
