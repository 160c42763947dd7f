//! From the visitors' records and the origin's log to the figures of the report and the
//! checks that decide the exit status.
//!
//! Admission order is judged from what visitors can prove, not from when their notices happen
//! to arrive: each visitor has an interval that holds its admission, from the last moment it
//! was known to be waiting to the moment it saw itself admitted. A join or poll answer was made
//! after its request was sent, so the send time of the last one that said "waiting" is such a
//! moment. An SSE `status` event is not: it carries no time for the view it shows, and a
//! node's view can be seconds old under load (a bound assumed here was broken by real runs),
//! so SSE events do not narrow the interval. Nor does a poll a node answered from that same
//! view (its answer has an `Age` header): it shows the line as the view read it. Two visitors are in a known order when their
//! intervals do not overlap; Kendall's tau is counted over those pairs
//! (`(concordant - discordant) / (concordant + discordant)`), so visitors admitted in the same
//! tick are a tie, not a coin toss, and a single proven inversion makes tau < 1.
//!
//! The sharper FIFO check holds for every status, SSE or not: a status that shows a visitor
//! waiting with `serving` (the highest admitted position) at or past its own position proves
//! a later position was admitted first.

use std::collections::BTreeMap;

use serde::Serialize;

use super::record::{OriginLog, Outcome, VisitorRecord};
use super::scenario::{Order, Scenario};

/// ETA errors are measured against actual waits of at least this long: the estimate is in
/// whole seconds and admission is seen to within about a second.
pub(crate) const ETA_MIN_ACTUAL: f64 = 1.0;

/// Errors after this long from the first visitor queueing are reported on their own: the
/// measured admission rate needs that long to settle.
pub(crate) const ETA_WARM_UP: f64 = 60.0;

/// Everything the report says, as `summary.json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) scenario: String,
    pub(crate) description: String,
    /// The whole scenario the run followed.
    pub(crate) settings: Scenario,
    pub(crate) visitors: usize,
    pub(crate) nodes: usize,
    pub(crate) workers: usize,
    pub(crate) max_active: u64,
    pub(crate) admit_per_minute: u64,
    pub(crate) fifo: bool,
    /// Seconds from the start to the last thing recorded.
    pub(crate) duration: f64,
    pub(crate) outcomes: BTreeMap<String, usize>,
    pub(crate) joined: usize,
    pub(crate) queued: usize,
    pub(crate) admitted: usize,
    pub(crate) followed_sse: usize,
    pub(crate) sse_refused: usize,
    pub(crate) observations: usize,
    pub(crate) join_latency_ms: Percentiles,
    pub(crate) queue_seconds: Percentiles,
    pub(crate) admission: AdmissionRate,
    pub(crate) order: OrderCheck,
    /// Every increase seen.
    pub(crate) ahead_increases: Vec<AheadIncrease>,
    pub(crate) ahead_increase_count: usize,
    pub(crate) eta: EtaErrors,
    pub(crate) origin: OriginFigures,
    pub(crate) errors: BTreeMap<String, usize>,
    pub(crate) checks: Vec<Check>,
}

/// Nearest-rank percentiles.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) count: usize,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// Admissions per minute while the queue was not empty.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct AdmissionRate {
    pub(crate) configured_per_minute: u64,
    /// Between the 5th and the 95th percentile of queued visitors' admission times.
    pub(crate) window: Option<[f64; 2]>,
    pub(crate) admissions_in_window: usize,
    pub(crate) measured_per_minute: Option<f64>,
    /// measured / configured - 1.
    pub(crate) deviation: Option<f64>,
}

/// Join order against admission order.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct OrderCheck {
    pub(crate) visitors: usize,
    pub(crate) concordant: u64,
    pub(crate) discordant: u64,
    /// Pairs whose admissions cannot be told apart.
    pub(crate) ties: u64,
    pub(crate) tau: Option<f64>,
    /// A few proven inversions: (earlier position, later position) with their intervals.
    pub(crate) inversions: Vec<Inversion>,
    /// Statuses that showed a visitor waiting while `serving` had reached its position.
    pub(crate) passed_over: usize,
}

/// A later position admitted before an earlier one.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Inversion {
    pub(crate) earlier: u64,
    pub(crate) later: u64,
    /// The earlier position was still waiting at this time…
    pub(crate) earlier_waiting_at: f64,
    /// …after the later one saw its admission at this time.
    pub(crate) later_admitted_at: f64,
}

/// A visitor was shown more people ahead than before.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AheadIncrease {
    pub(crate) visitor: usize,
    pub(crate) position: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) at: f64,
    pub(crate) sse: bool,
}

/// ETA relative errors.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct EtaErrors {
    pub(crate) overall: ErrorStats,
    pub(crate) after_first_minute: ErrorStats,
    /// Statuses of waiting visitors without an ETA (rate unknown).
    pub(crate) without_eta: usize,
}

/// Median and 90th percentile of |predicted - actual| / actual.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ErrorStats {
    pub(crate) count: usize,
    pub(crate) median: Option<f64>,
    pub(crate) p90: Option<f64>,
}

/// Sessions as the origin saw them.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct OriginFigures {
    pub(crate) enabled: bool,
    pub(crate) sessions: usize,
    pub(crate) released: usize,
    pub(crate) requests: u64,
    pub(crate) without_pass: u64,
    /// Most session spans open at once.
    pub(crate) max_active: usize,
    /// Most sessions with a request in flight at once.
    pub(crate) max_in_flight: usize,
}

/// One line of the verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    /// Invariants decide the exit status; targets are reported.
    pub(crate) invariant: bool,
    pub(crate) met: bool,
    pub(crate) detail: String,
}

/// The time series the charts draw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// Queued visitors, sampled every second.
    pub(crate) queue: Vec<(f64, f64)>,
    /// Admissions per second, averaged over 5-second bins.
    pub(crate) admissions: Vec<(f64, f64)>,
    /// Most sessions open at the origin in each second.
    pub(crate) active: Vec<(f64, f64)>,
    /// (actual wait, predicted) for a sample of statuses.
    pub(crate) eta: Vec<(f64, f64)>,
}

/// Computes the summary and the series.
pub(crate) fn analyse(
    scenario: &Scenario,
    nodes: usize,
    records: &[VisitorRecord],
    origin: Option<&OriginLog>,
) -> (Summary, Series) {
    let (outcomes, errors) = tally(records);
    let joined: Vec<&VisitorRecord> = records.iter().filter(|r| r.join.is_some()).collect();
    let queue_start = joined
        .iter()
        .filter(|r| r.waited)
        .filter_map(|r| r.join.as_ref().map(|join| join.received))
        .min_by(f64::total_cmp);
    let (ahead_increases, ahead_increase_count) = ahead_increases(&joined);
    let (eta, eta_points) = eta_errors(&joined, queue_start.unwrap_or(0.0));
    let duration = run_duration(records);
    let series = Series {
        queue: queue_series(&joined, duration),
        admissions: admission_series(&joined, duration),
        active: origin
            .map(|log| active_series(log, duration))
            .unwrap_or_default(),
        eta: eta_points,
    };
    let mut summary = Summary {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        settings: scenario.clone(),
        visitors: records.len(),
        nodes,
        workers: scenario.workers(),
        max_active: scenario.room.max_active,
        admit_per_minute: scenario.room.admit_per_minute,
        fifo: scenario.room.order == Order::Fifo,
        duration,
        outcomes,
        joined: joined.len(),
        queued: joined.iter().filter(|r| r.waited).count(),
        admitted: joined.iter().filter(|r| r.admitted.is_some()).count(),
        followed_sse: joined.iter().filter(|r| r.sse).count(),
        sse_refused: joined.iter().filter(|r| r.sse_refused).count(),
        observations: joined.iter().map(|r| r.observations.len()).sum(),
        join_latency_ms: join_latency(&joined),
        queue_seconds: queue_times(&joined),
        admission: admission_rate(scenario.room.admit_per_minute, &joined),
        order: order_check(&joined),
        ahead_increases,
        ahead_increase_count,
        eta,
        origin: origin.map(origin_figures).unwrap_or_default(),
        errors,
        checks: Vec::new(),
    };
    summary.checks = checks(&summary);
    (summary, series)
}

/// How many visitors ended in each outcome, and how often each error was seen.
fn tally(records: &[VisitorRecord]) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut outcomes = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for record in records {
        *outcomes
            .entry(record.outcome.name().to_owned())
            .or_default() += 1;
        for error in &record.errors {
            *errors.entry(error.clone()).or_default() += 1;
        }
    }
    (outcomes, errors)
}

/// The joins' latencies, in milliseconds.
fn join_latency(joined: &[&VisitorRecord]) -> Percentiles {
    percentiles(
        joined
            .iter()
            .filter_map(|r| r.join.as_ref())
            .map(|join| (join.received - join.sent) * 1000.0)
            .collect(),
    )
}

/// How long queued visitors waited from their join's answer to their admission, in seconds.
fn queue_times(joined: &[&VisitorRecord]) -> Percentiles {
    percentiles(
        joined
            .iter()
            .filter(|r| r.waited)
            .filter_map(|r| Some(r.admitted? - r.join.as_ref()?.received))
            .collect(),
    )
}

/// Seconds from the start to the last thing any visitor recorded.
fn run_duration(records: &[VisitorRecord]) -> f64 {
    records
        .iter()
        .flat_map(|r| {
            [
                r.join.as_ref().map(|join| join.received),
                r.admitted,
                r.gave_up,
                r.ended,
                r.observations.last().map(|o| o.received),
            ]
        })
        .flatten()
        .fold(0.0, f64::max)
}

/// What the run is judged on: the invariants, then the targets (SPEC's figures).
fn checks(summary: &Summary) -> Vec<Check> {
    let mut checks = Vec::new();
    if summary.fifo {
        checks.extend(fifo_checks(&summary.order));
    }
    checks.push(Check {
        name: "`ahead` never increases".to_owned(),
        invariant: true,
        met: summary.ahead_increase_count == 0,
        detail: format!("{} increases", summary.ahead_increase_count),
    });
    if summary.origin.enabled && summary.max_active > 0 {
        checks.push(origin_check(&summary.origin, summary.max_active));
    }
    checks.push(join_check(summary));
    if summary.admit_per_minute > 0 {
        checks.push(rate_check(
            &summary.admission,
            summary.admit_per_minute,
            summary.settings.targets.admission_rate,
        ));
    }
    checks.push(eta_check(&summary.eta, summary.settings.targets.eta_error));
    checks
}

/// Every visitor got a ticket: a join refused or never answered (the store's bound, a
/// refused connection, a timeout) is a visitor the room failed at its door.
fn join_check(summary: &Summary) -> Check {
    Check {
        name: "every visitor joined".to_owned(),
        invariant: false,
        met: summary.joined == summary.visitors,
        detail: format!(
            "{} of {} joined, {} did not",
            summary.joined,
            summary.visitors,
            summary.visitors - summary.joined
        ),
    }
}

/// A FIFO room admits in the order of positions and never shows a passed visitor waiting.
fn fifo_checks(order: &OrderCheck) -> [Check; 2] {
    [
        Check {
            name: "FIFO: Kendall tau between position and admission = 1".to_owned(),
            invariant: true,
            met: order.discordant == 0,
            detail: format!(
                "tau {} over {} ordered pairs ({} inversions, {} ties)",
                order
                    .tau
                    .map_or("n/a".to_owned(), |tau| format!("{tau:.6}")),
                order.concordant + order.discordant,
                order.discordant,
                order.ties
            ),
        },
        Check {
            name: "FIFO: nobody shown waiting once serving reached them".to_owned(),
            invariant: true,
            met: order.passed_over == 0,
            detail: format!("{} such statuses", order.passed_over),
        },
    ]
}

/// The origin never had more sessions open at once than the room's cap.
fn origin_check(origin: &OriginFigures, max_active: u64) -> Check {
    Check {
        name: "origin concurrency <= max_active".to_owned(),
        invariant: true,
        met: origin.max_active as u64 <= max_active,
        detail: format!(
            "at most {} sessions open at the origin ({} with a request in flight), max_active {}",
            origin.max_active, origin.max_in_flight, max_active
        ),
    }
}

/// The measured admission rate is near the configured one while people wait.
fn rate_check(admission: &AdmissionRate, admit_per_minute: u64, tolerance: f64) -> Check {
    Check {
        name: format!(
            "admission rate within {:.0} % of admit_per_minute while people wait",
            tolerance * 100.0
        ),
        invariant: false,
        met: admission
            .deviation
            .is_some_and(|deviation| deviation.abs() <= tolerance),
        detail: match (admission.measured_per_minute, admission.deviation) {
            (Some(rate), Some(deviation)) => format!(
                "{rate:.0}/min measured, {} configured ({:+.1} %)",
                admit_per_minute,
                deviation * 100.0
            ),
            _ => "too few queued admissions to measure".to_owned(),
        },
    }
}

/// The ETAs shown after the first minute are near the actual waits.
fn eta_check(eta: &EtaErrors, tolerance: f64) -> Check {
    Check {
        name: format!(
            "median ETA error <= {:.0} % after the first minute",
            tolerance * 100.0
        ),
        invariant: false,
        met: eta
            .after_first_minute
            .median
            .is_some_and(|median| median <= tolerance),
        detail: match eta.after_first_minute.median {
            Some(median) => format!(
                "median {:.1} % over {} statuses",
                median * 100.0,
                eta.after_first_minute.count
            ),
            None => "no status after the first minute".to_owned(),
        },
    }
}

impl Summary {
    /// Whether every invariant held.
    pub(crate) fn invariants_held(&self) -> bool {
        self.checks
            .iter()
            .all(|check| !check.invariant || check.met)
    }
}

fn percentiles(mut values: Vec<f64>) -> Percentiles {
    values.sort_by(f64::total_cmp);
    Percentiles {
        count: values.len(),
        p50: rank(&values, 0.50).unwrap_or(0.0),
        p90: rank(&values, 0.90).unwrap_or(0.0),
        p99: rank(&values, 0.99).unwrap_or(0.0),
        max: values.last().copied().unwrap_or(0.0),
    }
}

/// The nearest-rank `q` quantile of sorted values.
fn rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

fn admission_rate(configured: u64, joined: &[&VisitorRecord]) -> AdmissionRate {
    let mut queued: Vec<f64> = joined
        .iter()
        .filter(|r| r.waited)
        .filter_map(|r| r.admitted)
        .collect();
    queued.sort_by(f64::total_cmp);
    let mut rate = AdmissionRate {
        configured_per_minute: configured,
        ..AdmissionRate::default()
    };
    if queued.len() < 20 {
        return rate;
    }
    let low = queued[queued.len() * 5 / 100];
    let high = queued[queued.len() * 95 / 100];
    if high <= low {
        return rate;
    }
    // Every admission seen in the window (a visitor admitted by its join counts too), the
    // one at its start excluded: n admissions after the first span n intervals.
    let in_window = joined
        .iter()
        .filter_map(|r| r.admitted)
        .filter(|&at| at > low && at <= high)
        .count();
    let measured = in_window as f64 / (high - low) * 60.0;
    rate.window = Some([low, high]);
    rate.admissions_in_window = in_window;
    rate.measured_per_minute = Some(measured);
    rate.deviation = (configured > 0).then(|| measured / configured as f64 - 1.0);
    rate
}

/// The interval holding a visitor's admission: (position, known waiting until, seen admitted).
fn admission_interval(record: &VisitorRecord) -> Option<(u64, f64, f64)> {
    let join = record.join.as_ref()?;
    let admitted = record.admitted?;
    let waiting_until = record
        .observations
        .iter()
        .filter(|o| !o.sse && !o.from_view)
        .map(|o| o.sent)
        .fold(join.sent, f64::max);
    Some((join.position, waiting_until, admitted))
}

fn order_check(joined: &[&VisitorRecord]) -> OrderCheck {
    let mut intervals: Vec<(u64, f64, f64)> = joined
        .iter()
        .filter_map(|r| admission_interval(r))
        .collect();
    intervals.sort_by_key(|&(position, _, _)| position);
    let mut check = OrderCheck {
        visitors: intervals.len(),
        ..OrderCheck::default()
    };
    for (index, &(earlier, earlier_low, earlier_high)) in intervals.iter().enumerate() {
        for &(later, later_low, later_high) in &intervals[index + 1..] {
            if earlier_high < later_low {
                check.concordant += 1;
            } else if later_high < earlier_low {
                check.discordant += 1;
                if check.inversions.len() < 10 {
                    check.inversions.push(Inversion {
                        earlier,
                        later,
                        earlier_waiting_at: earlier_low,
                        later_admitted_at: later_high,
                    });
                }
            } else {
                check.ties += 1;
            }
        }
    }
    let ordered = check.concordant + check.discordant;
    check.tau =
        (ordered > 0).then(|| (check.concordant as f64 - check.discordant as f64) / ordered as f64);
    check.passed_over = joined
        .iter()
        .filter_map(|r| Some((r.join.as_ref()?.position, &r.observations)))
        .map(|(position, observations)| {
            observations
                .iter()
                .filter(|o| o.serving >= position)
                .count()
        })
        .sum();
    check
}

/// Every increase of `ahead` a visitor saw, in visitor order, and how many.
fn ahead_increases(joined: &[&VisitorRecord]) -> (Vec<AheadIncrease>, usize) {
    let mut listed = Vec::new();
    for record in joined {
        let Some(join) = record.join.as_ref().filter(|_| record.waited) else {
            continue;
        };
        let mut previous = join.ahead;
        for observation in &record.observations {
            if observation.ahead > previous {
                listed.push(AheadIncrease {
                    visitor: record.id,
                    position: join.position,
                    from: previous,
                    to: observation.ahead,
                    at: observation.received,
                    sse: observation.sse,
                });
            }
            previous = observation.ahead;
        }
    }
    let count = listed.len();
    (listed, count)
}

fn eta_errors(joined: &[&VisitorRecord], queue_start: f64) -> (EtaErrors, Vec<(f64, f64)>) {
    let mut overall = Vec::new();
    let mut later = Vec::new();
    let mut points = Vec::new();
    let mut without_eta = 0;
    for record in joined.iter().filter(|r| r.waited) {
        let Some(join) = record.join.as_ref() else {
            continue;
        };
        let statuses = std::iter::once((join.received, join.eta))
            .chain(record.observations.iter().map(|o| (o.received, o.eta)));
        for (at, eta) in statuses {
            let Some(eta) = eta else {
                without_eta += 1;
                continue;
            };
            let Some(admitted) = record.admitted else {
                continue;
            };
            let actual = admitted - at;
            if actual < ETA_MIN_ACTUAL {
                continue;
            }
            let error = (eta as f64 - actual).abs() / actual;
            overall.push(error);
            points.push((actual, eta as f64));
            if at - queue_start >= ETA_WARM_UP {
                later.push(error);
            }
        }
    }
    // A sample for the chart: every k-th point, at most 2,500.
    let step = points.len().div_ceil(2_500).max(1);
    let points = points.into_iter().step_by(step).collect();
    let stats = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        ErrorStats {
            count: values.len(),
            median: rank(&values, 0.5),
            p90: rank(&values, 0.9),
        }
    };
    (
        EtaErrors {
            overall: stats(overall),
            after_first_minute: stats(later),
            without_eta,
        },
        points,
    )
}

fn origin_figures(log: &OriginLog) -> OriginFigures {
    OriginFigures {
        enabled: true,
        sessions: log.spans.len(),
        released: log.spans.iter().filter(|span| span.released).count(),
        requests: log.requests,
        without_pass: log.without_pass,
        max_active: active_series(log, f64::INFINITY)
            .iter()
            .map(|&(_, active)| active as usize)
            .max()
            .unwrap_or(0),
        max_in_flight: log.max_in_flight,
    }
}

/// Most spans open at once within each second (a span open at the same instant another
/// closes counts as overlapping, the strict reading).
fn active_series(log: &OriginLog, duration: f64) -> Vec<(f64, f64)> {
    let mut events: Vec<(f64, i64)> = log
        .spans
        .iter()
        .flat_map(|span| [(span.first, 1), (span.last, -1)])
        .collect();
    // Opens before closes at the same instant.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
    let end = events
        .last()
        .map_or(0.0, |&(at, _)| at)
        .min(duration)
        .ceil()
        .max(0.0) as usize;
    let mut series = Vec::with_capacity(end + 1);
    let mut open = 0i64;
    let mut events = events.into_iter().peekable();
    for second in 0..=end {
        let mut most = open;
        while let Some(&(at, change)) = events.peek() {
            if at >= (second + 1) as f64 {
                break;
            }
            open += change;
            most = most.max(open);
            events.next();
        }
        series.push((second as f64, most as f64));
    }
    series
}

/// Queued visitors at each whole second.
fn queue_series(joined: &[&VisitorRecord], duration: f64) -> Vec<(f64, f64)> {
    let mut changes: Vec<(f64, i64)> = Vec::new();
    for record in joined.iter().filter(|r| r.waited) {
        let Some(join) = record.join.as_ref() else {
            continue;
        };
        changes.push((join.received, 1));
        let left = record.admitted.or(record.gave_up).or_else(|| {
            (record.outcome == Outcome::Failed)
                .then(|| record.observations.last().map(|o| o.received))
                .flatten()
        });
        if let Some(left) = left {
            changes.push((left, -1));
        }
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut series = Vec::new();
    let mut queued = 0i64;
    let mut changes = changes.into_iter().peekable();
    for second in 0..=duration.ceil() as usize {
        while let Some(&(at, change)) = changes.peek() {
            if at > second as f64 {
                break;
            }
            queued += change;
            changes.next();
        }
        series.push((second as f64, queued as f64));
    }
    series
}

/// Admissions per second, averaged over 5-second bins.
fn admission_series(joined: &[&VisitorRecord], duration: f64) -> Vec<(f64, f64)> {
    const BIN: f64 = 5.0;
    let bins = (duration / BIN).ceil() as usize + 1;
    let mut counts = vec![0u64; bins];
    for at in joined.iter().filter_map(|r| r.admitted) {
        let bin = ((at / BIN) as usize).min(bins - 1);
        counts[bin] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(bin, count)| (bin as f64 * BIN + BIN / 2.0, count as f64 / BIN))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::record::{Join, Observation, Span};
    use super::*;

    #[test]
    fn the_eta_target_is_the_scenarios() {
        let eta = EtaErrors {
            after_first_minute: ErrorStats {
                count: 10,
                median: Some(0.15),
                p90: Some(0.3),
            },
            ..EtaErrors::default()
        };
        let loose = eta_check(&eta, 0.20);
        assert!(loose.met);
        assert!(loose.name.contains("<= 20 %"), "{}", loose.name);
        let tight = eta_check(&eta, 0.10);
        assert!(!tight.met);
        assert!(tight.name.contains("<= 10 %"), "{}", tight.name);
    }

    fn visitor(id: usize, position: u64, waiting_polls: &[f64], admitted: f64) -> VisitorRecord {
        answered(id, position, waiting_polls, false, admitted)
    }

    /// A visitor whose polls at `waiting_polls` said "waiting", from a node's view or not.
    fn answered(
        id: usize,
        position: u64,
        waiting_polls: &[f64],
        from_view: bool,
        admitted: f64,
    ) -> VisitorRecord {
        VisitorRecord {
            id,
            join: Some(Join {
                sent: 0.0,
                received: 0.01,
                position,
                ahead: position,
                eta: None,
            }),
            observations: waiting_polls
                .iter()
                .map(|&at| Observation {
                    sent: at,
                    received: at + 0.01,
                    sse: false,
                    from_view,
                    ahead: 0,
                    serving: 0,
                    waiting: 0,
                    eta: None,
                })
                .collect(),
            waited: true,
            admitted: Some(admitted),
            ..VisitorRecord::default()
        }
    }

    /// A visitor whose join was never answered fails the "every visitor joined" target,
    /// which is reported but decides nothing (it is not an invariant).
    #[test]
    fn a_visitor_without_a_ticket_fails_the_join_target() {
        let scenario: Scenario = toml::from_str(
            r#"
            name = "joins"
            visitors = 3
            [arrival]
            shape = "spike"
            over = "1s"
            [room]
            id = "r"
            max_active = 1
            "#,
        )
        .expect("scenario");
        let join_target = |records: &[VisitorRecord]| {
            let (summary, _) = analyse(&scenario, 1, records, None);
            summary
                .checks
                .into_iter()
                .find(|check| check.name == "every visitor joined")
                .expect("the join target is checked")
        };
        let all = [
            visitor(0, 1, &[], 0.5),
            visitor(1, 2, &[1.0], 1.5),
            visitor(2, 3, &[1.0], 2.5),
        ];
        let check = join_target(&all);
        assert!(check.met && !check.invariant, "{check:?}");
        assert_eq!(check.detail, "3 of 3 joined, 0 did not");

        let refused = VisitorRecord {
            id: 2,
            outcome: Outcome::Failed,
            ..VisitorRecord::default()
        };
        let one_short = [all[0].clone(), all[1].clone(), refused];
        let check = join_target(&one_short);
        assert!(!check.met && !check.invariant, "{check:?}");
        assert_eq!(check.detail, "2 of 3 joined, 1 did not");
    }

    #[test]
    fn only_proven_inversions_lower_tau() {
        let records = [
            visitor(0, 1, &[1.0], 2.0),
            // Admitted between 1.5 and 2.5: a tie with position 1, not an inversion.
            visitor(1, 2, &[1.5], 2.5),
            // Still waiting at 4.0, after position 4 saw its admission at 3.5: an inversion.
            visitor(2, 3, &[4.0], 4.5),
            visitor(3, 4, &[3.0], 3.5),
        ];
        let joined: Vec<&VisitorRecord> = records.iter().collect();
        let check = order_check(&joined);
        assert_eq!(check.discordant, 1);
        assert_eq!(check.ties, 1);
        assert_eq!(check.concordant, 4);
        assert_eq!(check.tau, Some(3.0 / 5.0));
        assert_eq!(check.inversions[0].earlier, 3);
    }

    /// A "waiting" a node answered from its view of the line proves nothing about when the
    /// poll was sent: it does not narrow the interval, so it makes no inversion.
    #[test]
    fn polls_answered_from_a_view_prove_no_order() {
        let records = [
            answered(0, 1, &[4.0], true, 4.5),
            visitor(1, 2, &[3.0], 3.5),
        ];
        let joined: Vec<&VisitorRecord> = records.iter().collect();
        let check = order_check(&joined);
        assert_eq!((check.discordant, check.ties), (0, 1));
        let proven = [visitor(0, 1, &[4.0], 4.5), visitor(1, 2, &[3.0], 3.5)];
        let joined: Vec<&VisitorRecord> = proven.iter().collect();
        assert_eq!(
            order_check(&joined).discordant,
            1,
            "the same poll from the store"
        );
    }

    #[test]
    fn the_origin_cap_counts_overlapping_spans() {
        let span = |first, last| Span {
            first,
            last,
            released: true,
        };
        let log = OriginLog {
            spans: vec![
                span(0.0, 2.0),
                span(1.0, 1.5),
                span(1.5, 3.0),
                span(2.5, 4.0),
            ],
            ..OriginLog::default()
        };
        assert_eq!(origin_figures(&log).max_active, 3);
    }
}
