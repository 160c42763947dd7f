//! Rooms and passes (SPEC §7.1): what a request on a protected route needs, room by room in
//! order (each room's `requires` before it, then the route's rooms: tier 1 then tier 2).
//!
//! For each room:
//! - a valid pass (cookie `anteroom_p_<room>`, `X-Anteroom-Pass`, or `Authorization: Bearer`)
//!   goes on; the pass is renewed (a new cookie, one store write) once more than half of
//!   `session_ttl` has passed since its last renewal. Mutating requests (POST, PUT, PATCH,
//!   DELETE) in a room with an `identity` must come from the pass's `uid`, else 403;
//! - without one, a visitor the room can take at once is admitted on the spot (join, claim,
//!   pass cookie) and goes on;
//! - otherwise the request is held back: navigations (GET/HEAD accepting HTML) get the waiting
//!   page inline (or a 302 to it with `page = "redirect"`), other requests 429 `waiting_room`
//!   with the join URL, `Retry-After`, and the queue status when the visitor holds a ticket.
//!
//! Only navigations shown the page inline join the queue when the room cannot take them at
//! once (the page needs the ticket). Other requests join only when the room's figures say it
//! would admit at once: a client that keeps no cookies must not leave a ticket behind per
//! request, each of which would later be admitted and hold a slot until it is a no-show.
//!
//! A room the store does not have answers 503 like a store failing closed. When the store
//! cannot be reached, a pass that verifies still goes through (its session cannot be looked
//! up; a revocation the node already heard still holds); a request without one follows the
//! room's `on_store_error`: `open` lets
//! it through (logged and counted), `closed` answers 503 with the "temporarily unavailable"
//! page.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use anteroom_core::config::PageMode;
use anteroom_core::engine::{AdmittedView, Entry, SessionState};
use anteroom_core::room::{Identity, RoomConfig, StoreErrorPolicy};
use anteroom_core::{RoomId, SessionId, Timestamp};
use anteroom_store::StoreError;
use anteroom_token::{LEEWAY_SECS, PassError, PassExpectations};

use crate::access_log::{Decided, Decision};
use anteroom_api::cookies::{asked_passes, pass_cookie_name};
use anteroom_api::error::ApiError;
use anteroom_api::join_path::{
    self, GatewayVisitor, HeldBack, IdentityRefusal, JoinRefusal, wait_location,
};
use anteroom_api::site_identity::SiteTokenError;
use anteroom_api::{AppState, STORE_GONE_AFTER};

use super::Gateway;
use super::passes::{CachedPass, HeldPass, HeldPasses};
use super::rooms::{RoomInfo, RoomLookup};
use super::routes::Route;
use crate::visitor::Visitor;

/// When a visitor without a pass is joined to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinWhen {
    /// Always: the waiting page is shown with the ticket.
    Always,
    /// Only when the room's figures say it admits at once.
    AdmitsAtOnce,
}

/// The parts of a request protection looks at.
pub(crate) struct Asked<'a> {
    pub(crate) method: &'a Method,
    pub(crate) headers: &'a HeaderMap,
    /// What earlier layers left (and, for a request through the router, its connection).
    pub(crate) extensions: &'a Extensions,
    /// The connection's details (the peer address) and what the rate limiter settled.
    pub(crate) visitor: &'a Visitor,
    /// What was asked for: where the visitor goes once admitted ([`return_path`]).
    pub(crate) uri: &'a Uri,
}

/// What the rooms say about a request.
pub(crate) enum Verdict {
    /// Go on; these cookies (new or renewed passes, tickets) go out with the response.
    Allow {
        cookies: Vec<HeaderValue>,
        passes: HeldPasses,
        /// A pass was issued with this request (not only shown).
        admitted: bool,
    },
    /// Held back by this room.
    Wait(Box<Waiting>),
    /// The room is closed.
    Closed {
        room: RoomId,
        config: Box<RoomConfig>,
    },
    /// The store cannot be reached and the room fails closed.
    Unavailable {
        room: RoomId,
        config: Box<RoomConfig>,
    },
    /// Refused outright: by the join gate, or for the pass's identity (403 mismatch, …).
    Refuse(JoinRefusal),
    /// Over the join limit (the limiter's 429, with its headers).
    Limited(Response),
}

/// A request held back by a room.
pub(crate) struct Waiting {
    pub(crate) room: RoomId,
    pub(crate) config: RoomConfig,
    /// The visitor's place, when they were joined (or resumed).
    pub(crate) entry: Option<Entry>,
    /// Cookies of the rooms before this one (passes just issued or renewed).
    pub(crate) cookies: Vec<HeaderValue>,
    pub(crate) retry_after_secs: u64,
}

/// What the rooms before have given a request: cookies to send (passes issued or renewed,
/// tickets), the passes it holds, and whether a pass was issued with it.
#[derive(Default)]
struct Gathered {
    cookies: Vec<HeaderValue>,
    passes: HeldPasses,
    admitted: bool,
}

/// Decides a request on `route`, room by room: each room lets it on, or answers.
pub(crate) async fn decide(
    gateway: &Gateway,
    route: &Route,
    asked: &Asked<'_>,
    join: JoinWhen,
) -> Verdict {
    let now = gateway.app().now();
    let mut gathered = Gathered::default();
    let mut rooms = gateway.inner.rooms.with_requirements(&route.rooms);
    let mut added = 0;
    let mut at = 0;
    while let Some(room) = rooms.get(at) {
        let info = match look_up(gateway, route, asked, room, now, &mut gathered).await {
            Looked::Found(info) => info,
            Looked::GoOn => {
                at += 1;
                continue;
            }
            Looked::Answer(verdict) => return verdict,
        };
        // The list was made from the rooms configured and the copies the node had: a room
        // given `requires` at run time whose copy it had not read yet names them only now.
        // Each such room is decided first, then this one again, so that a pass of this room
        // never goes on without the passes it requires.
        let unlisted = info
            .config
            .requires
            .iter()
            .find(|required| !rooms[..at].contains(required));
        if let Some(required) = unlisted {
            if added == MAX_ROOMS_ADDED {
                let cookies = std::mem::take(&mut gathered.cookies);
                let room = rooms[at].clone();
                return Verdict::Wait(Box::new(waiting_without_entry(room, &info, cookies)));
            }
            let required = required.clone();
            let list = rooms.to_mut();
            list.retain(|room| *room != required);
            list.insert(at, required);
            added += 1;
            continue;
        }
        let room = &rooms[at];
        let verdict = decide_room(gateway, asked, join, room, &info, now, &mut gathered).await;
        if let Some(verdict) = verdict {
            return verdict;
        }
        at += 1;
    }
    Verdict::Allow {
        cookies: gathered.cookies,
        passes: gathered.passes,
        admitted: gathered.admitted,
    }
}

/// The most rooms [`decide`] adds to a route's list for requirements it learns of from the
/// store (as deep a chain of `requires` as the list follows); past it the request is held
/// back rather than decided on a list that may still lack one.
const MAX_ROOMS_ADDED: usize = super::rooms::MAX_REQUIRES_DEPTH;

/// A room looked up for a request.
enum Looked {
    Found(Arc<RoomInfo>),
    /// The store cannot be reached and the request goes on (with a pass, or the room's
    /// `on_store_error = "open"`).
    GoOn,
    Answer(Verdict),
}

/// Looks `room` up; when the store cannot be reached, a pass that verifies against the last
/// known figures goes on, and otherwise the room's `on_store_error` decides.
async fn look_up(
    gateway: &Gateway,
    route: &Route,
    asked: &Asked<'_>,
    room: &RoomId,
    now: Timestamp,
    gathered: &mut Gathered,
) -> Looked {
    let app = gateway.app();
    let lookup = gateway
        .inner
        .rooms
        .get(app.store().as_ref(), room, now)
        .await;
    let (last, config, error) = match lookup {
        RoomLookup::Found(info) => return Looked::Found(info),
        RoomLookup::Missing => return Looked::Answer(missing_room(gateway, route, room.clone())),
        RoomLookup::StoreDown {
            last,
            config,
            error,
        } => (last, config, error),
    };
    if let Some(info) = last.as_ref() {
        for token in asked_passes(asked.headers, room) {
            let Some(pass) = cached_or_verified(gateway, room, info, token, now).await else {
                continue;
            };
            // The session cannot be looked up, but a revocation already heard still holds.
            if app.revocations().contains(&pass.session) {
                pass.revoke();
                continue;
            }
            // Nor does an outage lend a pass to another user.
            if let Err(refusal) = check_identity(app, &info.config, asked, &pass).await {
                return Looked::Answer(Verdict::Refuse(JoinRefusal::Identity(refusal)));
            }
            gathered.passes.push(HeldPass { pass });
            return Looked::GoOn;
        }
    }
    app.store_failures().record(Some(room), "room", &error);
    let read_at_last = last.as_deref();
    match store_down(
        gateway,
        room.clone(),
        config.map(|config| *config),
        read_at_last,
        now,
    ) {
        None => Looked::GoOn,
        Some(verdict) => Looked::Answer(verdict),
    }
}

/// What one room the store knows says of the request: `None` to go on to the next room.
async fn decide_room(
    gateway: &Gateway,
    asked: &Asked<'_>,
    join: JoinWhen,
    room: &RoomId,
    info: &RoomInfo,
    now: Timestamp,
    gathered: &mut Gathered,
) -> Option<Verdict> {
    let app = gateway.app();
    if info.config.mode_at(now) == anteroom_core::room::Mode::Closed {
        return Some(Verdict::Closed {
            room: room.clone(),
            config: Box::new(info.config.clone()),
        });
    }
    if let Some(pass) = valid_pass(gateway, room, info, asked.headers, now).await {
        if let Err(refusal) = check_identity(app, &info.config, asked, &pass).await {
            return Some(Verdict::Refuse(JoinRefusal::Identity(refusal)));
        }
        if let Some(cookie) = renew(gateway, room, info, &pass, now).await {
            gathered.cookies.push(cookie);
        }
        gathered.passes.push(HeldPass { pass });
        return None;
    }
    if join == JoinWhen::AdmitsAtOnce && !info.admits_at_once(now) {
        let cookies = std::mem::take(&mut gathered.cookies);
        return Some(Verdict::Wait(Box::new(waiting_without_entry(
            room.clone(),
            info,
            cookies,
        ))));
    }
    join_room(gateway, asked, room, info, now, gathered).await
}

/// Joins a visitor without a pass to `room` through the join gate: admitted at once (the
/// pass goes with the request), or held back with the place, or refused.
async fn join_room(
    gateway: &Gateway,
    asked: &Asked<'_>,
    room: &RoomId,
    info: &RoomInfo,
    now: Timestamp,
    gathered: &mut Gathered,
) -> Option<Verdict> {
    let app = gateway.app();
    // Every way into the line passes the same gate (SPEC §14.2); a room asking for a
    // proof of work takes no new ticket here: the waiting page solves it first.
    let proven: Vec<RoomId> = gathered
        .passes
        .iter()
        .map(|held| held.room().clone())
        .collect();
    // The join gate reads the peer and the client address from the extensions.
    let extensions = asked.visitor.marked(asked.extensions);
    let visitor = GatewayVisitor {
        headers: asked.headers,
        extensions: &extensions,
        proven_passes: &proven,
        return_to: return_path(asked.uri),
    };
    let joined = join_path::join(app, room, &info.config, visitor).await;
    match &joined {
        Ok(Entry::Admitted(_)) => gateway.inner.rooms.joined(room, true),
        Ok(Entry::Waiting(_)) => gateway.inner.rooms.joined(room, false),
        // Refused or failed: the room did not change.
        Err(_) => {}
    }
    match joined {
        Ok(Entry::Admitted(view)) => admit(gateway, room, info, view, now, gathered),
        Ok(Entry::Waiting(view)) => {
            // The visitor polls at the page's pace (§5.5); so should a client.
            let retry_after_secs = clamp_retry_after(
                anteroom_core::eta::next_poll_ms(view.ahead, &mut rand::thread_rng())
                    .div_ceil(1000),
            );
            Some(Verdict::Wait(Box::new(Waiting {
                room: room.clone(),
                config: info.config.clone(),
                entry: Some(Entry::Waiting(view)),
                cookies: std::mem::take(&mut gathered.cookies),
                retry_after_secs,
            })))
        }
        Err(JoinRefusal::ChallengeNeeded(_) | JoinRefusal::PassRequired(_)) => {
            Some(Verdict::Wait(Box::new(waiting_without_entry(
                room.clone(),
                info,
                std::mem::take(&mut gathered.cookies),
            ))))
        }
        Err(JoinRefusal::Limited(response)) => Some(Verdict::Limited(response)),
        Err(JoinRefusal::Closed) => Some(Verdict::Closed {
            room: room.clone(),
            config: Box::new(info.config.clone()),
        }),
        Err(JoinRefusal::StoreUnavailable(_)) => store_down(
            gateway,
            room.clone(),
            Some(info.config.clone()),
            Some(info),
            now,
        ),
        Err(refusal) => Some(Verdict::Refuse(refusal)),
    }
}

/// A visitor the gate admitted at once: the ticket and pass cookies go out, and the pass
/// (cached as just issued) goes on with the request.
fn admit(
    gateway: &Gateway,
    room: &RoomId,
    info: &RoomInfo,
    view: AdmittedView,
    now: Timestamp,
    gathered: &mut Gathered,
) -> Option<Verdict> {
    let app = gateway.app();
    let session = view.session.clone();
    let mut given = match join_path::give_entry(app, room, &info.config, Entry::Admitted(view)) {
        Ok(given) => given,
        Err(error) => return Some(Verdict::Refuse(JoinRefusal::Failed(error))),
    };
    gathered.cookies.append(&mut given.cookies);
    if let Some(token) = given.pass() {
        let pass = remember_issued(gateway, room, info, token, &session, now);
        gathered.passes.push(HeldPass { pass });
        gathered.admitted = true;
    }
    None
}

/// `Retry-After` when nothing better is known.
const DEFAULT_RETRY_AFTER_SECS: u64 = 5;

/// A request held back by `room` without a place in its line.
fn waiting_without_entry(room: RoomId, info: &RoomInfo, cookies: Vec<HeaderValue>) -> Waiting {
    Waiting {
        retry_after_secs: info
            .snapshot
            .eta_seconds_for_new
            .map_or(DEFAULT_RETRY_AFTER_SECS, clamp_retry_after),
        room,
        config: info.config.clone(),
        entry: None,
        cookies,
    }
}

fn clamp_retry_after(seconds: u64) -> u64 {
    seconds.clamp(1, 60)
}

/// The first pass of the request that verifies for `room` and whose session still holds.
async fn valid_pass(
    gateway: &Gateway,
    room: &RoomId,
    info: &RoomInfo,
    headers: &HeaderMap,
    now: Timestamp,
) -> Option<Arc<CachedPass>> {
    for token in asked_passes(headers, room) {
        let Some(pass) = cached_or_verified(gateway, room, info, token, now).await else {
            continue;
        };
        if session_holds(gateway, room, &pass, now).await {
            return Some(pass);
        }
    }
    None
}

/// The cached pass of `token`, or the pass verified now (and cached); `None` when it is not a
/// usable pass of `room`.
async fn cached_or_verified(
    gateway: &Gateway,
    room: &RoomId,
    info: &RoomInfo,
    token: &str,
    now: Timestamp,
) -> Option<Arc<CachedPass>> {
    let generation = info.snapshot.generation;
    if let Some(pass) = gateway.inner.passes.get(token) {
        return pass
            .usable(room, generation, now.as_millis())
            .then_some(pass);
    }
    let app = gateway.app();
    let expect = PassExpectations {
        room: room.as_str(),
        issuer: &app.settings().issuer,
        generation,
    };
    let claims = match app.keys().verify_pass(token, &expect, now.as_secs()) {
        Ok(claims) => claims,
        // Signed with a key another node made since this one last looked at the key
        // directory: look now (at most once a second) and try again.
        Err(PassError::UnknownKey) if anteroom_api::key_reload::reload_if_changed(app).await => {
            app.keys().verify_pass(token, &expect, now.as_secs()).ok()?
        }
        Err(_) => return None,
    };
    let session: SessionId = claims.sub.parse().ok()?;
    let renew_due = renewal_due(claims.iat.saturating_mul(1000), &info.config);
    let pass = Arc::new(CachedPass::new(
        claims,
        room.clone(),
        session,
        renew_due,
        None,
    ));
    gateway
        .inner
        .passes
        .insert(token, pass.clone(), now.as_millis());
    Some(pass)
}

/// When a session last renewed at `renewed_at_ms` is due for renewal: once more than half
/// of `session_ttl` has passed.
fn renewal_due(renewed_at_ms: u64, config: &RoomConfig) -> u64 {
    let half_ttl = u64::try_from(config.session_ttl.as_millis() / 2).unwrap_or(u64::MAX);
    renewed_at_ms.saturating_add(half_ttl).saturating_add(1)
}

/// Caches a pass the gateway just issued (its session was just read from the store).
fn remember_issued(
    gateway: &Gateway,
    room: &RoomId,
    info: &RoomInfo,
    token: &str,
    session: &anteroom_core::engine::Session,
    now: Timestamp,
) -> Arc<CachedPass> {
    let claims = join_path::pass_claims(gateway.app(), room, session);
    let renew_due = renewal_due(session.renewed_at.as_millis(), &info.config);
    let pass = Arc::new(CachedPass::new(
        claims,
        room.clone(),
        session.id,
        renew_due,
        Some(now.as_millis()),
    ));
    gateway
        .inner
        .passes
        .insert(token, pass.clone(), now.as_millis());
    pass
}

/// Whether the pass's session still holds: looked up in the store at most once a second per
/// pass; between looks, and when the store cannot say, the last answer stands.
async fn session_holds(
    gateway: &Gateway,
    room: &RoomId,
    pass: &CachedPass,
    now: Timestamp,
) -> bool {
    let now_ms = now.as_millis();
    // Another node ended the session and said so: refused at once.
    if gateway.app().revocations().contains(&pass.session) {
        pass.revoke();
        return false;
    }
    let Some(check) = pass.begin_check(now_ms) else {
        return true;
    };
    match gateway.app().store().session(room, pass.session).await {
        Ok(Some(session)) => {
            let active = session.state == SessionState::Active && session.expires_at > now;
            check.finish(Some(active), now_ms);
            active
        }
        Ok(None) | Err(StoreError::RoomNotFound(_)) => {
            check.finish(Some(false), now_ms);
            false
        }
        Err(error) => {
            tracing::warn!(%room, %error, "cannot check a pass's session; honouring the pass");
            check.finish(None, now_ms);
            true
        }
    }
}

/// How often the session of a pass an open WebSocket holds is looked up in the store while
/// it is known to run on. Every open socket looks (an idle visitor's requests do not), so
/// less often than a request's pass: a session ended on any node is still seen within a
/// second by the revocations the nodes announce, and a reset or closed room without the
/// store; once the session's known end has come, the store is asked every second.
const SOCKET_STORE_RECHECK: Duration = Duration::from_secs(10);

/// A pass an open WebSocket was let through with, asked again every second while the socket
/// is open ([`SocketPass::still_holds`]).
///
/// The socket does not renew the session: as for the visitor's cookie, only their requests do
/// (activity is requests, as in other waiting rooms). The session's end is what the store
/// says: a request of the visitor's renewed it, on any node, and the store says it runs on,
/// or nothing did and the socket ends with the session, as the visitor's cookie does.
pub(crate) struct SocketPass {
    held: HeldPass,
    /// When the session ends as last known: the pass's expiry, later once the store said it
    /// was renewed.
    session_until: Timestamp,
    /// When the store was last asked about the session.
    looked_at: Option<Timestamp>,
}

impl SocketPass {
    pub(crate) fn new(held: HeldPass) -> SocketPass {
        let session_until = Timestamp(held.pass.claims.exp.saturating_mul(1000));
        SocketPass {
            held,
            session_until,
            looked_at: None,
        }
    }

    /// Whether the pass still lets the socket through: no revocation heard for its session,
    /// its room still there and neither closed nor reset, and its session running as far as
    /// the store says (asked every [`SOCKET_STORE_RECHECK`], and every second once its known
    /// end has come). While the store cannot be read, the last known end stands (with the
    /// leeway passes are verified with).
    pub(crate) async fn still_holds(&mut self, gateway: &Gateway) -> bool {
        let app = gateway.app();
        let now = app.now();
        let pass = &self.held.pass;
        if app.revocations().contains(&pass.session) {
            pass.revoke();
            return false;
        }
        let room = self.held.room().clone();
        let lookup = gateway
            .inner
            .rooms
            .get(app.store().as_ref(), &room, now)
            .await;
        let info = match lookup {
            RoomLookup::Found(info)
            | RoomLookup::StoreDown {
                last: Some(info), ..
            } => Some(info),
            RoomLookup::Missing => return false,
            RoomLookup::StoreDown { last: None, .. } => None,
        };
        if info.is_some_and(|info| {
            info.config.mode_at(now) == anteroom_core::room::Mode::Closed
                || pass.claims.r#gen != info.snapshot.generation
        }) {
            return false;
        }
        let every = if now >= self.session_until {
            Duration::from_secs(1)
        } else {
            SOCKET_STORE_RECHECK
        };
        if self.looked_at.is_some_and(|at| now.since(at) < every) {
            return true;
        }
        self.looked_at = Some(now);
        let pass = &self.held.pass;
        match app.store().session(&room, pass.session).await {
            Ok(Some(session))
                if session.state == SessionState::Active && session.expires_at > now =>
            {
                self.session_until = session.expires_at;
                true
            }
            Ok(_) | Err(StoreError::RoomNotFound(_)) => {
                pass.revoke();
                false
            }
            Err(error) => {
                app.store_failures().record(Some(&room), "session", &error);
                now.as_secs() < self.session_until.as_secs().saturating_add(LEEWAY_SECS)
            }
        }
    }
}

/// A room a WebSocket went on through without a pass: its store could not be read and its
/// `on_store_error` is `open`. The socket lives no longer than the outage, asked again every
/// second ([`SocketLetThrough::still_holds`]): once the store answers for the room again,
/// the room decides who is on the site, and a socket opened past it would hold a place the
/// room never gave (the visitor's next handshake goes through the room).
pub(crate) struct SocketLetThrough {
    room: RoomId,
    /// When the socket was let through: a copy of the room read since says the store answers.
    since: Timestamp,
}

impl SocketLetThrough {
    pub(crate) fn new(room: RoomId, since: Timestamp) -> SocketLetThrough {
        SocketLetThrough { room, since }
    }

    /// Whether the room still lets the socket through without a pass: its store has not been
    /// read since the socket was let through, and its last known `on_store_error` is still
    /// `open`. (A copy from before, given while another request reads the room again, says
    /// nothing of the store now.)
    pub(crate) async fn still_holds(&self, gateway: &Gateway) -> bool {
        let app = gateway.app();
        let lookup = gateway
            .inner
            .rooms
            .get(app.store().as_ref(), &self.room, app.now())
            .await;
        let config = match lookup {
            RoomLookup::Found(info) if info.read_since(self.since) => return false,
            RoomLookup::Missing => return false,
            RoomLookup::Found(info) => Some(info.config.on_store_error),
            RoomLookup::StoreDown { config, .. } => config.map(|config| config.on_store_error),
        };
        config.unwrap_or_else(|| app.on_store_error(&self.room)) == StoreErrorPolicy::Open
    }
}

/// Requests that may change something (every method but GET, HEAD, OPTIONS and TRACE) in a
/// room with an identity must come from the pass's `uid`.
async fn check_identity(
    app: &AppState,
    config: &RoomConfig,
    asked: &Asked<'_>,
    pass: &CachedPass,
) -> Result<(), IdentityRefusal> {
    // Every method but the safe ones, whatever its case: an origin that reads `post` as
    // POST must not see it skip the check.
    let safe = ["GET", "HEAD", "OPTIONS", "TRACE"]
        .iter()
        .any(|safe| asked.method.as_str().eq_ignore_ascii_case(safe));
    if safe {
        return Ok(());
    }
    let mismatch = || IdentityRefusal::Mismatch(config.id.clone());
    match &config.identity {
        Identity::Anonymous => Ok(()),
        Identity::Header(name) => {
            // Believed only from a trusted proxy, as at the join: from anyone else it would
            // let a pass bound to one user be used by whoever names them.
            let extensions = asked.visitor.marked(asked.extensions);
            let presented = join_path::identity_from_header(app, &extensions, asked.headers, name)?;
            if pass.claims.uid.as_deref() == Some(presented.as_str()) {
                Ok(())
            } else {
                Err(mismatch())
            }
        }
        Identity::JwtClaim(site) => {
            let presented = app
                .site_keys()
                .identify(site, asked.headers, app.now().as_millis())
                .await;
            match (pass.claims.uid.as_deref(), presented) {
                (Some(uid), Ok(Some(identity))) if identity == uid => Ok(()),
                // An anonymous pass (the room does not require the site's token) stays
                // anonymous: it binds nobody, whatever token comes with it.
                (None, _) if !site.required => Ok(()),
                (Some(_), Ok(None)) => Err(IdentityRefusal::SiteToken(SiteTokenError::Missing)),
                (Some(_), Err(error)) => Err(IdentityRefusal::SiteToken(error)),
                _ => Err(mismatch()),
            }
        }
    }
}

/// Renews the pass's session when due: the new pass's cookie, once. Requests still carrying
/// the old pass get the same new cookie without another store call.
async fn renew(
    gateway: &Gateway,
    room: &RoomId,
    info: &RoomInfo,
    pass: &CachedPass,
    now: Timestamp,
) -> Option<HeaderValue> {
    let app = gateway.app();
    let cookie = |token: &str, max_age: u64| {
        app.cookies()
            .set(&pass_cookie_name(room.as_str()), token, max_age)
    };
    if let Some((token, expires_at_secs)) = pass.replacement() {
        return cookie(&token, expires_at_secs.saturating_sub(now.as_secs()));
    }
    let now_ms = now.as_millis();
    let renewal = pass.begin_renewal(now_ms)?;
    match app.store().renew_session(room, pass.session).await {
        Ok((session, true)) => match join_path::sign_pass(app, room, &session) {
            Ok(token) => {
                remember_issued(gateway, room, info, &token, &session, now);
                let expires_at_secs = session.expires_at.as_secs();
                renewal.finish(Some((token.clone(), expires_at_secs)), None);
                cookie(&token, expires_at_secs.saturating_sub(now.as_secs()))
            }
            Err(_) => {
                renewal.finish(None, Some(now_ms + 1000));
                None
            }
        },
        Ok((session, false)) => {
            renewal.finish(
                None,
                Some(renewal_due(session.renewed_at.as_millis(), &info.config)),
            );
            None
        }
        Err(StoreError::Engine(_)) => {
            pass.revoke();
            renewal.finish(None, None);
            None
        }
        Err(error) => {
            tracing::warn!(%room, %error, "cannot renew a session; trying again in a second");
            renewal.finish(None, Some(now_ms + 1000));
            None
        }
    }
}

/// The store could not do what `room` needed for a visitor without a pass (the failure is
/// already recorded): `None` to go on (`on_store_error = "open"`, counted as let through), or
/// the 503 verdict (`closed`, or a store that answered for the room within
/// [`STORE_GONE_AFTER`] of `now`, as `last` was read or the node's ticks say, so busy rather
/// than gone: counted as refused). The policy comes
/// from the room's last known configuration.
fn store_down(
    gateway: &Gateway,
    room: RoomId,
    config: Option<RoomConfig>,
    last: Option<&RoomInfo>,
    now: Timestamp,
) -> Option<Verdict> {
    let app = gateway.app();
    // Gone: no copy of the room read lately, and the node's ticks have failed as long (or the
    // store never answered this node): a node without a copy (just started, or scaled in
    // during a rush) does not take a busy store for a gone one either.
    let gone = !last.is_some_and(|info| info.read_within(now, STORE_GONE_AFTER))
        && app.store_failures().gone_for(&room);
    let policy = if !gone {
        StoreErrorPolicy::Closed
    } else {
        config
            .as_ref()
            .map_or_else(|| app.on_store_error(&room), |config| config.on_store_error)
    };
    match policy {
        StoreErrorPolicy::Open => {
            app.store_failures().let_through();
            None
        }
        StoreErrorPolicy::Closed => {
            app.store_failures().refused();
            let config = config.unwrap_or_else(|| RoomConfig::with_defaults(room.clone()));
            Some(Verdict::Unavailable {
                room,
                config: Box::new(config),
            })
        }
    }
}

/// The route names a room the store does not have (deleted, or a store that lost its data):
/// the room fails closed whatever its `on_store_error` (SPEC §14.3), since letting requests
/// through would switch protection off.
fn missing_room(gateway: &Gateway, route: &Route, room: RoomId) -> Verdict {
    // Logged once when the room goes missing (rooms.rs), not once per request.
    tracing::debug!(%room, route = %route.name, "the route names a room the store does not have");
    let config = gateway
        .inner
        .rooms
        .configured(&room)
        .unwrap_or_else(|| RoomConfig::with_defaults(room.clone()));
    Verdict::Unavailable {
        room,
        config: Box::new(config),
    }
}

/// Whether a request is a page navigation: GET or HEAD accepting HTML.
pub(crate) fn is_navigation(method: &Method, headers: &HeaderMap) -> bool {
    (*method == Method::GET || *method == Method::HEAD)
        && headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|accept| accept.contains("text/html"))
}

/// Where to return after admission: the requested path and query when it is a safe relative
/// address, else `/`.
pub(crate) fn return_path(uri: &Uri) -> String {
    let path = uri
        .path_and_query()
        .map_or("/", |path_and_query| path_and_query.as_str());
    join_path::safe_return(path)
}

/// The status JSON and the cookies (ticket, and pass when admitted) of an entry.
pub(crate) fn entry_status(
    gateway: &Gateway,
    room: &RoomId,
    config: &RoomConfig,
    entry: Entry,
) -> (Option<serde_json::Value>, Vec<HeaderValue>) {
    match join_path::give_entry(gateway.app(), room, config, entry) {
        Ok(given) => (given.status_json(), given.cookies),
        Err(_) => (None, Vec::new()),
    }
}

/// The step after the route's limits: lets the request through with its passes (the
/// cookies to send with its response: passes issued or renewed) and what the rooms decided,
/// or answers for the room (the answer carries its [`Decided`]).
pub(crate) async fn protect(
    gateway: &Gateway,
    route: &Route,
    asked: &Asked<'_>,
) -> Result<(Vec<HeaderValue>, HeldPasses, Decision), Response> {
    if route.bypass || route.rooms.is_empty() {
        return Ok((Vec::new(), HeldPasses::new(), Decision::Bypass));
    }
    let navigation = is_navigation(asked.method, asked.headers);
    let join = if navigation && route.page == PageMode::Inline {
        JoinWhen::Always
    } else {
        JoinWhen::AdmitsAtOnce
    };
    let verdict = decide(gateway, route, asked, join).await;
    let decision = decision(&verdict);
    // The room's id is copied for an answer that holds the request back, not for every
    // request let through (the access log names the route's first room for those).
    let holding_room = holding_room(&verdict);
    match answer(gateway, route, asked, navigation, verdict) {
        Ok((cookies, passes)) => Ok((cookies, passes, decision)),
        Err(response) => {
            let mut response = *response;
            let room = holding_room.or_else(|| route.rooms.first().cloned());
            response.extensions_mut().insert(Decided { decision, room });
            Err(response)
        }
    }
}

/// The cookies and passes of a request let through, or the answer to one held back: a page
/// for a navigation, else problem+json (or the limiter's 429).
fn answer(
    gateway: &Gateway,
    route: &Route,
    asked: &Asked<'_>,
    navigation: bool,
    verdict: Verdict,
) -> Result<(Vec<HeaderValue>, HeldPasses), Box<Response>> {
    let app = gateway.app();
    // Only a request held back is told where it was going.
    let return_to = || return_path(asked.uri);
    let page = |room: &RoomId, config: &RoomConfig, held: HeldBack| {
        join_path::held_back_page(app, room, config, held, &return_to(), asked.headers)
    };
    Err(Box::new(match verdict {
        Verdict::Allow {
            cookies, passes, ..
        } => return Ok((cookies, passes)),
        Verdict::Wait(waiting) => held_back(
            gateway,
            route,
            navigation,
            waiting,
            &return_to(),
            asked.headers,
        ),
        Verdict::Closed { room, config } if navigation => page(&room, &config, HeldBack::Closed),
        Verdict::Closed { .. } => ApiError::room_closed().into_response(),
        Verdict::Unavailable { room, config } if navigation => {
            page(&room, &config, HeldBack::Unavailable)
        }
        Verdict::Unavailable { .. } => ApiError::store_unavailable().into_response(),
        // A browser refused for its sign-in is told so in a page, not in JSON.
        Verdict::Refuse(JoinRefusal::Identity(refusal))
            if navigation && let Some(sign_in) = refusal.sign_in() =>
        {
            join_path::sign_in_page(refusal, sign_in)
        }
        Verdict::Refuse(refusal) => refusal.into_response(),
        Verdict::Limited(response) => response,
    }))
}

/// What the access log says of `verdict`.
fn decision(verdict: &Verdict) -> Decision {
    match verdict {
        Verdict::Allow { admitted: true, .. } => Decision::Admitted,
        Verdict::Allow { .. } => Decision::Passed,
        Verdict::Wait(_) => Decision::Queued,
        Verdict::Closed { .. } | Verdict::Unavailable { .. } | Verdict::Refuse(_) => {
            Decision::Refused
        }
        Verdict::Limited(_) => Decision::Limited,
    }
}

/// The room that holds the request back, when `verdict` names one (else the access log
/// names the route's first room).
fn holding_room(verdict: &Verdict) -> Option<RoomId> {
    match verdict {
        Verdict::Wait(waiting) => Some(waiting.room.clone()),
        Verdict::Closed { room, .. } | Verdict::Unavailable { room, .. } => Some(room.clone()),
        Verdict::Allow { .. } | Verdict::Refuse(_) | Verdict::Limited(_) => None,
    }
}

/// Sends the cookies [`protect`] gave (passes issued or renewed) with the response to the
/// request it let through.
pub(crate) fn add_cookies(response: &mut Response, cookies: Vec<HeaderValue>) {
    for cookie in cookies {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
}

/// The answer to a request a room holds back.
fn held_back(
    gateway: &Gateway,
    route: &Route,
    navigation: bool,
    waiting: Box<Waiting>,
    return_to: &str,
    headers: &HeaderMap,
) -> Response {
    let Waiting {
        room,
        config,
        entry,
        mut cookies,
        retry_after_secs,
    } = *waiting;
    let mut response = match (navigation, route.page, entry) {
        (true, PageMode::Inline, Some(entry)) => join_path::held_back_page(
            gateway.app(),
            &room,
            &config,
            HeldBack::Waiting(entry),
            return_to,
            headers,
        ),
        (true, _, entry) => {
            if let Some(entry) = entry {
                cookies.extend(entry_status(gateway, &room, &config, entry).1);
            }
            let location = wait_location(&room, return_to);
            let mut response = StatusCode::FOUND.into_response();
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            response
        }
        (false, _, entry) => {
            let queue = entry.map(|entry| {
                let (status, entry_cookies) = entry_status(gateway, &room, &config, entry);
                cookies.extend(entry_cookies);
                status
            });
            waiting_room_problem(&room, return_to, queue.flatten(), retry_after_secs)
        }
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for cookie in cookies {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// 429 problem+json `waiting_room`: where to join, and the visitor's place when known.
pub(crate) fn waiting_room_problem(
    room: &RoomId,
    return_to: &str,
    queue: Option<serde_json::Value>,
    retry_after_secs: u64,
) -> Response {
    let mut body = serde_json::json!({
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "code": "waiting_room",
        "detail": format!(
            "this resource is behind the waiting room {:?}: join it, wait for your turn, then retry with the pass",
            room.as_str()
        ),
        "room": room.as_str(),
        "join_url": format!("/_anteroom/v1/rooms/{room}/join"),
        "wait_url": wait_location(room, return_to),
    });
    if let Some(queue) = queue {
        body["queue"] = queue;
    }
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn navigations_are_gets_accepting_html() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"),
        );
        assert!(is_navigation(&Method::GET, &headers));
        assert!(is_navigation(&Method::HEAD, &headers));
        assert!(!is_navigation(&Method::POST, &headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!is_navigation(&Method::GET, &headers));
        assert!(!is_navigation(&Method::GET, &HeaderMap::new()));
    }

    #[test]
    fn wait_location_encodes_the_return_path() {
        let room = RoomId::new("launch").unwrap();
        assert_eq!(
            wait_location(&room, "/shop/item?id=7&x=a b"),
            "/_anteroom/wait/launch?return=/shop/item%3Fid%3D7%26x%3Da%20b"
        );
        let uri: Uri = "/a?b=c".parse().unwrap();
        assert_eq!(return_path(&uri), "/a?b=c");
        let uri: Uri = "http://evil.example//x".parse().unwrap();
        assert_eq!(return_path(&uri), "/");
    }
}
