//! Wait estimates and the polling schedule (SPEC §5.5).
//!
//! The ETA divides the people ahead by the *measured* admission rate, an exponentially weighted
//! moving average over the last minutes, never a configured constant. Intervals in which nobody
//! waited and nobody was admitted carry no information about the room's pace and are skipped,
//! so a quiet hour does not make the first visitor of a rush look hopeless. The average's time
//! constant is two minutes.
//!
//! Before the first admissions have been measured (the start of a sale), and while the measured
//! rate is zero (a full room whose sessions have not ended yet), the estimate comes from the
//! room's configured pace instead ([`ConfiguredPace`]), and says so ([`EtaBasis`]): a visitor
//! sees a wait from their first second in line, and a client can tell a planned pace from an
//! observed one.
//!
//! [`next_poll_ms`] spaces a polling client's calls by how far back it waits, with ±20 %
//! jitter so a crowd that joined together does not poll together; [`next_poll_ms_within`]
//! brings the next poll forward to the wait the visitor is shown, so a visitor of a fast room
//! hears of its admission when it comes, not a schedule's interval later.

use rand::Rng;

use crate::clock::Timestamp;
use crate::room::RoomConfig;

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
    seconds_at(ahead, rate.per_second()?)
}

/// Where an estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtaBasis {
    /// The measured admission rate ([`AdmissionRate`]).
    Measured,
    /// The room's configured pace ([`ConfiguredPace`]), while nothing has been measured yet.
    Configured,
}

/// A wait estimate and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Seconds until the people ahead have been admitted.
    pub seconds: u64,
    /// Where the figure comes from.
    pub basis: EtaBasis,
}

/// The admission pace a room's configuration allows, in admissions per second: the slower of
/// `admit_per_minute` and the turnover of `max_active` slots, each held for one idle
/// `session_ttl` (a slot freed earlier, by a completed session, only makes the estimate
/// pessimistic). `None` when neither limits the room: it then admits as fast as people come,
/// and only a measurement says anything.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConfiguredPace {
    per_second: Option<f64>,
}

impl ConfiguredPace {
    /// The pace `room` is configured for.
    pub fn of(room: &RoomConfig) -> ConfiguredPace {
        let by_rate = (room.admit_per_minute > 0).then(|| room.admit_per_minute as f64 / 60.0);
        let slot_secs = room.session_ttl.as_secs_f64();
        let by_capacity =
            (room.max_active > 0 && slot_secs > 0.0).then(|| room.max_active as f64 / slot_secs);
        let per_second = match (by_rate, by_capacity) {
            (Some(rate), Some(capacity)) => Some(rate.min(capacity)),
            (rate, capacity) => rate.or(capacity),
        };
        ConfiguredPace { per_second }
    }

    /// Admissions per second; `None` when the configuration sets no limit.
    pub fn per_second(&self) -> Option<f64> {
        self.per_second
    }
}

/// The wait for `ahead` people: from the measured rate when there is one, else from the
/// configured pace; `None` when neither is known (SPEC §5.5).
pub fn estimate(
    ahead: u64,
    measured: &AdmissionRate,
    configured: ConfiguredPace,
) -> Option<Estimate> {
    with_configured_fallback(eta_seconds(ahead, measured), ahead, configured)
}

/// An estimate already made from the measured rate (a store's view carries one), completed
/// from the configured pace when it is `None`.
pub fn with_configured_fallback(
    measured_seconds: Option<u64>,
    ahead: u64,
    configured: ConfiguredPace,
) -> Option<Estimate> {
    if let Some(seconds) = measured_seconds {
        return Some(Estimate {
            seconds,
            basis: EtaBasis::Measured,
        });
    }
    let per_second = configured.per_second()?;
    let seconds = seconds_at(ahead, per_second)?;
    Some(Estimate {
        seconds,
        basis: EtaBasis::Configured,
    })
}

/// Seconds for `ahead` admissions at `per_second`; `None` at a zero pace.
fn seconds_at(ahead: u64, per_second: f64) -> Option<u64> {
    if per_second <= 1e-9 {
        return None;
    }
    // The small slack keeps float noise (4.999… per second) from adding a whole second.
    Some((ahead as f64 / per_second - 1e-6).ceil().max(0.0) as u64)
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
    jittered.clamp(MIN_POLL_MS, MAX_POLL_MS)
}

/// [`next_poll_ms`] for a visitor shown the wait `eta_seconds`: never later than that wait,
/// nor sooner than the schedule's shortest interval for it (2 s, less the jitter below). The schedule counts people,
/// not time: in a room admitting 500 a second, 2,001 ahead is four seconds from the door, yet
/// the schedule says 10. An admitted ticket holds a slot of `max_active` until its visitor
/// sees the admission and claims the pass (I2), so every second a poll comes after the
/// admission is a second of a slot nobody uses, and a fast room polled by the plain schedule
/// fills its cap with such tickets and admits below its rate. The floor keeps the front of
/// the line, whose polls the store answers, polling no more often than the schedule has it.
///
/// A poll brought forward keeps a jitter of its own, below the wait (up to 20 % sooner):
/// visitors of a fast room joined in the same second are shown the same whole seconds, and
/// would otherwise all poll in the same millisecond.
pub fn next_poll_ms_within(ahead: u64, eta_seconds: Option<u64>, rng: &mut impl Rng) -> u64 {
    let scheduled = next_poll_ms(ahead, rng);
    let Some(seconds) = eta_seconds else {
        return scheduled;
    };
    let wait_ms = seconds.saturating_mul(1_000).max(SHORTEST_BASE_MS);
    if scheduled <= wait_ms {
        return scheduled;
    }
    let sooner: f64 = rng.gen_range(0.0..=0.2);
    (wait_ms as f64 * (1.0 - sooner)).round() as u64
}

/// Bounds of every poll interval (SPEC §5.5).
const MIN_POLL_MS: u64 = 1_000;
const MAX_POLL_MS: u64 = 60_000;

/// The schedule's shortest interval before jitter (up to 500 ahead).
const SHORTEST_BASE_MS: u64 = 2_000;

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

    fn pace(max_active: u64, admit_per_minute: u64, session_ttl_secs: u64) -> ConfiguredPace {
        let mut room = RoomConfig::with_defaults(crate::RoomId::new("r").unwrap());
        room.max_active = max_active;
        room.admit_per_minute = admit_per_minute;
        room.session_ttl = std::time::Duration::from_secs(session_ttl_secs);
        ConfiguredPace::of(&room)
    }

    #[test]
    fn the_configured_pace_is_the_slower_of_rate_and_turnover() {
        assert_eq!(pace(0, 120, 600).per_second(), Some(2.0), "rate only");
        assert_eq!(pace(60, 0, 600).per_second(), Some(0.1), "slots only");
        assert_eq!(
            pace(600, 30, 60).per_second(),
            Some(0.5),
            "the rate is slower"
        );
        assert_eq!(
            pace(6, 600, 60).per_second(),
            Some(0.1),
            "the slots are slower"
        );
        assert_eq!(
            pace(0, 0, 600).per_second(),
            None,
            "nothing limits the room"
        );
    }

    #[test]
    fn before_any_measurement_the_estimate_comes_from_the_configuration() {
        let unmeasured = AdmissionRate::default();
        assert_eq!(
            estimate(30, &unmeasured, pace(0, 60, 600)),
            Some(Estimate {
                seconds: 30,
                basis: EtaBasis::Configured
            })
        );
        assert_eq!(estimate(30, &unmeasured, pace(0, 0, 600)), None);
        let measured = AdmissionRate::from_estimate(Some(10.0));
        assert_eq!(
            estimate(30, &measured, pace(0, 60, 600)),
            Some(Estimate {
                seconds: 3,
                basis: EtaBasis::Measured
            }),
            "a measurement wins over the plan"
        );
        let stalled = AdmissionRate::from_estimate(Some(0.0));
        assert_eq!(
            estimate(30, &stalled, pace(0, 60, 600)),
            Some(Estimate {
                seconds: 30,
                basis: EtaBasis::Configured
            }),
            "a measured standstill falls back to the plan"
        );
        assert_eq!(
            with_configured_fallback(None, 0, pace(1, 0, 600)),
            Some(Estimate {
                seconds: 0,
                basis: EtaBasis::Configured
            })
        );
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

    #[test]
    fn a_poll_comes_no_later_than_the_estimated_wait() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        // 2,001 ahead at 500 a second: four seconds (up to 20 % sooner), not the schedule's
        // ten; spread, not all at one millisecond.
        let polls: std::collections::BTreeSet<u64> = (0..200)
            .map(|_| next_poll_ms_within(2_001, Some(4), &mut rng))
            .collect();
        assert!(
            polls.iter().all(|poll| (3_200..=4_000).contains(poll)),
            "{polls:?}"
        );
        assert!(polls.len() > 100, "{} distinct polls", polls.len());
        // 1,000 ahead at 1,000 a second: 2 s, the schedule's shortest interval (up to 20 %
        // sooner, as the schedule's own jitter has it), not 1 s.
        for _ in 0..200 {
            let poll = next_poll_ms_within(1_000, Some(1), &mut rng);
            assert!((1_600..=2_000).contains(&poll), "{poll}");
        }
        // At the front the schedule stands (2 s ± 20 %), capped at 2 s.
        for _ in 0..200 {
            let poll = next_poll_ms_within(300, Some(0), &mut rng);
            assert!((1_600..=2_000).contains(&poll), "{poll}");
        }
        // A wait longer than the schedule leaves the schedule as it is.
        for _ in 0..200 {
            let poll = next_poll_ms_within(20_000, Some(600), &mut rng);
            assert!((12_000..=18_000).contains(&poll), "{poll}");
        }
        // No estimate: the schedule.
        for _ in 0..200 {
            let poll = next_poll_ms_within(1_000, None, &mut rng);
            assert!((4_000..=6_000).contains(&poll), "{poll}");
        }
    }

    proptest::proptest! {
        /// Over any line and any estimate, a poll is the schedule's jittered interval, or, when
        /// that is later than the estimated wait (at least 2 s), up to 20 % before that wait.
        #[test]
        fn the_poll_is_the_earlier_of_schedule_and_wait(
            ahead in 0u64..1_000_000,
            eta in proptest::option::of(0u64..100_000),
            seed in proptest::num::u64::ANY,
        ) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let scheduled = next_poll_ms(ahead, &mut rng);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let poll = next_poll_ms_within(ahead, eta, &mut rng);
            proptest::prop_assert!(poll >= MIN_POLL_MS);
            proptest::prop_assert!(poll <= scheduled);
            proptest::prop_assert!(poll >= scheduled.min(SHORTEST_BASE_MS * 4 / 5));
            match eta {
                Some(eta) => {
                    let wait = (eta * 1_000).max(SHORTEST_BASE_MS);
                    if scheduled <= wait {
                        proptest::prop_assert_eq!(poll, scheduled);
                    } else {
                        proptest::prop_assert!(poll <= wait && poll >= wait * 4 / 5, "{poll} {wait}");
                    }
                }
                None => proptest::prop_assert_eq!(poll, scheduled),
            }
        }
    }
}
