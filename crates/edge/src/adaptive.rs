//! Adaptive admission (SPEC §5.4): the loop that runs each adaptive room's controller
//! (`anteroom_core::adaptive`) every `interval` and applies the new `admit_per_minute`
//! through the store, so the room's admitter uses it on every node.
//!
//! What the controller sees, in this order:
//! 1. the gateway's measurements of the routes that name the room, over the last interval
//!    (p95 from the fine histogram, 5xx share, requests in flight), when it answered any;
//! 2. else the origin's last pushed signal (`PUT /admin/v1/rooms/{room}/signal`, kept in the
//!    store by whichever node received it and read from there every run) if it is at most
//!    30 s old; older than that (or none 30 s after the node started, on a room no route
//!    of this node names) the health is unknown and the rate drops to `min_per_minute`;
//! 3. else the room's routes were idle: nothing is decided.
//!
//! The new rate is written with `replace_room_if`, only over the configuration the decision
//! was made on, so an operator's change made meanwhile wins.
//!
//! Several nodes on one store: each node measures its own share of the traffic (a sample of
//! the same origin), but only one decision per room and interval is applied. Before writing, a
//! node takes the interval's one-time mark (`adaptive|<room>|<interval number>`) in the
//! rate-limit store, which is Redis when the node has one: the first node with something to
//! say decides, the others leave the rate alone, so nodes never stack their increases or
//! fight. A node with nothing to say (idle routes) does not take the mark. Each node still
//! shows its own inputs in the admin stats and metrics.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::adaptive::{
    AdaptiveSettings, Decision, Health, LoadSignal, SIGNAL_STALE_AFTER_MS,
};
use anteroom_core::room::{RoomConfig, default_admit_burst};
use anteroom_core::{RoomId, Timestamp};
use anteroom_store::ConfigWrite;
use anteroom_store::marks::Marked;

use anteroom_api::adaptive_status::AdaptiveStatus;

use anteroom_api::AppState;

use crate::gateway::{Gateway, UpstreamStats, UpstreamStatsSnapshot, fine_bound_ms};

/// How often the loop looks for rooms whose interval is over.
const POLL: Duration = Duration::from_millis(100);
/// How often the loop re-reads the list of rooms.
const RELIST: Duration = Duration::from_secs(1);

/// What the gateway measured for one room over one interval.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Interval {
    /// Responses measured in the interval.
    pub responses: u64,
    /// Of them, 5xx answers.
    pub server_errors: u64,
    /// Requests in flight to the upstream at the end of the interval.
    pub in_flight: u64,
    /// Responses per fine bucket.
    pub fine: Vec<u64>,
}

impl Interval {
    /// The change from `before` to `after`, summed over the room's routes (paired by name:
    /// a reload may have added, removed or reordered them; a new route counts from zero).
    pub fn between(before: &[UpstreamStatsSnapshot], after: &[UpstreamStatsSnapshot]) -> Interval {
        let mut interval = Interval::default();
        for now in after {
            let then = before.iter().find(|then| then.name == now.name);
            let earlier = |pick: fn(&UpstreamStatsSnapshot) -> u64| then.map_or(0, pick);
            interval.responses += now.responses.saturating_sub(earlier(|s| s.responses));
            interval.server_errors += now
                .server_errors
                .saturating_sub(earlier(|s| s.server_errors));
            interval.in_flight += now.in_flight;
            if interval.fine.len() < now.fine_buckets.len() {
                interval.fine.resize(now.fine_buckets.len(), 0);
            }
            for (bucket, count) in now.fine_buckets.iter().enumerate() {
                let old = then
                    .and_then(|s| s.fine_buckets.get(bucket))
                    .copied()
                    .unwrap_or(0);
                interval.fine[bucket] += count.saturating_sub(old);
            }
        }
        interval
    }

    /// The latency quantile `q` (0-1), in milliseconds: the bound of the fine bucket holding
    /// it (at most 10 % above the true value).
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total: u64 = self.fine.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.fine.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(fine_bound_ms(index));
            }
        }
        None
    }

    fn error_rate(&self) -> f64 {
        if self.responses == 0 {
            0.0
        } else {
            self.server_errors as f64 / self.responses as f64
        }
    }
}

/// One room's place in the loop.
struct RoomRun {
    next_due: Timestamp,
    baseline: Vec<UpstreamStatsSnapshot>,
}

/// Runs every adaptive room's controller until `shutdown` resolves. `gateway` gives the
/// upstream measurements (none beside an existing proxy: pushed signals only).
pub async fn run_adaptive(
    app: AppState,
    gateway: Option<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
) {
    tokio::pin!(shutdown);
    let started = app.now();
    let mut rooms: Vec<RoomConfig> = Vec::new();
    let mut listed_at: Option<tokio::time::Instant> = None;
    let mut runs: HashMap<RoomId, RoomRun> = HashMap::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = &mut shutdown => return,
        }
        if listed_at.is_none_or(|at| at.elapsed() >= RELIST) {
            if let Some(listed) = adaptive_rooms(&app, &mut runs).await {
                rooms = listed;
            }
            listed_at = Some(tokio::time::Instant::now());
        }
        for config in &rooms {
            let Some(settings) = config.adaptive else {
                continue;
            };
            let upstreams = gateway
                .as_ref()
                .map(|gateway| gateway.room_upstreams(&config.id))
                .unwrap_or_default();
            let now = app.now();
            let interval_ms = u64::try_from(settings.interval.as_millis()).unwrap_or(u64::MAX);
            let run = runs.entry(config.id.clone()).or_insert_with(|| RoomRun {
                next_due: Timestamp(now.0.saturating_add(interval_ms)),
                baseline: snapshots(&upstreams),
            });
            if now < run.next_due {
                continue;
            }
            run.next_due = Timestamp(now.0.saturating_add(interval_ms));
            let current = snapshots(&upstreams);
            let measured = Interval::between(&run.baseline, &current);
            run.baseline = current;
            // The gateway's own measurements come first: the store is asked for the signal
            // only when they have nothing to say.
            let signal = if measured.responses > 0 {
                None
            } else {
                pushed_signal(&app, &config.id).await
            };
            let inputs = inputs(&measured, signal, !upstreams.is_empty(), started, now);
            if let Some(inputs) = inputs {
                control(&app, &config.id, settings, inputs, now).await;
            }
        }
    }
}

/// The adaptive rooms, listed again from the store; the rooms no longer adaptive (or gone)
/// are forgotten. `None` when the store cannot list them (the last list stays).
async fn adaptive_rooms(
    app: &AppState,
    runs: &mut HashMap<RoomId, RoomRun>,
) -> Option<Vec<RoomConfig>> {
    let rooms: Vec<RoomConfig> = app
        .store()
        .rooms()
        .await
        .ok()?
        .into_iter()
        .filter(|room| room.adaptive.is_some())
        .collect();
    let ids: Vec<RoomId> = rooms.iter().map(|room| room.id.clone()).collect();
    runs.retain(|room, _| ids.contains(room));
    app.adaptive().forget_except(&ids);
    Some(rooms)
}

/// The room's last pushed signal, from the store (whichever node received it); a store that
/// cannot be read counts as no signal, which the staleness rule turns into the floor in time.
async fn pushed_signal(app: &AppState, room: &RoomId) -> Option<LoadSignal> {
    match app.store().load_signal(room).await {
        Ok(signal) => signal,
        Err(error) => {
            tracing::debug!(%room, %error, "adaptive admission: cannot read the load signal");
            None
        }
    }
}

fn snapshots(upstreams: &[Arc<UpstreamStats>]) -> Vec<UpstreamStatsSnapshot> {
    upstreams.iter().map(|stats| stats.snapshot()).collect()
}

/// The controller's inputs for one run.
struct Inputs {
    health: Health,
    source: &'static str,
    responses: u64,
    in_flight: u64,
}

/// What the controller sees for `room` (see the module docs); `None` when it should not run.
fn inputs(
    measured: &Interval,
    signal: Option<LoadSignal>,
    has_routes: bool,
    started: Timestamp,
    now: Timestamp,
) -> Option<Inputs> {
    if measured.responses > 0 {
        return Some(Inputs {
            health: Health::Measured {
                p95_ms: measured.quantile_ms(0.95),
                error_rate: measured.error_rate(),
            },
            source: "gateway",
            responses: measured.responses,
            in_flight: measured.in_flight,
        });
    }
    match signal {
        Some(signal) if signal.is_current(now) => Some(Inputs {
            health: Health::Measured {
                p95_ms: Some(signal.p95_ms),
                error_rate: signal.error_rate,
            },
            source: "signal",
            responses: 0,
            in_flight: signal.in_flight.unwrap_or(0),
        }),
        Some(_) => Some(unknown()),
        None if has_routes => Some(Inputs {
            health: Health::Measured {
                p95_ms: None,
                error_rate: 0.0,
            },
            source: "gateway",
            responses: 0,
            in_flight: measured.in_flight,
        }),
        None if now.0.saturating_sub(started.0) >= SIGNAL_STALE_AFTER_MS => Some(unknown()),
        None => None,
    }
}

fn unknown() -> Inputs {
    Inputs {
        health: Health::Unknown,
        source: "none",
        responses: 0,
        in_flight: 0,
    }
}

/// Runs the controller once for `room` and applies its decision through the store.
async fn control(
    app: &AppState,
    room: &RoomId,
    settings: AdaptiveSettings,
    inputs: Inputs,
    now: Timestamp,
) {
    // The store's configuration, not a cached one: the rate another node set counts.
    let config = match app.store().room(room).await {
        Ok(config) => config,
        Err(error) => {
            tracing::debug!(%room, %error, "adaptive admission: cannot read the room");
            return;
        }
    };
    let (next, decision) = settings.next_rate(config.admit_per_minute, inputs.health);
    let (p95_ms, error_rate) = match inputs.health {
        Health::Measured { p95_ms, error_rate } => (p95_ms, error_rate),
        Health::Unknown => (None, 0.0),
    };
    let mut status = AdaptiveStatus {
        rate_per_minute: config.admit_per_minute,
        decision: decision.as_str(),
        source: inputs.source,
        p95_ms,
        error_rate,
        responses: inputs.responses,
        in_flight: inputs.in_flight,
        at_ms: now.0,
        min_per_minute: settings.min_per_minute,
        max_per_minute: settings.max_per_minute,
        target_p95_ms: settings.target_p95_ms,
    };
    if decision != Decision::Idle {
        let interval_ms = u64::try_from(settings.interval.as_millis()).unwrap_or(u64::MAX);
        let key = format!("adaptive|{room}|{}", now.0 / interval_ms.max(1));
        match app.mark_once(&key, settings.interval).await {
            Ok(Marked::First) => {
                if let Some(rate) = apply(app, config, next).await {
                    status.rate_per_minute = rate;
                }
            }
            Ok(Marked::Seen) => status.decision = "other_node",
            Ok(Marked::Full) => {
                tracing::debug!(%room, "adaptive admission: the one-time marks are full; skipping this interval");
                return;
            }
            Err(error) => {
                tracing::debug!(%room, %error, "adaptive admission: cannot take the interval's mark");
                return;
            }
        }
    }
    app.adaptive().record(room, status);
}

/// Sets the room's rate (and its burst, a second's worth) in the store; the rate in force.
async fn apply(app: &AppState, mut config: RoomConfig, rate: u64) -> Option<u64> {
    let burst = default_admit_burst(rate);
    if config.admit_per_minute == rate && config.admit_burst == burst {
        return Some(rate);
    }
    let room = config.id.clone();
    let from = config.admit_per_minute;
    let read = config.clone();
    config.admit_per_minute = rate;
    config.admit_burst = burst;
    // Only over the configuration the decision was made on: an operator's change made
    // meanwhile is kept, and the next interval decides again from it.
    match app.store().replace_room_if(&read, config).await {
        Ok(ConfigWrite::Written(_)) => {
            tracing::debug!(%room, from, to = rate, "adaptive admission: rate changed");
            Some(rate)
        }
        Ok(ConfigWrite::Changed(_)) => {
            tracing::debug!(%room, "adaptive admission: the room changed meanwhile; rate left alone");
            None
        }
        Err(error) => {
            tracing::warn!(%room, %error, "adaptive admission: cannot set the rate");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_interval_is_the_change_summed_over_routes() {
        let a = UpstreamStats::new("a");
        let b = UpstreamStats::new("b");
        a.record(Duration::from_millis(500), false);
        let before = vec![a.snapshot(), b.snapshot()];
        for millis in 1..=100 {
            a.record(Duration::from_millis(millis), millis > 98);
        }
        b.record(Duration::from_millis(100), false);
        let interval = Interval::between(&before, &[a.snapshot(), b.snapshot()]);
        assert_eq!(interval.responses, 101);
        assert_eq!(interval.server_errors, 2);
        let p95 = interval.quantile_ms(0.95).expect("measured");
        assert!((95.0..=105.0).contains(&p95), "p95 {p95}");
        assert_eq!(Interval::default().quantile_ms(0.95), None);
    }

    fn source(
        measured: &Interval,
        signal: Option<LoadSignal>,
        has_routes: bool,
        now_ms: u64,
    ) -> Option<(&'static str, Health)> {
        inputs(
            measured,
            signal,
            has_routes,
            Timestamp(0),
            Timestamp(now_ms),
        )
        .map(|inputs| (inputs.source, inputs.health))
    }

    #[test]
    fn measurements_then_a_fresh_signal_then_nothing() {
        let busy = Interval {
            responses: 10,
            server_errors: 1,
            in_flight: 3,
            fine: vec![10],
        };
        let signal = LoadSignal {
            p95_ms: 300.0,
            error_rate: 0.0,
            in_flight: None,
            received_at: Timestamp(100_000),
        };
        let pushed = Health::Measured {
            p95_ms: Some(300.0),
            error_rate: 0.0,
        };
        let idle = Interval::default();
        // The gateway's own measurements come first.
        assert_eq!(
            source(&busy, Some(signal), true, 100_000),
            Some((
                "gateway",
                Health::Measured {
                    p95_ms: Some(1.0),
                    error_rate: 0.1
                }
            ))
        );
        // A signal counts for 30 s, then the health is unknown (the floor).
        assert_eq!(
            source(&idle, Some(signal), false, 130_000),
            Some(("signal", pushed))
        );
        assert_eq!(
            source(&idle, Some(signal), false, 130_001),
            Some(("none", Health::Unknown))
        );
        // Idle routes and no signal: nothing measured (the controller holds).
        assert_eq!(
            source(&idle, None, true, 100_000),
            Some((
                "gateway",
                Health::Measured {
                    p95_ms: None,
                    error_rate: 0.0
                }
            ))
        );
        // No routes and never a signal: unknown once the node has run for 30 s.
        assert_eq!(source(&idle, None, false, 29_999), None);
        assert_eq!(
            source(&idle, None, false, 30_000),
            Some(("none", Health::Unknown))
        );
    }
}
