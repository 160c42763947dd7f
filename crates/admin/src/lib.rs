//! The operator's side of a node: the admin API and panel (SPEC §8), Prometheus metrics
//! (§8.4) with the process series, the OpenAPI document of the HTTP API, and the event sinks
//! (webhooks and the log) fed from the store's outbox.
//!
//! It sits on top: it reads the node's shared state (`anteroom-api`) and the gateway's
//! measurements (`anteroom-edge`); neither knows it. The admin listener is served by the
//! edge's engine like the public one.

mod admin;
mod metrics;
mod openapi;
mod process_metrics;
mod sinks;

// What this crate builds on, named at the root so the modules here reach it as
// `crate::AppState`, `crate::Gateway`, like their own.
use anteroom_api::ratelimit::{RateLimiter, RuleResult};
use anteroom_api::{
    AppState, KeySource, MAX_HAND_ISSUED_PASS_TTL, key_matches, key_retention_secs,
};
use anteroom_api::{adaptive_status, api, challenge, error, readiness, store_timing};
use anteroom_edge::{Gateway, LATENCY_BUCKETS_MS, UpstreamStatsSnapshot, adaptive};

pub use admin::{AdminEvent, AdminSettings, AdminState, admin_router, run_admin_sampler};
pub use metrics::{Metrics, MetricsError};
pub use openapi::document_json as openapi_json;
pub use sinks::{EventSinks, Outbox, Sink, signature as event_signature, spawn_event_sinks};
