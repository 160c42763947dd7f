//! A serving node's parts, shared by `anteroom serve` (`node.rs`) and the demo: the config
//! read and checked, the store, keys and rooms opened (`prepare`), the public listener and the
//! gateway, and the run until shutdown, then the drain (`run_until_shutdown`).
//!
//! A Redis store that cannot be reached at start does not stop the node: it serves (each room
//! following its `on_store_error`) and installs the configured rooms in the background once
//! Redis answers. The workers' runtimes are stopped last, since a store connection opened by a
//! request is driven there.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use anteroom_api::ratelimit::{RateLimitOptions, RateLimiter};
use anteroom_api::{AppState, NodeOptions, PageRenderer, PublicSettings};
use anteroom_core::Clock;
use anteroom_core::config::{Config, StoreConfig, parse_config};
use anteroom_core::room::{Identity, SiteKeys};
use anteroom_edge::TlsServer;
use anteroom_store::RoomStore;
use anteroom_store::limit::{
    LimitStore, LocalLimitConfig, LocalLimitStore, RedisLimitConfig, RedisLimitStore,
};
use anteroom_token::KeySet;

use crate::BadConfig;
use crate::clock::SystemClock;
use crate::store::{OpenedStore, open_store, redis_config};

/// Reads and validates the config file, with `ANTEROOM_…` overrides from the environment.
pub(crate) fn load_config(path: &Path) -> anyhow::Result<Config> {
    let source = std::fs::read_to_string(path).map_err(|error| {
        BadConfig(format!(
            "cannot read config file {}: {error}",
            path.display()
        ))
    })?;
    let env: Vec<(String, String)> = std::env::vars().collect();
    parse_config(&source, &env).map_err(|errors| {
        let count = errors.0.len();
        BadConfig(format!("{}: {count} problem(s)\n{errors}", path.display())).into()
    })
}

/// Everything `serve` and `demo` run on.
pub(crate) struct Runtime {
    pub(crate) state: AppState,
    pub(crate) store: Arc<dyn RoomStore>,
    pub(crate) key_source: anteroom_api::KeySource,
}

/// Opens the store and keys and installs the configured rooms.
pub(crate) async fn prepare(config: &Config) -> anyhow::Result<Runtime> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let OpenedStore {
        store,
        code_redemptions,
    } = open_store(config, &clock)?;
    // Request-path store calls are timed (anteroom_store_operation_seconds).
    let store = anteroom_api::store_timing::TimedStore::wrap(store);
    let key_source = crate::keys::key_source(config)?;
    let keys = load_keys(config, &key_source, &*clock).await?;
    warn_about_oidc(config, &keys);
    install_configured_rooms(config, &store).await?;
    let settings = PublicSettings {
        public_url: config.server.public_url.clone(),
        issuer: config.server.issuer.clone(),
        service_keys: config.auth.service_keys.clone(),
        trusted_proxies: config.server.trusted_proxies.clone(),
    };
    let page = page_renderer(config)?;
    let site_secrets = site_secrets(config)?;
    let options = NodeOptions {
        sse: config.server.sse,
        max_once_marks: config.server.max_once_marks,
        page,
        rate_limiter: Some(rate_limiter(config, clock.clone())?),
        code_redemptions,
        key_source: Some(key_source.clone()),
        tls: config.server.tls.is_some(),
        ticker: config.server.ticker,
    };
    let state = AppState::with_options(store.clone(), keys, clock, settings, options);
    state.know_rooms(config.rooms.iter().cloned());
    for (path, secret) in site_secrets {
        state.preload_site_secret(path, secret);
    }
    Ok(Runtime {
        state,
        store,
        key_source,
    })
}

/// The signing keys from `key_source` (generated when there are none), with a warning when
/// the active key's algorithm is not the configured one.
async fn load_keys(
    config: &Config,
    key_source: &anteroom_api::KeySource,
    clock: &dyn Clock,
) -> anyhow::Result<KeySet> {
    let keys = crate::keys::load_or_generate(key_source, config, clock.now().as_secs()).await?;
    let algorithm = crate::keys::algorithm(config)?;
    if keys.algorithm() != algorithm {
        tracing::warn!(
            configured = algorithm.as_str(),
            active = keys.algorithm().as_str(),
            "the active signing key uses another algorithm; rotate (`anteroom keys generate` or POST /admin/v1/keys/rotate) to change it"
        );
    }
    Ok(keys)
}

/// Installs the configured rooms. A shared store may be down for a while: then the node
/// serves anyway (each room follows its on_store_error) and installs the rooms once the store
/// answers; any other store's failure stops the start.
async fn install_configured_rooms(
    config: &Config,
    store: &Arc<dyn RoomStore>,
) -> anyhow::Result<()> {
    let Err((room, error)) = install_rooms(&**store, &config.rooms).await else {
        return Ok(());
    };
    if !matches!(config.store, StoreConfig::Redis { .. }) {
        return Err(error).with_context(|| format!("installing room {room}"));
    }
    tracing::error!(%room, %error, "cannot install the configured rooms yet; serving meanwhile and retrying in the background");
    tokio::spawn(install_in_background(store.clone(), config.rooms.clone()));
    Ok(())
}

/// The page renderer of `[server] templates_dir`, with every configured room's custom page
/// loaded and checked (inside the directory after following links, and rendering), so a bad
/// one stops the start (and `check-config`) rather than reaching visitors.
pub(crate) fn page_renderer(config: &Config) -> Result<PageRenderer, BadConfig> {
    let page = match &config.server.templates_dir {
        Some(dir) => PageRenderer::with_templates_dir(dir.clone()),
        None => PageRenderer::default(),
    };
    for room in config
        .rooms
        .iter()
        .filter(|room| !room.page_template.is_empty())
    {
        page.load(&room.page_template)
            .map_err(|error| BadConfig(format!("room {}: {error}", room.id)))?;
    }
    Ok(page)
}

/// The HS256 secrets of rooms with `identity = "jwt:<claim>"` (`[room.identity_jwt]
/// hs256_secret_file`), read and checked, so a missing or short one stops the start (and
/// `check-config`) rather than refusing visitors.
pub(crate) fn site_secrets(config: &Config) -> Result<Vec<(PathBuf, Vec<u8>)>, BadConfig> {
    let mut secrets = Vec::new();
    for room in &config.rooms {
        let Identity::JwtClaim(site) = &room.identity else {
            continue;
        };
        let SiteKeys::Hs256SecretFile(path) = &site.keys else {
            continue;
        };
        let secret = anteroom_api::site_identity::read_secret_file(path).map_err(|error| {
            BadConfig(format!("room {}: [room.identity_jwt]: {error}", room.id))
        })?;
        secrets.push((path.clone(), secret));
    }
    Ok(secrets)
}

/// The public listener's TLS (`[server.tls]`) with every certificate and key loaded and
/// checked, so a bad file stops the start (and `check-config`) rather than a handshake.
pub(crate) fn tls_server(config: &Config) -> Result<Option<TlsServer>, BadConfig> {
    let Some(files) = &config.server.tls else {
        return Ok(None);
    };
    TlsServer::new(files)
        .map(Some)
        .map_err(|error| BadConfig(format!("[server.tls]: {error}")))
}

/// Checks that an `https://` upstream's TLS can be set up: its `ca_file` (or the system's
/// certificate authorities) and its `server_name`.
pub(crate) fn check_upstream_tls(config: &Config) -> Result<(), BadConfig> {
    match config
        .upstream
        .as_ref()
        .filter(|upstream| upstream.is_https())
    {
        Some(upstream) => anteroom_edge::upstream_tls(upstream)
            .map(|_| ())
            .map_err(|error| BadConfig(format!("[upstream]: {error}"))),
        None => Ok(()),
    }
}

/// Settings that OIDC clients of the configured rooms (SPEC §11) could not work with.
fn warn_about_oidc(config: &Config, keys: &KeySet) {
    let Some(room) = config.rooms.iter().find(|room| room.oidc.is_some()) else {
        return;
    };
    if !keys.algorithm().is_asymmetric() {
        tracing::warn!(
            %room.id,
            algorithm = keys.algorithm().as_str(),
            "rooms with [room.oidc] need an asymmetric signing key: clients cannot verify ID tokens signed with the node's secret"
        );
    }
    if config.server.issuer != config.server.public_url {
        tracing::warn!(
            issuer = %config.server.issuer,
            public_url = %config.server.public_url,
            "OIDC clients look for the discovery document under the issuer, which differs from the public URL"
        );
    }
}

/// Puts every room into the store; the first failure stops it.
async fn install_rooms(
    store: &dyn RoomStore,
    rooms: &[anteroom_core::room::RoomConfig],
) -> Result<(), (anteroom_core::RoomId, anteroom_store::StoreError)> {
    for room in rooms {
        store
            .put_room(room.clone())
            .await
            .map_err(|error| (room.id.clone(), error))?;
    }
    Ok(())
}

/// How long the background installer waits between attempts.
const INSTALL_RETRY: Duration = Duration::from_secs(1);

/// Installs the configured rooms once the store answers (see [`prepare`]).
async fn install_in_background(
    store: Arc<dyn RoomStore>,
    rooms: Vec<anteroom_core::room::RoomConfig>,
) {
    let mut attempts = 1u64;
    loop {
        tokio::time::sleep(INSTALL_RETRY).await;
        attempts += 1;
        match install_rooms(&*store, &rooms).await {
            Ok(()) => {
                tracing::info!(rooms = rooms.len(), attempts, "configured rooms installed");
                return;
            }
            // Once a minute is enough to say it is still failing.
            Err((room, error)) if attempts.is_multiple_of(60) => {
                tracing::error!(%room, %error, attempts, "still cannot install the configured rooms");
            }
            Err(_) => {}
        }
    }
}

/// How often the local rate-limit store drops keys whose state no longer matters.
const LIMIT_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// The rate limiter of the public listener: `[[rate_limit]]` rules counting in this process,
/// or in the redis store for `store = "redis"` rules (config validation makes sure there is
/// one). It exists even without rules, so a reload can add some.
fn rate_limiter(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<RateLimiter> {
    let local = Arc::new(LocalLimitStore::new(clock, LocalLimitConfig::default()));
    local.spawn_sweeper(LIMIT_SWEEP_INTERVAL);
    // Connecting is lazy: a redis that is down fails the calls (each rule's on_store_error),
    // not the start.
    let redis_store = match &config.store {
        StoreConfig::Redis {
            urls,
            cluster,
            timeout,
        } => {
            // The room store's servers and key prefix, the rate limits' own timeout.
            let limits = RedisLimitConfig::for_store(&redis_config(urls, *cluster, *timeout));
            tracing::info!(
                nodes = urls.len(),
                cluster = *cluster,
                "redis rate-limit store"
            );
            let store = RedisLimitStore::connect(limits)
                .map_err(|error| BadConfig(format!("[store] redis for rate limits: {error}")))?;
            Some(Arc::new(store) as Arc<dyn LimitStore>)
        }
        _ => None,
    };
    let options = RateLimitOptions {
        trusted_proxies: config.server.trusted_proxies.clone(),
        redis_store,
        ..RateLimitOptions::default()
    };
    let limiter = RateLimiter::with_options(config.rate_limits.clone(), local, options)
        .map_err(|error| BadConfig(format!("[[rate_limit]]: {error}")))?;
    Ok(limiter)
}

/// The public listener's timeouts and caps, one set for every serving thread: `max_connections`
/// unless set is sized from the open-file limit the process runs with (raised to its hard
/// limit at start), leaving a reserve for the admin listener, the store and the upstream.
pub(crate) fn server_limits(config: &Config) -> anteroom_edge::ServerLimits {
    let open_files = match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, _hard)) => soft,
        Err(error) => {
            tracing::warn!(%error, "cannot read the open-file limit; sizing for 1024");
            1024
        }
    };
    let limits = anteroom_edge::ServerLimits::new(
        config.server.connections,
        open_files,
        config.server.trusted_proxies.clone(),
    );
    tracing::info!(
        open_files,
        max_connections = limits.max_connections(),
        max_connections_per_address = config.server.connections.max_connections_per_address,
        "connection limits"
    );
    limits
}

/// The public listener's sockets, one per serving thread: `workers`, or one per available
/// core.
pub(crate) fn bind_public(
    listen: std::net::SocketAddr,
    workers: Option<usize>,
) -> anyhow::Result<anteroom_edge::PublicListeners> {
    let workers = workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    anteroom_edge::PublicListeners::bind(listen, workers)
        .with_context(|| format!("binding the public listener on {listen}"))
}

/// The gateway of the config's routes: the verify endpoint always, and the reverse proxy for
/// every path outside `/_anteroom/` when `[upstream]` is set.
pub(crate) fn gateway(
    config: &Config,
    runtime: &Runtime,
    spans: Option<anteroom_edge::SpanExport>,
) -> anteroom_edge::Gateway {
    if let Some(upstream) = &config.upstream {
        tracing::info!(upstream = %upstream.url, routes = config.routes.len(), "gateway mode");
    }
    anteroom_edge::Gateway::new(
        runtime.state.clone(),
        anteroom_edge::GatewayOptions {
            upstream: config.upstream.clone(),
            routes: config.routes.clone(),
            websocket: config.websocket.clone(),
            rooms: config.rooms.clone(),
            verify: config.verify.clone(),
            http_engine: config.server.http_engine,
            access_log: anteroom_edge::AccessLog::start(config.log.access),
            spans,
        },
    )
}

/// Serves the public API on `listeners` (one thread per socket, each with the router `router`
/// builds for it) and runs the ticker (and the adaptive rooms' controller, over `gateway`'s
/// measurements) on this runtime until `shutdown`, then drains.
pub(crate) async fn run_until_shutdown(
    runtime: Runtime,
    listeners: anteroom_edge::PublicListeners,
    router: impl Fn() -> anteroom_edge::PublicApp + Send + Sync + 'static,
    gateway: Option<anteroom_edge::Gateway>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_ticker, ticker_stopped) = tokio::sync::watch::channel(false);
    let stopped = |mut receiver: tokio::sync::watch::Receiver<bool>| async move {
        let _ = receiver.wait_for(|stop| *stop).await;
    };
    let ticker = tokio::spawn(anteroom_api::run_ticker(
        runtime.state.clone(),
        stopped(ticker_stopped.clone()),
    ));
    // The rooms' `routes` as the store holds them, changed on any node, into the route table.
    let room_routes = gateway
        .clone()
        .map(|gateway| tokio::spawn(gateway.follow_room_listings(stopped(ticker_stopped.clone()))));
    // Adaptive admission (§5.4): rooms with [room.adaptive] get their rate set every interval.
    let adaptive = tokio::spawn(anteroom_edge::run_adaptive(
        runtime.state.clone(),
        gateway,
        stopped(ticker_stopped.clone()),
    ));
    // Other nodes' changes to the rooms (a shared store only; returns at once otherwise).
    let notices = tokio::spawn(anteroom_api::follow_notices(
        runtime.state.clone(),
        stopped(ticker_stopped),
    ));
    // Key rotations made by other nodes sharing the key directory.
    let keys = tokio::spawn(anteroom_api::key_reload::follow_key_dir(
        runtime.state.clone(),
    ));
    // From the shutdown on, readyz says 503 while the connections drain.
    let draining = runtime.state.clone();
    let shutdown = async move {
        shutdown.await;
        draining.start_draining();
    };
    let mut workers = anteroom_edge::start_workers(listeners, router, shutdown)
        .context("starting the public listener's threads")?;
    let served = workers.drained().await;
    keys.abort();
    let _ = stop_ticker.send(true);
    let _ = ticker.await;
    let _ = adaptive.await;
    let _ = notices.await;
    if let Some(room_routes) = room_routes {
        let _ = room_routes.await;
    }
    // Last: a store connection a request opened runs on its worker's runtime.
    workers.stop().await;
    served.context("serving the public listener")?;
    tracing::info!("stopped");
    Ok(())
}
