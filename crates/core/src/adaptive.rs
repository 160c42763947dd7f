//! Adaptive admission (SPEC §5.4): a controller that sets a room's `admit_per_minute` from how
//! healthy the origin is.
//!
//! Every interval (10 s by default) the caller hands [`AdaptiveSettings::next_rate`] the
//! current rate and what the origin looked like over the last interval ([`Health`]): its
//! 95th-percentile latency and share of 5xx answers, measured by the gateway or pushed by the
//! origin. The answer is the new rate, always within `[min_per_minute, max_per_minute]`.
//!
//! The rule is additive increase, multiplicative decrease, with the decrease scaled by how far
//! over the target the latency is:
//!
//! - **Overloaded** (p95 above the target, or the error rate above `max_error_rate`): the rate
//!   is multiplied by `target / p95`, clamped to `[0.5, 0.9]` ([`MIN_DECREASE`],
//!   [`MAX_DECREASE`]); an error rate over the limit alone multiplies by 0.5. A slightly slow
//!   origin is eased off gently, a drowning one is halved at once.
//! - **Healthy and near the target** (p95 between [`NEAR_TARGET`] of the target and the
//!   target): the rate holds, so a settled system does not saw up and down.
//! - **Healthy with headroom**: the rate grows by a step of 5 % of the room's range
//!   ([`INCREASE_SHARE`]), at least 1 per minute.
//! - **No traffic** in the interval: nothing was learned; the rate holds.
//! - **No health at all** (a pushed signal missing for [`SIGNAL_STALE_AFTER_MS`]): the rate
//!   drops to `min_per_minute` and stays there until health arrives.

use std::time::Duration;

/// How long a pushed signal counts as current (SPEC §5.4: 30 s).
pub const SIGNAL_STALE_AFTER_MS: u64 = 30_000;
/// The default controller interval (SPEC §5.4: every 10 s).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// The smallest multiplicative decrease (halving).
pub const MIN_DECREASE: f64 = 0.5;
/// The largest multiplicative decrease (a tenth off).
pub const MAX_DECREASE: f64 = 0.9;
/// Below this share of the target latency the rate grows; between it and the target it holds.
pub const NEAR_TARGET: f64 = 0.8;
/// The additive step, as a share of `max_per_minute - min_per_minute`.
pub const INCREASE_SHARE: f64 = 0.05;

/// A room's `[room.adaptive]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdaptiveSettings {
    /// The 95th-percentile latency to keep the origin at, in milliseconds (at least 1).
    pub target_p95_ms: u64,
    /// The highest share of 5xx answers tolerated, in parts per million (0..=1,000,000).
    pub max_error_ppm: u32,
    /// The lowest rate the controller sets (admissions per minute, at least 1).
    pub min_per_minute: u64,
    /// The highest rate the controller sets (at least `min_per_minute`).
    pub max_per_minute: u64,
    /// How often the controller runs.
    pub interval: Duration,
}

/// What the origin looked like over one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Health {
    /// Measured (by the gateway) or pushed (by the origin) during the interval.
    Measured {
        /// The 95th-percentile latency, in milliseconds; `None` when nothing was answered.
        p95_ms: Option<f64>,
        /// The share of 5xx answers, 0 to 1.
        error_rate: f64,
    },
    /// Nothing known: the origin's pushed signal is missing.
    Unknown,
}

/// A load signal an origin pushed (`PUT /admin/v1/rooms/{room}/signal`): what it measured
/// of itself, kept by the store so every node's controller reads the same one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSignal {
    /// The origin's 95th-percentile latency, in milliseconds (finite, at least 0).
    pub p95_ms: f64,
    /// The origin's share of failed answers, 0 to 1.
    pub error_rate: f64,
    /// Requests the origin had in flight, if it said.
    pub in_flight: Option<u64>,
    /// When a node received it.
    pub received_at: crate::Timestamp,
}

impl LoadSignal {
    /// Whether the signal still counts at `now` (at most [`SIGNAL_STALE_AFTER_MS`] old).
    pub fn is_current(&self, now: crate::Timestamp) -> bool {
        now.0.saturating_sub(self.received_at.0) <= SIGNAL_STALE_AFTER_MS
    }
}

/// What the controller decided, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Over the latency target or the error limit: the rate went down.
    Decrease,
    /// Within [`NEAR_TARGET`] of the target: the rate held.
    Hold,
    /// Healthy with headroom: the rate went up.
    Increase,
    /// No answers in the interval: the rate held.
    Idle,
    /// No health known: the rate is `min_per_minute`.
    Floor,
}

impl Decision {
    /// A lowercase name for logs, JSON and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Decrease => "decrease",
            Decision::Hold => "hold",
            Decision::Increase => "increase",
            Decision::Idle => "idle",
            Decision::Floor => "floor",
        }
    }
}

impl AdaptiveSettings {
    /// The rate to start from: `current` brought within the bounds.
    pub fn clamp(&self, current: u64) -> u64 {
        current.clamp(self.min_per_minute, self.max_per_minute)
    }

    /// The additive step of one increase.
    pub fn increase_step(&self) -> u64 {
        let range = self.max_per_minute.saturating_sub(self.min_per_minute) as f64;
        ((range * INCREASE_SHARE).round() as u64).max(1)
    }

    /// The rate for the next interval, from the `current` one and the last interval's health.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anteroom_core::adaptive::{AdaptiveSettings, Decision, Health};
    ///
    /// let settings = AdaptiveSettings {
    ///     target_p95_ms: 200,
    ///     max_error_ppm: 50_000,
    ///     min_per_minute: 60,
    ///     max_per_minute: 1_260,
    ///     interval: Duration::from_secs(10),
    /// };
    /// let fast = Health::Measured { p95_ms: Some(50.0), error_rate: 0.0 };
    /// assert_eq!(settings.next_rate(600, fast), (660, Decision::Increase));
    /// let slow = Health::Measured { p95_ms: Some(400.0), error_rate: 0.0 };
    /// assert_eq!(settings.next_rate(600, slow), (300, Decision::Decrease));
    /// assert_eq!(settings.next_rate(600, Health::Unknown), (60, Decision::Floor));
    /// ```
    pub fn next_rate(&self, current: u64, health: Health) -> (u64, Decision) {
        let current = self.clamp(current);
        let Health::Measured { p95_ms, error_rate } = health else {
            return (self.min_per_minute, Decision::Floor);
        };
        let max_error_rate = f64::from(self.max_error_ppm) / 1_000_000.0;
        let target = self.target_p95_ms as f64;
        let over_errors = error_rate > max_error_rate;
        let factor = match p95_ms {
            Some(p95) if p95 > target => (target / p95).clamp(MIN_DECREASE, MAX_DECREASE),
            _ if over_errors => MIN_DECREASE,
            Some(p95) if p95 >= target * NEAR_TARGET => return (current, Decision::Hold),
            Some(_) => {
                let next = current.saturating_add(self.increase_step());
                return (self.clamp(next), Decision::Increase);
            }
            None => return (current, Decision::Idle),
        };
        let factor = if over_errors {
            factor.min(MIN_DECREASE)
        } else {
            factor
        };
        let next = (current as f64 * factor).floor() as u64;
        (self.clamp(next), Decision::Decrease)
    }
}

#[cfg(test)]
mod tests;
