//! Wait estimates and the polling schedule (SPEC §5.5).
//!
//! The ETA divides the people ahead by the *measured* admission rate, an exponentially weighted
//! moving average over the last minutes, never a configured constant. Intervals in which nobody
//! waited and nobody was admitted carry no information about the room's pace and are skipped,
//! so a quiet hour does not make the first visitor of a rush look hopeless.

use rand::Rng;

use crate::clock::Timestamp;

/// Time constant of the admission-rate average, in seconds.
const RATE_TIME_CONSTANT_SECS: f64 = 120.0;

/// Observed time below which the rate is still unknown.
const MIN_OBSERVED_SECS: f64 = 1.5;

/// The measured admission rate of a room: admissions and observed time, both decayed
/// exponentially with a two-minute time constant. Their ratio is the rate; unlike a plain
/// moving average of per-interval samples it needs no warm-up, so the first estimate after a
/// room opens is already the real pace.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AdmissionRate {
    /// Decayed count of admissions.
    pub admissions: f64,
    /// Decayed observed time, in seconds.
    pub seconds: f64,
    /// End of the last measured interval.
    pub measured_until: Option<Timestamp>,
}

impl AdmissionRate {
    /// A rate known only as admissions per second (for views built from a snapshot).
    pub fn from_estimate(per_second: Option<f64>) -> AdmissionRate {
        match per_second {
            Some(rate) => AdmissionRate {
                admissions: rate * RATE_TIME_CONSTANT_SECS,
                seconds: RATE_TIME_CONSTANT_SECS,
                measured_until: None,
            },
            None => AdmissionRate::default(),
        }
    }

    /// Admissions per second; `None` until enough time has been observed.
    pub fn per_second(&self) -> Option<f64> {
        (self.seconds >= MIN_OBSERVED_SECS).then(|| self.admissions / self.seconds)
    }

    /// Folds in `admitted` admissions made between the last measurement and `now`.
    /// `had_demand` says whether anyone was waiting during the interval.
    pub fn record(&mut self, admitted: u64, had_demand: bool, now: Timestamp) {
        let Some(since) = self.measured_until else {
            self.measured_until = Some(now);
            return;
        };
        if now <= since {
            return;
        }
        self.measured_until = Some(now);
        if admitted == 0 && !had_demand {
            return;
        }
        let elapsed_secs = now.since(since).as_secs_f64();
        let decay = (-elapsed_secs / RATE_TIME_CONSTANT_SECS).exp();
        self.admissions = self.admissions * decay + admitted as f64;
        self.seconds = self.seconds * decay + elapsed_secs;
    }
}

/// Seconds until `ahead` people have been admitted at `rate`; `None` while the rate is unknown
/// or zero (SPEC §5.5).
pub fn eta_seconds(ahead: u64, rate: &AdmissionRate) -> Option<u64> {
    if ahead == 0 {
        return Some(0);
    }
    let per_second = rate.per_second()?;
    if per_second <= 1e-9 {
        return None;
    }
    // The small slack keeps float noise (4.999… per second) from adding a whole second.
    Some((ahead as f64 / per_second - 1e-6).ceil() as u64)
}

/// How long a client should wait before polling again (SPEC §5.5): 2 s up to 500 ahead, 5 s up
/// to 2 000, 10 s up to 10 000, else 15 s; ±20 % jitter; clamped to [1 s, 60 s].
pub fn next_poll_ms(ahead: u64, rng: &mut impl Rng) -> u64 {
    let base: u64 = match ahead {
        0..=500 => 2_000,
        501..=2_000 => 5_000,
        2_001..=10_000 => 10_000,
        _ => 15_000,
    };
    let jitter: f64 = rng.gen_range(-0.2..=0.2);
    let jittered = (base as f64 * (1.0 + jitter)).round() as u64;
    jittered.clamp(1_000, 60_000)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn rate_is_unknown_until_measured() {
        let mut rate = AdmissionRate::default();
        assert_eq!(eta_seconds(10, &rate), None);
        rate.record(0, true, Timestamp(1_000));
        assert_eq!(eta_seconds(10, &rate), None);
        rate.record(5, true, Timestamp(2_000));
        assert_eq!(rate.per_second(), None, "one second is too little to tell");
        rate.record(5, true, Timestamp(3_000));
        let measured = rate.per_second().unwrap();
        assert!((measured - 5.0).abs() < 0.01, "measured {measured}");
        assert_eq!(eta_seconds(10, &rate), Some(2));
        assert_eq!(eta_seconds(0, &rate), Some(0));
    }

    #[test]
    fn idle_intervals_do_not_dilute_the_rate() {
        let mut rate = AdmissionRate::default();
        rate.record(0, true, Timestamp(0));
        rate.record(20, true, Timestamp(2_000));
        rate.record(0, false, Timestamp(3_600_000));
        assert_eq!(rate.per_second(), Some(10.0));
    }

    #[test]
    fn rate_converges_to_the_true_pace() {
        let mut rate = AdmissionRate::default();
        rate.record(0, true, Timestamp(0));
        rate.record(50, true, Timestamp(1_000));
        for second in 2..=1200 {
            rate.record(2, true, Timestamp(second * 1_000));
        }
        let measured = rate.per_second().unwrap();
        assert!((measured - 2.0).abs() < 0.05, "measured {measured}");
    }

    #[test]
    fn the_first_estimate_is_already_the_real_pace() {
        // One admission every 5 s, ticked twice a second: no warm-up from zero.
        let mut rate = AdmissionRate::default();
        rate.record(0, true, Timestamp(0));
        for tick in 1..=20u64 {
            let admitted = u64::from(tick % 10 == 0);
            rate.record(admitted, true, Timestamp(tick * 500));
        }
        let measured = rate.per_second().unwrap();
        assert!((measured - 0.2).abs() < 0.02, "measured {measured}");
    }

    #[test]
    fn poll_schedule_grows_with_ahead_and_jitters_within_bounds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for (ahead, base) in [
            (0, 2_000u64),
            (500, 2_000),
            (501, 5_000),
            (2_000, 5_000),
            (10_000, 10_000),
            (10_001, 15_000),
        ] {
            for _ in 0..200 {
                let poll = next_poll_ms(ahead, &mut rng);
                assert!(
                    poll >= base * 8 / 10 && poll <= base * 12 / 10,
                    "ahead {ahead}: {poll}"
                );
            }
        }
    }
}
