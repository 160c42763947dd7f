//! Live events for operators (SPEC §8.4): a node-local broadcast that the admin API's
//! `/admin/v1/events` stream serves, fed by the admin handlers (room changes, advances,
//! resets, passes by hand, key rotations) and by the sampler.
//!
//! Ticket and session events (`ticket.joined`, `pass.issued`, …) are not made here: the
//! store writes them, one per visitor, with the change itself (SPEC §14.9, anteroom-store's
//! `visitor_events`), and the sinks deliver them from the store's outbox.
//!
//! The sampler reads every room's figures once a second: it fills the stats history (with the upstream latency this node's gateway measured
//! on the room's routes that second) and sets
//! the Prometheus gauges and counters, and makes `room.metrics`, the per-minute summary of
//! each room. On a shared store every node sees every room: each node shows the summary on its
//! own live feed, and the node holding the store's `event-sampler` lease (renewed every
//! second, lost 3 s after its holder stops) alone hands it to the event sinks, so a receiver
//! does not get it once per node.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde_json::json;
use tokio::sync::broadcast;

use anteroom_api::problem_answers;
use anteroom_core::engine::{RoomSnapshot, RoomTotals};
use anteroom_core::{RoomId, Timestamp};
use anteroom_edge::UpstreamStatsSnapshot;
use anteroom_edge::adaptive::Interval;

use super::AdminState;
use super::auth::ReadAccess;
use super::history::Sample;
use crate::admin_event::AdminEvent;

/// How often the sampler reads every room.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// How often `room.metrics` goes out per room.
const METRICS_EVERY_SECS: u64 = 60;

/// `GET /admin/v1/events`
#[utoipa::path(get, path = "/admin/v1/events", tag = "admin",
    security(("admin_key" = [])),
    description = "Server-Sent Events: one `event:` per live event (its `type`), the event \
        JSON as `data`; a comment keep-alive every 15 s. Node-local: each node tells what it \
        saw.",
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = AdminEvent),
        problem_answers::NoValidKey,
    ))]
pub(crate) async fn feed(_: ReadAccess, State(admin): State<AdminState>) -> Response {
    let receiver = admin.subscribe();
    let sse = Sse::new(event_stream(receiver))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)));
    let mut response = sse.into_response();
    response.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    response
}

fn event_stream(
    receiver: broadcast::Receiver<AdminEvent>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let hello = Event::default()
        .event("hello")
        .data("{}")
        .retry(Duration::from_secs(3));
    let first = stream::once(async move { Ok(hello) });
    let rest = stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(event) => {
                    let data = serde_json::to_string(&event).unwrap_or_default();
                    let sse = Event::default().event(event.kind.as_str()).data(data);
                    return Some((Ok(sse), receiver));
                }
                // A slow reader skips what it missed rather than holding the others up.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    futures_util::StreamExt::chain(first, rest)
}

/// The lease naming the node that hands the sampler's events to the event sinks.
const SAMPLER_LEASE: &str = "event-sampler";

/// How long the sampler's lease outlives its holder's last renewal.
const SAMPLER_LEASE_TTL: Duration = Duration::from_secs(3);

/// Reads every room once a second until `shutdown`: history, metrics and events (see the
/// module documentation).
pub async fn run_admin_sampler(admin: AdminState, shutdown: impl Future<Output = ()>) {
    let mut interval = tokio::time::interval(SAMPLE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut previous: HashMap<RoomId, Previous> = HashMap::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = interval.tick() => sample_once(&admin, &mut previous).await,
            () = &mut shutdown => return,
        }
    }
}

/// What the sampler remembers of a room from its last sample.
struct Previous {
    totals: RoomTotals,
    /// The gateway's measurements of the room's routes.
    upstream: Vec<UpstreamStatsSnapshot>,
    /// The minute (Unix seconds / 60) of the last `room.metrics` event.
    metrics_minute: u64,
}

async fn sample_once(admin: &AdminState, previous: &mut HashMap<RoomId, Previous>) {
    let store = admin.app().store();
    let started = std::time::Instant::now();
    let rooms = match store.rooms().await {
        Ok(rooms) => rooms,
        Err(error) => {
            admin.app().store_failures().record(None, "rooms", &error);
            return;
        }
    };
    crate::metrics::store_latency("rooms", started.elapsed());
    let now = admin.now();
    let mut seen = Vec::with_capacity(rooms.len());
    let mut events = Vec::new();
    for config in &rooms {
        if let Some(room_events) = sample_one(admin, &config.id, previous, now).await {
            seen.push(config.id.clone());
            events.extend(room_events);
        }
    }
    let reports = match store
        .hold_lease(SAMPLER_LEASE, admin.node(), SAMPLER_LEASE_TTL)
        .await
    {
        Ok(held) => held,
        Err(error) => {
            admin.app().store_failures().record(None, "lease", &error);
            false
        }
    };
    if reports {
        admin.record_all(events).await;
    } else {
        admin.record_locally(events);
    }
    previous.retain(|room, _| seen.contains(room));
    admin.history().retain(|room| seen.contains(room));
    crate::metrics::sse_connections(admin.app().hub().connections());
}

/// Samples one room against its previous sample (kept in `previous`): its events, or `None`
/// when the store cannot say (the room is then not counted as seen).
async fn sample_one(
    admin: &AdminState,
    room: &RoomId,
    previous: &mut HashMap<RoomId, Previous>,
    now: Timestamp,
) -> Option<Vec<AdminEvent>> {
    let started = std::time::Instant::now();
    let snapshot = match admin.app().store().snapshot(room).await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            admin
                .app()
                .store_failures()
                .record(Some(room), "snapshot", &error);
            return None;
        }
    };
    crate::metrics::store_latency("snapshot", started.elapsed());
    let minute = now.as_secs() / METRICS_EVERY_SECS;
    let upstream: Vec<UpstreamStatsSnapshot> = admin
        .gateway()
        .map(|gateway| gateway.room_upstreams(room))
        .unwrap_or_default()
        .iter()
        .map(|stats| stats.snapshot())
        .collect();
    let before = previous.insert(
        room.clone(),
        Previous {
            totals: snapshot.totals,
            upstream: upstream.clone(),
            metrics_minute: minute,
        },
    );
    // A room seen for the first time has no "before": its first second shows no latency.
    let latency = before
        .as_ref()
        .map(|before| Interval::between(&before.upstream, &upstream))
        .unwrap_or_default();
    // Once a minute, even when a second of the sampler is skipped; not at the first sample.
    let metrics_due = before
        .as_ref()
        .is_some_and(|before| before.metrics_minute != minute);
    Some(sample_room(
        admin,
        room,
        &snapshot,
        &latency,
        before.map(|before| before.totals),
        now,
        metrics_due,
    ))
}

/// Fills the room's history and metrics from one snapshot; answers `room.metrics` when due.
fn sample_room(
    admin: &AdminState,
    room: &RoomId,
    snapshot: &RoomSnapshot,
    latency: &Interval,
    before: Option<RoomTotals>,
    now: Timestamp,
    metrics_due: bool,
) -> Vec<AdminEvent> {
    let mut events = Vec::new();
    let totals = snapshot.totals;
    // A room seen for the first time (or recreated) has no "before": no burst of old totals.
    let delta = |pick: fn(&RoomTotals) -> u64| {
        before.map_or(0, |before| pick(&totals).saturating_sub(pick(&before)))
    };
    let sample = Sample {
        at: now.as_secs(),
        waiting: snapshot.waiting,
        active: snapshot.active,
        admitted_unclaimed: snapshot.admitted_unclaimed,
        serving: snapshot.serving,
        admitted: delta(|t| t.admitted),
        joined: delta(|t| t.joined),
        upstream_responses: latency.responses,
        upstream_p50_ms: latency.quantile_ms(0.5),
        upstream_p95_ms: latency.quantile_ms(0.95),
    };
    admin.history().record(room, sample);
    crate::metrics::room_figures(room, snapshot);
    if metrics_due {
        events.push(AdminEvent::new(
            "room.metrics",
            Some(room),
            now,
            json!({
                "waiting": snapshot.waiting,
                "active": snapshot.active,
                "admitted_unclaimed": snapshot.admitted_unclaimed,
                "serving": snapshot.serving,
                "admission_rate_per_minute": snapshot.admission_rate.map(|rate| rate * 60.0),
            }),
        ));
    }
    events
}
