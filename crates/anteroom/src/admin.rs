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

use anteroom_core::config::{EventSinkKind, SecretSource};
use anteroom_store::OutboxLimits;

use crate::BadConfig;
use crate::clock::SystemClock;
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
        ticket_secret_retention: config.keys.ticket_secret_retention,
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
    admin.set_routes(&config.routes);
    if !config.events.is_empty() {
        admin.set_outbox(event_sinks(config, runtime.state.store().clone())?);
    }
    // The sampler feeds the event sinks and the metrics even without an admin listener.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(anteroom_http::run_admin_sampler(
        admin.clone(),
        async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    ));
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%listen, %error, "cannot bind the admin listener: no admin API, control panel or metrics on this node");
            tokio::spawn(async move {
                shutdown.await;
                let _ = stop.send(true);
            });
            return Ok(None);
        }
    };
    let address = listener.local_addr()?;
    // The public listener's timeouts, none of its caps: the admin listener is what the
    // descriptors kept out of `max_connections` are for.
    let app = anteroom_http::PublicApp::from(anteroom_http::admin_router(admin)).with_limits(
        anteroom_http::ServerLimits::uncapped(config.server.connections),
    );
    tokio::spawn(async move {
        let served = anteroom_http::serve(listener, app, shutdown).await;
        let _ = stop.send(true);
        if let Err(error) = served {
            tracing::error!(%error, "the admin listener failed");
        }
    });
    tracing::info!(admin_listen = %address, "admin API, control panel and metrics listening");
    Ok(Some(address))
}

/// Switches the store's per-visitor events on and starts the `[[events.sink]]` delivery
/// loops over its outbox: the embedded store keeps events in its own file and log, a Redis
/// store in Redis Streams shared by every node (both survive restarts), the memory store in
/// memory.
fn event_sinks(
    config: &Config,
    room_store: std::sync::Arc<dyn anteroom_store::RoomStore>,
) -> anyhow::Result<anteroom_http::Outbox> {
    let store = room_store
        .event_outbox(OutboxLimits::default())
        .map_err(|error| anyhow::anyhow!("opening the event outbox: {error}"))?;
    let mut sinks = Vec::with_capacity(config.events.len());
    for sink in &config.events {
        let secret = match &sink.kind {
            EventSinkKind::Log => Vec::new(),
            EventSinkKind::Webhook(webhook) => match &webhook.secret {
                SecretSource::Inline(secret) => secret.as_bytes().to_vec(),
                SecretSource::File(path) => std::fs::read_to_string(path)
                    .map_err(|error| {
                        BadConfig(format!(
                            "event sink {}: cannot read secret_file {}: {error}",
                            sink.name,
                            path.display()
                        ))
                    })?
                    .trim()
                    .as_bytes()
                    .to_vec(),
            },
        };
        // Only a webhook needs a client (loading the system's authorities is not free).
        let client = match &sink.kind {
            EventSinkKind::Webhook(webhook) => {
                let extra_roots = match &webhook.ca_file {
                    Some(path) => Some(std::fs::read(path).map_err(|error| {
                        BadConfig(format!(
                            "event sink {}: cannot read ca_file {}: {error}",
                            sink.name,
                            path.display()
                        ))
                    })?),
                    None => None,
                };
                Some(
                    anteroom_http::webhook_client(extra_roots.as_deref()).map_err(|error| {
                        BadConfig(format!("event sink {}: ca_file: {error}", sink.name))
                    })?,
                )
            }
            EventSinkKind::Log => None,
        };
        sinks.push(anteroom_http::Sink {
            config: sink.clone(),
            secret,
            client,
        });
    }
    tracing::info!(sinks = sinks.len(), "event sinks");
    Ok(anteroom_http::spawn_event_sinks(
        store,
        room_store,
        sinks,
        std::sync::Arc::new(SystemClock),
    ))
}
