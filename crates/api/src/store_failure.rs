//! Store failures as one node sees them (SPEC §9.4): counted by operation, logged at most once
//! per room every [`LOG_EVERY`] (with how many failures the quiet period hid), and a line when
//! a room's store answers again.
//!
//! Only backend failures count: a refused operation (an expired ticket, a closed room) is the
//! store answering. What a failing room then does, `on_store_error`, is decided by the
//! handlers from the room's last known configuration (`AppState::on_store_error`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use anteroom_core::RoomId;
use anteroom_store::StoreError;

/// How long the store must have failed for a room (no call about it answered since, as far
/// as the node follows: its ticks, its copies) before the room's `on_store_error` applies to a
/// visitor without a pass. A store that answered moments ago and now fails a call is
/// overloaded (a crowd's joins waiting past their bound in the node's queue) or had a blip,
/// not gone: `open` then would hand the site the very crowd the room is there to hold back,
/// and anyone able to slow the store down could switch the room off. Until then such a
/// visitor is answered 503, as in a `closed` room.
pub const STORE_GONE_AFTER: Duration = Duration::from_secs(5);

/// A room's store failures are logged at most this often.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// The most rooms followed apart while they fail: room ids come from requests, and a made-up
/// one is never ticked, so it would stay failing (and be logged once) for each id sent while
/// the store fails. Past this many, failures are followed as the node's (no room).
const MAX_FAILING_ROOMS: usize = 1024;

/// How many store calls failed on this node, and what the rooms did about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreErrorCounts {
    /// Failed calls by operation (`join`, `status`, `tick`, `room`, …).
    pub by_operation: BTreeMap<&'static str, u64>,
    /// Requests let through without a pass by `on_store_error = "open"` rooms.
    pub let_through: u64,
    /// Requests answered 503 because of a store failure.
    pub refused: u64,
}

impl StoreErrorCounts {
    /// Every failed call, whatever the operation.
    pub fn total(&self) -> u64 {
        self.by_operation.values().sum()
    }
}

/// The node's record of store failures; shared by every handler and the ticker.
#[derive(Default)]
pub struct StoreFailures {
    by_operation: Mutex<BTreeMap<&'static str, u64>>,
    let_through: AtomicU64,
    refused: AtomicU64,
    /// Rooms (or `None`: calls about no room) currently failing, for rate-limited logs and
    /// [`gone_for`](Self::gone_for).
    failing: Mutex<HashMap<Option<RoomId>, Failing>>,
    /// The ticker has had an answer from the store at least once.
    answered_once: AtomicBool,
}

struct Failing {
    since: Instant,
    logged_at: Instant,
    /// Failures since the last log line.
    unlogged: u64,
    /// Failures since the room started failing.
    total: u64,
}

impl StoreFailures {
    /// Counts a failed store call and logs it unless this room was logged recently. Refusals
    /// that are not backend failures are ignored.
    pub fn record(&self, room: Option<&RoomId>, operation: &'static str, error: &StoreError) {
        if !matches!(error, StoreError::Backend { .. }) {
            return;
        }
        *self.by_operation.lock().entry(operation).or_insert(0) += 1;
        let now = Instant::now();
        let mut failing = self.failing.lock();
        let followed = room.filter(|room| {
            failing.len() < MAX_FAILING_ROOMS || failing.contains_key(&Some((*room).clone()))
        });
        let key = followed.cloned();
        let state = failing.entry(key).or_insert(Failing {
            since: now,
            logged_at: now,
            unlogged: 0,
            total: 0,
        });
        state.total += 1;
        let first = state.total == 1;
        if !first && now.duration_since(state.logged_at) < LOG_EVERY {
            state.unlogged += 1;
            return;
        }
        let hidden = state.unlogged;
        let failing_for = now.duration_since(state.since);
        state.logged_at = now;
        state.unlogged = 0;
        drop(failing);
        let source = std::error::Error::source(error).map(ToString::to_string);
        tracing::error!(
            room = room.map(RoomId::as_str).unwrap_or("-"),
            operation,
            %error,
            source = source.as_deref().unwrap_or(""),
            failing_for_secs = failing_for.as_secs(),
            failures_since_last_log = hidden,
            "store unavailable; the room follows its on_store_error until it answers again"
        );
    }

    /// Notes that a store call about `room` succeeded; logs the recovery of a failing room.
    pub(crate) fn succeeded(&self, room: Option<&RoomId>) {
        self.answered_once.store(true, Ordering::Release);
        let mut failing = self.failing.lock();
        if failing.is_empty() {
            return;
        }
        if let Some(state) = failing.remove(&room.cloned()) {
            drop(failing);
            // At the failure's own level of attention, so whoever saw it sees the end of it.
            tracing::warn!(
                room = room.map(RoomId::as_str).unwrap_or("-"),
                failed_calls = state.total,
                failed_for_secs = state.since.elapsed().as_secs(),
                "store answers again"
            );
        }
    }

    /// Whether the store is gone for `room`, not only failing now: it has failed for the room
    /// (or to list the rooms) for [`STORE_GONE_AFTER`] with no tick answered since, or it has
    /// never answered this node's ticker.
    pub fn gone_for(&self, room: &RoomId) -> bool {
        if !self.answered_once.load(Ordering::Acquire) {
            return true;
        }
        let failing = self.failing.lock();
        let since = |key: Option<RoomId>| failing.get(&key).map(|state| state.since);
        // Rooms past the bound of those followed apart are followed as the node's.
        [since(Some(room.clone())), since(None)]
            .into_iter()
            .flatten()
            .min()
            .is_some_and(|since| since.elapsed() >= STORE_GONE_AFTER)
    }

    /// Forgets the rooms followed as failing that the store, listing its rooms just now, does
    /// not have (ids made up by requests): they are never ticked, so nothing else would, and
    /// they would fill the rooms followed apart for good.
    pub(crate) fn forget_unlisted(&self, listed: &[anteroom_core::room::RoomConfig]) {
        let mut failing = self.failing.lock();
        if failing.is_empty() {
            return;
        }
        failing.retain(|room, _| {
            room.as_ref()
                .is_none_or(|room| listed.iter().any(|config| config.id == *room))
        });
    }

    /// Counts a request let through without a pass (`on_store_error = "open"`).
    pub fn let_through(&self) {
        self.let_through.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused with 503 because of a store failure.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn counts(&self) -> StoreErrorCounts {
        StoreErrorCounts {
            by_operation: self.by_operation.lock().clone(),
            let_through: self.let_through.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn backend() -> StoreError {
        StoreError::Backend {
            message: "redis did not complete join within 2s".to_owned(),
            source: None,
        }
    }

    #[test]
    fn backend_failures_are_counted_by_operation_and_refusals_are_not() {
        let failures = StoreFailures::default();
        let room = RoomId::new("launch").unwrap();
        failures.record(Some(&room), "join", &backend());
        failures.record(Some(&room), "join", &backend());
        failures.record(None, "rooms", &backend());
        failures.record(
            Some(&room),
            "status",
            &StoreError::RoomNotFound(room.clone()),
        );
        failures.let_through();
        failures.refused();
        let counts = failures.counts();
        assert_eq!(counts.by_operation.get("join"), Some(&2));
        assert_eq!(counts.by_operation.get("rooms"), Some(&1));
        assert_eq!(counts.by_operation.get("status"), None);
        assert_eq!(counts.total(), 3);
        assert_eq!((counts.let_through, counts.refused), (1, 1));

        // Logged once, then quiet; success forgets the failing state.
        assert_eq!(
            failures
                .failing
                .lock()
                .get(&Some(room.clone()))
                .unwrap()
                .unlogged,
            1
        );
        failures.succeeded(Some(&room));
        assert!(!failures.failing.lock().contains_key(&Some(room)));
    }

    #[test]
    fn a_store_is_gone_for_a_room_once_it_failed_for_a_while_with_no_tick_answered() {
        let failures = StoreFailures::default();
        let room = RoomId::new("launch").unwrap();
        assert!(failures.gone_for(&room), "never answered this node");
        failures.succeeded(None);
        assert!(!failures.gone_for(&room), "not failing");
        failures.record(Some(&room), "join", &backend());
        assert!(
            !failures.gone_for(&room),
            "failing just now: busy, not gone"
        );
        let long_ago = Instant::now() - STORE_GONE_AFTER;
        failures
            .failing
            .lock()
            .get_mut(&Some(room.clone()))
            .unwrap()
            .since = long_ago;
        assert!(failures.gone_for(&room), "failing for the bound");
        failures.succeeded(Some(&room));
        assert!(!failures.gone_for(&room), "a tick answered");
        // The listing failing that long says so for every room.
        failures.record(None, "rooms", &backend());
        failures.failing.lock().get_mut(&None).unwrap().since = long_ago;
        failures.record(Some(&room), "join", &backend());
        assert!(failures.gone_for(&room));
    }

    #[test]
    fn made_up_rooms_cannot_grow_the_failing_rooms_past_their_bound() {
        let failures = StoreFailures::default();
        for n in 0..MAX_FAILING_ROOMS * 2 {
            let room = RoomId::new(&format!("r{n}")).unwrap();
            failures.record(Some(&room), "room", &backend());
        }
        let failing = failures.failing.lock();
        assert_eq!(failing.len(), MAX_FAILING_ROOMS + 1);
        assert_eq!(
            failing.get(&None).map(|state| state.total),
            Some(MAX_FAILING_ROOMS as u64)
        );
        drop(failing);
        // A room already followed goes on being followed apart.
        let first = RoomId::new("r0").unwrap();
        failures.record(Some(&first), "room", &backend());
        assert_eq!(failures.failing.lock()[&Some(first.clone())].total, 2);
        // A listing of the store's rooms forgets those it does not have.
        let listed = [anteroom_core::room::RoomConfig::with_defaults(
            first.clone(),
        )];
        failures.forget_unlisted(&listed);
        let failing = failures.failing.lock();
        assert_eq!(failing.len(), 2, "r0 and the node's");
        assert!(failing.contains_key(&Some(first)));
    }
}
