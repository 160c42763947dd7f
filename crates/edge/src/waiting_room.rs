//! [`WaitingRoom`]: anteroom's rooms inside a Rust service (SPEC §1.3), built with
//! [`WaitingRoomBuilder`] from a room store (embedded or Redis), signing keys, the site's
//! public URL, the rooms and the routes they protect.
//!
//! It hands out three things: the tower layer that protects the routes
//! ([`WaitingRoomLayer`], the gateway's own decisions), the routes of the waiting page and its
//! API (`/_anteroom/*` and the JWKS) for the service to serve beside its own, and the node's
//! background work ([`WaitingRoom::run`]: the admitter's ticker, other nodes' room changes
//! and key rotations). The waiting page must be served on the site's own origin, by
//! [`WaitingRoom::router`] or by an anteroom node the proxy in front sends `/_anteroom/` to:
//! the pass is a cookie of the site, and the page sends the visitor back to a path of it.
//!
//! Several instances of a service share one Redis store and one key directory, as anteroom
//! nodes do; the embedded store belongs to one process.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use futures_util::FutureExt as _;

use anteroom_core::config::{Cidr, Config, PageMode, RouteConfig};
use anteroom_core::ratelimit::rules::{MatcherError, RequestMatcher};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, RoomId};
use anteroom_store::{RoomStore, StoreError};
use anteroom_token::{KeySet, SigningAlgorithm, TokenError};

use anteroom_api::{AppState, KeySource, NodeOptions, PublicSettings};

use crate::gateway::{Gateway, GatewayOptions, WaitingRoomLayer};

/// Rooms for a Rust service: the layer, the waiting page's routes and the background work.
///
/// ```
/// use std::sync::Arc;
///
/// use anteroom_core::room::RoomConfig;
/// use anteroom_core::{Clock, RoomId};
/// use anteroom_edge::WaitingRoom;
/// use anteroom_store::{MemoryStore, RoomStore};
/// use tower::ServiceExt;
/// # use anteroom_core::{ManualClock, Timestamp};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// # let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
/// # let keys = tempfile::tempdir().unwrap();
/// # let key_dir = keys.path();
///
/// // `RedbStore` (one process) or `RedisStore` (shared by every instance) in production.
/// let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(clock.clone()));
/// let launch = RoomId::new("launch").unwrap();
/// let waiting_room = WaitingRoom::builder(store, clock)
///     .key_dir(key_dir)
///     .public_url("https://shop.example")
///     .room(RoomConfig { max_active: 1, ..RoomConfig::with_defaults(launch.clone()) })
///     .protect(["/checkout/**"], &launch)
///     .build()
///     .await
///     .expect("rooms installed");
/// let shop = axum::Router::new()
///     .route("/checkout/cart", axum::routing::get(|| async { "your cart" }));
/// let app = waiting_room.around(shop);
/// // In a server: tokio::spawn(async move { waiting_room.run(shutdown).await });
///
/// let visit = || {
///     axum::http::Request::get("/checkout/cart")
///         .header("accept", "text/html")
///         .body(axum::body::Body::empty())
///         .unwrap()
/// };
/// // The room has room: the first visitor is let in with a pass.
/// let first = app.clone().oneshot(visit()).await.unwrap();
/// assert_eq!(first.status(), 200);
/// assert!(first.headers()["set-cookie"].to_str().unwrap().starts_with("anteroom_"));
/// // The second waits.
/// let second = app.oneshot(visit()).await.unwrap();
/// assert_eq!(second.status(), 302);
/// assert_eq!(second.headers()["location"], "/_anteroom/wait/launch?return=/checkout/cart");
/// # });
/// ```
#[derive(Clone)]
pub struct WaitingRoom {
    state: AppState,
    gateway: Gateway,
}

impl WaitingRoom {
    /// A builder for rooms kept in `store`, on `clock`'s time.
    pub fn builder(store: Arc<dyn RoomStore>, clock: Arc<dyn Clock>) -> WaitingRoomBuilder {
        WaitingRoomBuilder {
            node: Node::New(NewNode {
                store,
                clock,
                keys: None,
                public_url: None,
                trusted_proxies: Vec::new(),
            }),
            rooms: Vec::new(),
            routes: Vec::new(),
            problem: None,
        }
    }

    /// A builder for the rooms of an app state already made (its store, keys, settings and
    /// rate limiter; the rate limiter's route-only rules apply to the routes naming them).
    pub fn builder_with_state(state: AppState) -> WaitingRoomBuilder {
        WaitingRoomBuilder {
            node: Node::Made(state),
            rooms: Vec::new(),
            routes: Vec::new(),
            problem: None,
        }
    }

    /// `app` behind the rooms: the waiting page's routes ([`router`](Self::router)), and every
    /// other request through the [`layer`](Self::layer) to `app`. The layer sits around the
    /// whole router, so it decides before `app` routes, on the path `app` then routes.
    pub fn around(&self, app: Router) -> Router {
        self.router()
            .fallback_service(tower::Layer::layer(&self.layer(), app))
    }

    /// The tower layer protecting the routes; every clone shares the caches of passes and
    /// rooms. Put it around a whole router, not with `Router::layer`, which applies it after
    /// routing: the router would route the path as sent rather than in the canonical form the
    /// routes were matched on, and axum's default fallback would not be layered.
    pub fn layer(&self) -> WaitingRoomLayer {
        WaitingRoomLayer::new(self.gateway.clone())
    }

    /// The waiting page and its API (`/_anteroom/*`), and the JWKS, to merge into the
    /// service's router (this router has no fallback of its own).
    pub fn router(&self) -> Router {
        anteroom_api::waiting_room_routes(self.state.clone())
    }

    /// The app state behind the rooms (store, keys, metrics of store failures).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The node's background work until `shutdown` completes: the admitter's ticker (every
    /// node may run it), other nodes' room changes (Redis), and key rotations made by other
    /// nodes in the key directory.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let shutdown = shutdown.shared();
        let ticker = anteroom_api::run_ticker(self.state.clone(), shutdown.clone());
        let notices = anteroom_api::follow_notices(self.state.clone(), shutdown.clone());
        let keys = async {
            anteroom_api::key_reload::follow_key_dir(self.state.clone()).await;
            // Nothing to follow: wait for the shutdown with the others.
            shutdown.clone().await;
        };
        tokio::select! {
            _ = async { tokio::join!(ticker, notices) } => {}
            () = keys => {}
        }
    }
}

/// Where the builder's app state comes from.
enum Node {
    /// Made by [`build`](WaitingRoomBuilder::build) from these parts.
    New(NewNode),
    /// Given whole ([`WaitingRoom::builder_with_state`]).
    Made(AppState),
}

/// The parts of an app state to make.
struct NewNode {
    store: Arc<dyn RoomStore>,
    clock: Arc<dyn Clock>,
    keys: Option<Keys>,
    public_url: Option<String>,
    trusted_proxies: Vec<Cidr>,
}

/// Where the signing keys come from.
enum Keys {
    Dir {
        dir: PathBuf,
        algorithm: SigningAlgorithm,
    },
    Set(KeySet),
}

/// Builds a [`WaitingRoom`]: rooms from a config or from [`RoomConfig`] values, the routes they
/// protect, the key directory and the site's public URL.
pub struct WaitingRoomBuilder {
    node: Node,
    rooms: Vec<RoomConfig>,
    routes: Vec<RouteConfig>,
    /// The first mistake made while building, reported by [`build`](Self::build).
    problem: Option<WaitingRoomSetupError>,
}

impl WaitingRoomBuilder {
    /// Signing keys from `dir`, shared with the other instances and anteroom nodes: loaded,
    /// or an Ed25519 key generated when it holds none; rotations made there are followed.
    pub fn key_dir(self, dir: impl Into<PathBuf>) -> WaitingRoomBuilder {
        self.with_keys(Keys::Dir {
            dir: dir.into(),
            algorithm: SigningAlgorithm::EdDsa,
        })
    }

    /// Signing keys already loaded (not followed for rotations).
    pub fn keys(self, keys: KeySet) -> WaitingRoomBuilder {
        self.with_keys(Keys::Set(keys))
    }

    /// The base URL visitors reach the site at (`https://…` makes the cookies `Secure`); also
    /// the `iss` of the passes.
    pub fn public_url(mut self, url: impl Into<String>) -> WaitingRoomBuilder {
        if let Some(node) = self.new_node("public_url") {
            node.public_url = Some(url.into());
        }
        self
    }

    /// Peers believed about the visitor (`X-Forwarded-For`, a room's identity header): the
    /// proxies in front of the service.
    pub fn trusted_proxies(mut self, proxies: Vec<Cidr>) -> WaitingRoomBuilder {
        if let Some(node) = self.new_node("trusted_proxies") {
            node.trusted_proxies = proxies;
        }
        self
    }

    /// The rooms and routes of a config file, its `[keys]` (directory and algorithm), and its
    /// `[server]` public URL and trusted proxies; with an app state given, only the rooms and
    /// routes (the state has the rest).
    pub fn config(mut self, config: &Config) -> WaitingRoomBuilder {
        self.rooms.extend(config.rooms.iter().cloned());
        self.routes.extend(config.routes.iter().cloned());
        let Node::New(node) = &mut self.node else {
            return self;
        };
        match config.keys.algorithm.parse() {
            Ok(algorithm) => {
                node.keys = Some(Keys::Dir {
                    dir: config.keys.dir.clone(),
                    algorithm,
                });
            }
            Err(error) => {
                self.problem
                    .get_or_insert(WaitingRoomSetupError::Keys(error));
            }
        }
        node.public_url = Some(config.server.public_url.clone());
        node.trusted_proxies
            .clone_from(&config.server.trusted_proxies);
        self
    }

    /// A room, put into the store by [`build`](Self::build) (replacing the store's copy, as a
    /// config file's rooms are at start). Its `routes` shorthand protects those paths with the
    /// waiting page inline, as in a config file.
    pub fn room(mut self, room: RoomConfig) -> WaitingRoomBuilder {
        if !room.routes.is_empty() {
            let globs: Vec<&str> = room.routes.iter().map(String::as_str).collect();
            let name = format!("room-{}", room.id);
            let rooms = vec![room.id.clone()];
            self = self.with_route(name, &globs, rooms, PageMode::Inline);
        }
        self.rooms.push(room);
        self
    }

    /// A route, as a `[[route]]` of the config file: the first route matching a request is
    /// its route.
    pub fn route(mut self, route: RouteConfig) -> WaitingRoomBuilder {
        self.routes.push(route);
        self
    }

    /// Protects the paths `globs` (`*` one segment, `**` any) with `room`: navigations without
    /// a pass are sent to the waiting page (302), other requests get 429 `waiting_room`.
    pub fn protect<'a>(
        self,
        globs: impl IntoIterator<Item = &'a str>,
        room: &RoomId,
    ) -> WaitingRoomBuilder {
        let globs: Vec<&str> = globs.into_iter().collect();
        let name = format!("protect-{}", room);
        self.with_route(name, &globs, vec![room.clone()], PageMode::Redirect)
    }

    /// Puts the rooms into the store and makes the [`WaitingRoom`]. Every room a route names
    /// (or a given room `requires`) must be given to the builder or already be in the store.
    pub async fn build(self) -> Result<WaitingRoom, WaitingRoomSetupError> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        let state = match self.node {
            Node::Made(state) => state,
            Node::New(node) => new_state(node)?,
        };
        let store = state.store().clone();
        for room in &self.rooms {
            store.put_room(room.clone()).await.map_err(|source| {
                WaitingRoomSetupError::InstallRoom {
                    room: room.id.clone(),
                    source,
                }
            })?;
        }
        check_named_rooms(&*store, &self.routes, &self.rooms).await?;
        state.know_rooms(self.rooms.iter().cloned());
        let gateway = Gateway::new(
            state.clone(),
            GatewayOptions {
                routes: self.routes,
                rooms: self.rooms,
                ..GatewayOptions::default()
            },
        );
        Ok(WaitingRoom { state, gateway })
    }

    fn with_keys(mut self, source: Keys) -> WaitingRoomBuilder {
        if let Some(node) = self.new_node("keys") {
            node.keys = Some(source);
        }
        self
    }

    /// The parts of the app state to make, for a `setting` of it; `None` (and the mistake
    /// recorded for [`build`](Self::build)) when the app state was given whole.
    fn new_node(&mut self, setting: &'static str) -> Option<&mut NewNode> {
        match &mut self.node {
            Node::New(node) => Some(node),
            Node::Made(_) => {
                self.problem
                    .get_or_insert(WaitingRoomSetupError::StateGiven(setting));
                None
            }
        }
    }

    fn with_route(
        mut self,
        name: String,
        globs: &[&str],
        rooms: Vec<RoomId>,
        page: PageMode,
    ) -> WaitingRoomBuilder {
        match RequestMatcher::default().with_paths(globs.iter().copied()) {
            Ok(matcher) => self.routes.push(RouteConfig {
                name,
                matcher,
                rooms,
                rate_limits: Vec::new(),
                bypass: false,
                page,
            }),
            Err(source) => {
                self.problem
                    .get_or_insert(WaitingRoomSetupError::Route { name, source });
            }
        }
        self
    }
}

/// The app state of a builder that was given the parts.
fn new_state(node: NewNode) -> Result<AppState, WaitingRoomSetupError> {
    let NewNode {
        store,
        clock,
        keys,
        public_url,
        trusted_proxies,
    } = node;
    let public_url = public_url.ok_or(WaitingRoomSetupError::NoPublicUrl)?;
    if !(public_url.starts_with("https://") || public_url.starts_with("http://")) {
        return Err(WaitingRoomSetupError::PublicUrl(public_url));
    }
    let (keys, key_source) = match keys.ok_or(WaitingRoomSetupError::NoKeys)? {
        Keys::Set(keys) => (keys, None),
        Keys::Dir { dir, algorithm } => {
            let keys = KeySet::load_or_generate(&dir, algorithm, clock.now().as_secs())?;
            (keys, Some(KeySource::Dir(dir)))
        }
    };
    let settings = PublicSettings {
        issuer: public_url.clone(),
        public_url,
        service_keys: Vec::new(),
        trusted_proxies,
    };
    let options = NodeOptions {
        key_source,
        ..NodeOptions::default()
    };
    Ok(AppState::with_options(
        store, keys, clock, settings, options,
    ))
}

/// Every room a route names, and every room a given room `requires`, is in the store (given
/// to the builder, or made before): a route needing a room that is not answers 503 to every
/// request.
async fn check_named_rooms(
    store: &dyn RoomStore,
    routes: &[RouteConfig],
    rooms: &[RoomConfig],
) -> Result<(), WaitingRoomSetupError> {
    let by_routes = routes.iter().flat_map(|route| {
        let named_by = format!("route {:?}", route.name);
        route.rooms.iter().map(move |room| (named_by.clone(), room))
    });
    let by_rooms = rooms.iter().flat_map(|config| {
        let named_by = format!("room {}'s `requires`", config.id);
        config
            .requires
            .iter()
            .map(move |room| (named_by.clone(), room))
    });
    for (named_by, room) in by_routes.chain(by_rooms) {
        match store.room(room).await {
            Ok(_) => {}
            Err(StoreError::RoomNotFound(_)) => {
                return Err(WaitingRoomSetupError::UnknownRoom {
                    named_by,
                    room: room.clone(),
                });
            }
            Err(source) => {
                return Err(WaitingRoomSetupError::ReadRoom {
                    room: room.clone(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Why a [`WaitingRoom`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum WaitingRoomSetupError {
    /// Neither a key directory nor a key set was given.
    #[error("no signing keys: give a key directory or a key set")]
    NoKeys,
    /// No public URL was given.
    #[error("no public URL: give the base URL visitors reach the site at")]
    NoPublicUrl,
    /// A setting of the app state (keys, public URL, trusted proxies) was given to a builder
    /// that was given the app state whole.
    #[error("{0}: the builder was given an app state, which has its own")]
    StateGiven(&'static str),
    /// The public URL is not an `http://` or `https://` URL.
    #[error("public URL {0:?}: expected http://… or https://…")]
    PublicUrl(String),
    /// The signing keys cannot be loaded or generated.
    #[error("signing keys: {0}")]
    Keys(#[from] TokenError),
    /// A path glob of a route is not valid.
    #[error("route {name:?}: {source}")]
    Route {
        /// The route's name.
        name: String,
        /// What is wrong with the glob.
        source: MatcherError,
    },
    /// A room cannot be put into the store.
    #[error("installing room {room}: {source}")]
    InstallRoom {
        /// The room.
        room: RoomId,
        /// The store's failure.
        source: StoreError,
    },
    /// A route (or a room's `requires`) names a room that is neither given nor in the store.
    #[error("{named_by} names room {room}, which is neither given to the builder nor in the store")]
    UnknownRoom {
        /// The route, or the room whose `requires`, naming it.
        named_by: String,
        /// The room.
        room: RoomId,
    },
    /// A room a route names cannot be read from the store.
    #[error("reading room {room}: {source}")]
    ReadRoom {
        /// The room.
        room: RoomId,
        /// The store's failure.
        source: StoreError,
    },
}
