//! The node's shared state ([`AppState`]): the store, the signing keys, the clock and the
//! settings, with this node's caches, store-failure record, SSE hub, page templates, rate
//! limiter and one-time marks. Every handler and background task takes it; it knows none of
//! them.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use anteroom_core::config::{Cidr, KeyHash, SseLimits, TickerIntervals};
use anteroom_core::engine::TicketRef;
use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_core::room::{RoomConfig, StoreErrorPolicy};
use anteroom_core::{Clock, RoomId, Timestamp};
use anteroom_store::limit::{LimitRequest, LimitStore, LimitStoreError};
use anteroom_store::marks::{DEFAULT_MAX_MARKS, LocalMarks, Marked};
use anteroom_store::{CodeRedemptions, MemoryCodeRedemptions, RoomStore, StoreError};
use anteroom_token::KeySet;

use crate::adaptive_status;
use crate::cookies::CookiePolicy;
use crate::error::ApiError;
use crate::key_source::{KeyReload, KeySource};
use crate::page_render::PageRenderer;
use crate::ratelimit::{self, RateLimiter};
use crate::revocations::Revocations;
use crate::room_cache;
use crate::site_identity;
use crate::sse_hub::SseHub;
use crate::store_failure::StoreFailures;
use crate::ticket_request::ticket_reference;

/// Deployment settings the public API needs.
#[derive(Debug, Clone)]
pub struct PublicSettings {
    /// The public base URL (`https://…` makes cookies `Secure`, as does a TLS listener).
    pub public_url: String,
    /// The `iss` of every pass.
    pub issuer: String,
    /// SHA-256 hashes of the keys allowed to call the backend session endpoints.
    pub service_keys: Vec<KeyHash>,
    /// Peers believed about the visitor (SPEC §14.1): their forwarding headers, the verify
    /// endpoint's headers and a room's identity header.
    pub trusted_proxies: Vec<Cidr>,
}

/// Limits and templates of one node.
pub struct NodeOptions {
    /// Open SSE streams this node accepts: in all (then 503), per ticket and per client
    /// address (then 429).
    pub sse: SseLimits,
    /// The waiting page templates.
    pub page: PageRenderer,
    /// The rate limits applied to every request of the public listener (SPEC §10.2); none
    /// when absent.
    pub rate_limiter: Option<RateLimiter>,
    /// Where redeemed OIDC authorization codes are recorded (SPEC §11): the shared store
    /// when several nodes serve the same rooms; this process's memory when absent.
    pub code_redemptions: Option<Arc<dyn CodeRedemptions>>,
    /// Where the signing keys are kept (a directory, or Redis), followed for rotations made
    /// elsewhere and pruned (see `key_reload`); none for keys that only live in memory.
    pub key_source: Option<KeySource>,
    /// The most one-time marks (used challenges) this node holds when they are its own.
    pub max_once_marks: usize,
    /// The public listener speaks TLS itself (`[server.tls]`): cookies are `Secure` even when
    /// `public_url` says `http://`.
    pub tls: bool,
    /// How often the admission ticker runs and touches connected streams' tickets.
    pub ticker: TickerIntervals,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            sse: SseLimits::default(),
            page: PageRenderer::default(),
            rate_limiter: None,
            code_redemptions: None,
            key_source: None,
            max_once_marks: DEFAULT_MAX_MARKS,
            tls: false,
            ticker: TickerIntervals::default(),
        }
    }
}

/// Where one-time marks live: in Redis when the node has a Redis store (so a mark holds on
/// every node), else in this node's own bounded store, apart from the rate-limit counters.
enum OnceMarks {
    Local(Arc<LocalMarks>),
    Shared(Arc<dyn LimitStore>),
}

/// Everything the handlers share; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn RoomStore>,
    /// Swapped whole by a key rotation; every reader takes a cheap clone.
    keys: parking_lot::RwLock<KeySet>,
    /// Held by whoever reads the key source and then installs what it read (a rotation, a
    /// prune, a reload), so a reload that read the keys before a rotation cannot install them
    /// after the rotation's: the node would sign with the retired key until its next look.
    keys_changing: tokio::sync::Mutex<()>,
    clock: Arc<dyn Clock>,
    settings: PublicSettings,
    cookies: CookiePolicy,
    hub: Arc<SseHub>,
    page: PageRenderer,
    rate_limiter: Option<RateLimiter>,
    rooms: room_cache::RoomConfigsUntilChanged,
    failures: StoreFailures,
    revocations: Revocations,
    code_redemptions: Arc<dyn CodeRedemptions>,
    key_reload: Option<KeyReload>,
    /// One-time marks (used challenges, adaptive decisions).
    once: OnceMarks,
    /// The rooms of the config file: installed in the store before the node is ready.
    expected_rooms: parking_lot::RwLock<Vec<RoomId>>,
    /// Set when the shutdown began: the node drains and is no longer ready.
    draining: std::sync::atomic::AtomicBool,
    adaptive: adaptive_status::AdaptiveState,
    /// The site's keys for rooms with `identity = "jwt:<claim>"`.
    site_keys: site_identity::SiteKeyCache,
    /// The ticker's latest listing of every room in the store (`None` before the first).
    room_listing: tokio::sync::watch::Sender<Option<Arc<Vec<RoomConfig>>>>,
    ticker: TickerIntervals,
    /// The store's part of readiness, asked at most once a second.
    store_check: crate::store_check::StoreCheck,
}

impl AppState {
    /// Wires the store, the signing keys and the clock together.
    pub fn new(
        store: Arc<dyn RoomStore>,
        keys: KeySet,
        clock: Arc<dyn Clock>,
        settings: PublicSettings,
    ) -> AppState {
        AppState::with_options(store, keys, clock, settings, NodeOptions::default())
    }

    /// Like [`new`](Self::new), with this node's own limits and templates.
    pub fn with_options(
        store: Arc<dyn RoomStore>,
        keys: KeySet,
        clock: Arc<dyn Clock>,
        settings: PublicSettings,
        options: NodeOptions,
    ) -> AppState {
        let cookies = CookiePolicy {
            secure: options.tls || settings.public_url.starts_with("https://"),
        };
        let rooms = room_cache::RoomConfigsUntilChanged::new(store.notices());
        let code_redemptions = options
            .code_redemptions
            .unwrap_or_else(|| Arc::new(MemoryCodeRedemptions::new(clock.now())));
        let once = match options
            .rate_limiter
            .as_ref()
            .and_then(RateLimiter::redis_store)
        {
            Some(redis) => OnceMarks::Shared(redis),
            None => OnceMarks::Local(Arc::new(LocalMarks::new(
                clock.clone(),
                options.max_once_marks,
            ))),
        };
        AppState {
            inner: Arc::new(Shared {
                rooms,
                failures: StoreFailures::default(),
                revocations: Revocations::default(),
                code_redemptions,
                store,
                keys: parking_lot::RwLock::new(keys),
                keys_changing: tokio::sync::Mutex::new(()),
                clock,
                settings,
                cookies,
                hub: Arc::new(SseHub::new(options.sse)),
                page: options.page,
                rate_limiter: options.rate_limiter,
                key_reload: options.key_source.map(KeyReload::new),
                once,
                expected_rooms: parking_lot::RwLock::new(Vec::new()),
                draining: std::sync::atomic::AtomicBool::new(false),
                adaptive: adaptive_status::AdaptiveState::default(),
                site_keys: site_identity::SiteKeyCache::default(),
                room_listing: tokio::sync::watch::Sender::new(None),
                ticker: options.ticker,
                store_check: crate::store_check::StoreCheck::default(),
            }),
        }
    }

    /// How often this node's admission ticker runs (`run_ticker`).
    pub(crate) fn ticker_intervals(&self) -> TickerIntervals {
        self.inner.ticker
    }

    /// This node's SSE hub.
    pub fn hub(&self) -> &Arc<SseHub> {
        &self.inner.hub
    }

    /// The rate limiter of the public listener, if any.
    pub fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.inner.rate_limiter.as_ref()
    }

    /// The waiting page templates.
    pub fn page(&self) -> &PageRenderer {
        &self.inner.page
    }

    /// Marks `key` as used for `period`: [`Marked::First`] the first time, [`Marked::Seen`]
    /// while the mark lasts (on every node sharing the Redis store), [`Marked::Full`] when this
    /// node's marks are full and nothing was recorded (the caller refuses: a mark it could
    /// not record cannot stop a replay).
    pub async fn mark_once(&self, key: &str, period: Duration) -> Result<Marked, LimitStoreError> {
        let redis = match &self.inner.once {
            OnceMarks::Local(marks) => return Ok(marks.mark(key, period)),
            OnceMarks::Shared(redis) => redis,
        };
        // A token bucket of one per `period`.
        Ok(if take_one_token(redis.as_ref(), key, 1, period).await? {
            Marked::First
        } else {
            Marked::Seen
        })
    }

    /// This node's one-time marks, when they are its own (no Redis store).
    pub fn local_marks(&self) -> Option<&LocalMarks> {
        match &self.inner.once {
            OnceMarks::Local(marks) => Some(marks),
            OnceMarks::Shared(_) => None,
        }
    }

    /// Spends one of `limit` attempts per `period` under `key`, in the rate limiter's store
    /// (Redis when the node has one, so every node counts together): `false` once they are
    /// spent. A node without a rate limiter (a library user's) counts nothing.
    pub(crate) async fn spend_attempt(
        &self,
        key: &str,
        limit: u64,
        period: Duration,
    ) -> Result<bool, LimitStoreError> {
        let Some(limiter) = self.rate_limiter() else {
            return Ok(true);
        };
        take_one_token(limiter.shared_store().as_ref(), key, limit, period).await
    }

    /// Follows the ticker's listings of every room in the store (twice a second, on every
    /// node): what the gateway builds the rooms' `routes` shorthands from.
    pub fn room_listings(&self) -> tokio::sync::watch::Receiver<Option<Arc<Vec<RoomConfig>>>> {
        self.inner.room_listing.subscribe()
    }

    pub(crate) fn publish_room_listing(&self, rooms: Arc<Vec<RoomConfig>>) {
        self.inner.room_listing.send_replace(Some(rooms));
    }

    /// This node's last adaptive-admission runs, by room.
    pub fn adaptive(&self) -> &adaptive_status::AdaptiveState {
        &self.inner.adaptive
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RoomStore> {
        &self.inner.store
    }

    /// The room's configuration as this node knows it: its own copy while no notice said
    /// the room changed, else the store's. The caller handles a failure.
    pub(crate) async fn room_config(&self, room: &RoomId) -> Result<RoomConfig, StoreError> {
        self.inner
            .rooms
            .get(&*self.inner.store, room)
            .await
            .map(Arc::unwrap_or_clone)
    }

    /// [`room_config`](Self::room_config) for the public API, shared rather than copied:
    /// failures answered as problems.
    pub(crate) async fn api_room_config(&self, room: &RoomId) -> Result<Arc<RoomConfig>, ApiError> {
        self.inner
            .rooms
            .get(&*self.inner.store, room)
            .await
            .map_err(|error| self.store_error(room, "room", error))
    }

    /// Remembers configurations the store may not hold yet (the config file's rooms while
    /// the store is unreachable at start), so their `on_store_error` is known.
    pub fn know_rooms(&self, configs: impl IntoIterator<Item = RoomConfig>) {
        let configs: Vec<RoomConfig> = configs.into_iter().collect();
        *self.inner.expected_rooms.write() = configs.iter().map(|room| room.id.clone()).collect();
        self.inner.rooms.prime(configs);
    }

    /// The rooms of the config file ([`know_rooms`](Self::know_rooms)).
    pub(crate) fn expected_rooms(&self) -> Vec<RoomId> {
        self.inner.expected_rooms.read().clone()
    }

    /// Whether a request with these connection details came straight from a peer inside
    /// `[server] trusted_proxies` (SPEC §14.1): the one check behind every header that is
    /// believed about the visitor only from such a peer.
    pub fn is_trusted_peer(&self, extensions: &axum::http::Extensions) -> bool {
        self.is_trusted_address(ratelimit::peer_address(extensions))
    }

    /// [`is_trusted_peer`](Self::is_trusted_peer) for a peer address carried beside the
    /// request rather than in its extensions.
    pub fn is_trusted_address(&self, peer: Option<std::net::IpAddr>) -> bool {
        let trusted = &self.settings().trusted_proxies;
        !trusted.is_empty()
            && peer
                .is_some_and(|peer| anteroom_core::ratelimit::client_ip::is_trusted(peer, trusted))
    }

    /// Marks the node as draining for a shutdown: `readyz` answers 503 from now on.
    pub fn start_draining(&self) {
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.inner
            .draining
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The store's part of readiness ([`crate::store_check`]).
    pub(crate) fn store_check(&self) -> &crate::store_check::StoreCheck {
        &self.inner.store_check
    }

    /// What `room` does while its store is unreachable (SPEC §9.4), from its last known
    /// configuration; a room this node never saw is closed.
    pub fn on_store_error(&self, room: &RoomId) -> StoreErrorPolicy {
        self.inner
            .rooms
            .last_known(room)
            .map_or(StoreErrorPolicy::Closed, |config| config.on_store_error)
    }

    /// Store failures seen by this node.
    pub fn store_failures(&self) -> &StoreFailures {
        &self.inner.failures
    }

    /// Sessions this node heard were ended by any node (SPEC §8.2).
    pub fn revocations(&self) -> &Revocations {
        &self.inner.revocations
    }

    /// Where redeemed OIDC authorization codes are recorded.
    pub(crate) fn code_redemptions(&self) -> &dyn CodeRedemptions {
        &*self.inner.code_redemptions
    }

    pub(crate) fn room_cache(&self) -> &room_cache::RoomConfigsUntilChanged {
        &self.inner.rooms
    }

    /// Turns a failed store call of the public API into its answer, counting and logging
    /// backend failures. A store that cannot be reached answers 503 `store_unavailable` with
    /// `Retry-After` whatever the room's `on_store_error`: the API has no protected content to
    /// let through, but says when the room's protected pages are open meanwhile.
    pub(crate) fn store_error(
        &self,
        room: &RoomId,
        operation: &'static str,
        error: StoreError,
    ) -> ApiError {
        if !matches!(error, StoreError::Backend { .. }) {
            return error.into();
        }
        self.inner.failures.record(Some(room), operation, &error);
        // An `open` room lets visitors through only once its store is gone, not busy.
        match self.on_store_error(room) {
            StoreErrorPolicy::Open if self.inner.failures.gone_for(room) => {
                ApiError::store_unavailable_open()
            }
            StoreErrorPolicy::Closed | StoreErrorPolicy::Open => ApiError::store_unavailable(),
        }
    }

    /// The signing keys (a snapshot: cheap to clone, replaced whole by a rotation).
    pub fn keys(&self) -> KeySet {
        self.inner.keys.read().clone()
    }

    /// Starts a change of the signing keys: whoever reads the key source and then installs
    /// what it read (a rotation, a prune, a reload) holds this while doing both, so a change
    /// that read the source before another is installed before the other starts, never over
    /// it.
    pub async fn change_keys(&self) -> KeysChange<'_> {
        KeysChange {
            keys: &self.inner.keys,
            _one_at_a_time: self.inner.keys_changing.lock().await,
        }
    }

    /// Keeps an HS256 secret read at start (`read_secret_file`) for the rooms naming its
    /// file, so no request reads the file.
    pub fn preload_site_secret(&self, path: std::path::PathBuf, secret: Vec<u8>) {
        self.inner.site_keys.preload_secret(path, secret);
    }

    /// The site's keys for rooms with `identity = "jwt:<claim>"`.
    pub fn site_keys(&self) -> &site_identity::SiteKeyCache {
        &self.inner.site_keys
    }

    pub(crate) fn key_reload(&self) -> Option<&KeyReload> {
        self.inner.key_reload.as_ref()
    }

    /// The settings.
    pub fn settings(&self) -> &PublicSettings {
        &self.inner.settings
    }

    /// How this node's cookies are written (`Secure` behind https or TLS).
    pub fn cookies(&self) -> CookiePolicy {
        self.inner.cookies
    }

    /// The node's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The current time of day, `HH:MM:SS` UTC, for "last updated" on pages.
    pub(crate) fn clock_time_of_day(&self) -> String {
        let seconds = self.now().as_secs() % 86_400;
        format!(
            "{:02}:{:02}:{:02} UTC",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )
    }

    pub(crate) fn verify_ticket(&self, room: &RoomId, token: &str) -> Result<TicketRef, ApiError> {
        self.verify_ticket_at(room, token)
            .map(|(reference, _)| reference)
    }

    /// The ticket a token names, and the position it was signed with.
    pub(crate) fn verify_ticket_at(
        &self,
        room: &RoomId,
        token: &str,
    ) -> Result<(TicketRef, u64), ApiError> {
        let claims = self
            .keys()
            .ticket_signer()
            .verify(token, room.as_str(), self.now().as_secs())
            .map_err(|_| ApiError::ticket_invalid())?;
        let reference = ticket_reference(&claims).ok_or_else(ApiError::ticket_invalid)?;
        Ok((reference, claims.position))
    }

    pub(crate) fn require_service_key(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(ApiError::unauthorized)?;
        if key_matches(&self.settings().service_keys, presented) {
            Ok(())
        } else {
            Err(ApiError::unauthorized())
        }
    }
}

/// Whether `presented` hashes to one of `hashes`, compared in constant time.
pub fn key_matches(hashes: &[KeyHash], presented: &str) -> bool {
    let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
    hashes.iter().fold(false, |found, hash| {
        found | bool::from(hash.0.ct_eq(&digest))
    })
}

/// Takes one token from the bucket of `limit` per `period` (as many in a burst) under `key` in
/// `store`: `true` when there was one.
async fn take_one_token(
    store: &dyn LimitStore,
    key: &str,
    limit: u64,
    period: Duration,
) -> Result<bool, LimitStoreError> {
    let params = LimitParams {
        algorithm: Algorithm::TokenBucket,
        limit,
        period,
        burst: limit,
        delay: 0,
        nodelay: false,
    };
    let request = LimitRequest {
        key,
        params: &params,
        cost: 1,
        budget: None,
    };
    let decisions = store.acquire(&[request]).await?;
    Ok(decisions.first().is_some_and(|decision| decision.allowed))
}

/// A change of the node's signing keys under way ([`AppState::change_keys`]): no other
/// change reads the key source or installs keys until it is dropped.
pub struct KeysChange<'a> {
    keys: &'a parking_lot::RwLock<KeySet>,
    _one_at_a_time: tokio::sync::MutexGuard<'a, ()>,
}

impl KeysChange<'_> {
    /// Replaces the signing keys; requests already signing keep the set they took.
    pub fn install(&self, keys: KeySet) {
        *self.keys.write() = keys;
    }
}
