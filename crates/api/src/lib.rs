//! The public side of anteroom's HTTP surface: the public JSON API (SPEC §6.1), the waiting
//! page, SSE, the OpenID Connect adapter (§11), challenges and the join gate, the rate-limit
//! layer (§10.2), site identity, and the node's shared state ([`AppState`]) with its caches,
//! store-failure record, signing keys and the admission ticker (§5.1).
//!
//! Handlers are thin: they parse and verify what the client sent, call one store operation,
//! and shape the answer. Every error leaves through [`ApiError`](error::ApiError) as
//! problem+json, except the OIDC token and userinfo endpoints', which answer in the JSON form
//! OAuth clients read.
//!
//! This crate may depend on core, store and token. `anteroom-edge` (the gateway and the HTTP
//! engine) and `anteroom-admin` build on it; it knows neither.

// Reached by path from the crates above: the handlers the OpenAPI document of `anteroom-admin`
// names (`api`, `challenge`, `page`, `readiness`, `sse`, with `problem_answers`), the join path
// as the gateway of `anteroom-edge` and the admin API take it (`join_path`, the one way into
// `join_gate`, the status shaping and the pages), and the rate limiter (`ratelimit`, also
// usable on its own in front of any axum service: the `rate_limited_app` example).
pub mod adaptive_status;
pub mod api;
pub mod challenge;
pub mod cookies;
pub mod error;
pub mod join_path;
pub mod key_reload;
pub mod page;
pub mod problem_answers;
pub mod ratelimit;
pub mod readiness;
pub mod site_identity;
pub mod sse;
pub mod store_timing;

// Inside this crate; what the crates above need of them is re-exported below, once.
mod join_gate;
mod key_source;
mod notices;
mod oidc;
mod page_render;
mod revocations;
mod room_cache;
mod router;
mod sse_hub;
mod state;
mod status_json;
mod store_check;
mod store_failure;
mod ticker;
mod ticket_request;
mod view_status;
mod webhook_client;

// Building and running a node: its state, routes and background tasks (the binary, the
// gateway, the admin API, and services embedding a waiting room).
pub use key_source::{
    KeySource, KeySourceError, MAX_HAND_ISSUED_PASS_TTL, RedisKeys, key_retention_secs,
};
pub use notices::follow_notices;
pub use page_render::{PageError, PageRenderer};
pub use revocations::Revocations;
pub use router::{public_router, public_router_with_site, waiting_room_routes};
pub use sse_hub::SseHub;
pub use state::{AppState, KeysChange, NodeOptions, PublicSettings, key_matches};
pub use store_failure::{STORE_GONE_AFTER, StoreErrorCounts, StoreFailures};
pub use ticker::run_ticker;
pub use ticket_request::{parse_room, parse_session};
pub use webhook_client::{WebhookClient, WebhookClientError, webhook_client};
