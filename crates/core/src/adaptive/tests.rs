//! Tests of the adaptive controller: each rule on its own, then the controller against a
//! simulated origin whose latency grows with the sessions it serves.

use super::*;

fn settings() -> AdaptiveSettings {
    AdaptiveSettings {
        target_p95_ms: 200,
        max_error_ppm: 50_000,
        min_per_minute: 60,
        max_per_minute: 1_260,
        interval: DEFAULT_INTERVAL,
    }
}

fn measured(p95_ms: f64, error_rate: f64) -> Health {
    Health::Measured {
        p95_ms: Some(p95_ms),
        error_rate,
    }
}

fn check(current: u64, health: Health, expected: (u64, Decision)) {
    assert_eq!(
        settings().next_rate(current, health),
        expected,
        "from {current} with {health:?}"
    );
}

#[test]
fn each_rule() {
    // Headroom: one step of 5 % of the range (60) up, never past the maximum.
    check(600, measured(100.0, 0.0), (660, Decision::Increase));
    check(1_250, measured(100.0, 0.0), (1_260, Decision::Increase));
    // Near the target: hold.
    check(600, measured(160.0, 0.0), (600, Decision::Hold));
    check(600, measured(200.0, 0.0), (600, Decision::Hold));
    // Over the target: scaled by target / p95, between 0.5 and 0.9.
    check(600, measured(210.0, 0.0), (540, Decision::Decrease));
    check(600, measured(250.0, 0.0), (480, Decision::Decrease));
    check(600, measured(2_000.0, 0.0), (300, Decision::Decrease));
    // Errors over the limit halve, whatever the latency; never below the minimum.
    check(600, measured(10.0, 0.2), (300, Decision::Decrease));
    check(100, measured(10.0, 0.2), (60, Decision::Decrease));
    check(
        600,
        Health::Measured {
            p95_ms: None,
            error_rate: 0.5,
        },
        (300, Decision::Decrease),
    );
    // Errors at the limit are tolerated.
    check(600, measured(100.0, 0.05), (660, Decision::Increase));
    // Nothing answered: hold. Nothing known: the floor.
    check(
        600,
        Health::Measured {
            p95_ms: None,
            error_rate: 0.0,
        },
        (600, Decision::Idle),
    );
    check(600, Health::Unknown, (60, Decision::Floor));
    // A rate set outside the bounds (by hand) is brought back in first.
    check(5_000, measured(180.0, 0.0), (1_260, Decision::Hold));
    check(0, measured(180.0, 0.0), (60, Decision::Hold));
}

#[test]
fn the_step_is_at_least_one() {
    let narrow = AdaptiveSettings {
        min_per_minute: 10,
        max_per_minute: 12,
        ..settings()
    };
    assert_eq!(narrow.increase_step(), 1);
    assert_eq!(
        narrow.next_rate(10, measured(1.0, 0.0)),
        (11, Decision::Increase)
    );
}

/// An origin whose p95 latency is `base + k × sessions`, where the sessions in progress are
/// the admissions of the last `session_secs` (Little's law): the shape of an origin that slows
/// down under load.
struct Origin {
    base_ms: f64,
    per_session_ms: f64,
    session_secs: f64,
}

impl Origin {
    fn p95_ms(&self, rate_per_minute: u64) -> f64 {
        let sessions = rate_per_minute as f64 / 60.0 * self.session_secs;
        self.base_ms + self.per_session_ms * sessions
    }
}

#[test]
fn settles_near_the_target_within_the_bounds() {
    // Target 200 ms; the origin reaches it at (200 - 20) / 1.5 = 120 sessions, that is
    // 120 / 10 s × 60 = 720 admissions per minute.
    let origin = Origin {
        base_ms: 20.0,
        per_session_ms: 1.5,
        session_secs: 10.0,
    };
    let settings = settings();
    for start in [60, 300, 1_260] {
        let mut rate = start;
        let mut settled = Vec::new();
        for step in 0..60 {
            let p95 = origin.p95_ms(rate);
            let (next, _) = settings.next_rate(rate, measured(p95, 0.0));
            assert!(
                (settings.min_per_minute..=settings.max_per_minute).contains(&next),
                "step {step}: {next} out of bounds"
            );
            rate = next;
            if step >= 30 {
                settled.push(origin.p95_ms(rate));
            }
        }
        for p95 in settled {
            assert!(
                (150.0..=250.0).contains(&p95),
                "from {start}: p95 {p95} ms is not within 25 % of 200 ms"
            );
        }
    }
}

#[test]
fn an_origin_that_cannot_keep_up_gets_the_minimum() {
    let origin = Origin {
        base_ms: 500.0,
        per_session_ms: 1.0,
        session_secs: 10.0,
    };
    let settings = settings();
    let mut rate = 1_260;
    for _ in 0..20 {
        rate = settings
            .next_rate(rate, measured(origin.p95_ms(rate), 0.0))
            .0;
    }
    assert_eq!(rate, settings.min_per_minute);
}
