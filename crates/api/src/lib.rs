//! The public side of anteroom's HTTP surface: the public JSON API (SPEC §6.1), the waiting
//! page, SSE, the OpenID Connect adapter (§11), challenges and the join gate, the rate-limit
//! layer (§10.2), site identity, and the node's shared state ([`AppState`]) with its caches,
//! store-failure record, signing keys and the admission ticker (§5.1).
//!
//! Handlers are thin: they parse and verify what the client sent, call one store operation,
//! and shape the answer. Every error leaves through [`ApiError`] as problem+json, except the
//! OIDC token and userinfo endpoints', which answer in the JSON form OAuth clients read.
//!
//! This crate may depend on core, store and token. `anteroom-edge` (the gateway and the HTTP
//! engine) and `anteroom-admin` build on it; it knows neither.

pub mod adaptive_status;
pub mod api;
pub mod challenge;
pub mod cookies;
pub mod error;
pub mod join_gate;
pub mod key_reload;
pub mod key_source;
pub mod notices;
pub mod oidc;
pub mod page;
pub mod page_render;
pub mod problem_answers;
pub mod ratelimit;
pub mod readiness;
pub mod revocations;
pub mod room_cache;
pub mod router;
pub mod site_identity;
pub mod sse;
pub mod sse_hub;
pub mod state;
pub mod status_json;
pub mod store_failure;
pub mod store_timing;
pub mod ticker;
pub mod ticket_request;
pub mod webhook_client;

pub use cookies::{CookiePolicy, pass_cookie_name, read_cookie, ticket_cookie_name};
pub use error::ApiError;
pub use key_reload::follow_key_dir;
pub use key_source::{KeySource, KeySourceError, key_retention_secs};
pub use notices::follow_notices;
pub use page_render::{PageError, PageRenderer};
pub use ratelimit::{
    ClientIp, DEFAULT_MAX_DELAY, RateLimitClaims, RateLimitLayer, RateLimitMetrics,
    RateLimitOptions, RateLimitService, RateLimitSetupError, RateLimitVerdict, RateLimiter,
    RouteRateLimits, RuleMetrics, RuleResult,
};
pub use revocations::Revocations;
pub use router::{MAX_BODY_BYTES, public_router, public_router_with_site, waiting_room_routes};
pub use site_identity::{SecretFileError, read_secret_file};
pub use sse_hub::{SseHub, TickerRoomView};
pub use state::{AppState, NodeOptions, PublicSettings, key_matches};
pub use store_failure::{LOG_EVERY as STORE_ERROR_LOG_EVERY, StoreErrorCounts, StoreFailures};
pub use store_timing::TimedStore;
pub use ticker::run_ticker;
pub use webhook_client::{WebhookClient, WebhookClientError, webhook_client};
