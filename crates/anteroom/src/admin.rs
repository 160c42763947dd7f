//! The admin listener (SPEC §8): admin API, control panel and `/metrics`, with the sampler that
//! feeds the panel's history, the metrics and the live event feed.
//!
//! A port that cannot be bound is logged as an error and the node serves the public anyway:
//! visitors in line matter more than the dashboard, and the operator sees the error at once.

use std::future::Future;
use std::net::SocketAddr;

use anteroom_core::config::Config;
use anteroom_http::{AdminSettings, AdminState, Metrics};
use anteroom_token::SigningAlgorithm;

use crate::BadConfig;
use crate::serve::Runtime;

/// Starts the admin listener on `listen` until `shutdown`; `/metrics` includes the gateway's
/// measurements when there is one. Returns the address it listens on, or `None` when it
/// could not bind.
pub(crate) async fn start(
    runtime: &Runtime,
    config: &Config,
    listen: SocketAddr,
    gateway: Option<&anteroom_http::Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<SocketAddr>> {
    let algorithm: SigningAlgorithm = config
        .keys
        .algorithm
        .parse()
        .map_err(|error| BadConfig(format!("[keys] algorithm: {error}")))?;
    let settings = AdminSettings {
        admin_keys: config.auth.admin_keys.clone(),
        read_keys: config.auth.read_keys.clone(),
        key_dir: config.keys.dir.clone(),
        algorithm,
    };
    let metrics = match Metrics::install(runtime.state.rate_limiter().cloned()) {
        Ok(metrics) => {
            metrics.spawn_upkeep();
            if let Some(gateway) = gateway {
                metrics.watch_gateway(gateway.clone());
            }
            Some(metrics)
        }
        Err(error) => {
            tracing::error!(%error, "metrics are off");
            None
        }
    };
    let admin = AdminState::new(runtime.state.clone(), settings, metrics);
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%listen, %error, "cannot bind the admin listener: no admin API, control panel or metrics on this node");
            return Ok(None);
        }
    };
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(anteroom_http::run_admin_sampler(
        admin.clone(),
        async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    ));
    let router = anteroom_http::admin_router(admin);
    tokio::spawn(async move {
        let served = anteroom_http::serve(listener, router, shutdown).await;
        let _ = stop.send(true);
        if let Err(error) = served {
            tracing::error!(%error, "the admin listener failed");
        }
    });
    tracing::info!(admin_listen = %address, "admin API, control panel and metrics listening");
    Ok(Some(address))
}
