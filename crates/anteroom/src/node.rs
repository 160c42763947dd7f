//! `anteroom serve` put together: the node's parts from `serve.rs`, the admin listener
//! (`admin.rs`) and the reload on SIGHUP (`reload.rs`), run until SIGTERM/SIGINT.

use std::path::PathBuf;

use anyhow::Context;

use anteroom_core::config::Config;

use crate::serve::{
    bind_public, check_upstream_tls, gateway, prepare, run_until_shutdown, server_limits,
    tls_server,
};

/// Runs until SIGTERM or SIGINT; SIGHUP reloads what can change live from `path`
/// (`reload.rs`).
pub(crate) async fn serve(config: Config, path: PathBuf) -> anyhow::Result<()> {
    let tls = tls_server(&config)?;
    check_upstream_tls(&config)?;
    let runtime = prepare(&config).await?;
    if let Some(tls) = &tls {
        // A renewal that writes new files is served without a signal.
        tokio::spawn(anteroom_edge::follow_certificate_files(
            tls.clone(),
            anteroom_edge::CERTIFICATE_CHECK_INTERVAL,
        ));
    }
    let listeners = bind_public(config.server.listen, config.server.workers)?;
    tracing::info!(
        listen = %listeners.local_addr(),
        public_url = %config.server.public_url,
        tls = tls.is_some(),
        rooms = config.rooms.len(),
        workers = listeners.workers(),
        "anteroom is serving"
    );
    let spans = span_export(&config).await?;
    let gateway = gateway(&config, &runtime, spans.clone());
    let admin = crate::admin::start(
        &runtime,
        &config,
        config.server.admin_listen,
        Some(&gateway),
        crate::shutdown_signal(),
    )
    .await?;
    tokio::spawn(crate::reload::reload_on_hangup(crate::reload::Reloadable {
        path,
        started: config.clone(),
        store: runtime.store.clone(),
        limiter: runtime.state.rate_limiter().cloned(),
        tls: tls.clone(),
        gateway: gateway.clone(),
        admin: admin.state,
        sinks: admin.sinks,
    }));
    let state = runtime.state.clone();
    let site = gateway.clone();
    let limits = server_limits(&config);
    let served = run_until_shutdown(
        runtime,
        listeners,
        move || {
            anteroom_edge::gateway_app(state.clone(), &site)
                .with_limits(limits.clone())
                .with_tls(tls.as_ref())
        },
        Some(gateway),
        crate::shutdown_signal(),
    )
    .await;
    if let Some(spans) = spans {
        // The last batch goes out before the process ends; the exporter's client blocks.
        let _ = tokio::task::spawn_blocking(move || spans.shutdown()).await;
    }
    served
}

/// The span exporter of `[tracing] otlp_endpoint`, if set. Built off the runtime's threads:
/// its HTTP client is a blocking one, which must not be made or dropped on them.
async fn span_export(config: &Config) -> anyhow::Result<Option<anteroom_edge::SpanExport>> {
    let Some(endpoint) = config.tracing.otlp_endpoint.clone() else {
        return Ok(None);
    };
    let spans = tokio::task::spawn_blocking(move || anteroom_edge::SpanExport::start(&endpoint))
        .await
        .context("starting the span exporter")??;
    tracing::info!(endpoint = ?config.tracing.otlp_endpoint, "spans are exported over OTLP");
    Ok(Some(spans))
}
