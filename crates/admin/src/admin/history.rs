//! A node-local per-second history of each room's figures over the last hour, for the stats
//! endpoint and the panel's charts. The sampler (see `events.rs`) adds one sample per room per
//! second; each room keeps at most [`HISTORY_SECONDS`] of them in a ring buffer, so memory is
//! bounded whatever the uptime. A restarted node starts with an empty history. Upstream
//! latency is what this node's gateway measured on the room's routes during each second.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

use anteroom_core::RoomId;

/// How many per-second samples a room keeps: one hour.
pub(crate) const HISTORY_SECONDS: usize = 3600;

/// One room's figures at one second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    /// Unix seconds.
    pub(crate) at: u64,
    pub(crate) waiting: u64,
    pub(crate) active: u64,
    pub(crate) admitted_unclaimed: u64,
    pub(crate) serving: u64,
    /// Admissions since the previous sample.
    pub(crate) admitted: u64,
    /// Joins since the previous sample.
    pub(crate) joined: u64,
    /// Upstream responses on the room's routes since the previous sample (this node's).
    pub(crate) upstream_responses: u64,
    /// Their median and 95th-percentile latency in milliseconds; `None` without responses.
    pub(crate) upstream_p50_ms: Option<f64>,
    pub(crate) upstream_p95_ms: Option<f64>,
}

/// Every room's ring buffer.
#[derive(Default)]
pub(crate) struct History {
    rooms: Mutex<HashMap<RoomId, VecDeque<Sample>>>,
}

impl History {
    /// Adds a sample; a second already sampled is replaced.
    pub(crate) fn record(&self, room: &RoomId, sample: Sample) {
        let mut rooms = self.rooms.lock();
        let samples = rooms
            .entry(room.clone())
            .or_insert_with(|| VecDeque::with_capacity(64));
        if samples.back().is_some_and(|last| last.at >= sample.at) {
            samples.pop_back();
        }
        if samples.len() == HISTORY_SECONDS {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The samples of the last `seconds` (at most an hour), oldest first.
    pub(crate) fn recent(&self, room: &RoomId, seconds: usize) -> Vec<Sample> {
        let rooms = self.rooms.lock();
        let Some(samples) = rooms.get(room) else {
            return Vec::new();
        };
        let skip = samples.len().saturating_sub(seconds.min(HISTORY_SECONDS));
        samples.iter().skip(skip).copied().collect()
    }

    /// Forgets rooms that no longer exist.
    pub(crate) fn retain(&self, keep: impl Fn(&RoomId) -> bool) {
        self.rooms.lock().retain(|room, _| keep(room));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sample(at: u64) -> Sample {
        Sample {
            at,
            waiting: at,
            active: 0,
            admitted_unclaimed: 0,
            serving: 0,
            admitted: 0,
            joined: 0,
            upstream_responses: 0,
            upstream_p50_ms: None,
            upstream_p95_ms: None,
        }
    }

    #[test]
    fn keeps_the_last_hour_at_most() {
        let history = History::default();
        let room = RoomId::new("r").unwrap();
        for at in 0..(HISTORY_SECONDS as u64 + 10) {
            history.record(&room, sample(at));
        }
        let all = history.recent(&room, usize::MAX);
        assert_eq!(all.len(), HISTORY_SECONDS);
        assert_eq!(all[0].at, 10);
        let last = history.recent(&room, 3);
        assert_eq!(
            last.iter().map(|s| s.at).collect::<Vec<_>>(),
            [3607, 3608, 3609]
        );
        // The same second again replaces the sample.
        history.record(&room, sample(3609));
        assert_eq!(history.recent(&room, usize::MAX).len(), HISTORY_SECONDS);
        history.retain(|_| false);
        assert!(history.recent(&room, 10).is_empty());
    }
}
