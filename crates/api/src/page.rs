//! The waiting page (SPEC §6.3) and custom page templates (§6.4).
//!
//! Serving the page joins the visitor server-side (or resumes the ticket their cookie names),
//! so the figures are in the HTML itself and the page works without JavaScript (a `<noscript>`
//! refresh). With JavaScript it follows the room over SSE, falls back to polling with
//! `next_poll_ms`, pauses polling in hidden tabs, and goes to the `return` path on admission.
//! The page is one template with inline CSS and JS, rendered by minijinja (`page_render.rs`); a room may name its
//! own template file (`page_template`) using the same placeholders. Every value is
//! HTML-escaped, whatever the template's name; a custom template is read only inside `[server]
//! templates_dir` (the name is checked by core's `page_template.rs`, the real path after
//! symbolic links by the loader here). Languages are chosen in `page_render/lang.rs` (`?lang=`, then
//! `Accept-Language` q-values with script and region fallbacks); `page_render/texts.rs` holds every
//! message once per language, as a struct, so none can be missing.
//!
//! A room with `challenge` (SPEC §12) first serves a visitor without a ticket the page in its
//! `challenge` state: a second script gets a proof-of-work challenge, solves it in a Web
//! Worker built from inline source (a Blob URL), shows its progress and joins; without
//! JavaScript the page says JavaScript is needed.
//!
//! Placeholders: `room`, `lang` (`en`, `ko`, `ja`, `zh-Hans`, `zh-Hant`, `es`, `fr`, `de`,
//! `pt-BR`, `id`; chosen in `page_render/lang.rs`), `state` (`waiting`, `paused`, `prequeue`, `closed`,
//! `unavailable`, `challenge`), `position`, `ahead`, `waiting`, `serving`, `eta_seconds`,
//! `eta_text`, `opens_at` (RFC 3339, in a scheduled pre-queue), `progress_percent`,
//! `next_poll_ms`, `refresh_seconds`, `updated_at`, `return_path`, `next_room` (the room whose
//! line follows this one, when the visitor was sent here first by its `requires`), `languages`
//! (`code`, `name`, `current` of each language, for links), `t` (the texts of the chosen
//! language, `page_render/texts.rs`) and `config` (what the script needs, for `tojson`).
//!
//! Leaving: the leave button gives the place up at once (a beacon to `leave`). Closing the page
//! gives it up only when the visitor ticked the leave-on-close box first: the script then sends
//! the same beacon on `pagehide`, unless the page is going to another page of the room (a
//! language link, a reload, admission). Without that intent, a visitor who closes the page or
//! navigates away keeps their place until `ticket_idle_ttl` passes without contact.
//!
//! While the store cannot be reached, the page of an `on_store_error = "open"` room sends a
//! visitor back to the `return` page without a pass, and a `closed` room shows its
//! "temporarily unavailable" state (`store_unavailable_page`, also what a protected route of
//! such a room answers).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use anteroom_core::RoomId;
use anteroom_core::engine::Entry;
use anteroom_core::room::RoomConfig;
use anteroom_store::StoreError;

use crate::AppState;
use crate::api;
use crate::challenge;
use crate::error::ApiError;
use crate::join_gate::{self, Caller, Door, IdentityRefusal, JoinAsk, JoinRefusal, SignIn};
use crate::page_render::lang::Lang;
use crate::page_render::{Figures, PageContext, PageState};
use crate::status_json::TicketState;

/// `?return=/path&lang=ko` on the page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageQuery {
    #[serde(rename = "return")]
    return_to: Option<String>,
    lang: Option<String>,
    state: Option<String>,
    /// A priority access code (SPEC §12), as an invitation link carries it.
    code: Option<String>,
}

/// The waiting page: joins (or resumes) server-side and shows position, people ahead and ETA;
/// `Accept: application/json` gets the status JSON instead.
#[utoipa::path(get, path = "/_anteroom/wait/{room}", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("return" = Option<String>, Query, description = "Where to go once admitted (same-origin path)"),
        ("lang" = Option<String>, Query, description = "`en` or `ko`"),
        ("code" = Option<String>, Query, description = "A priority access code, for a new ticket in the priority lane")),
    responses(
        (status = 200, description = "The page (or the status JSON)", content(
            (String = "text/html"), (crate::status_json::StatusBody = "application/json"))),
        (status = 400, description = "A query the page cannot take", content(
            (String = "text/html"), (crate::error::Problem = "application/problem+json"))),
        (status = 303, description = "The room requires another room's pass first: that room's page, which returns here once admitted"),
        (status = 403, description = "A priority access code that is wrong or used up; or the room's identity header came from a peer outside `trusted_proxies`; or (JSON) another room's pass is required first", content(
            (String = "text/html"), (crate::error::Problem = "application/problem+json"))),
        (status = 404, description = "No such room, or an unknown query parameter", content(
            (String = "text/html"), (crate::error::Problem = "application/problem+json"))),
        (status = 429, description = "Over the per-IP join limit, or too many priority code attempts from this address", content(
            (String = "text/html"), (crate::error::Problem = "application/problem+json"))),
        (status = 503, description = "Closed, or the store cannot be reached", content(
            (String = "text/html"), (crate::error::Problem = "application/problem+json"))),
    ))]
pub(crate) async fn waiting_page(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<PageQuery>, QueryRejection>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    let Ok(Query(query)) = query else {
        return error_page(StatusCode::BAD_REQUEST, "That address is not valid.");
    };
    let lang = Lang::choose(query.lang.as_deref(), &headers);
    let Ok(room) = RoomId::new(&room) else {
        return error_page(StatusCode::NOT_FOUND, "There is no such waiting room.");
    };
    let asked_return = query.return_to.as_deref().filter(|path| !path.is_empty());
    let Ok(return_path) = asked_return.map(api::validate_return).transpose() else {
        return error_page(
            StatusCode::BAD_REQUEST,
            "That return address is not allowed: it must be a path on this site.",
        );
    };
    let wants_json = accepts_json(&headers);
    let config = match app.room_config(&room).await {
        Ok(config) => config,
        Err(error) => {
            let return_path = return_path.as_deref();
            return no_room_config(&app, &room, lang, wants_json, return_path, error);
        }
    };
    let caller = Caller::new(&headers, &extensions);
    let ask = JoinAsk {
        return_to: return_path.clone(),
        priority_code: query.code.clone().filter(|code| !code.is_empty()),
        solution: None,
    };
    let entry = match join_gate::join(&app, &room, &config, &caller, Door::Page, ask).await {
        Ok(entry) => entry,
        Err(refusal) => {
            let refused = Refused {
                app: &app,
                room: &room,
                config: &config,
                lang,
                wants_json,
                return_path: return_path.as_deref(),
            };
            return refused.answer(refusal);
        }
    };
    if wants_json {
        return api::entry_response(&app, &room, &config, entry);
    }
    entry_page(&app, &room, &config, entry, return_path, lang)
}

/// The answer when the room's configuration cannot be had: no such room, or the store
/// cannot be reached.
fn no_room_config(
    app: &AppState,
    room: &RoomId,
    lang: Lang,
    wants_json: bool,
    return_path: Option<&str>,
    error: StoreError,
) -> Response {
    if let StoreError::RoomNotFound(_) = error {
        return if wants_json {
            ApiError::room_not_found(room.as_str()).into_response()
        } else {
            error_page(StatusCode::NOT_FOUND, "There is no such waiting room.")
        };
    }
    let error = app.store_error(room, "room", error);
    store_failed(app, room, lang, wants_json, return_path, error)
}

/// A join the gate refused, and what the page needs to say so.
struct Refused<'a> {
    app: &'a AppState,
    room: &'a RoomId,
    config: &'a RoomConfig,
    lang: Lang,
    wants_json: bool,
    return_path: Option<&'a str>,
}

impl Refused<'_> {
    /// The visitor's answer: the challenge page, the required room's page (which returns
    /// here once admitted), the closed or unavailable page, or an error page.
    fn answer(self, refusal: JoinRefusal) -> Response {
        let Refused {
            app,
            room,
            config,
            lang,
            wants_json,
            return_path,
        } = self;
        match refusal {
            JoinRefusal::ChallengeNeeded(_) => {
                challenge_page(app, config, room, lang, wants_json, return_path)
            }
            JoinRefusal::PassRequired(required) if !wants_json => {
                let mut here = format!("/_anteroom/wait/{room}");
                if let Some(path) = return_path {
                    here = wait_location(room, path);
                }
                Redirect::to(&wait_location(&required, &here)).into_response()
            }
            JoinRefusal::Limited(response) if !wants_json => {
                let mut page = error_page(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many visitors joined from your address just now. Please try again in a minute.",
                );
                if let Some(retry) = response.headers().get(header::RETRY_AFTER) {
                    page.headers_mut()
                        .insert(header::RETRY_AFTER, retry.clone());
                }
                page
            }
            JoinRefusal::Closed if !wants_json => {
                let context = PageContext::build(
                    room.as_str(),
                    lang,
                    PageState::Closed,
                    &no_figures(),
                    return_path.unwrap_or("/"),
                );
                html(app, config, &context, StatusCode::SERVICE_UNAVAILABLE)
            }
            JoinRefusal::StoreUnavailable(error) => {
                store_failed(app, room, lang, wants_json, return_path, error)
            }
            JoinRefusal::InvalidPriorityCode if !wants_json => error_page(
                StatusCode::FORBIDDEN,
                "That access code is not valid for this waiting room, or has been used up.",
            ),
            JoinRefusal::Identity(refusal) if !wants_json => match refusal.sign_in() {
                Some(sign_in) => sign_in_page(refusal, sign_in),
                None => failed_page(app, room, config, lang, ApiError::from(refusal)),
            },
            JoinRefusal::Failed(error) if !wants_json => {
                failed_page(app, room, config, lang, error)
            }
            other => other.into_response(),
        }
    }
}

/// The page for a join refused for another reason: the unavailable page for a 503, else a
/// plain error page.
fn failed_page(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    lang: Lang,
    error: ApiError,
) -> Response {
    if error.status() == StatusCode::SERVICE_UNAVAILABLE {
        return unavailable(app, Some(config), room, lang, false, error);
    }
    error_page(error.status(), "Your request could not be handled.")
}

/// The page for a visitor refused for their identity (the site's token, or the identity
/// header): sign in first, or again.
pub(crate) fn sign_in_page(refusal: IdentityRefusal, sign_in: SignIn) -> Response {
    let message = match sign_in {
        SignIn::First => {
            "Please sign in to the site first: this waiting room keeps one place for each signed-in visitor."
        }
        SignIn::Again => {
            "Your sign-in could not be confirmed (it may have expired). Please sign in to the site again, then come back."
        }
    };
    error_page(ApiError::from(refusal).status(), message)
}

/// The page of a room that asks for a proof of work, for a visitor without a ticket: its
/// script gets a challenge, solves it in a worker and joins (SPEC §12). JSON clients get the
/// join's `challenge_required` problem.
fn challenge_page(
    app: &AppState,
    config: &RoomConfig,
    room: &RoomId,
    lang: Lang,
    wants_json: bool,
    return_path: Option<&str>,
) -> Response {
    if wants_json {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "challenge_required",
            "this room asks for a proof of work before a join",
        )
        .with_challenge_url(challenge::challenge_url(room))
        .into_response();
    }
    let mut context = PageContext::build(
        room.as_str(),
        lang,
        PageState::Challenge,
        &no_figures(),
        return_path.unwrap_or("/"),
    );
    if let Some(script) = context.config.as_object_mut() {
        script.insert(
            "challengeUrl".to_owned(),
            challenge::challenge_url(room).into(),
        );
    }
    let mut response = html(app, config, &context, StatusCode::OK);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Why the gateway holds a protected navigation back (SPEC §7.1).
pub enum HeldBack {
    /// The visitor waits with this entry (joined or resumed by the gateway).
    Waiting(Entry),
    /// The room is closed.
    Closed,
    /// The store cannot be reached and the room fails closed (§9.4).
    Unavailable,
}

/// The waiting page answered in place of a protected page (the same page as
/// `/_anteroom/wait/{room}`): 200 while waiting, 503 closed or unavailable. `cookies` (the
/// ticket cookie, passes of earlier rooms) go out with it.
pub(crate) fn held_back_page(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    held: HeldBack,
    return_path: &str,
    headers: &HeaderMap,
) -> Response {
    let lang = Lang::choose(None, headers);
    match held {
        HeldBack::Waiting(entry) => {
            entry_page(app, room, config, entry, Some(return_path.to_owned()), lang)
        }
        HeldBack::Closed => {
            let context = PageContext::build(
                room.as_str(),
                lang,
                PageState::Closed,
                &no_figures(),
                return_path,
            );
            html(app, config, &context, StatusCode::SERVICE_UNAVAILABLE)
        }
        HeldBack::Unavailable => unavailable(
            app,
            Some(config),
            room,
            lang,
            false,
            ApiError::store_unavailable(),
        ),
    }
}

/// The page of a joined visitor: the waiting page with the ticket cookie, or a redirect to
/// `return_path` with the pass cookie once admitted.
fn entry_page(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    entry: Entry,
    return_path: Option<String>,
    lang: Lang,
) -> Response {
    let entry_opens_at = match &entry {
        Entry::Waiting(view) => view.opens_at,
        Entry::Admitted(_) => None,
    };
    let answer = match api::entry_answer(app, room, api::StatusTerms::of(config), entry) {
        Ok(answer) => answer,
        Err(error) => return error.into_response(),
    };
    let mut cookies = HeaderMap::new();
    api::set_entry_cookies(app, room, &answer, &mut cookies);
    if answer.body.state == TicketState::Admitted {
        let target = return_path
            .or(answer.body.redirect.clone())
            .unwrap_or_else(|| "/".to_owned());
        return (cookies, Redirect::to(&target)).into_response();
    }
    let state = match answer.body.state {
        TicketState::Paused => PageState::Paused,
        TicketState::Prequeue => PageState::Prequeue,
        TicketState::Waiting | TicketState::Admitted => PageState::Waiting,
    };
    let opens_in = match &entry_opens_at {
        Some(at) => answer
            .body
            .opens_at
            .clone()
            .map(|text| (text, at.as_secs().saturating_sub(app.now().as_secs()))),
        None => None,
    };
    let figures = Figures {
        position: answer.body.position,
        ahead: answer.body.ahead.unwrap_or(0),
        waiting: answer.body.waiting,
        serving: answer.body.serving,
        eta_seconds: answer.body.eta_seconds,
        next_poll_ms: answer.body.next_poll_ms,
        opens_in,
    };
    let mut context = PageContext::build(
        room.as_str(),
        lang,
        state,
        &figures,
        return_path.as_deref().unwrap_or("/"),
    );
    context.updated_at = app.clock_time_of_day();
    let mut response = html(app, config, &context, StatusCode::OK);
    response.headers_mut().extend(cookies);
    response
}

/// `GET /_anteroom/wait/{room}/preview?state=waiting|paused|prequeue|closed|unavailable|challenge&lang=ko`: the
/// room's page with sample figures, for operators checking a template. Changes nothing.
pub(crate) async fn preview(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<PageQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let query = query.map(|Query(query)| query).unwrap_or_default();
    let Ok(room) = RoomId::new(&room) else {
        return error_page(StatusCode::NOT_FOUND, "There is no such waiting room.");
    };
    let config = match app.room_config(&room).await {
        Ok(config) => config,
        Err(StoreError::RoomNotFound(_)) => {
            return error_page(StatusCode::NOT_FOUND, "There is no such waiting room.");
        }
        Err(error) => match app.room_cache().last_known(&room) {
            Some(config) => config,
            None => {
                let error = app.store_error(&room, "room", error);
                return unavailable(&app, None, &room, Lang::En, false, error);
            }
        },
    };
    let state = match query.state.as_deref() {
        Some("paused") => PageState::Paused,
        Some("prequeue") => PageState::Prequeue,
        Some("closed") => PageState::Closed,
        Some("unavailable") => PageState::Unavailable,
        Some("challenge") => PageState::Challenge,
        _ => PageState::Waiting,
    };
    let lang = Lang::choose(query.lang.as_deref(), &headers);
    let mut context = PageContext::sample(room.as_str(), lang, state);
    // A preview must not start polling a real ticket.
    context.config["state"] = serde_json::json!("preview");
    context.refresh_seconds = None;
    context.updated_at = app.clock_time_of_day();
    html(&app, &config, &context, StatusCode::OK)
}

fn no_figures() -> Figures {
    Figures {
        position: 0,
        ahead: 0,
        waiting: 0,
        serving: 0,
        eta_seconds: None,
        next_poll_ms: 30_000,
        opens_in: None,
    }
}

/// The waiting page when the store cannot be reached (SPEC §9.4): a room with
/// `on_store_error = "open"` sends a visitor who came from a protected page back to it
/// without a pass (the protected routes are open meanwhile); otherwise, and for clients asking
/// for JSON, the "temporarily unavailable" state.
fn store_failed(
    app: &AppState,
    room: &RoomId,
    lang: Lang,
    wants_json: bool,
    return_path: Option<&str>,
    error: ApiError,
) -> Response {
    let config = app.room_cache().last_known(room);
    // Only a store gone for a while lets the visitor go on: one that fails while it still
    // answers the node's ticks is too busy for the crowd, which `open` would let through.
    if !wants_json
        && let Some(path) = return_path
        && app.on_store_error(room) == anteroom_core::room::StoreErrorPolicy::Open
        && app.store_failures().gone_for(room)
    {
        app.store_failures().let_through();
        let mut response = Redirect::to(path).into_response();
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    app.store_failures().refused();
    unavailable(app, config.as_ref(), room, lang, wants_json, error)
}

fn unavailable(
    app: &AppState,
    config: Option<&RoomConfig>,
    room: &RoomId,
    lang: Lang,
    wants_json: bool,
    error: ApiError,
) -> Response {
    if wants_json {
        return error.into_response();
    }
    let context = PageContext::build(
        room.as_str(),
        lang,
        PageState::Unavailable,
        &no_figures(),
        "/",
    );
    let fallback = RoomConfig::with_defaults(room.clone());
    let mut response = html(
        app,
        config.unwrap_or(&fallback),
        &context,
        StatusCode::SERVICE_UNAVAILABLE,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
    response
}

fn html(
    app: &AppState,
    config: &RoomConfig,
    context: &PageContext,
    status: StatusCode,
) -> Response {
    let body = app.page().render(config, context);
    let mut response = (status, Html(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Language, Cookie"),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        // `worker-src blob:`: the proof-of-work solver runs in a worker made from the page's
        // own inline source (SPEC §12).
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; worker-src blob:; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    );
    response
}

pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content=\"width=device-width, initial-scale=1\"><title>Waiting room</title>\
         <body style=\"font-family:system-ui,sans-serif;max-width:34rem;margin:4rem auto;padding:0 1rem\"><h1>Waiting room</h1><p>{message}</p></body></html>\n"
    );
    let mut response = (status, Html(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Whether the client asked for JSON rather than a page (mobile apps).
fn accepts_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// `/_anteroom/wait/{room}?return=<return_path>`.
pub(crate) fn wait_location(room: &RoomId, return_path: &str) -> String {
    let mut location = format!("/_anteroom/wait/{room}?return=");
    for byte in return_path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            location.push(char::from(byte));
        } else {
            location.push_str(&format!("%{byte:02X}"));
        }
    }
    location
}
