//! SIGHUP (SPEC §13): re-reads the config file and applies, while the node serves, its rooms,
//! rate limits, routes, upstream, WebSocket limits and event sinks, and loads the TLS
//! certificates again from their files.
//!
//! Whole or nothing: the file is parsed and validated, and everything that reads other files
//! or can fail (the upstream's TLS files, custom pages, the sinks' secrets and certificate
//! authorities, the rooms' HS256 identity secrets) is prepared before anything is applied; a file with any problem changes
//! nothing, and the problems are logged. What cannot change in a running process (listeners,
//! store, keys, API keys, trusted proxies, …: see [`needs_restart`]) is logged as needing a
//! restart, and the running node keeps the values it started with.

use std::path::PathBuf;
use std::sync::Arc;

use anteroom_admin::{AdminState, EventSinks, Sink};
use anteroom_api::ratelimit::RateLimiter;
use anteroom_core::config::{Config, ServerConfig};
use anteroom_edge::{Gateway, GatewayReload, TlsServer};
use anteroom_store::RoomStore;

use crate::serve::{check_upstream_tls, load_config, page_renderer, site_secrets};

/// What a reload changes, and the config the node started with.
pub(crate) struct Reloadable {
    pub(crate) path: PathBuf,
    /// The config at start: what settings that need a restart are compared with.
    pub(crate) started: Config,
    pub(crate) store: Arc<dyn RoomStore>,
    pub(crate) limiter: Option<RateLimiter>,
    pub(crate) tls: Option<TlsServer>,
    pub(crate) gateway: Gateway,
    pub(crate) admin: AdminState,
    /// The running event sinks; started by the first reload that configures one.
    pub(crate) sinks: Option<EventSinks>,
}

/// Reloads on every SIGHUP until the process ends.
pub(crate) async fn reload_on_hangup(mut reloadable: Reloadable) {
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
            if let Some(tls) = &reloadable.tls {
                reload_certificates(tls.clone()).await;
            }
            reloadable.reload().await;
        }
    }
    #[cfg(not(unix))]
    {
        let _ = &mut reloadable;
    }
}

/// A validated file with everything it needs read, ready to apply.
struct Prepared {
    config: Config,
    sinks: Vec<Sink>,
    /// The HS256 secret files of rooms with `identity = "jwt:<claim>"`, read again (a site
    /// rotates its secret by rewriting the file and sending SIGHUP).
    site_secrets: Vec<(PathBuf, Vec<u8>)>,
}

impl Reloadable {
    /// One reload: prepare, then apply; logs what happened.
    async fn reload(&mut self) {
        let path = self.path.display().to_string();
        let prepared = match prepare(&self.path) {
            Ok(prepared) => prepared,
            Err(error) => {
                tracing::error!(%path, "configuration not reloaded, nothing changed: {error:#}");
                return;
            }
        };
        for setting in needs_restart(&self.started, &prepared.config) {
            tracing::warn!(%path, setting, "changed in the file; needs a restart to take effect");
        }
        self.apply(prepared).await;
    }

    async fn apply(&mut self, prepared: Prepared) {
        let Prepared {
            config,
            sinks,
            site_secrets,
        } = prepared;
        // The gateway first: its upstream is the one step that can still fail (checked while
        // preparing, so only a file that changed since), and then nothing has changed yet.
        if !self.reload_gateway(&config) {
            return;
        }
        for (file, secret) in site_secrets {
            self.admin.app().preload_site_secret(file, secret);
        }
        let rate_limits = config.rate_limits.len();
        if let Some(limiter) = &self.limiter
            && let Err(error) = limiter.replace_rules(config.rate_limits.clone())
        {
            tracing::error!(%error, "cannot apply the reloaded rate limits");
        }
        self.apply_sinks(sinks);
        let applied = self.apply_rooms(&config).await;
        tracing::info!(
            path = %self.path.display(),
            rooms = applied,
            rate_limits,
            routes = config.routes.len(),
            sinks = config.events.len(),
            "configuration reloaded"
        );
    }

    /// Hands the gateway its new upstream, routes and rooms; `false` (logged) when the
    /// upstream cannot be used, and then nothing changed.
    fn reload_gateway(&self, config: &Config) -> bool {
        let gateway = self.gateway.reload(GatewayReload {
            upstream: config.upstream.clone(),
            routes: config.routes.clone(),
            websocket: config.websocket.clone(),
            rooms: config.rooms.clone(),
        });
        match gateway {
            Ok(reloaded) => {
                if reloaded.upstream_changed {
                    tracing::info!(upstream = ?config.upstream.as_ref().map(|u| &u.url), "upstream reloaded; requests from now on use it");
                }
                if reloaded.upstream_needs_restart {
                    tracing::warn!(
                        setting = "[upstream]",
                        "added or removed; needs a restart to take effect"
                    );
                }
                true
            }
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "configuration not reloaded, nothing changed");
                false
            }
        }
    }

    /// Puts the file's rooms into the store; how many went in.
    async fn apply_rooms(&self, config: &Config) -> usize {
        let mut applied = 0;
        for room in &config.rooms {
            match self.store.put_room(room.clone()).await {
                Ok(_) => applied += 1,
                Err(error) => {
                    tracing::error!(room = %room.id, %error, "cannot apply the reloaded room")
                }
            }
        }
        // The file's rooms may have brought other `routes`: into the table now rather than
        // at the next listing.
        if let Ok(rooms) = self.store.rooms().await {
            self.gateway.follow_rooms(&rooms);
        }
        applied
    }

    fn apply_sinks(&mut self, sinks: Vec<Sink>) {
        match &self.sinks {
            Some(running) => {
                let (stopped, started) = running.replace(sinks);
                if stopped + started > 0 {
                    tracing::info!(stopped, started, "event sinks reloaded");
                }
            }
            None if sinks.is_empty() => {}
            None => match crate::admin::start_event_sinks(&self.admin, sinks) {
                Ok(running) => self.sinks = Some(running),
                Err(error) => tracing::error!("cannot start the event sinks: {error:#}"),
            },
        }
    }
}

/// Reads and checks the file and everything it points to, changing nothing.
fn prepare(path: &std::path::Path) -> anyhow::Result<Prepared> {
    let config = load_config(path)?;
    check_upstream_tls(&config)?;
    page_renderer(&config)?;
    let sinks = crate::admin::configured_sinks(&config)?;
    let site_secrets = site_secrets(&config)?;
    Ok(Prepared {
        config,
        sinks,
        site_secrets,
    })
}

/// The settings that differ between `started` and `reloaded` but only take effect at a
/// restart. Everything else reloads: rooms, rate limits, routes, `[upstream]` settings,
/// `[websocket]`, event sinks (and the TLS certificates' contents). Both structs are taken
/// apart field by field, so a new setting does not compile until it is placed on one side.
pub(crate) fn needs_restart(started: &Config, reloaded: &Config) -> Vec<&'static str> {
    let Config {
        server,
        store,
        keys,
        auth,
        verify,
        log,
        tracing,
        // Reloaded (adding or removing `[upstream]` is reported by the gateway's reload).
        upstream: _,
        rooms: _,
        rate_limits: _,
        routes: _,
        websocket: _,
        events: _,
    } = started;
    let ServerConfig {
        listen,
        admin_listen,
        public_url,
        issuer,
        trusted_proxies,
        workers,
        templates_dir,
        sse,
        max_once_marks,
        http_engine,
        tls,
        connections,
        ticker,
    } = server;
    let new = &reloaded.server;
    let changes = [
        ("[server] listen", *listen != new.listen),
        ("[server] admin_listen", *admin_listen != new.admin_listen),
        ("[server] public_url", *public_url != new.public_url),
        ("[server] issuer", *issuer != new.issuer),
        (
            "[server] trusted_proxies",
            *trusted_proxies != new.trusted_proxies,
        ),
        ("[server] workers", *workers != new.workers),
        (
            "[server] templates_dir",
            *templates_dir != new.templates_dir,
        ),
        ("[server] sse", *sse != new.sse),
        (
            "[server] max_once_marks",
            *max_once_marks != new.max_once_marks,
        ),
        ("[server] http_engine", *http_engine != new.http_engine),
        ("[server] connections", *connections != new.connections),
        (
            "[server] tick_interval, sse_touch_interval",
            *ticker != new.ticker,
        ),
        ("[server.tls]", *tls != new.tls),
        ("[store]", *store != reloaded.store),
        ("[keys]", *keys != reloaded.keys),
        ("[auth]", *auth != reloaded.auth),
        ("[verify]", *verify != reloaded.verify),
        ("[log]", *log != reloaded.log),
        ("[tracing]", *tracing != reloaded.tracing),
    ];
    changes
        .into_iter()
        .filter_map(|(setting, changed)| changed.then_some(setting))
        .collect()
}

/// Loads the TLS certificates again; a bad file keeps the ones served (and is logged).
#[cfg(unix)]
async fn reload_certificates(tls: TlsServer) {
    match tokio::task::spawn_blocking(move || tls.reload()).await {
        Ok(Ok(())) => tracing::info!("TLS certificates reloaded"),
        Ok(Err(error)) => {
            tracing::error!(%error, "TLS certificates not reloaded; the previous ones are still served")
        }
        Err(error) => tracing::error!(%error, "TLS certificate reload did not finish"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        match anteroom_core::config::parse_config(text, &[]) {
            Ok(config) => config,
            Err(errors) => panic!("{errors}"),
        }
    }

    const BASE: &str = "[server]\nlisten = \"127.0.0.1:8080\"\n\n[upstream]\nurl = \"http://127.0.0.1:3000\"\n\n[[room]]\nid = \"sale\"\n";

    #[test]
    fn what_reloads_needs_no_restart() {
        let live = format!(
            "{}routes = [\"/buy/**\"]\n\n[websocket]\nlimit = 5\nperiod = \"1s\"\n",
            BASE.replace("3000", "3001")
        );
        assert_eq!(
            needs_restart(&parse(BASE), &parse(&live)),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn listeners_and_keys_need_a_restart() {
        let moved = BASE.replace("8080", "8081").replace(
            "[upstream]",
            "[auth]\nread_keys = [\"sha256:0101010101010101010101010101010101010101010101010101010101010101\"]\n\n[upstream]",
        );
        assert_eq!(
            needs_restart(&parse(BASE), &parse(&moved)),
            ["[server] listen", "[auth]"]
        );
    }
}
