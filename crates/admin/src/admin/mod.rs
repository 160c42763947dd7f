//! The admin API under `/admin/v1` (SPEC §8) and the state its handlers share
//! ([`AdminState`]); `router.rs` puts it on the admin listener beside the control panel at `/`,
//! Prometheus `/metrics` and the OpenAPI document.
//!
//! Every `/admin/v1` call needs `Authorization: Bearer <key>`: a key whose SHA-256 is in
//! `[auth] admin_keys` may do anything, one in `read_keys` may only read (403 on a write). Keys
//! are compared as hashes in constant time ([`anteroom_api::key_matches`]). The panel page, the
//! OpenAPI document and `/metrics` carry no secrets and need no key; the listener itself
//! defaults to the loopback address.
//!
//! Rooms changed here are written to the store, which every node reads (the ticker lists the
//! store's rooms on every pass), so a change is live on every node without a restart and
//! survives one; never to a node-local copy. A change computed from a room read earlier is
//! written only through the store's compare-and-swap (`conditional.rs`), never a blind
//! `put_room`. What is node-local (the stats history, the live event feed) is observation
//! only. The panel (`web/panel.html`, embedded) keeps the admin key in page memory only.

mod auth;
mod bodies;
mod conditional;
pub(crate) mod control;
pub(crate) mod events;
mod history;
pub(crate) mod keys;
pub(crate) mod revoke;
mod room_body;
pub(crate) mod rooms;
pub(crate) mod stats;

use std::sync::Arc;

use anteroom_core::config::KeyHash;
use anteroom_core::{RoomId, Timestamp};
use anteroom_token::SigningAlgorithm;

use anteroom_api::AppState;

use crate::admin_event::AdminEvent;

pub use events::run_admin_sampler;

/// What the admin listener needs beyond the public API's state.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    /// SHA-256 hashes of keys that may read and write.
    pub admin_keys: Vec<KeyHash>,
    /// SHA-256 hashes of keys that may only read.
    pub read_keys: Vec<KeyHash>,
    /// Where the signing keys are kept, for `keys/rotate` and `keys/prune`.
    pub key_source: anteroom_api::KeySource,
    /// The algorithm of keys made by a rotation that names none.
    pub algorithm: SigningAlgorithm,
    /// How long the ticket secret a rotation retires keeps verifying what it made.
    pub ticket_secret_retention: std::time::Duration,
}

/// Everything the admin handlers share; cheap to clone.
#[derive(Clone)]
pub struct AdminState {
    app: AppState,
    inner: Arc<AdminShared>,
}

struct AdminShared {
    settings: AdminSettings,
    history: history::History,
    events: tokio::sync::broadcast::Sender<AdminEvent>,
    metrics: Option<crate::metrics::Metrics>,
    /// Where events wait for the event sinks; none when no sink is configured.
    outbox: std::sync::OnceLock<crate::sinks::Outbox>,
    /// This node's name for leases on a shared store (random per process).
    node: String,
    /// The gateway: its routes may need rooms, and the sampler charts the upstream latency of
    /// each room's routes (SPEC §8.3); set once, none without one.
    gateway: std::sync::OnceLock<anteroom_edge::Gateway>,
}

/// Events the live feed buffers for a slow reader before it skips ahead.
const EVENT_BUFFER: usize = 1024;

impl AdminState {
    /// The admin surface over a node's public state. With `metrics`, `/metrics` answers the
    /// Prometheus exposition; without, 404.
    pub fn new(
        app: AppState,
        settings: AdminSettings,
        metrics: Option<crate::metrics::Metrics>,
    ) -> AdminState {
        if settings.admin_keys.is_empty() && settings.read_keys.is_empty() {
            tracing::warn!(
                "[auth] lists no admin_keys or read_keys: the admin API refuses every call"
            );
        }
        AdminState {
            app,
            inner: Arc::new(AdminShared {
                settings,
                history: history::History::default(),
                events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
                metrics,
                outbox: std::sync::OnceLock::new(),
                node: format!("{:016x}", rand::random::<u64>()),
                gateway: std::sync::OnceLock::new(),
            }),
        }
    }

    /// From now on every event is also appended to `outbox` (durably, before the action that
    /// made it is answered) for the event sinks to deliver; set once.
    pub fn set_outbox(&self, outbox: crate::sinks::Outbox) {
        let _ = self.inner.outbox.set(outbox);
    }

    /// The gateway: a room one of its `[[route]]` entries names cannot be deleted while the
    /// route needs it (SPEC §14.3), and the sampler charts the upstream latency of each room's
    /// routes (SPEC §8.3); set once.
    pub fn set_gateway(&self, gateway: anteroom_edge::Gateway) {
        let _ = self.inner.gateway.set(gateway);
    }

    pub(crate) fn gateway(&self) -> Option<&anteroom_edge::Gateway> {
        self.inner.gateway.get()
    }

    /// The names of the gateway's routes that need `room`.
    pub(crate) fn routes_naming(&self, room: &RoomId) -> Vec<String> {
        self.inner
            .gateway
            .get()
            .map(|gateway| gateway.routes_needing(room))
            .unwrap_or_default()
    }

    /// The public API's state this admin surface works on.
    pub fn app(&self) -> &AppState {
        &self.app
    }

    /// Records what happened: into the outbox for the event sinks (durably, when there are
    /// sinks), then to the live event feed.
    pub async fn record(&self, event: AdminEvent) {
        self.record_all(vec![event]).await;
    }

    /// [`record`](Self::record) for several events, appended in one write.
    pub async fn record_all(&self, events: Vec<AdminEvent>) {
        if events.is_empty() {
            return;
        }
        if let Some(outbox) = self.inner.outbox.get() {
            outbox.append(&events).await;
        }
        for event in events {
            // No subscriber is not an error: nobody is watching.
            let _ = self.inner.events.send(event);
        }
    }

    /// Sends events to this node's live feed only, not to the event sinks.
    pub(crate) fn record_locally(&self, events: Vec<AdminEvent>) {
        for event in events {
            let _ = self.inner.events.send(event);
        }
    }

    /// This node's name for leases on a shared store.
    pub(crate) fn node(&self) -> &str {
        &self.inner.node
    }

    /// Subscribes to the live event feed.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<AdminEvent> {
        self.inner.events.subscribe()
    }

    fn settings(&self) -> &AdminSettings {
        &self.inner.settings
    }

    pub(crate) fn history(&self) -> &history::History {
        &self.inner.history
    }

    pub(crate) fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.inner.metrics.as_ref()
    }

    fn now(&self) -> Timestamp {
        self.app.now()
    }
}
