//! A real HTTP request as the rule engine sees it ([`RequestView`]), and the request
//! extensions through which callers tell the engine what it cannot read from the request
//! itself: the verified token's claims, the route's rules, and the peer address.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderName, header};

use anteroom_core::config::Cidr;
use anteroom_core::ratelimit::client_ip::client_ip;
use anteroom_core::ratelimit::rules::{LazyHost, RequestView, normalize_path};

use crate::cookies::read_cookie;

/// The claims of the token a request carries, for `claim:<name>` keys. Verifying the token is
/// the caller's job (the gateway verifies the anteroom pass; a site can verify its own JWT in
/// a middleware before the rate limiter): insert this into the request's extensions.
///
/// ```
/// use anteroom_api::ratelimit::RateLimitClaims;
///
/// let mut request = axum::http::Request::new(());
/// let claims = RateLimitClaims::default().with("sub", "user-42");
/// request.extensions_mut().insert(claims);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitClaims {
    claims: HashMap<String, String>,
}

impl RateLimitClaims {
    /// These claims and `name` = `value`.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> RateLimitClaims {
        self.claims.insert(name.into(), value.into());
        self
    }

    /// The value of claim `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.claims.get(name).map(String::as_str)
    }
}

/// The route-only rules (rules without `match`) the route a request matched lists. The
/// gateway's router inserts this; [`RateLimiter::route_layer`](super::RateLimiter::route_layer)
/// does the same for one axum route.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteRateLimits(pub Vec<String>);

/// The rules already evaluated for a request, so a rule applies at most once per request even
/// behind several rate-limit layers.
#[derive(Debug, Clone)]
pub(crate) enum AppliedRateLimits {
    /// The lone rule's shortcut applied its rule: the name is the rule set's own, shared (a
    /// list with a copy of the name cost two allocations on every request).
    One(Arc<str>),
    /// The general engine applied these.
    Several(Vec<String>),
}

impl AppliedRateLimits {
    /// Whether the rule named `name` was applied.
    pub(crate) fn contains(&self, name: &str) -> bool {
        match self {
            AppliedRateLimits::One(one) => **one == *name,
            AppliedRateLimits::Several(names) => names.iter().any(|applied| applied == name),
        }
    }

    /// Records the rules named `names` as applied too.
    pub(crate) fn extend(&mut self, names: impl Iterator<Item = String>) {
        match self {
            AppliedRateLimits::One(one) => {
                let mut several = vec![one.to_string()];
                several.extend(names);
                *self = AppliedRateLimits::Several(several);
            }
            AppliedRateLimits::Several(applied) => applied.extend(names),
        }
    }
}

/// The client address the rate limiter settled on, left in the request's extensions for the
/// handlers and layers after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// The peer address of a request: `ConnectInfo<SocketAddr>` (axum's
/// `into_make_service_with_connect_info`), else `MockConnectInfo<SocketAddr>` (tests), else
/// `None`.
pub fn peer_address(extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip())
        .or_else(|| {
            extensions
                .get::<MockConnectInfo<SocketAddr>>()
                .map(|MockConnectInfo(address)| address.ip())
        })
}

/// The address used when the peer is unknown: every such request shares it.
pub const UNKNOWN_PEER: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client address of a request from `peer`.
pub fn resolve_client_ip(headers: &HeaderMap, peer: IpAddr, trusted_proxies: &[Cidr]) -> IpAddr {
    let lines = |name: &HeaderName| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            // A header that is not text is unusable: an empty line makes the chain malformed.
            .map(|value| value.to_str().unwrap_or("\u{0}"))
            .collect()
    };
    if trusted_proxies.is_empty() {
        return client_ip(peer, trusted_proxies, &[], &[]);
    }
    client_ip(
        peer,
        trusted_proxies,
        &lines(&X_FORWARDED_FOR),
        &lines(&header::FORWARDED),
    )
}

/// A request seen through [`RequestView`].
pub(crate) struct HttpView<'a> {
    parts: &'a Parts,
    host: LazyHost<'a>,
    path: Cow<'a, str>,
    client_ip: IpAddr,
    claims: Option<&'a RateLimitClaims>,
}

impl<'a> HttpView<'a> {
    pub(crate) fn new(parts: &'a Parts, client_ip: IpAddr) -> HttpView<'a> {
        HttpView {
            parts,
            host: LazyHost::new(
                parts
                    .uri
                    .authority()
                    .map(|authority| authority.host())
                    .or_else(|| {
                        parts
                            .headers
                            .get(header::HOST)
                            .and_then(|value| value.to_str().ok())
                    }),
            ),
            path: normalize_path(parts.uri.path()),
            client_ip,
            claims: parts.extensions.get::<RateLimitClaims>(),
        }
    }
}

impl RequestView for HttpView<'_> {
    fn method(&self) -> &str {
        self.parts.method.as_str()
    }

    fn host(&self) -> Option<&str> {
        self.host.get()
    }

    fn path(&self) -> &str {
        &self.path
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    }

    fn cookie(&self, name: &str) -> Option<&str> {
        read_cookie(&self.parts.headers, name)
    }

    fn claim(&self, name: &str) -> Option<&str> {
        self.claims.and_then(|claims| claims.get(name))
    }

    fn client_ip(&self) -> IpAddr {
        self.client_ip
    }
}
