//! What the upstream is like, per route (SPEC §5.4, §8.4): a fixed-bucket latency histogram
//! (time until the upstream's response headers), the share of 5xx answers (the upstream's, and
//! the gateway's own 502/504 when it cannot be reached), and the requests in flight. Counters
//! are atomics, so recording costs no lock; readers take a [`UpstreamStatsSnapshot`].
//!
//! Besides the coarse buckets that Prometheus shows, a fine histogram (bucket bounds 10 %
//! apart, [`FINE_RATIO`]) lets the adaptive controller (§5.4) read the p95 of an interval to
//! within 10 %, which the coarse buckets (100 ms, then 250 ms) cannot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::response::Response;

/// Upper bounds (inclusive, in milliseconds) of the latency buckets; a last bucket holds
/// everything slower.
pub const LATENCY_BUCKETS_MS: [u64; 14] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000,
];

const BUCKETS: usize = LATENCY_BUCKETS_MS.len() + 1;

/// The ratio between consecutive bounds of the fine histogram.
pub(crate) const FINE_RATIO: f64 = 1.1;
/// Fine buckets: bounds `FINE_RATIO^i` ms for i in 0..FINE_BUCKETS (1 ms to about 1.5 min);
/// the last also holds everything slower.
pub(crate) const FINE_BUCKETS: usize = 120;

/// The fine bucket of a latency: the first whose bound is at least `millis`.
fn fine_index(latency: Duration) -> usize {
    let millis = latency.as_secs_f64() * 1000.0;
    if millis <= 1.0 {
        return 0;
    }
    let index = (millis.ln() / FINE_RATIO.ln()).ceil();
    (index as usize).min(FINE_BUCKETS - 1)
}

/// The upper bound of fine bucket `index`, in milliseconds.
pub(crate) fn fine_bound_ms(index: usize) -> f64 {
    FINE_RATIO.powi(i32::try_from(index).unwrap_or(i32::MAX))
}

/// One route's upstream measurements.
#[derive(Debug)]
pub struct UpstreamStats {
    name: String,
    buckets: [AtomicU64; BUCKETS],
    fine: [AtomicU64; FINE_BUCKETS],
    latency_sum_micros: AtomicU64,
    responses: AtomicU64,
    server_errors: AtomicU64,
    in_flight: AtomicU64,
}

/// A copy of one route's measurements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamStatsSnapshot {
    /// The route's name.
    pub name: String,
    /// Responses per latency bucket (not cumulative): `buckets[i]` counts latencies up to
    /// `LATENCY_BUCKETS_MS[i]` and above the bucket before; the last counts the rest.
    pub buckets: Vec<u64>,
    /// Responses per fine bucket (not cumulative), bounds `fine_bound_ms`.
    pub fine_buckets: Vec<u64>,
    /// Responses measured.
    pub responses: u64,
    /// Responses with a 5xx status.
    pub server_errors: u64,
    /// Sum of all latencies.
    pub latency_sum: Duration,
    /// Requests sent to the upstream and not answered yet.
    pub in_flight: u64,
}

impl UpstreamStatsSnapshot {
    /// The share of 5xx responses (0 when nothing was measured).
    pub fn error_rate(&self) -> f64 {
        if self.responses == 0 {
            0.0
        } else {
            self.server_errors as f64 / self.responses as f64
        }
    }

    /// The upper bound of the bucket holding quantile `q` (0-1) of the latencies; `None`
    /// when nothing was measured or it lies in the last, unbounded bucket.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        if self.responses == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.responses as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return LATENCY_BUCKETS_MS
                    .get(index)
                    .map(|&ms| Duration::from_millis(ms));
            }
        }
        None
    }
}

impl UpstreamStats {
    /// Empty measurements of the route named `name`.
    pub fn new(name: impl Into<String>) -> UpstreamStats {
        UpstreamStats {
            name: name.into(),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            fine: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_sum_micros: AtomicU64::new(0),
            responses: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        }
    }

    /// The route's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// A copy of the measurements.
    pub fn snapshot(&self) -> UpstreamStatsSnapshot {
        UpstreamStatsSnapshot {
            name: self.name.clone(),
            buckets: self
                .buckets
                .iter()
                .map(|bucket| bucket.load(Ordering::Relaxed))
                .collect(),
            fine_buckets: self
                .fine
                .iter()
                .map(|bucket| bucket.load(Ordering::Relaxed))
                .collect(),
            responses: self.responses.load(Ordering::Relaxed),
            server_errors: self.server_errors.load(Ordering::Relaxed),
            latency_sum: Duration::from_micros(self.latency_sum_micros.load(Ordering::Relaxed)),
            in_flight: self.in_flight(),
        }
    }

    /// Records one response.
    pub fn record(&self, latency: Duration, server_error: bool) {
        let millis = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        let index = LATENCY_BUCKETS_MS.partition_point(|&bound| bound < millis);
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        self.fine[fine_index(latency)].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.responses.fetch_add(1, Ordering::Relaxed);
        if server_error {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The step around the proxy: times a request until the upstream's response headers (or the
/// gateway's own error), counting it in flight meanwhile (until dropped, so also when the
/// request is abandoned).
pub(crate) struct Measuring<'a> {
    stats: &'a UpstreamStats,
    started: Instant,
}

impl<'a> Measuring<'a> {
    /// Starts measuring a request on the route whose stats these are.
    pub(crate) fn start(stats: &'a UpstreamStats) -> Measuring<'a> {
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        Measuring {
            stats,
            started: Instant::now(),
        }
    }

    /// Records the answer, and answers how long it took (the access log's and the span's
    /// upstream time too: the request is timed once).
    pub(crate) fn finish(self, response: &Response) -> Duration {
        let took = self.started.elapsed();
        self.stats.record(took, response.status().is_server_error());
        took
    }
}

impl Drop for Measuring<'_> {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rates_and_quantiles() {
        let stats = UpstreamStats::new("api");
        for millis in [0, 1, 3, 3, 40, 40, 40, 700, 60_000] {
            stats.record(Duration::from_millis(millis), false);
        }
        stats.record(Duration::from_millis(2), true);
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.responses, 10);
        assert_eq!(snapshot.buckets[0], 2, "0 ms and 1 ms");
        assert_eq!(snapshot.buckets[1], 1, "2 ms");
        assert_eq!(snapshot.buckets[2], 2, "3 ms twice");
        assert_eq!(snapshot.buckets[5], 3, "40 ms three times");
        assert_eq!(snapshot.buckets[BUCKETS - 1], 1, "a minute");
        assert!((snapshot.error_rate() - 0.1).abs() < 1e-9);
        assert_eq!(
            snapshot.latency_quantile(0.5),
            Some(Duration::from_millis(5))
        );
        assert_eq!(
            snapshot.latency_quantile(0.8),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            snapshot.latency_quantile(0.9),
            Some(Duration::from_millis(1_000))
        );
        assert_eq!(snapshot.latency_quantile(1.0), None);
        assert_eq!(
            UpstreamStats::new("x").snapshot().latency_quantile(0.5),
            None
        );
        let fine = &snapshot.fine_buckets;
        assert_eq!(fine.iter().sum::<u64>(), 10);
        assert_eq!(fine[0], 2, "0 ms and 1 ms");
        assert_eq!(fine[fine_index(Duration::from_millis(40))], 3);
        assert_eq!(fine[fine_index(Duration::from_secs(60))], 1, "a minute");
        let hour = fine_index(Duration::from_secs(3600));
        assert_eq!(hour, FINE_BUCKETS - 1, "an hour is past the last bound");
    }

    #[test]
    fn fine_buckets_are_ten_percent_wide() {
        for millis in [2u64, 37, 150, 199, 201, 5_000] {
            let index = fine_index(Duration::from_millis(millis));
            let bound = fine_bound_ms(index);
            assert!(
                bound >= millis as f64 - 1e-9,
                "{millis} ms under its bound {bound}"
            );
            assert!(
                bound < millis as f64 * FINE_RATIO,
                "{millis} ms: bound {bound}"
            );
        }
    }
}
