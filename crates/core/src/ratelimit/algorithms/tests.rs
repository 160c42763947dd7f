//! Hand-computed sequences for every algorithm, nginx's two-stage example, seed 001's
//! fixed-window boundary burst, and properties every algorithm keeps.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn params(algorithm: Algorithm, limit: u64, period_ms: u64, burst: u64) -> LimitParams {
    LimitParams {
        algorithm,
        limit,
        period: Duration::from_millis(period_ms),
        burst,
        delay: 0,
        nodelay: false,
    }
}

/// What one request is expected to get: `(allowed, remaining, reset_after ms, retry_after ms,
/// delay ms)`.
type Expected = (bool, u64, u64, Option<u64>, u64);

const PASS: bool = true;
const FAIL: bool = false;

/// Runs `(now, cost)` requests against one key from no state and compares every decision.
fn check(params: &LimitParams, steps: &[((u64, u64), Expected)]) -> Option<LimitState> {
    params.validate().unwrap();
    let mut state = None;
    for (index, &((now, cost), expected)) in steps.iter().enumerate() {
        let (decision, next) = decide(params, state.as_ref(), now, cost);
        let got = (
            decision.allowed,
            decision.remaining,
            millis(decision.reset_after),
            decision.retry_after.map(millis),
            millis(decision.delay),
        );
        assert_eq!(
            got,
            expected,
            "request #{} (now {now}, cost {cost})",
            index + 1
        );
        assert_eq!(decision.limit, params.limit);
        if !decision.allowed {
            assert_eq!(next, None, "a rejected request changed the state");
        }
        if let Some(next) = next {
            state = Some(next);
        }
    }
    state
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap()
}

#[test]
fn token_bucket_refills_continuously() {
    let params = params(Algorithm::TokenBucket, 2, 1000, 0);
    check(
        &params,
        &[
            ((0, 1), (PASS, 1, 500, None, 0)),
            ((0, 1), (PASS, 0, 1000, None, 0)),
            ((0, 1), (FAIL, 0, 1000, Some(500), 0)),
            ((250, 1), (FAIL, 0, 750, Some(250), 0)),
            ((500, 1), (PASS, 0, 1000, None, 0)),
            ((1500, 2), (PASS, 0, 1000, None, 0)),
            ((1500, 3), (FAIL, 0, 1000, None, 0)),
            ((1500, 0), (PASS, 0, 1000, None, 0)),
            ((1750, 0), (PASS, 0, 750, None, 0)),
        ],
    );
}

#[test]
fn token_bucket_burst_is_its_capacity() {
    let params = params(Algorithm::TokenBucket, 1, 1000, 3);
    check(
        &params,
        &[
            ((0, 1), (PASS, 2, 1000, None, 0)),
            ((0, 2), (PASS, 0, 3000, None, 0)),
            ((0, 1), (FAIL, 0, 3000, Some(1000), 0)),
            ((2000, 2), (PASS, 0, 3000, None, 0)),
        ],
    );
}

#[test]
fn gcra_keeps_a_fractional_arrival_time() {
    // 3 per second: one request every 333⅓ ms, at most one at once.
    let params = params(Algorithm::Gcra, 3, 1000, 1);
    let state = check(
        &params,
        &[
            ((0, 1), (PASS, 0, 334, None, 0)),
            ((333, 1), (FAIL, 0, 1, Some(1), 0)),
            ((334, 1), (PASS, 0, 334, None, 0)),
            ((667, 1), (FAIL, 0, 1, Some(1), 0)),
            ((668, 1), (PASS, 0, 334, None, 0)),
        ],
    );
    assert_eq!(
        state,
        Some(LimitState::Gcra(gcra::State {
            tat_ms: 1001,
            tat_sub: 1
        }))
    );
}

#[test]
fn gcra_decides_like_the_token_bucket() {
    let bucket = params(Algorithm::TokenBucket, 2, 1000, 0);
    let gcra = LimitParams {
        algorithm: Algorithm::Gcra,
        ..bucket
    };
    check(
        &gcra,
        &[
            ((0, 1), (PASS, 1, 500, None, 0)),
            ((0, 1), (PASS, 0, 1000, None, 0)),
            ((0, 1), (FAIL, 0, 1000, Some(500), 0)),
            ((250, 1), (FAIL, 0, 750, Some(250), 0)),
            ((500, 1), (PASS, 0, 1000, None, 0)),
            ((1500, 2), (PASS, 0, 1000, None, 0)),
            ((1500, 3), (FAIL, 0, 1000, None, 0)),
            ((1500, 0), (PASS, 0, 1000, None, 0)),
        ],
    );
}

/// nginx `limit_req zone=… rate=5r/s; limit_req burst=12 delay=8;`, 20 requests at once.
#[test]
fn leaky_bucket_is_nginx_two_stage_limit() {
    let params = LimitParams {
        delay: 8,
        ..params(Algorithm::LeakyBucket, 5, 1000, 12)
    };
    let mut steps = Vec::new();
    // #1–#9 pass at once (excess 0–8000), #10–#13 are delayed 200–800 ms (excess 9000–12000):
    // remaining counts the rest of the burst, reset is the time to drain (excess + 1000) / 5.
    for k in 1..=13u64 {
        let delay = if k >= 10 { (k - 9) * 200 } else { 0 };
        steps.push(((0, 1), (PASS, 13 - k, 200 * k, None, delay)));
    }
    // #14–#20 (excess 13000 > 12000) are rejected and change nothing: the bucket leaks one
    // request's worth in 200 ms.
    for _ in 14..=20 {
        steps.push(((0, 1), (FAIL, 0, 2600, Some(200), 0)));
    }
    // 200 ms later exactly one more fits, delayed like #13: the rejections cost nothing.
    steps.push(((200, 1), (PASS, 0, 2600, None, 800)));
    steps.push(((200, 1), (FAIL, 0, 2600, Some(200), 0)));
    let state = check(&params, &steps);
    assert_eq!(
        state,
        Some(LimitState::LeakyBucket(leaky_bucket::State {
            excess: 12_000,
            last_ms: 200
        }))
    );
}

#[test]
fn leaky_bucket_without_delay_delays_every_excess_request() {
    // `burst=5` without `delay`: everything beyond the rate waits its turn.
    let params = params(Algorithm::LeakyBucket, 5, 1000, 5);
    check(
        &params,
        &[
            ((0, 1), (PASS, 5, 200, None, 0)),
            ((0, 1), (PASS, 4, 400, None, 200)),
            ((0, 1), (PASS, 3, 600, None, 400)),
            // 300 ms later 1.5 requests have leaked: excess 2000 - 1500 + 1000 = 1500.
            ((300, 1), (PASS, 3, 500, None, 300)),
        ],
    );
}

#[test]
fn leaky_bucket_nodelay_passes_the_burst_at_once() {
    let params = LimitParams {
        nodelay: true,
        ..params(Algorithm::LeakyBucket, 5, 1000, 2)
    };
    check(
        &params,
        &[
            ((0, 1), (PASS, 2, 200, None, 0)),
            ((0, 1), (PASS, 1, 400, None, 0)),
            ((0, 1), (PASS, 0, 600, None, 0)),
            ((0, 1), (FAIL, 0, 600, Some(200), 0)),
            ((0, 4), (FAIL, 0, 600, None, 0)),
            ((0, 0), (PASS, 0, 600, None, 0)),
        ],
    );
}

#[test]
fn leaky_bucket_without_burst_spaces_requests_by_the_rate() {
    let params = params(Algorithm::LeakyBucket, 5, 1000, 0);
    check(
        &params,
        &[
            ((0, 1), (PASS, 0, 200, None, 0)),
            ((100, 1), (FAIL, 0, 100, Some(100), 0)),
            ((199, 1), (FAIL, 0, 1, Some(1), 0)),
            ((200, 1), (PASS, 0, 200, None, 0)),
        ],
    );
}

#[test]
fn leaky_bucket_rate_per_minute_is_exact() {
    // nginx rounds 1r/m to 16 milli-requests per second; here it is exactly one per 60 s.
    let params = params(Algorithm::LeakyBucket, 1, 60_000, 0);
    check(
        &params,
        &[
            ((0, 1), (PASS, 0, 60_000, None, 0)),
            ((59_999, 1), (FAIL, 0, 1, Some(1), 0)),
            ((60_000, 1), (PASS, 0, 60_000, None, 0)),
        ],
    );
}

#[test]
fn fixed_window_resets_lazily_at_the_first_request_after_it_ends() {
    let params = params(Algorithm::FixedWindow, 3, 1000, 0);
    check(
        &params,
        &[
            ((100, 1), (PASS, 2, 1000, None, 0)),
            ((600, 2), (PASS, 0, 500, None, 0)),
            ((900, 1), (FAIL, 0, 200, Some(200), 0)),
            ((1099, 1), (FAIL, 0, 1, Some(1), 0)),
            ((1100, 1), (PASS, 2, 1000, None, 0)),
            ((5000, 0), (PASS, 3, 0, None, 0)),
            ((5000, 4), (FAIL, 0, 0, None, 0)),
        ],
    );
}

/// Seed 001: limit 5 per minute. A window opened at 0:00 ends at 1:00, so 4 requests at 0:59
/// and 5 at 1:00 all pass: 9 within a second, 10 within the minute [0:00, 1:00]. The sliding
/// log on the same requests never lets more than 5 into any minute.
#[test]
fn seed_001_fixed_window_boundary_burst() {
    let fixed = params(Algorithm::FixedWindow, 5, 60_000, 0);
    let mut steps = vec![((0, 1), (PASS, 4, 60_000, None, 0))];
    for k in 1..=4u64 {
        steps.push(((59_000, 1), (PASS, 4 - k, 1000, None, 0)));
    }
    for k in 1..=5u64 {
        steps.push(((60_000, 1), (PASS, 5 - k, 60_000, None, 0)));
    }
    check(&fixed, &steps);

    let log = LimitParams {
        algorithm: Algorithm::SlidingLog,
        ..fixed
    };
    let mut steps = vec![((0, 1), (PASS, 4, 60_000, None, 0))];
    for k in 1..=4u64 {
        steps.push(((59_000, 1), (PASS, 4 - k, 60_000, None, 0)));
    }
    // At 1:00 the request of 0:00 has left the window: one fits, the other four wait until
    // the four of 0:59 leave at 1:59.
    steps.push(((60_000, 1), (PASS, 0, 60_000, None, 0)));
    for _ in 1..=4 {
        steps.push(((60_000, 1), (FAIL, 0, 60_000, Some(59_000), 0)));
    }
    check(&log, &steps);
}

/// Five at 0:59 open a window that lasts until 1:59: the five at 1:00 are refused by both.
#[test]
fn seed_001_window_opened_by_the_burst_itself() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingLog] {
        let params = params(algorithm, 5, 60_000, 0);
        let mut steps = Vec::new();
        for k in 1..=5u64 {
            steps.push(((59_000, 1), (PASS, 5 - k, 60_000, None, 0)));
        }
        for _ in 1..=5 {
            steps.push(((60_000, 1), (FAIL, 0, 59_000, Some(59_000), 0)));
        }
        check(&params, &steps);
    }
}

#[test]
fn sliding_log_counts_exactly_the_last_period() {
    let params = params(Algorithm::SlidingLog, 3, 1000, 0);
    let state = check(
        &params,
        &[
            ((0, 1), (PASS, 2, 1000, None, 0)),
            ((400, 2), (PASS, 0, 1000, None, 0)),
            ((500, 1), (FAIL, 0, 900, Some(500), 0)),
            ((1000, 1), (PASS, 0, 1000, None, 0)),
            ((1000, 1), (FAIL, 0, 1000, Some(400), 0)),
            ((1000, 4), (FAIL, 0, 1000, None, 0)),
            ((1400, 2), (PASS, 0, 1000, None, 0)),
        ],
    );
    let entries = match state {
        Some(LimitState::SlidingLog(log)) => log.entries.into_iter().collect::<Vec<_>>(),
        other => panic!("unexpected state {other:?}"),
    };
    assert_eq!(entries, vec![(1000, 1), (1400, 2)]);
}

/// Seed 001's picture: 5 in the previous minute, 30% into this one: `floor(5 × 0.7) = 3`.
#[test]
fn sliding_window_weights_the_previous_window() {
    let params = params(Algorithm::SlidingWindow, 7, 1000, 0);
    check(
        &params,
        &[
            // Window 0: five requests. The estimate falls to 0 at 1801 (floor(5 × 199/1000)).
            ((0, 5), (PASS, 2, 1801, None, 0)),
            // 30% into window 1: floor(5 × 0.7) + 0 = 3, plus these 3 = 6.
            ((1300, 3), (PASS, 1, 1367, None, 0)),
            ((1300, 0), (PASS, 1, 1367, None, 0)),
            ((1300, 1), (PASS, 0, 1451, None, 0)),
            // 3 + 4 + 1 > 7 until floor(5 × (1000 - x)/1000) ≤ 2, at x = 401.
            ((1300, 1), (FAIL, 0, 1451, Some(101), 0)),
            ((1400, 1), (FAIL, 0, 1351, Some(1), 0)),
            ((1401, 1), (PASS, 0, 1400, None, 0)),
            // Too big for this window (7 - 5 < 3); in window 2 the five of window 1 weigh
            // floor(5 × (1000 - x)/1000) ≤ 4 from x = 1.
            ((1500, 3), (FAIL, 0, 1301, Some(501), 0)),
            ((1500, 8), (FAIL, 0, 1301, None, 0)),
        ],
    );
}

fn any_params() -> impl Strategy<Value = LimitParams> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..8,
        prop::sample::select(vec![1u64, 7, 100, 1000, 60_000]),
        0u64..6,
        0u64..4,
        any::<bool>(),
    )
        .prop_map(
            |(algorithm, limit, period_ms, burst, delay, nodelay)| LimitParams {
                algorithm,
                limit,
                period: Duration::from_millis(period_ms),
                burst,
                delay,
                nodelay,
            },
        )
}

fn any_steps() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..5, 0u64..200, 0u64..3000],
            0u64..4,
        ),
        1..60,
    )
}

proptest! {
    /// From `forget_at` on, a state decides every cost exactly like no state: evicting it then
    /// changes nothing, and evicting earlier is never needed.
    #[test]
    fn forgotten_state_decides_like_no_state(params in any_params(), steps in any_steps()) {
        let mut state: Option<LimitState> = None;
        let mut now = 1_000_000u64;
        for (gap, cost) in steps {
            now += gap;
            let (_, next) = decide(&params, state.as_ref(), now, cost);
            if let Some(next) = next {
                state = Some(next);
            }
            if let Some(state) = &state {
                let forget = forget_at(&params, state);
                for later in [forget, forget + 1, forget + params.period_ms()] {
                    for cost in 0..=params.limit.max(params.burst) + 2 {
                        prop_assert_eq!(
                            decide(&params, Some(state), later, cost).0,
                            decide(&params, None, later, cost).0
                        );
                    }
                }
            }
        }
    }

    /// The token bucket and GCRA are the same limiter.
    #[test]
    fn gcra_equals_token_bucket(params in any_params(), steps in any_steps()) {
        let bucket = LimitParams { algorithm: Algorithm::TokenBucket, ..params };
        let gcra = LimitParams { algorithm: Algorithm::Gcra, ..params };
        let (mut bucket_state, mut gcra_state) = (None, None);
        let mut now = 5_000u64;
        for (gap, cost) in steps {
            now += gap;
            let bucket_decision = decide_in_place(&bucket, &mut bucket_state, now, cost);
            let gcra_decision = decide_in_place(&gcra, &mut gcra_state, now, cost);
            prop_assert_eq!(bucket_decision, gcra_decision);
        }
    }

    /// `decide_in_place` is `decide`, and rejections leave the state as it was.
    #[test]
    fn in_place_equals_pure(params in any_params(), steps in any_steps()) {
        let mut pure: Option<LimitState> = None;
        let mut in_place: Option<LimitState> = None;
        let mut now = 0u64;
        for (gap, cost) in steps {
            now += gap;
            let before = in_place.clone();
            let (decision, next) = decide(&params, pure.as_ref(), now, cost);
            if let Some(next) = next {
                pure = Some(next);
            }
            prop_assert_eq!(decide_in_place(&params, &mut in_place, now, cost), decision);
            if !decision.allowed {
                prop_assert_eq!(&in_place, &before);
            }
            prop_assert_eq!(&pure, &in_place);
        }
    }

    /// The sliding log is exact: no span of one period ever holds more than `limit`; a
    /// rejection's `retry_after` is exactly when the request would pass.
    #[test]
    fn sliding_log_never_exceeds_the_limit(params in any_params(), steps in any_steps()) {
        let params = LimitParams { algorithm: Algorithm::SlidingLog, ..params };
        let period = params.period_ms();
        let mut state = None;
        let mut now = 0u64;
        let mut passed: Vec<(u64, u64)> = Vec::new();
        for (gap, cost) in steps {
            now += gap;
            let (decision, next) = decide(&params, state.as_ref(), now, cost);
            if let Some(retry) = decision.retry_after {
                let at = now + millis(retry);
                prop_assert!(!decide(&params, state.as_ref(), at - 1, cost).0.allowed);
                prop_assert!(decide(&params, state.as_ref(), at, cost).0.allowed);
            }
            if decision.allowed {
                passed.push((now, cost));
                let in_span: u64 = passed
                    .iter()
                    .filter(|&&(time, _)| time + period > now)
                    .map(|&(_, cost)| cost)
                    .sum();
                prop_assert!(in_span <= params.limit);
            }
            if let Some(next) = next {
                state = Some(next);
            }
        }
    }

    /// Every algorithm's `retry_after` is exact: one millisecond earlier the request is still
    /// refused, at `retry_after` it passes.
    #[test]
    fn retry_after_is_exact(params in any_params(), steps in any_steps()) {
        let mut state = None;
        let mut now = 10_000u64;
        for (gap, cost) in steps {
            now += gap;
            let (decision, next) = decide(&params, state.as_ref(), now, cost);
            if let Some(retry) = decision.retry_after {
                let at = now + millis(retry);
                prop_assert!(retry > Duration::ZERO);
                prop_assert!(!decide(&params, state.as_ref(), at - 1, cost).0.allowed);
                prop_assert!(decide(&params, state.as_ref(), at, cost).0.allowed);
            }
            if let Some(next) = next {
                state = Some(next);
            }
        }
    }
}

#[test]
fn parameters_are_bounded_so_doubles_stay_exact() {
    let ok = params(Algorithm::TokenBucket, 1000, 60_000, 0);
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(
        params(Algorithm::TokenBucket, 0, 1000, 0).validate(),
        Err(LimitParamsError::ZeroLimit)
    );
    assert_eq!(
        params(Algorithm::TokenBucket, 1, 0, 0).validate(),
        Err(LimitParamsError::PeriodTooShort)
    );
    let day = 86_400_000;
    assert_eq!(
        params(Algorithm::LeakyBucket, 1, day, 10_000_000).validate(),
        Err(LimitParamsError::TooLarge)
    );
    assert_eq!(
        params(Algorithm::LeakyBucket, 1, day, 3_000_000).validate(),
        Ok(())
    );
}

/// A leaky bucket that had drained: the refund moves `last` back so the bucket reads drained
/// from the acquire on, as it would have without the request.
#[test]
fn leaky_bucket_refund_of_a_drained_bucket_moves_last_back() {
    let params = params(Algorithm::LeakyBucket, 3, 1000, 2);
    let (decision, written) = decide(&params, None, 10_000, 1);
    assert!(decision.allowed);
    let written = written.unwrap();
    assert_eq!(
        written,
        LimitState::LeakyBucket(leaky_bucket::State {
            excess: 0,
            last_ms: 10_000
        })
    );
    // 1000 units short: 334 ms back at 3 units per ms, keeping 2 units.
    let refunded = refund(&params, Some(&written), &reservation(&written, 1));
    assert_eq!(
        refunded,
        Some(LimitState::LeakyBucket(leaky_bucket::State {
            excess: 2,
            last_ms: 9_666
        }))
    );
    for cost in 0..5 {
        assert_eq!(
            decide(&params, refunded.as_ref(), 10_000, cost).0,
            decide(&params, None, 10_000, cost).0
        );
    }
}

/// A fixed window opened by the refunded request is dropped with it; one opened before keeps
/// its start and gets its count back.
#[test]
fn fixed_window_refund_drops_a_window_the_request_opened() {
    let params = params(Algorithm::FixedWindow, 3, 1000, 0);
    let (_, opened) = decide(&params, None, 500, 2);
    let opened = opened.unwrap();
    assert_eq!(
        refund(&params, Some(&opened), &reservation(&opened, 2)),
        None
    );
    let (_, joined) = decide(&params, Some(&opened), 900, 1);
    let joined = joined.unwrap();
    assert_eq!(
        refund(&params, Some(&joined), &reservation(&joined, 1)),
        Some(opened)
    );
    // A reservation of an earlier window leaves a later one alone.
    let (_, later) = decide(&params, Some(&joined), 1_600, 1);
    let later = later.unwrap();
    assert_eq!(
        refund(&params, Some(&later), &reservation(&joined, 1)),
        Some(later)
    );
}

/// Each step of a sequence: a gap, then a request of a cost.
fn replay(
    params: &LimitParams,
    mut state: Option<LimitState>,
    mut now: u64,
    steps: &[(u64, u64)],
) -> Vec<Decision> {
    steps
        .iter()
        .map(|&(gap, cost)| {
            now += gap;
            decide_in_place(params, &mut state, now, cost)
        })
        .collect()
}

proptest! {
    /// Acquire, then refund (at once or a while later, nothing else in between): every later
    /// request, of any cost at any later time, is decided exactly as if the acquire had never
    /// happened.
    #[test]
    fn a_refunded_acquire_decides_like_none(
        params in any_params(),
        before in any_steps(),
        (gap, cost) in (prop_oneof![Just(0u64), 0u64..5, 0u64..3000], 1u64..4),
        after in any_steps(),
    ) {
        let mut state: Option<LimitState> = None;
        let mut now = 1_000_000u64;
        for &(step, step_cost) in &before {
            now += step;
            decide_in_place(&params, &mut state, now, step_cost);
        }
        now += gap;
        let (decision, written) = decide(&params, state.as_ref(), now, cost);
        if let (true, Some(written)) = (decision.allowed, written) {
            let refunded = refund(&params, Some(&written), &reservation(&written, cost));
            prop_assert_eq!(
                replay(&params, refunded.clone(), now, &after),
                replay(&params, state.clone(), now, &after),
                "refunded {:?}, never acquired {:?}", refunded, state
            );
        }
    }

    /// Two requests on one key in one call, both refunded with the reservations of the state
    /// written after both: again like never acquiring.
    #[test]
    fn two_refunds_of_one_call_decide_like_none(
        params in any_params(),
        before in any_steps(),
        costs in (1u64..3, 1u64..3),
        after in any_steps(),
    ) {
        let mut state: Option<LimitState> = None;
        let mut now = 1_000_000u64;
        for &(step, step_cost) in &before {
            now += step;
            decide_in_place(&params, &mut state, now, step_cost);
        }
        let mut working = state.clone();
        let first = decide_in_place(&params, &mut working, now, costs.0);
        let second = decide_in_place(&params, &mut working, now, costs.1);
        if let (true, true, Some(written)) = (first.allowed, second.allowed, working) {
            let once = refund(&params, Some(&written), &reservation(&written, costs.1));
            let twice = refund(&params, once.as_ref(), &reservation(&written, costs.0));
            prop_assert_eq!(
                replay(&params, twice, now, &after),
                replay(&params, state, now, &after)
            );
        }
    }
}
