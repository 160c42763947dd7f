//! Sessions this node learned were ended by any node (SPEC §8.2), so it refuses their passes
//! at once: recorded by the change-notice follower (`notices.rs`) and the admin API, checked by the
//! gateway and the join gate.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use anteroom_core::SessionId;

/// How long an ended session is remembered here; a pass lives at most its `session_ttl`
/// without renewal, and passes older than this are checked against the store anyway.
const REMEMBER_ENDED: Duration = Duration::from_secs(2 * 3600);

/// Sessions this node learned were ended (completed, abandoned or revoked) by any node.
#[derive(Default)]
pub struct Revocations {
    ended: Mutex<HashMap<SessionId, Instant>>,
}

impl Revocations {
    /// Whether `session` was ended recently (its pass must be refused).
    pub fn contains(&self, session: &SessionId) -> bool {
        self.ended.lock().contains_key(session)
    }

    /// Remembers an ended session.
    pub fn record(&self, session: SessionId) {
        let now = Instant::now();
        let mut ended = self.ended.lock();
        ended.insert(session, now);
        // Forgetting is amortised over insertions: at most one sweep per doubling.
        if ended.len().is_power_of_two() && ended.len() >= 1024 {
            ended.retain(|_, at| now.duration_since(*at) < REMEMBER_ENDED);
        }
    }

    /// Sessions remembered now.
    pub fn len(&self) -> usize {
        self.ended.lock().len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.ended.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_sessions_are_remembered() {
        let revocations = Revocations::default();
        let session = SessionId::from_bytes([3; 16]);
        assert!(!revocations.contains(&session));
        revocations.record(session);
        assert!(revocations.contains(&session));
        assert_eq!(revocations.len(), 1);
        for byte in 0..=255u8 {
            for other in 0..8u8 {
                let mut id = [byte; 16];
                id[0] = other;
                revocations.record(SessionId::from_bytes(id));
            }
        }
        assert!(
            revocations.contains(&session),
            "recent entries survive sweeps"
        );
    }
}
