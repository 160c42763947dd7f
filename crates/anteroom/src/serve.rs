//! `anteroom serve`: load the config, open the store and keys, start the listeners and the
//! ticker, and drain on SIGTERM/SIGINT.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use anteroom_core::Clock;
use anteroom_core::config::{Config, StoreConfig, parse_config};
use anteroom_http::{
    AppState, DEFAULT_MAX_SSE_CONNECTIONS, NodeOptions, PageRenderer, PublicSettings,
};
use anteroom_store::{MemoryStore, RedbStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm};

use crate::BadConfig;
use crate::clock::SystemClock;

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
    pub(crate) keys: KeySet,
}

/// Opens the store and keys and installs the configured rooms.
pub(crate) async fn prepare(config: &Config) -> anyhow::Result<Runtime> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store: Arc<dyn RoomStore> = match &config.store {
        StoreConfig::Embedded { path } => Arc::new(
            RedbStore::open(path, clock.clone())
                .with_context(|| format!("opening the store at {}", path.display()))?,
        ),
        StoreConfig::Memory => {
            tracing::warn!("memory store: every queue and session is lost when the process stops");
            Arc::new(MemoryStore::new(clock.clone()))
        }
        StoreConfig::Redis { urls, cluster } => {
            // Scripts read the server's TIME (no clock passed): every node shares one clock.
            let redis = if *cluster {
                anteroom_store::RedisConfig::cluster(urls.iter().cloned())
            } else {
                anteroom_store::RedisConfig::standalone(urls.first().cloned().unwrap_or_default())
            };
            tracing::info!(nodes = urls.len(), cluster = *cluster, "redis store");
            Arc::new(
                anteroom_store::RedisStore::new(redis, None)
                    .map_err(|error| BadConfig(format!("[store] redis: {error}")))?,
            )
        }
    };
    let algorithm: SigningAlgorithm = config
        .keys
        .algorithm
        .parse()
        .map_err(|error| BadConfig(format!("[keys] algorithm: {error}")))?;
    let keys = KeySet::load_or_generate(&config.keys.dir, algorithm, clock.now().as_secs())
        .with_context(|| format!("loading signing keys from {}", config.keys.dir.display()))?;
    if keys.algorithm() != algorithm {
        tracing::warn!(
            configured = algorithm.as_str(),
            active = keys.algorithm().as_str(),
            "the key directory's active key uses another algorithm; run `anteroom keys generate` to rotate"
        );
    }
    for room in &config.rooms {
        store
            .put_room(room.clone())
            .await
            .with_context(|| format!("installing room {}", room.id))?;
    }
    let settings = PublicSettings {
        public_url: config.server.public_url.clone(),
        issuer: config.server.issuer.clone(),
        service_keys: config.auth.service_keys.clone(),
    };
    let page = PageRenderer::default();
    for room in config
        .rooms
        .iter()
        .filter(|room| !room.page_template.is_empty())
    {
        page.load(&room.page_template)
            .map_err(|error| BadConfig(format!("room {}: {error}", room.id)))?;
    }
    let options = NodeOptions {
        max_sse_connections: DEFAULT_MAX_SSE_CONNECTIONS,
        page,
        rate_limiter: None,
    };
    let state = AppState::with_options(store.clone(), keys.clone(), clock, settings, options);
    Ok(Runtime { state, store, keys })
}

/// Runs until SIGTERM or SIGINT; SIGHUP reloads the rooms from `path`.
pub(crate) async fn serve(config: Config, path: PathBuf) -> anyhow::Result<()> {
    let runtime = prepare(&config).await?;
    tokio::spawn(reload_on_hangup(path, runtime.store.clone()));
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding the public listener on {}", config.server.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        public_url = %config.server.public_url,
        rooms = config.rooms.len(),
        "anteroom is serving"
    );
    let router = anteroom_http::public_router(runtime.state.clone());
    run_until_shutdown(runtime, listener, router, crate::shutdown_signal()).await
}

/// Serves the public API and runs the ticker until `shutdown`, then drains.
pub(crate) async fn run_until_shutdown(
    runtime: Runtime,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_ticker, ticker_stopped) = tokio::sync::oneshot::channel::<()>();
    let ticker = tokio::spawn(anteroom_http::run_ticker(
        runtime.store.clone(),
        runtime.state.hub().clone(),
        async {
            let _ = ticker_stopped.await;
        },
    ));
    anteroom_http::serve(listener, router, shutdown)
        .await
        .context("serving the public listener")?;
    let _ = stop_ticker.send(());
    let _ = ticker.await;
    tracing::info!("stopped");
    Ok(())
}

/// Re-reads the config file on every SIGHUP and applies its rooms live. A file with problems
/// is refused as a whole (and the problems logged), so a typo never half-applies.
async fn reload_on_hangup(path: PathBuf, store: Arc<dyn RoomStore>) {
    #[cfg(unix)]
    {
        let mut hangups =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGHUP; reloading is off");
                    return;
                }
            };
        while hangups.recv().await.is_some() {
            match load_config(&path) {
                Ok(config) => {
                    let mut applied = 0;
                    for room in config.rooms {
                        match store.put_room(room.clone()).await {
                            Ok(_) => applied += 1,
                            Err(error) => {
                                tracing::error!(room = %room.id, %error, "cannot apply the reloaded room")
                            }
                        }
                    }
                    tracing::info!(path = %path.display(), rooms = applied, "configuration reloaded");
                }
                Err(error) => {
                    tracing::error!(path = %path.display(), "configuration not reloaded: {error:#}")
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, store);
    }
}
