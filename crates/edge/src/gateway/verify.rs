//! `GET /_anteroom/verify` (SPEC §7.3) for proxies that keep proxying themselves: nginx
//! `auth_request`, Envoy `ext_authz` (HTTP), Traefik `forwardAuth`, Caddy `forward_auth`.
//!
//! Only peers in `[server] trusted_proxies` are answered (403 `untrusted_proxy` to anyone else,
//! SPEC §14.1). The proxy names the visitor's request in the one header set `[verify] proxy`
//! chooses (`core/config/verify.rs`): nginx `X-Original-URI` / `-Method`, Traefik and Caddy
//! `X-Forwarded-Uri` / `-Method`, both with `X-Forwarded-Host`; Envoy appends the path to
//! `/_anteroom/verify` (`path_prefix`) and sends its own method and `Host`. A header of another
//! set is never read. The visitor's own headers (cookies, `Authorization`, `Accept`) come along. The request is matched to a route, rate limited and
//! checked against the route's rooms exactly as the gateway does, and answered:
//! - 200: go ahead (with `Set-Cookie` when a pass was issued or renewed);
//! - 401 with `X-Anteroom-Location: /_anteroom/wait/{room}?return=…`: send the visitor to the
//!   waiting page (with the ticket cookie when the visitor was joined). Proxies that hand a
//!   denial to the visitor as it is (Envoy, Traefik, Caddy) ask for the visitor's answer instead
//!   with `X-Anteroom-Verify: redirect` or `?wait=redirect`: 302 to the waiting page for
//!   navigations, 429 `waiting_room` for other requests. In that form a navigation that was
//!   just given a pass (or a renewed one) is sent back to its own address with the cookie
//!   (302), since such proxies do not pass on the cookies of an allowing answer;
//! - 429 with the rate-limit headers; 403 for a pass of another user; 503 for a closed room or
//!   an unreachable store that fails closed.
//!
//! Visitors are joined here only when the room would admit them at once; anybody else joins
//! on the waiting page, so a proxy that drops this answer's cookies leaves no ticket behind.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};

use anteroom_core::config::{OriginalUri, VerifyConfig};
use axum::response::{IntoResponse, Response};

use anteroom_api::error::ApiError;
use anteroom_api::ratelimit::{RateLimitVerdict, RouteRateLimits};

use super::passes::HeldPasses;
use super::protect::{self, Asked, JoinWhen, Verdict};
use super::{Gateway, canonical};
use crate::visitor::Visitor;

/// The endpoint; Envoy appends the visitor's path to it.
pub(crate) const VERIFY_PATH: &str = "/_anteroom/verify";

static ANTEROOM_LOCATION: HeaderName = HeaderName::from_static("x-anteroom-location");

/// The visitor's request as the calling proxy names it.
struct Original {
    uri: Uri,
    method: Method,
    host: Option<HeaderValue>,
}

/// The handler: checks the caller, rebuilds the visitor's request, rate limits it, decides it
/// on its route's rooms and answers in the form the proxy asked for.
pub(crate) async fn verify(State(gateway): State<Gateway>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    // Everything below believes the caller about the visitor: only a trusted proxy may call.
    if !gateway.app().is_trusted_peer(&parts.extensions) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "untrusted_proxy",
            "the verify endpoint answers only proxies listed in [server] trusted_proxies",
        )
        .into_response();
    }
    let headers_read = &gateway.inner.verify;
    let redirect = asks_for_redirect(&parts, headers_read);
    let visitor = original_request(&parts, headers_read)
        .and_then(|original| visitor_request(&parts, original));
    let mut visitor = match visitor {
        Ok(visitor) => visitor,
        Err(refused) => return refused.into_response(),
    };
    let route = gateway
        .live()
        .routes
        .find(
            &visitor.method,
            &visitor.uri,
            visitor
                .headers
                .get(header::HOST)
                .and_then(|value| value.to_str().ok()),
        )
        .clone();
    let rate_headers = match rate_limit(&gateway, &route, &mut visitor).await {
        Ok(headers) => headers,
        Err(refused) => return refused,
    };
    let connection = Visitor::of(&visitor.extensions);
    let asked = Asked {
        method: &visitor.method,
        headers: &visitor.headers,
        extensions: &visitor.extensions,
        visitor: &connection,
        uri: &visitor.uri,
    };
    // A bypass route goes through its rate limits as the gateway's does, then no room.
    let verdict = if route.bypass || route.rooms.is_empty() {
        Verdict::Allow {
            cookies: Vec::new(),
            passes: HeldPasses::new(),
            admitted: false,
        }
    } else {
        protect::decide(&gateway, &route, &asked, JoinWhen::AdmitsAtOnce).await
    };
    let mut response = answer(&gateway, verdict, &visitor, redirect);
    anteroom_api::ratelimit::add_headers(&mut response, &rate_headers);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The route's rate limits on the visitor's request: the headers to add to an allowing
/// answer, or the refusal.
async fn rate_limit(
    gateway: &Gateway,
    route: &super::routes::Route,
    visitor: &mut Parts,
) -> Result<HeaderMap, Response> {
    let Some(limiter) = gateway.app().rate_limiter() else {
        return Ok(HeaderMap::new());
    };
    visitor
        .extensions
        .insert(RouteRateLimits(route.rate_limits.clone()));
    match limiter.check(visitor).await {
        RateLimitVerdict::Refused(response) | RateLimitVerdict::Unavailable(response) => {
            Err(response)
        }
        RateLimitVerdict::Allowed { headers } => Ok(headers),
    }
}

/// Whether the proxy asks for the visitor's own answer (a redirect or a 429) instead of a 401
/// it turns into one: by header, or by `?wait=redirect` when the query is not the visitor's.
fn asks_for_redirect(parts: &Parts, headers_read: &VerifyConfig) -> bool {
    parts
        .headers
        .get("x-anteroom-verify")
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"redirect"))
        || parts
            .uri
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair == "wait=redirect"))
            && headers_read.uri != OriginalUri::AppendedPath
}

/// The visitor's request as the gateway would have seen it: its method, URI and host, with the
/// headers and connection details of this one.
fn visitor_request(parts: &Parts, original: Original) -> Result<Parts, ApiError> {
    let Original { uri, method, host } = original;
    // The proxy forwards the path as the visitor spelled it: one that servers read
    // differently is refused, and the route is matched on its canonical form.
    let uri = canonical::canonical_uri(&uri)?.unwrap_or(uri);
    let mut visitor = Request::new(Body::empty());
    *visitor.method_mut() = method;
    *visitor.uri_mut() = Uri::builder()
        .path_and_query(uri.path_and_query().map_or("/", |path| path.as_str()))
        .build()
        .unwrap_or_default();
    *visitor.headers_mut() = parts.headers.clone();
    *visitor.extensions_mut() = parts.extensions.clone();
    if let Some(host) = host {
        visitor.headers_mut().insert(header::HOST, host);
    }
    Ok(visitor.into_parts().0)
}

/// The answer to the proxy for the rooms' verdict (before the rate-limit headers).
fn answer(gateway: &Gateway, verdict: Verdict, visitor: &Parts, redirect: bool) -> Response {
    let return_to = protect::return_path(&visitor.uri);
    let navigation = protect::is_navigation(&visitor.method, &visitor.headers);
    match verdict {
        Verdict::Allow { cookies, .. } => allow_answer(cookies, redirect && navigation, &return_to),
        Verdict::Wait(waiting) => wait_answer(gateway, *waiting, redirect, navigation, &return_to),
        Verdict::Closed { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "room_closed",
            "this room is closed",
        )
        .into_response(),
        Verdict::Unavailable { .. } => ApiError::store_unavailable().into_response(),
        Verdict::Refuse(error) => error.into_response(),
        Verdict::Limited(response) => response,
    }
}

/// 200 with the cookies; or, for a navigation whose proxy hands only denials to the visitor and
/// that was given a pass now, 302 back to where it was going with the cookie (such proxies would
/// drop the pass from an allowing answer).
fn allow_answer(
    mut cookies: Vec<HeaderValue>,
    redirect_navigation: bool,
    return_to: &str,
) -> Response {
    // Some proxies pass on only the first cookie of the answer (nginx's
    // $upstream_http_set_cookie): passes go first, tickets after.
    cookies.sort_by_key(|cookie| !cookie.as_bytes().starts_with(b"anteroom_p_"));
    let mut response = if redirect_navigation && !cookies.is_empty() {
        found(return_to)
    } else {
        StatusCode::OK.into_response()
    };
    append_cookies(&mut response, cookies);
    response
}

/// The visitor waits: 401 naming the waiting page for the proxy to send them to, or, when the
/// proxy asked for the visitor's answer, 302 there for a navigation and 429 `waiting_room` for
/// anything else. Always with `X-Anteroom-Location` and the cookies (ticket included).
fn wait_answer(
    gateway: &Gateway,
    waiting: protect::Waiting,
    redirect: bool,
    navigation: bool,
    return_to: &str,
) -> Response {
    let location = anteroom_api::join_path::wait_location(&waiting.room, return_to);
    let mut cookies = waiting.cookies;
    let queue = waiting.entry.map(|entry| {
        let (status, entry_cookies) =
            protect::entry_status(gateway, &waiting.room, &waiting.config, entry);
        cookies.extend(entry_cookies);
        status
    });
    let mut response = if redirect && navigation {
        found(&location)
    } else if redirect {
        protect::waiting_room_problem(
            &waiting.room,
            return_to,
            queue.flatten(),
            waiting.retry_after_secs,
        )
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "waiting_room",
            format!(
                "the visitor needs a pass of room {:?}: send them to X-Anteroom-Location",
                waiting.room.as_str()
            ),
        )
        .retry_after(waiting.retry_after_secs)
        .into_response()
    };
    if let Ok(value) = HeaderValue::from_str(&location) {
        response
            .headers_mut()
            .insert(ANTEROOM_LOCATION.clone(), value);
    }
    append_cookies(&mut response, cookies);
    response
}

/// 302 to `location` (without `Location` if it is not a valid header value).
fn found(location: &str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

fn append_cookies(response: &mut Response, cookies: Vec<HeaderValue>) {
    for cookie in cookies {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
}

/// Reads the visitor's URI, method and host from the one header set configured (SPEC §14.1):
/// never "the first of several present", which let a visitor add the header their proxy does
/// not set.
fn original_request(parts: &Parts, read: &VerifyConfig) -> Result<Original, ApiError> {
    let text = match &read.uri {
        OriginalUri::Header(name) => header_text(&parts.headers, name).map(str::to_owned),
        OriginalUri::AppendedPath => parts
            .uri
            .path()
            .strip_prefix(VERIFY_PATH)
            .filter(|rest| rest.starts_with('/'))
            .map(|rest| match parts.uri.query() {
                Some(query) => format!("{rest}?{query}"),
                None => rest.to_owned(),
            }),
    };
    let Some(uri) = text.and_then(|text| text.parse::<Uri>().ok()) else {
        let where_ = match &read.uri {
            OriginalUri::Header(name) => format!("the {name} header"),
            OriginalUri::AppendedPath => format!("the path after {VERIFY_PATH}"),
        };
        return Err(ApiError::bad_request(
            "original_uri_missing",
            format!(
                "the visitor's URI was expected in {where_} ([verify] proxy = \"{}\")",
                read.proxy.as_str()
            ),
        ));
    };
    let method = match read
        .method_header
        .as_deref()
        .and_then(|name| header_text(&parts.headers, name))
    {
        None => parts.method.clone(),
        Some(text) => text.trim().parse::<Method>().map_err(|_| {
            ApiError::bad_request("invalid_method", "the original method is not valid")
        })?,
    };
    let host = read
        .host_header
        .as_deref()
        .and_then(|name| parts.headers.get(name))
        .cloned();
    Ok(Original { uri, method, host })
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.trim().is_empty())
}
