//! One gate for every way into a room's line (SPEC §14.1, §14.2): the join API, the waiting
//! page's server-side join, the gateway's join on a protected request and, through the page,
//! the OIDC authorize endpoint all join here, and pass the same checks.
//!
//! A visitor whose ticket (or identity) is still live resumes it and goes on: the store is
//! asked to *resume only* first, so a ticket that still verifies but is no longer live (left,
//! expired, abandoned, of an older generation) never passes for a resume. Anybody about to
//! take a new place first passes, in this order:
//! 1. the identity, in a room with `identity = "header:…"`: believed only from a peer inside
//!    `[server] trusted_proxies` (anyone else could name somebody else's ticket); with
//!    `identity = "jwt:<claim>"`: the claim of the site's token once it verifies
//!    (`site_identity.rs`), a visitor without a valid token being refused when the room
//!    requires one and anonymous otherwise;
//! 2. `requires`: a valid pass of each listed room (tier 2 cannot be joined without tier 1);
//! 3. the per-IP join limit: the rate-limit rules that select `POST
//!    /_anteroom/v1/rooms/{room}/join` (the built-in `join-per-ip`), applied here to the page
//!    and the gateway; the API's own requests went through the rate limiter already;
//! 4. priority codes: attempts per client address and room are limited, so codes cannot be
//!    guessed;
//! 5. the proof of work, when the room asks for one: a fresh solution, spent on this new
//!    ticket and no other (`challenge.rs`).
//!
//! A refusal changes nothing in the room.

use std::net::IpAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Extensions, HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};

use anteroom_core::engine::{EngineError, Entry, JoinRequest, MAX_IDENTITY_LEN, TicketRef};
use anteroom_core::room::{Identity, Mode, RoomConfig, SiteJwt};
use anteroom_core::{RoomId, SessionId};
use anteroom_store::StoreError;
use anteroom_token::PassExpectations;

use crate::error::ApiError;
use crate::ratelimit::{ClientIp, RateLimitVerdict, UNKNOWN_PEER, peer_address, resolve_client_ip};
use crate::site_identity::SiteTokenError;
use crate::ticket_request::{TicketQuery, held_ticket};
use crate::{AppState, challenge};

/// How a visitor came to the line: says which checks its request already went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// `POST …/join`: the rate limiter saw the request itself.
    Api,
    /// The waiting page (and the OIDC authorize endpoint, which sends visitors there).
    Page,
    /// A protected request at the gateway or the verify endpoint.
    Gateway,
}

/// Who asks to join, and what may be believed of them.
pub(crate) struct Caller<'a> {
    /// The request's headers.
    pub(crate) headers: &'a HeaderMap,
    /// `?ticket=`, for clients that hold their ticket there.
    pub(crate) query: Option<&'a TicketQuery>,
    /// The connection's details (the peer address) and what earlier layers left.
    pub(crate) extensions: &'a Extensions,
    /// Rooms this request was found to hold a valid pass of (or was just given one) by the
    /// gateway, earlier in the same request.
    pub(crate) proven_passes: &'a [RoomId],
}

impl<'a> Caller<'a> {
    /// A caller known by its headers and connection only.
    pub(crate) fn new(headers: &'a HeaderMap, extensions: &'a Extensions) -> Caller<'a> {
        Caller {
            headers,
            query: None,
            extensions,
            proven_passes: &[],
        }
    }

    /// The client address, as the rate limiter settled it (or settles it now).
    fn client_ip(&self, app: &AppState) -> IpAddr {
        if let Some(ClientIp(ip)) = self.extensions.get::<ClientIp>() {
            return *ip;
        }
        let peer = peer_address(self.extensions).unwrap_or(UNKNOWN_PEER);
        resolve_client_ip(self.headers, peer, &app.settings().trusted_proxies)
    }
}

/// What the visitor asks for beyond a place.
#[derive(Debug, Default)]
pub(crate) struct JoinAsk {
    /// Where to return after admission.
    pub(crate) return_to: Option<String>,
    /// A priority code that lets the visitor skip the line.
    pub(crate) priority_code: Option<String>,
    /// The `challenge` member of a join body (API only).
    pub(crate) solution: Option<serde_json::Value>,
}

/// Why a join was refused: what each door (API, page, gateway) decides its answer on. The
/// problem+json of each is made below (`IntoResponse for JoinRefusal`).
pub enum JoinRefusal {
    /// Over a join limit: the limiter's answer, with its rate-limit headers.
    Limited(Response),
    /// A new place needs a proof of work, not given or not good (403 problem+json).
    ChallengeNeeded(ApiError),
    /// This room requires a pass of another room first.
    PassRequired(RoomId),
    /// The room is closed.
    Closed,
    /// The store cannot be reached (the failure is recorded); the answer for API clients,
    /// which says whether the room lets visitors through meanwhile.
    StoreUnavailable(ApiError),
    /// The priority access code is wrong or used up.
    InvalidPriorityCode,
    /// The caller's identity is missing, not believed or not valid.
    Identity(IdentityRefusal),
    /// Anything else (a bad request, an unknown ticket, …).
    Failed(ApiError),
}

/// Why the caller's identity was refused (SPEC §3, §14.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityRefusal {
    /// The room takes identity from this header, and the peer is not a trusted proxy.
    UntrustedProxy(String),
    /// The room takes identity from this header, and it is absent or blank.
    HeaderMissing(String),
    /// The identity header is longer than the engine keeps.
    HeaderTooLong(String),
    /// The identity header came more than once (a proxy that appends its value behind the
    /// client's instead of replacing it).
    HeaderRepeated(String),
    /// The site's token gives no identity in a room that requires one.
    SiteToken(SiteTokenError),
    /// A mutating request whose pass of this room belongs to another user.
    Mismatch(RoomId),
}

/// What a visitor refused for their identity can do about it in a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignIn {
    /// Nothing was sent: sign in to the site first.
    First,
    /// What was sent is not valid (expired, forged, too long): sign in again.
    Again,
}

impl IdentityRefusal {
    /// Whether signing in to the site is the way on (`None`: it would not help).
    pub fn sign_in(&self) -> Option<SignIn> {
        match self {
            IdentityRefusal::HeaderMissing(_)
            | IdentityRefusal::SiteToken(SiteTokenError::Missing) => Some(SignIn::First),
            IdentityRefusal::SiteToken(SiteTokenError::KeysUnavailable(_)) => None,
            IdentityRefusal::HeaderTooLong(_) | IdentityRefusal::SiteToken(_) => {
                Some(SignIn::Again)
            }
            IdentityRefusal::UntrustedProxy(_)
            | IdentityRefusal::HeaderRepeated(_)
            | IdentityRefusal::Mismatch(_) => None,
        }
    }
}

/// A refused join as the API answers it: the limiter's own 429, or problem+json.
impl IntoResponse for JoinRefusal {
    fn into_response(self) -> Response {
        let error = match self {
            JoinRefusal::Limited(response) => return response,
            JoinRefusal::ChallengeNeeded(error)
            | JoinRefusal::StoreUnavailable(error)
            | JoinRefusal::Failed(error) => error,
            JoinRefusal::PassRequired(required) => ApiError::pass_required(&required),
            JoinRefusal::Closed => ApiError::room_closed(),
            JoinRefusal::InvalidPriorityCode => EngineError::InvalidPriorityCode.into(),
            JoinRefusal::Identity(refusal) => refusal.into(),
        };
        error.into_response()
    }
}

impl From<IdentityRefusal> for ApiError {
    fn from(refusal: IdentityRefusal) -> ApiError {
        match refusal {
            IdentityRefusal::UntrustedProxy(name) => ApiError::new(
                StatusCode::FORBIDDEN,
                "untrusted_proxy",
                format!(
                    "this room takes the visitor's identity from the {name} header, which is \
                     believed only from a proxy listed in [server] trusted_proxies"
                ),
            ),
            IdentityRefusal::HeaderMissing(name) => ApiError::bad_request(
                "identity_required",
                format!("this room needs the {name} header"),
            ),
            IdentityRefusal::HeaderTooLong(name) => ApiError::bad_request(
                "identity_invalid",
                format!("the {name} header is longer than {MAX_IDENTITY_LEN} bytes"),
            ),
            IdentityRefusal::HeaderRepeated(name) => ApiError::bad_request(
                "identity_invalid",
                format!("the {name} header came more than once"),
            ),
            IdentityRefusal::SiteToken(error) => error.into(),
            IdentityRefusal::Mismatch(room) => ApiError::new(
                StatusCode::FORBIDDEN,
                "identity_mismatch",
                format!(
                    "the pass of room {:?} belongs to another user",
                    room.as_str()
                ),
            ),
        }
    }
}

/// The refusal for a store failure during a join: a closed room and a spent priority code are
/// the room's answers; an unreachable store is recorded and told apart.
fn store_refusal(
    app: &AppState,
    room: &RoomId,
    operation: &'static str,
    error: StoreError,
) -> JoinRefusal {
    match error {
        StoreError::Engine(EngineError::RoomClosed) => JoinRefusal::Closed,
        StoreError::Engine(EngineError::InvalidPriorityCode) => JoinRefusal::InvalidPriorityCode,
        StoreError::Backend { .. } => {
            JoinRefusal::StoreUnavailable(app.store_error(room, operation, error))
        }
        other => JoinRefusal::Failed(other.into()),
    }
}

/// Joins `room` or resumes the caller's place, through the gate.
pub(crate) async fn join(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    caller: &Caller<'_>,
    door: Door,
    ask: JoinAsk,
) -> Result<Entry, JoinRefusal> {
    let identity = identity_of(app, config, caller)
        .await
        .map_err(JoinRefusal::Identity)?;
    let no_query = TicketQuery::default();
    let held = held_ticket(caller.headers, caller.query.unwrap_or(&no_query), room)
        .and_then(|token| app.verify_ticket(room, token).ok());
    if held.is_some() || identity.is_some() {
        match resume(app, room, held, identity.clone()).await {
            Ok(entry) => return Ok(entry),
            Err(StoreError::Engine(EngineError::NothingToResume)) => {}
            Err(error) => return Err(store_refusal(app, room, "join", error)),
        }
    }
    // A closed room takes nobody: say so before asking for a pass or a proof of work.
    if config.mode_at(app.now()) == Mode::Closed {
        return Err(JoinRefusal::Closed);
    }
    check_requirements(app, config, caller).await?;
    if door != Door::Api {
        check_join_limit(app, room, caller).await?;
    }
    if ask.priority_code.is_some() {
        check_code_attempts(app, room, caller).await?;
    }
    if let Some(pow) = config.challenge {
        challenge::check_solution(app, room, pow, ask.solution)
            .await
            .map_err(JoinRefusal::ChallengeNeeded)?;
    }
    app.store()
        .join(
            room,
            JoinRequest {
                resume: held,
                identity,
                return_to: ask.return_to,
                priority_code: ask.priority_code,
                resume_only: false,
            },
        )
        .await
        .map_err(|error| store_refusal(app, room, "join", error))
}

async fn resume(
    app: &AppState,
    room: &RoomId,
    held: Option<TicketRef>,
    identity: Option<String>,
) -> Result<Entry, StoreError> {
    app.store()
        .join(
            room,
            JoinRequest {
                resume: held,
                identity,
                resume_only: true,
                ..JoinRequest::default()
            },
        )
        .await
}

/// The caller's identity in a room that binds one (SPEC §3, §14.1).
async fn identity_of(
    app: &AppState,
    config: &RoomConfig,
    caller: &Caller<'_>,
) -> Result<Option<String>, IdentityRefusal> {
    match &config.identity {
        Identity::Anonymous => Ok(None),
        Identity::Header(name) => {
            identity_from_header(app, caller.extensions, caller.headers, name).map(Some)
        }
        Identity::JwtClaim(site) => site_identity(app, config, site, caller.headers).await,
    }
}

/// The identity in the header `name` of a request with these connection details, believed
/// only from a trusted proxy (SPEC §14.1) and only when it came once: a proxy that appends
/// its value behind a client's copy would otherwise have the client's believed.
pub fn identity_from_header(
    app: &AppState,
    extensions: &axum::http::Extensions,
    headers: &HeaderMap,
    name: &str,
) -> Result<String, IdentityRefusal> {
    if !app.is_trusted_peer(extensions) {
        return Err(IdentityRefusal::UntrustedProxy(name.to_owned()));
    }
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(IdentityRefusal::HeaderRepeated(name.to_owned()));
    }
    let value = first
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| IdentityRefusal::HeaderMissing(name.to_owned()))?;
    if value.len() > anteroom_core::engine::MAX_IDENTITY_LEN {
        return Err(IdentityRefusal::HeaderTooLong(name.to_owned()));
    }
    Ok(value.to_owned())
}

/// The identity of the site's token: a visitor without a valid one is refused when the room
/// requires it, and otherwise joins as anonymous (never as somebody else).
async fn site_identity(
    app: &AppState,
    config: &RoomConfig,
    site: &SiteJwt,
    headers: &HeaderMap,
) -> Result<Option<String>, IdentityRefusal> {
    let found = app
        .site_keys()
        .identify(site, headers, app.now().as_millis())
        .await;
    match found {
        Ok(Some(identity)) => Ok(Some(identity)),
        Ok(None) if site.required => Err(IdentityRefusal::SiteToken(SiteTokenError::Missing)),
        Ok(None) => Ok(None),
        Err(error) if site.required => Err(IdentityRefusal::SiteToken(error)),
        Err(error) => {
            tracing::debug!(room = %config.id, %error, "site token refused; joining as anonymous");
            Ok(None)
        }
    }
}

/// Each room of `requires` needs a valid pass: proven earlier in this request, or presented.
async fn check_requirements(
    app: &AppState,
    config: &RoomConfig,
    caller: &Caller<'_>,
) -> Result<(), JoinRefusal> {
    for required in &config.requires {
        if caller.proven_passes.contains(required) {
            continue;
        }
        if !holds_pass(app, required, caller.headers).await? {
            return Err(JoinRefusal::PassRequired(required.clone()));
        }
    }
    Ok(())
}

/// Whether `headers` present a pass of `room` that verifies for its current generation and
/// whose session this node has not seen revoked.
async fn holds_pass(
    app: &AppState,
    room: &RoomId,
    headers: &HeaderMap,
) -> Result<bool, JoinRefusal> {
    let mut tokens = crate::cookies::asked_passes(headers, room).peekable();
    if tokens.peek().is_none() {
        return Ok(false);
    }
    let generation = app
        .store()
        .snapshot(room)
        .await
        .map_err(|error| store_refusal(app, room, "snapshot", error))?
        .generation;
    let keys = app.keys();
    let expect = PassExpectations {
        room: room.as_str(),
        issuer: &app.settings().issuer,
        generation,
    };
    let now = app.now().as_secs();
    Ok(tokens.any(|token| {
        keys.verify_pass(token, &expect, now).is_ok_and(|claims| {
            claims
                .sub
                .parse::<SessionId>()
                .is_ok_and(|session| !app.revocations().contains(&session))
        })
    }))
}

/// The rules that limit `POST …/join`, applied to a join that came another way.
async fn check_join_limit(
    app: &AppState,
    room: &RoomId,
    caller: &Caller<'_>,
) -> Result<(), JoinRefusal> {
    let Some(limiter) = app.rate_limiter() else {
        return Ok(());
    };
    let Ok(request) = Request::builder()
        .method(Method::POST)
        .uri(format!("/_anteroom/v1/rooms/{room}/join"))
        .body(Body::empty())
    else {
        return Ok(());
    };
    let (mut parts, _) = request.into_parts();
    parts.headers = caller.headers.clone();
    parts.extensions = caller.extensions.clone();
    match limiter.check(&mut parts).await {
        RateLimitVerdict::Allowed { .. } => Ok(()),
        RateLimitVerdict::Refused(response) | RateLimitVerdict::Unavailable(response) => {
            Err(JoinRefusal::Limited(response))
        }
    }
}

/// Joins presenting a priority code a client address may make per room and period: enough
/// for a visitor who mistypes a code, far too few to guess one.
const CODE_ATTEMPTS: u64 = 10;
const CODE_ATTEMPT_PERIOD: Duration = Duration::from_secs(600);

async fn check_code_attempts(
    app: &AppState,
    room: &RoomId,
    caller: &Caller<'_>,
) -> Result<(), JoinRefusal> {
    // An IPv6 client by its /64, as the rate limiter keys it: one subscriber holds all of it,
    // and counting each address apart would give them 2^64 times the attempts.
    let address = anteroom_core::ratelimit::client_ip::ip_key(
        caller.client_ip(app),
        anteroom_core::ratelimit::rules::DEFAULT_IPV6_PREFIX,
    );
    let key = format!("priority-code|{room}|{address}");
    match app
        .spend_attempt(&key, CODE_ATTEMPTS, CODE_ATTEMPT_PERIOD)
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => Err(JoinRefusal::Failed(
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "code_attempts_exceeded",
                format!(
                    "too many joins with a priority code from this address; at most \
                     {CODE_ATTEMPTS} every {} minutes",
                    CODE_ATTEMPT_PERIOD.as_secs() / 60
                ),
            )
            .retry_after(CODE_ATTEMPT_PERIOD.as_secs() / CODE_ATTEMPTS),
        )),
        Err(error) => {
            // Failing closed: an unreachable limit store must not open code guessing.
            tracing::warn!(%room, %error, "cannot count priority code attempts");
            Err(JoinRefusal::StoreUnavailable(ApiError::store_unavailable()))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::header;

    use super::*;
    use crate::join_gate::SignIn;

    fn check(refusal: IdentityRefusal, sign_in: Option<SignIn>, status: StatusCode, code: &str) {
        assert_eq!(refusal.sign_in(), sign_in, "{refusal:?}");
        let error = ApiError::from(refusal);
        assert_eq!((error.status(), error.code()), (status, code));
    }

    #[test]
    fn identity_refusals_say_whether_signing_in_helps_and_render_their_problem() {
        let header = || "X-User".to_owned();
        let room = RoomId::new("r").unwrap();
        use IdentityRefusal as R;
        use StatusCode as S;
        check(
            R::UntrustedProxy(header()),
            None,
            S::FORBIDDEN,
            "untrusted_proxy",
        );
        check(
            R::HeaderMissing(header()),
            Some(SignIn::First),
            S::BAD_REQUEST,
            "identity_required",
        );
        check(
            R::HeaderTooLong(header()),
            Some(SignIn::Again),
            S::BAD_REQUEST,
            "identity_invalid",
        );
        let missing = R::SiteToken(SiteTokenError::Missing);
        check(
            missing,
            Some(SignIn::First),
            S::UNAUTHORIZED,
            "identity_required",
        );
        let expired = R::SiteToken(SiteTokenError::Expired);
        check(
            expired,
            Some(SignIn::Again),
            S::UNAUTHORIZED,
            "identity_invalid",
        );
        let keys = R::SiteToken(SiteTokenError::KeysUnavailable("down".to_owned()));
        check(keys, None, S::SERVICE_UNAVAILABLE, "identity_unavailable");
        check(R::Mismatch(room), None, S::FORBIDDEN, "identity_mismatch");
    }

    #[test]
    fn join_refusals_render_their_problem_status() {
        let room = RoomId::new("tier1").unwrap();
        for (refusal, status) in [
            (JoinRefusal::Closed, StatusCode::SERVICE_UNAVAILABLE),
            (JoinRefusal::InvalidPriorityCode, StatusCode::FORBIDDEN),
            (JoinRefusal::PassRequired(room), StatusCode::FORBIDDEN),
            (
                JoinRefusal::StoreUnavailable(ApiError::store_unavailable()),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
        ] {
            let response = refusal.into_response();
            assert_eq!(response.status(), status);
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "application/problem+json"
            );
        }
    }
}
