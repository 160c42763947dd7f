//! The room's admission token bucket (SPEC §5.1 step 2): `admit_per_minute` sustained,
//! `admit_burst` at once.
//!
//! Tokens are kept in exact integer units of 1/60 000 of a token, so that a millisecond adds
//! exactly `admit_per_minute` units and no rounding drift can ever let I3 slip.

use crate::clock::Timestamp;
use crate::room::Limits;

/// Units per admission token: one minute in milliseconds.
const UNITS_PER_TOKEN: u64 = 60_000;

/// Admission budget of one room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionBucket {
    /// Budget in units of 1/60 000 token.
    pub units: u64,
    /// When `units` was last brought up to date.
    pub updated_at: Timestamp,
}

impl AdmissionBucket {
    /// A full bucket for `limits`.
    pub fn full(limits: Limits, now: Timestamp) -> AdmissionBucket {
        AdmissionBucket {
            units: capacity_units(limits),
            updated_at: now,
        }
    }

    /// Adds the budget earned since the last refill, up to the burst.
    pub fn refill(&mut self, limits: Limits, now: Timestamp) {
        let elapsed_ms = now.as_millis().saturating_sub(self.updated_at.as_millis());
        let earned = elapsed_ms.saturating_mul(limits.admit_per_minute);
        self.units = self
            .units
            .saturating_add(earned)
            .min(capacity_units(limits));
        if now > self.updated_at {
            self.updated_at = now;
        }
    }

    /// Whole admissions the bucket allows now (unbounded when `admit_per_minute` is 0).
    pub fn available(&self, limits: Limits) -> u64 {
        if limits.admit_per_minute == 0 {
            u64::MAX
        } else {
            self.units / UNITS_PER_TOKEN
        }
    }

    /// Spends `admissions` tokens; callers check [`available`](Self::available) first.
    pub fn spend(&mut self, limits: Limits, admissions: u64) {
        if limits.admit_per_minute != 0 {
            self.units = self
                .units
                .saturating_sub(admissions.saturating_mul(UNITS_PER_TOKEN));
        }
    }

    /// Trims the budget to a (possibly lowered) burst after a config change.
    pub fn clamp(&mut self, limits: Limits) {
        self.units = self.units.min(capacity_units(limits));
    }
}

fn capacity_units(limits: Limits) -> u64 {
    limits.admit_burst.max(1).saturating_mul(UNITS_PER_TOKEN)
}
