//! The edge of a node: the gateway (SPEC §7) in front of the protected site (route matching,
//! the routes' rate limits, rooms and passes, the reverse proxy, WebSocket limits, the verify
//! endpoint and `WaitingRoomLayer` for an embedding app), the node's own HTTP/1 engine and its
//! upstream client, TLS on the listener, the per-thread workers, the access log, trace
//! correlation and span export, and the adaptive admission loop that reads the gateway's
//! measurements.
//!
//! It builds on `anteroom-api` (the public API and the node's shared state): the gateway's
//! waiting page, join gate and passes are the API's. `anteroom-admin` and the binary build on
//! this crate.

mod access_log;
pub mod adaptive;
mod client_scheme;
mod correlation;
mod deadline;
mod gateway;
mod h1;
mod public_app;
mod request_metrics;
mod server_limits;
mod span_export;
mod tls;
mod visitor;
mod waiting_room;
mod workers;

pub use access_log::AccessLog;
pub use adaptive::run_adaptive;
pub use gateway::{
    Gateway, GatewayOptions, GatewayReload, GatewayReloadError, GatewayReloaded,
    LATENCY_BUCKETS_MS, UpstreamStats, UpstreamStatsSnapshot, WaitingRoomLayer, WaitingRoomService,
    WebSocketStats, WebSocketStatsSnapshot,
};
pub use h1::serve;
pub use public_app::{PublicApp, gateway_app, gateway_router};
pub use request_metrics::Listener;
pub use server_limits::ServerLimits;
pub use span_export::{SpanExport, SpanExportError};
pub use tls::{
    CERTIFICATE_CHECK_INTERVAL, TlsServer, TlsSetupError, UpstreamTls, follow_certificate_files,
    upstream_tls,
};
pub use waiting_room::{WaitingRoom, WaitingRoomBuilder, WaitingRoomSetupError};
pub use workers::{PublicListeners, Workers, start_workers};
