//! The operator's side of a node: the admin API and panel (SPEC §8), Prometheus metrics
//! (§8.4) with the process series, the OpenAPI document of the HTTP API, and the event sinks
//! (webhooks and the log) fed from the store's outbox.
//!
//! It sits on top: it reads the node's shared state (`anteroom-api`) and the gateway's
//! measurements (`anteroom-edge`); neither knows it. The admin listener is served by the
//! edge's engine like the public one.

mod admin;
mod admin_event;
mod metrics;
mod openapi;
mod process_metrics;
mod router;
mod sinks;

pub use admin::{AdminSettings, AdminState, run_admin_sampler};
pub use admin_event::AdminEvent;
pub use metrics::{Metrics, MetricsError};
pub use openapi::document_json as openapi_json;
pub use router::admin_router;
pub use sinks::{EventSinks, Outbox, Sink, signature as event_signature, spawn_event_sinks};
