//! What changes the gateway's settings in force (`live.rs`) while it serves (SPEC §13): a
//! reload of the config file (its `[upstream]`, `[[route]]` and `[websocket]`), and the rooms'
//! `routes` as the store holds them. A room's `routes` changed through the admin API of any
//! node reach every node's table through the store's change notices (milliseconds, on a shared
//! store) and, should a notice be lost, the ticker's listing of every room twice a second (see
//! [`Gateway::follow_room_listings`]).

use std::future::Future;
use std::sync::Arc;

use anteroom_core::config::{RouteConfig, UpstreamConfig, WebSocketConfig};
use anteroom_core::room::RoomConfig;
use anteroom_store::Notice;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::Gateway;
use super::live::{LiveSettings, room_globs, room_routes};
use super::proxy::Upstream;

/// What a reload of the config file hands the gateway.
#[derive(Debug, Clone, Default)]
pub struct GatewayReload {
    /// `[upstream]`: changes to it apply to requests that start after the reload. Adding or
    /// removing the section needs a restart (the listener's routing depends on it).
    pub upstream: Option<UpstreamConfig>,
    /// `[[route]]`, in file order (the rooms' shorthands come from the store).
    pub routes: Vec<RouteConfig>,
    /// `[websocket]`: applies to WebSocket connections opened after the reload.
    pub websocket: Option<WebSocketConfig>,
    /// The file's rooms: what `on_store_error` says for a room the store cannot be read for
    /// yet (the rooms' routes come from the store).
    pub rooms: Vec<RoomConfig>,
}

/// Why a reload was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayReloadError {
    /// The new upstream cannot be used (its URL, or its TLS files).
    #[error("[upstream] {0} cannot be used; see the error logged before")]
    Upstream(String),
}

/// What a reload applied, and what it left for a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayReloaded {
    /// Routes in force now (the rooms' shorthands included).
    pub routes: usize,
    /// The upstream's settings changed.
    pub upstream_changed: bool,
    /// `[upstream]` was added or removed: kept as it was until a restart.
    pub upstream_needs_restart: bool,
}

impl Gateway {
    /// Applies a reloaded config file's routes, upstream and WebSocket limits at once; with an
    /// error, nothing changes.
    pub fn reload(&self, reload: GatewayReload) -> Result<GatewayReloaded, GatewayReloadError> {
        let mut sources = self.inner.route_sources.lock();
        let current = self.live();
        let mut reloaded = GatewayReloaded::default();
        let upstream = match (&current.upstream, reload.upstream) {
            (Some(old), Some(new)) if old.config == new => Some(old.clone()),
            (Some(_), Some(new)) => {
                let url = new.url.clone();
                reloaded.upstream_changed = true;
                Some(Arc::new(
                    Upstream::new(new).ok_or(GatewayReloadError::Upstream(url))?,
                ))
            }
            (None, None) => None,
            (old, _) => {
                reloaded.upstream_needs_restart = true;
                old.clone()
            }
        };
        sources.configured = reload.routes;
        let routes = sources.table(Some(&current.routes));
        reloaded.routes = routes.len();
        self.inner.rooms.configure(reload.rooms);
        self.inner.live.store(Arc::new(LiveSettings {
            routes,
            upstream,
            websocket: reload.websocket.unwrap_or_default(),
        }));
        Ok(reloaded)
    }

    /// Takes a listing of every room in the store: when the rooms' `routes` changed, the route
    /// table is rebuilt with them (the `[[route]]` entries first, as always). Costs a
    /// comparison of the rooms' path lists when nothing changed.
    pub fn follow_rooms(&self, rooms: &[RoomConfig]) {
        let globs = room_globs(rooms);
        let mut sources = self.inner.route_sources.lock();
        if sources.room_globs == globs {
            return;
        }
        sources.rooms = room_routes(rooms);
        sources.room_globs = globs;
        let names: Vec<&str> = sources
            .rooms
            .iter()
            .map(|route| route.name.as_str())
            .collect();
        tracing::info!(routes = ?names, "the rooms' routes changed; the route table follows");
        let current = self.live();
        let routes = sources.table(Some(&current.routes));
        self.inner.live.store(Arc::new(LiveSettings {
            routes,
            upstream: current.upstream.clone(),
            websocket: current.websocket.clone(),
        }));
    }
}

impl Gateway {
    /// Keeps the route table in step with the rooms' `routes` in the store until `shutdown`:
    /// from the ticker's listings
    /// ([`AppState::room_listings`](anteroom_api::AppState::room_listings), twice a second),
    /// and at once when a shared store announces a room's configuration changed on any node
    /// (then the rooms are listed right away).
    pub async fn follow_room_listings(self, shutdown: impl Future<Output = ()>) {
        let mut listings = self.app().room_listings();
        let mut notices = self
            .app()
            .store()
            .notices()
            .map(|notices| notices.subscribe());
        tokio::pin!(shutdown);
        loop {
            let notice = async {
                match &mut notices {
                    Some(receiver) => receiver.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = listings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let listing = listings.borrow_and_update().clone();
                    if let Some(rooms) = listing {
                        self.follow_rooms(&rooms);
                    }
                }
                notice = notice => match notice {
                    Ok(Notice::Changed(notice)) if !notice.change.touches_config() => {}
                    Err(RecvError::Closed) => notices = None,
                    // A room's configuration changed, or changes may have been missed: one
                    // listing covers every notice already waiting too.
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        if let Some(receiver) = &mut notices {
                            skip_waiting(receiver);
                        }
                        self.list_rooms_now().await;
                    }
                },
                () = &mut shutdown => return,
            }
        }
    }

    /// Lists the store's rooms now and follows their `routes`; a store that cannot be read
    /// leaves the table as it is (the ticker's next listing tries again).
    async fn list_rooms_now(&self) {
        match self.app().store().rooms().await {
            Ok(rooms) => self.follow_rooms(&rooms),
            Err(error) => tracing::debug!(%error, "cannot list the rooms for their routes"),
        }
    }
}

/// Takes every notice already waiting in `receiver`, so one listing answers them all.
fn skip_waiting(receiver: &mut tokio::sync::broadcast::Receiver<Notice>) {
    while !matches!(
        receiver.try_recv(),
        Err(TryRecvError::Empty | TryRecvError::Closed)
    ) {}
}
