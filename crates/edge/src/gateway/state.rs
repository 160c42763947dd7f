//! What every step of the gateway reads, behind one handle ([`Gateway`], cheap to clone): the
//! node's shared state, the settings in force (`live.rs`), the rooms and passes cached per
//! node (`rooms.rs`, `passes.rs`) and the WebSocket counts. It sits below the steps, so each
//! step takes `&Gateway` without depending on the steps that make up a request (`mod.rs`
//! orders them).

use std::sync::Arc;

use arc_swap::ArcSwap;

use anteroom_core::config::{HttpEngine, VerifyConfig};

use anteroom_api::AppState;

use crate::access_log::AccessLog;
use crate::span_export::SpanExport;

use super::live::{LiveSettings, RouteSources};
use super::passes::PassesVerifiedUntilExpiry;
use super::rooms::RoomsReadEverySecond;
use super::websocket_stats::WebSocketStats;

/// The gateway: routes, rooms, passes and the upstream; cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(super) inner: Arc<Shared>,
}

/// What a [`Gateway`] points to: one per gateway, shared by its clones.
pub(super) struct Shared {
    pub(super) app: AppState,
    /// Routes, upstream and WebSocket limits: loaded once per request (`live.rs`).
    pub(super) live: ArcSwap<LiveSettings>,
    /// What the route table is built from; held only while it is rebuilt.
    pub(super) route_sources: parking_lot::Mutex<RouteSources>,
    pub(super) verify: VerifyConfig,
    pub(super) http_engine: HttpEngine,
    pub(super) access_log: Option<AccessLog>,
    pub(super) spans: Option<SpanExport>,
    pub(super) rooms: RoomsReadEverySecond,
    pub(super) passes: PassesVerifiedUntilExpiry,
    pub(super) websocket_stats: WebSocketStats,
}

impl Gateway {
    /// The routes, upstream and WebSocket limits in force now.
    pub(super) fn live(&self) -> Arc<LiveSettings> {
        self.inner.live.load_full()
    }

    pub(super) fn app(&self) -> &AppState {
        &self.inner.app
    }
}
