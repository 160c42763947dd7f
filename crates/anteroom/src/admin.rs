//! The admin listener (SPEC §8): admin API, control panel and `/metrics`, with the sampler that
//! feeds the panel's history, the metrics and the live event feed.
//!
//! A port that cannot be bound is logged as an error and the node serves the public anyway:
//! visitors in line matter more than the dashboard, and the operator sees the error at once.

use std::future::Future;
use std::net::SocketAddr;

use anteroom_admin::{AdminSettings, AdminState, Metrics};
use anteroom_core::config::Config;

use anteroom_core::config::{EventSinkKind, SecretSource};
use anteroom_store::OutboxLimits;

use crate::BadConfig;
use crate::clock::SystemClock;
use crate::serve::Runtime;

/// The admin surface a started node keeps: what a reload changes in it.
pub(crate) struct Admin {
    /// The address the admin listener listens on, or `None` when it could not bind.
    pub(crate) address: Option<SocketAddr>,
    pub(crate) state: AdminState,
    /// The `[[events.sink]]` delivery loops; none until a sink is configured.
    pub(crate) sinks: Option<anteroom_admin::EventSinks>,
}

/// Starts the admin listener on `listen` until `shutdown`; `/metrics` includes the gateway's
/// measurements when there is one.
pub(crate) async fn start(
    runtime: &Runtime,
    config: &Config,
    listen: SocketAddr,
    gateway: Option<&anteroom_edge::Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Admin> {
    let settings = AdminSettings {
        admin_keys: config.auth.admin_keys.clone(),
        read_keys: config.auth.read_keys.clone(),
        key_source: runtime.key_source.clone(),
        algorithm: crate::keys::algorithm(config)?,
        ticket_secret_retention: config.keys.ticket_secret_retention,
    };
    let metrics = install_metrics(runtime, gateway);
    let admin = AdminState::new(runtime.state.clone(), settings, metrics);
    if let Some(gateway) = gateway {
        admin.set_gateway(gateway.clone());
    }
    let sinks = if config.events.is_empty() {
        None
    } else {
        Some(start_event_sinks(&admin, configured_sinks(config)?)?)
    };
    // The sampler feeds the event sinks and the metrics even without an admin listener.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(anteroom_admin::run_admin_sampler(
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
            return Ok(Admin {
                address: None,
                state: admin,
                sinks,
            });
        }
    };
    let address = serve_admin(listener, &admin, config, shutdown, stop)?;
    Ok(Admin {
        address: Some(address),
        state: admin,
        sinks,
    })
}

/// The metrics recorder with its upkeep (and the gateway's measurements); `None`, logged,
/// when it cannot be installed.
fn install_metrics(runtime: &Runtime, gateway: Option<&anteroom_edge::Gateway>) -> Option<Metrics> {
    match Metrics::install(runtime.state.rate_limiter().cloned()) {
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
    }
}

/// Serves the admin router on `listener` until `shutdown`, then stops the sampler (`stop`);
/// the address it listens on.
fn serve_admin(
    listener: tokio::net::TcpListener,
    admin: &AdminState,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop: tokio::sync::watch::Sender<bool>,
) -> anyhow::Result<SocketAddr> {
    let address = listener.local_addr()?;
    // The public listener's timeouts, none of its caps: the admin listener is what the
    // descriptors kept out of `max_connections` are for.
    let app = anteroom_edge::PublicApp::from(anteroom_admin::admin_router(admin.clone()))
        .with_limits(anteroom_edge::ServerLimits::uncapped(
            config.server.connections,
        ))
        .counted_as(anteroom_edge::Listener::Admin);
    tokio::spawn(async move {
        let served = anteroom_edge::serve(listener, app, shutdown).await;
        let _ = stop.send(true);
        if let Err(error) = served {
            tracing::error!(%error, "the admin listener failed");
        }
    });
    tracing::info!(admin_listen = %address, "admin API, control panel and metrics listening");
    Ok(address)
}

/// Switches the store's per-visitor events on, starts the delivery loops of `sinks` over its
/// outbox and has the admin surface record its events there: the embedded store keeps events
/// in its own file and log, a Redis store in Redis Streams shared by every node (both survive
/// restarts), the memory store in memory.
pub(crate) fn start_event_sinks(
    admin: &AdminState,
    sinks: Vec<anteroom_admin::Sink>,
) -> anyhow::Result<anteroom_admin::EventSinks> {
    let room_store = admin.app().store().clone();
    let store = room_store
        .event_outbox(OutboxLimits::default())
        .map_err(|error| anyhow::anyhow!("opening the event outbox: {error}"))?;
    tracing::info!(sinks = sinks.len(), "event sinks");
    let running = anteroom_admin::spawn_event_sinks(
        store,
        room_store,
        sinks,
        std::sync::Arc::new(SystemClock),
    );
    admin.set_outbox(running.outbox());
    Ok(running)
}

/// The config's `[[events.sink]]` entries with their secrets and certificate authorities
/// read: a file that cannot be read is an error, and nothing starts.
pub(crate) fn configured_sinks(config: &Config) -> Result<Vec<anteroom_admin::Sink>, BadConfig> {
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
                    anteroom_api::webhook_client(extra_roots.as_deref()).map_err(|error| {
                        BadConfig(format!("event sink {}: ca_file: {error}", sink.name))
                    })?,
                )
            }
            EventSinkKind::Log => None,
        };
        sinks.push(anteroom_admin::Sink {
            config: sink.clone(),
            secret,
            client,
        });
    }
    Ok(sinks)
}
