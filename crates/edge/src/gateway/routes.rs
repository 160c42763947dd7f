//! Route matching (SPEC §7.1): the first `[[route]]` whose hosts, path globs and methods all
//! select the request, then the rooms' `routes` shorthands. Globs are compiled when a table is
//! built (at start, on a reload, when a room's routes change: see `reload.rs`); a request is
//! matched by walking the table with its normalised host and path, which for the tens of
//! routes a site has costs less than one hash of the pass. Requests no route selects get the
//! `default` route: no room, no route-only rate limit.
//!
//! Each route carries its upstream measurements; a new table takes them over from the one
//! before by route name, so a reload does not reset them.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::{Method, Uri, header};

use anteroom_core::RoomId;
use anteroom_core::config::{PageMode, RouteConfig};
use anteroom_core::ratelimit::rules::{LazyHost, RequestMatcher, RequestView, normalize_path};

use super::UpstreamStats;

/// The name of the route of requests no route selects.
const DEFAULT_ROUTE: &str = "default";

/// One compiled route.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) name: String,
    matcher: RequestMatcher,
    /// The rooms the route names, in order (each room's own `requires` come before it).
    pub(crate) rooms: Vec<RoomId>,
    pub(crate) rate_limits: Vec<String>,
    pub(crate) bypass: bool,
    pub(crate) page: PageMode,
    /// What reached the upstream on this route.
    pub(crate) stats: Arc<UpstreamStats>,
}

/// The routes in order, and the default route.
pub(crate) struct RouteTable {
    routes: Vec<Arc<Route>>,
    default: Arc<Route>,
}

impl RouteTable {
    /// The table of `configs`, in order, keeping the measurements `previous` has under the
    /// same route names.
    pub(crate) fn new(configs: Vec<RouteConfig>, previous: Option<&RouteTable>) -> RouteTable {
        let stats_for = |name: &str| {
            previous
                .and_then(|table| table.all().find(|route| route.name == name))
                .map_or_else(
                    || Arc::new(UpstreamStats::new(name)),
                    |route| route.stats.clone(),
                )
        };
        let routes: Vec<Arc<Route>> = configs
            .into_iter()
            .map(|config| {
                Arc::new(Route {
                    stats: stats_for(&config.name),
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
            name: DEFAULT_ROUTE.to_owned(),
            matcher: RequestMatcher::default(),
            rooms: Vec::new(),
            rate_limits: Vec::new(),
            bypass: false,
            page: PageMode::Inline,
            stats: stats_for(DEFAULT_ROUTE),
        });
        RouteTable { routes, default }
    }

    /// How many routes the table has (the default route not counted).
    pub(crate) fn len(&self) -> usize {
        self.routes.len()
    }

    /// Every route in order, the default route last.
    fn all(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter().chain(std::iter::once(&self.default))
    }

    /// Every route's measurements in order, the default route's last.
    pub(crate) fn stats(&self) -> Vec<Arc<UpstreamStats>> {
        self.all().map(|route| route.stats.clone()).collect()
    }

    /// The measurements of the routes that name `room`.
    pub(crate) fn stats_naming(&self, room: &RoomId) -> Vec<Arc<UpstreamStats>> {
        self.routes
            .iter()
            .filter(|route| !route.bypass && route.rooms.contains(room))
            .map(|route| route.stats.clone())
            .collect()
    }

    /// Every route's name in index order, the default route last.
    #[cfg(test)]
    fn names(&self) -> impl Iterator<Item = &str> {
        self.all().map(|route| route.name.as_str())
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

/// The route of the request `parts` describe in `table`, which every later step acts on.
pub(crate) fn match_route<'t>(table: &'t RouteTable, parts: &Parts) -> &'t Arc<Route> {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    table.find(&parts.method, &parts.uri, host)
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
        let table = RouteTable::new(
            vec![
                route("health", &[], &["/healthz"], &[]),
                route("shop-post", &["shop.example"], &["/buy/**"], &["POST"]),
                route("buy", &[], &["/buy/**"], &[]),
            ],
            None,
        );
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

    #[test]
    fn a_new_table_keeps_the_measurements_of_routes_it_keeps() {
        let first = RouteTable::new(
            vec![
                route("health", &[], &["/healthz"], &[]),
                route("buy", &[], &["/buy/**"], &[]),
            ],
            None,
        );
        first.routes[1]
            .stats
            .record(std::time::Duration::from_millis(5), false);
        let second = RouteTable::new(
            vec![
                route("sell", &[], &["/sell/**"], &[]),
                route("buy", &[], &["/buy/**"], &[]),
            ],
            Some(&first),
        );
        assert!(Arc::ptr_eq(&first.routes[1].stats, &second.routes[1].stats));
        assert_eq!(second.routes[1].stats.snapshot().responses, 1);
        assert_eq!(second.routes[0].stats.snapshot().responses, 0);
        assert!(Arc::ptr_eq(&first.default.stats, &second.default.stats));
        check(&second, "GET", "/sell/1", None, "sell");
    }
}
