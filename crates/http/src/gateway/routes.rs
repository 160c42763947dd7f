//! Route matching (SPEC §7.1): the first `[[route]]` whose hosts, path globs and methods all
//! select the request. Globs are compiled once, at start; a request is matched by walking the
//! table with its normalised host and path, which for the tens of routes a site has costs less
//! than one hash of the pass. Requests no route selects get the `default` route: no room, no
//! route-only rate limit.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::{Method, Uri, header};

use anteroom_core::RoomId;
use anteroom_core::config::{PageMode, RouteConfig};
use anteroom_core::ratelimit::rules::{LazyHost, RequestMatcher, RequestView, normalize_path};

use super::Gateway;

/// One compiled route.
#[derive(Debug)]
pub(crate) struct Route {
    /// Its place in the table (the default route is last); indexes the upstream stats.
    pub(crate) index: usize,
    pub(crate) name: String,
    matcher: RequestMatcher,
    /// The rooms the route names, in order (each room's own `requires` come before it).
    pub(crate) rooms: Vec<RoomId>,
    pub(crate) rate_limits: Vec<String>,
    pub(crate) bypass: bool,
    pub(crate) page: PageMode,
}

/// The routes in order, and the default route.
pub(crate) struct RouteTable {
    routes: Vec<Arc<Route>>,
    default: Arc<Route>,
}

impl RouteTable {
    pub(crate) fn new(configs: Vec<RouteConfig>) -> RouteTable {
        let routes: Vec<Arc<Route>> = configs
            .into_iter()
            .enumerate()
            .map(|(index, config)| {
                Arc::new(Route {
                    index,
                    name: config.name,
                    matcher: config.matcher,
                    rooms: config.rooms,
                    rate_limits: config.rate_limits,
                    bypass: config.bypass,
                    page: config.page,
                })
            })
            .collect();
        let default = Arc::new(Route {
            index: routes.len(),
            name: "default".to_owned(),
            matcher: RequestMatcher::default(),
            rooms: Vec::new(),
            rate_limits: Vec::new(),
            bypass: false,
            page: PageMode::Inline,
        });
        RouteTable { routes, default }
    }

    /// Every route's name in index order, the default route last.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.routes
            .iter()
            .chain(std::iter::once(&self.default))
            .map(|route| route.name.as_str())
    }

    /// Indexes (into the upstream stats) of the routes that name `room`.
    pub(crate) fn indexes_naming(&self, room: &RoomId) -> Vec<usize> {
        self.routes
            .iter()
            .filter(|route| !route.bypass && route.rooms.contains(room))
            .map(|route| route.index)
            .collect()
    }

    /// The route of a request with this method, URI and `Host` header.
    pub(crate) fn find(&self, method: &Method, uri: &Uri, host: Option<&str>) -> &Arc<Route> {
        if self.routes.is_empty() {
            return &self.default;
        }
        let view = RouteView {
            method,
            host: LazyHost::new(uri.authority().map(|authority| authority.host()).or(host)),
            path: normalize_path(uri.path()),
        };
        self.routes
            .iter()
            .find(|route| route.matcher.matches(&view))
            .unwrap_or(&self.default)
    }
}

/// The request as route matching sees it: method, host and path only.
struct RouteView<'a> {
    method: &'a Method,
    host: LazyHost<'a>,
    path: Cow<'a, str>,
}

impl RequestView for RouteView<'_> {
    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn host(&self) -> Option<&str> {
        self.host.get()
    }

    fn path(&self) -> &str {
        &self.path
    }

    fn header(&self, _name: &str) -> Option<&str> {
        None
    }

    fn cookie(&self, _name: &str) -> Option<&str> {
        None
    }

    fn claim(&self, _name: &str) -> Option<&str> {
        None
    }

    fn client_ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

impl Route {
    /// Whether the route's requests go on unchecked: it names no room to check (or is a
    /// bypass), and no rate limit of its own that a rate limiter would apply.
    pub(crate) fn checks_nothing(&self, has_rate_limiter: bool) -> bool {
        (self.bypass || self.rooms.is_empty()) && (self.rate_limits.is_empty() || !has_rate_limiter)
    }
}

/// The route of the request `parts` describe, which every later step acts on.
pub(crate) fn match_route<'g>(gateway: &'g Gateway, parts: &Parts) -> &'g Arc<Route> {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    gateway.inner.routes.find(&parts.method, &parts.uri, host)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn route(name: &str, hosts: &[&str], paths: &[&str], methods: &[&str]) -> RouteConfig {
        RouteConfig {
            name: name.to_owned(),
            matcher: RequestMatcher::default()
                .with_hosts(hosts.iter().copied())
                .and_then(|m| m.with_paths(paths.iter().copied()))
                .and_then(|m| m.with_methods(methods.iter().copied()))
                .unwrap(),
            rooms: Vec::new(),
            rate_limits: Vec::new(),
            bypass: true,
            page: PageMode::Inline,
        }
    }

    fn check(table: &RouteTable, method: &str, uri: &str, host: Option<&str>, expected: &str) {
        let method: Method = method.parse().unwrap();
        let uri: Uri = uri.parse().unwrap();
        assert_eq!(
            table.find(&method, &uri, host).name,
            expected,
            "{method} {uri} host {host:?}"
        );
    }

    #[test]
    fn first_matching_route_wins() {
        let table = RouteTable::new(vec![
            route("health", &[], &["/healthz"], &[]),
            route("shop-post", &["shop.example"], &["/buy/**"], &["POST"]),
            route("buy", &[], &["/buy/**"], &[]),
        ]);
        check(&table, "GET", "/healthz", None, "health");
        check(&table, "GET", "//healthz/", None, "health");
        check(
            &table,
            "POST",
            "/buy/1",
            Some("Shop.Example:8080"),
            "shop-post",
        );
        check(&table, "POST", "http://shop.example/buy", None, "shop-post");
        check(&table, "GET", "/buy/1", Some("shop.example"), "buy");
        check(&table, "POST", "/buy/1", Some("other.example"), "buy");
        check(&table, "GET", "/", None, "default");
        assert_eq!(
            table.names().collect::<Vec<_>>(),
            ["health", "shop-post", "buy", "default"]
        );
    }
}
