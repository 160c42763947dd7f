//! Server-Sent Events for waiting visitors (SPEC §6.2).
//!
//! A node keeps one `TickerRoomView` (`sse_hub.rs`) per room that has listeners: the room's figures and the
//! live waiting positions of its line (one bit each), refreshed by the ticker and shared by every
//! connection through a `watch` channel (latest state wins; a slow client skips stale views).
//! Each connection computes its own `ahead` from the shared view, so the
//! broadcast costs no store read per connection. Only when a connection's position leaves the
//! line does it ask the store once, to claim its pass or learn that the ticket ended. In a
//! scheduled pre-queue the order is drawn at the opening, so once it opens a stream asks the
//! store for its ticket's drawn position instead of trusting the one it started with.
//!
//! Open streams keep their tickets alive: the hub remembers which tickets are connected and
//! the ticker refreshes them all in one batched store write per room (§5.2).
//!
//! Streams are bounded three ways ([`SseLimits`](anteroom_core::config::SseLimits)), so neither one ticket nor one address can
//! hold the node's streams: in all (503 `too_many_connections`), per ticket and per client
//! address (429 `too_many_streams`), each with `Retry-After`; the page then polls. The client
//! address is the one the rate limiter settled on (`[server] trusted_proxies`), an IPv6
//! address counted by its /64 as the rate limiter does. Both ways a stream is served (axum,
//! and `h1/stream.rs`'s own loop) go through `events`, so both are bounded alike. Refusals
//! are counted in `anteroom_sse_refused_total{reason}`.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, HeaderMap};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use tokio::sync::watch;

use anteroom_core::engine::{Entry, TicketRef};
use anteroom_core::eta::{
    AdmissionRate, ConfiguredPace, estimate, next_poll_ms, next_poll_ms_within,
};
use anteroom_core::room::Mode;
use anteroom_core::{RoomId, Timestamp};

use crate::AppState;
use crate::api::{self, StatusTerms};
use crate::error::ApiError;
use crate::ratelimit::ClientIp;
use crate::ratelimit::view::{UNKNOWN_PEER, peer_address};
use crate::sse_hub::{Connection, Refusal, TickerRoomView};
use crate::ticket_request::{TicketQuery, held_ticket, parse_room, ticket_query};

/// Comment keep-alives keep proxies from closing quiet streams.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Status events go out at most this often per connection.
const MIN_EVENT_INTERVAL: Duration = Duration::from_secs(1);

/// What the browser waits before reconnecting.
const RETRY: Duration = Duration::from_millis(3000);

/// How long after a pre-queue's opening a quiet stream asks for its drawn place: the ticker
/// draws within half a second of the opening.
const OPENING_GRACE: Duration = Duration::from_millis(250);

/// The relative step in which a connection's ETA must move before an event tells it (the
/// estimate is an average, and the page shows it in minutes). Finer steps made every visitor
/// far back in a line that was not moving get an event every second as the rate decayed.
const ETA_STEP: f64 = 0.05;

/// The address a stream is counted under: the client address the rate limiter settled on
/// (else the peer's), an IPv6 address by its /64 (one subscriber holds a whole /64).
fn stream_address(extensions: &Extensions) -> IpAddr {
    let address = extensions
        .get::<ClientIp>()
        .map(|ClientIp(address)| *address)
        .or_else(|| peer_address(extensions))
        .unwrap_or(UNKNOWN_PEER);
    anteroom_core::ratelimit::client_ip::subscriber(address)
}

/// Server-Sent Events for one ticket: `status` (the status JSON, at most once a second),
/// `admitted` (then the stream ends), `closed`; a keep-alive comment every 15 s.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}/events", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token (EventSource cannot send headers)")),
    responses(
        (status = 200, description = "The event stream; each event's data is the status JSON", content_type = "text/event-stream", body = crate::status_json::StatusBody),
        crate::problem_answers::HeldTicket, crate::problem_answers::EventStreamProblems,
    ))]
pub(crate) async fn events(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let room = parse_room(&room)?;
    let query = ticket_query(query)?;
    let token = held_ticket(&headers, &query, &room)
        .ok_or_else(|| ApiError::bad_request("ticket_missing", "no ticket: join the room first"))?;
    let reference = app.verify_ticket(&room, token)?;
    let config = app.api_room_config(&room).await?;
    let terms = StatusTerms::of(&config);
    let connection = app
        .hub()
        .connect(&room, reference, stream_address(&extensions))
        .map_err(Refusal::into_error)?;
    let entry = app
        .store()
        .status(&room, reference)
        .await
        .map_err(|error| app.store_error(&room, "status", error))?;
    let views = app.hub().subscribe(&room);
    let opens_at = match &entry {
        Entry::Waiting(view) => view.opens_at,
        Entry::Admitted(_) => None,
    };
    let first = first_step(&app, &room, terms, config.mode, entry);
    let stream = StreamState {
        app,
        room,
        reference,
        views,
        first: Some(first),
        position: 0,
        generation: 0,
        ticket_token: token.to_owned(),
        opens_at,
        pace: terms.pace,
        last_sent: None,
        last_sent_at: None,
        last_ahead: None,
        _connection: connection,
    };
    let sse = Sse::new(event_stream(stream)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    let mut response = sse.into_response();
    response.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    Ok(response)
}

/// The stream's first event, from the ticket's entry when it connected.
fn first_step(app: &AppState, room: &RoomId, terms: StatusTerms, mode: Mode, entry: Entry) -> Step {
    match entry {
        Entry::Admitted(_) => Step::Admitted(entry),
        Entry::Waiting(_) if mode == Mode::Closed => Step::Closed,
        Entry::Waiting(view) => {
            let body = api::entry_body(app, room, terms, Entry::Waiting(view.clone()));
            Step::Status {
                body,
                position: view.position,
                generation: view.generation,
                ahead: view.opens_at.is_none().then_some(view.ahead),
            }
        }
    }
}

enum Step {
    Status {
        body: serde_json::Value,
        position: u64,
        generation: u32,
        /// The `ahead` the body shows (none in a pre-queue, where it means nothing).
        ahead: Option<u64>,
    },
    Admitted(Entry),
    Closed,
    End,
}

struct StreamState {
    app: AppState,
    room: RoomId,
    reference: TicketRef,
    views: watch::Receiver<Option<Arc<TickerRoomView>>>,
    first: Option<Step>,
    position: u64,
    generation: u32,
    /// The connection's ticket token, signed once.
    ticket_token: String,
    /// While the ticket is in a scheduled pre-queue: when it opens (SPEC §5.3). The draw at
    /// that moment may give the ticket another position, so the stream then asks the store.
    opens_at: Option<Timestamp>,
    /// The room's configured pace, for an estimate before any admission was measured.
    pace: ConfiguredPace,
    /// What the last status event said, so an unchanged view sends nothing.
    last_sent: Option<EventKey>,
    /// When the last status event went out, so the next waits [`MIN_EVENT_INTERVAL`].
    last_sent_at: Option<tokio::time::Instant>,
    /// The `ahead` last told (I5: what a visitor is shown never goes up). Views are published
    /// in the order they were read, so a later view never shows more; this holds even for a
    /// view the hub held before the stream's own first status.
    last_ahead: Option<u64>,
    _connection: Connection,
}

impl StreamState {
    /// The terms of the stream's answers from the store: the engine's view itself says
    /// whether the room is paused.
    fn queue_terms(&self) -> StatusTerms {
        StatusTerms {
            mode: Mode::Queue,
            pace: self.pace,
        }
    }
}

/// The figures a status event shows; the ETA in [`ETA_STEP`] steps ([`eta_step`]), so the
/// rate's slow drift alone does not send every connection an event.
type EventKey = (u64, u64, u64, Option<u64>, Mode);

fn event_stream(state: StreamState) -> impl Stream<Item = Result<Event, Infallible>> {
    // Boxed: each step's future holds the state it was given and the binding it is moved
    // into, and the stream lives as long as its visitor waits (a box is one copy, on the heap).
    stream::unfold(Some(Box::new(state)), |state| async move {
        let mut state = state?;
        let step = match state.first.take() {
            Some(first) => first,
            None => next_step(&mut state).await,
        };
        let event = match step {
            Step::Status {
                body,
                position,
                generation,
                ahead,
            } => {
                let first = state.position == 0;
                state.last_ahead = ahead;
                state.last_sent_at = Some(tokio::time::Instant::now());
                state.position = position;
                state.generation = generation;
                let event = Event::default().event("status").data(body.to_string());
                if first { event.retry(RETRY) } else { event }
            }
            Step::Admitted(entry) => {
                let body = api::entry_body(&state.app, &state.room, state.queue_terms(), entry);
                return Some((
                    Ok(Event::default().event("admitted").data(body.to_string())),
                    None,
                ));
            }
            Step::Closed => {
                let body = serde_json::json!({"room": state.room.as_str(), "state": "closed"});
                return Some((
                    Ok(Event::default().event("closed").data(body.to_string())),
                    None,
                ));
            }
            Step::End => return None,
        };
        Some((Ok(event), Some(state)))
    })
}

/// Waits for the next change worth telling this connection about. Status events go out at
/// most once a second; leaving the line (admission, or the ticket ending) is told at once,
/// so an admission made by any node reaches the visitor as soon as this node's view shows it.
async fn next_step(state: &mut StreamState) -> Step {
    loop {
        if view_changed(state).await.is_err() {
            return Step::End;
        }
        if let Some(opens_at) = state.opens_at
            && state.app.now() >= opens_at
        {
            return opened(state).await;
        }
        let Ok(view) = latest_view(state).await else {
            return Step::End;
        };
        let Some(view) = view else {
            continue;
        };
        if view.snapshot.mode == Mode::Closed {
            return Step::Closed;
        }
        if view.snapshot.generation != state.generation {
            return Step::End;
        }
        if let Some(opens_at) = state.opens_at {
            if state.app.now() >= opens_at {
                return opened(state).await;
            }
            if view.ahead_of(state.position).is_none() {
                // Out of the line before the opening (left, or let in by hand).
                match out_of_line(state).await {
                    Some(step) => return step,
                    None => continue,
                }
            }
        }
        let step = match view.ahead_of(state.position) {
            Some(ahead) => status_step(state, &view, ahead),
            // Out of the line: admitted (claim the pass now) or ended.
            None => out_of_line(state).await,
        };
        if let Some(step) = step {
            return step;
        }
    }
}

/// The room's views are no longer published (the hub dropped the room).
struct ViewsEnded;

/// Waits for the room's view to change, or, in a pre-queue, for the opening (even if the room
/// looks the same then).
#[inline]
async fn view_changed(state: &mut StreamState) -> Result<(), ViewsEnded> {
    let changed = match state.opens_at {
        Some(opens_at) => {
            let wait = opens_at
                .as_millis()
                .saturating_sub(state.app.now().as_millis());
            tokio::select! {
                changed = state.views.changed() => changed,
                () = tokio::time::sleep(Duration::from_millis(wait) + OPENING_GRACE) => Ok(()),
            }
        }
        None => state.views.changed().await,
    };
    changed.map_err(|_| ViewsEnded)
}

/// The room's latest view. A status change too soon after the last event waits out
/// [`MIN_EVENT_INTERVAL`] (or until the ticket leaves the line), so the latest figures then
/// are told.
#[inline]
async fn latest_view(state: &mut StreamState) -> Result<Option<Arc<TickerRoomView>>, ViewsEnded> {
    let mut view = state.views.borrow_and_update().clone();
    if let Some(ahead) = view
        .as_deref()
        .and_then(|view| view.ahead_of(state.position))
        && state.last_sent != event_key_of(view.as_deref(), ahead, state.pace)
        && let Some(at) = state.last_sent_at
        && at.elapsed() < MIN_EVENT_INTERVAL
    {
        let until = at + MIN_EVENT_INTERVAL;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => break,
                changed = state.views.changed() => {
                    changed.map_err(|_| ViewsEnded)?;
                    view = state.views.borrow_and_update().clone();
                    let still_waiting = view
                        .as_deref()
                        .is_some_and(|view| view.ahead_of(state.position).is_some());
                    if !still_waiting {
                        break;
                    }
                }
            }
        }
        view = state.views.borrow_and_update().clone().or(view);
    }
    Ok(view)
}

/// The status event for `ahead` people ahead (never more than last told); `None` when it
/// would say what the last one said.
#[inline]
fn status_step(state: &mut StreamState, view: &TickerRoomView, ahead: u64) -> Option<Step> {
    let ahead = state.last_ahead.map_or(ahead, |last| ahead.min(last));
    let key = event_key(view, ahead, state.pace);
    if state.last_sent == Some(key) {
        return None;
    }
    state.last_sent = Some(key);
    state.last_sent_at = Some(tokio::time::Instant::now());
    Some(Step::Status {
        body: status_body(state, view, ahead),
        position: state.position,
        generation: state.generation,
        ahead: Some(ahead),
    })
}

/// The ticket is out of the line in the view: the store says whether it was admitted (then
/// the visitor claims the pass now) or ended; `None` when it still waits there (the view was
/// behind).
async fn out_of_line(state: &StreamState) -> Option<Step> {
    match state.app.store().status(&state.room, state.reference).await {
        Ok(entry @ Entry::Admitted(_)) => Some(Step::Admitted(entry)),
        Ok(Entry::Waiting(_)) => None,
        Err(_) => Some(Step::End),
    }
}

/// The pre-queue has opened: the store answers with the ticket's drawn position (drawing now if
/// nobody has yet), and the stream goes on from there.
async fn opened(state: &mut StreamState) -> Step {
    match state.app.store().status(&state.room, state.reference).await {
        Ok(entry @ Entry::Admitted(_)) => Step::Admitted(entry),
        Ok(Entry::Waiting(waiting)) => {
            state.opens_at = waiting.opens_at;
            let (position, generation) = (waiting.position, waiting.generation);
            let ahead = waiting.opens_at.is_none().then_some(waiting.ahead);
            // The engine's view says whether the room is paused.
            let body = api::entry_body(
                &state.app,
                &state.room,
                state.queue_terms(),
                Entry::Waiting(waiting),
            );
            state.last_sent = None;
            Step::Status {
                body,
                position,
                generation,
                ahead,
            }
        }
        Err(_) => Step::End,
    }
}

fn event_key_of(
    view: Option<&TickerRoomView>,
    ahead: u64,
    pace: ConfiguredPace,
) -> Option<EventKey> {
    view.map(|view| event_key(view, ahead, pace))
}

fn event_key(view: &TickerRoomView, ahead: u64, pace: ConfiguredPace) -> EventKey {
    let rate = AdmissionRate::from_estimate(view.snapshot.admission_rate);
    let eta = estimate(ahead, &rate, pace).map(|estimate| eta_step(estimate.seconds));
    (
        ahead,
        view.snapshot.serving,
        view.snapshot.waiting,
        eta,
        view.snapshot.mode,
    )
}

/// The step an ETA falls in: everything under a minute is one ("under a minute" on the page),
/// above that steps of [`ETA_STEP`] of the estimate.
fn eta_step(seconds: u64) -> u64 {
    if seconds < 60 {
        return 0;
    }
    let minutes = seconds as f64 / 60.0;
    1 + (minutes.ln() / ETA_STEP.ln_1p()).floor() as u64
}

fn status_body(state: &StreamState, view: &TickerRoomView, ahead: u64) -> serde_json::Value {
    let rate = AdmissionRate::from_estimate(view.snapshot.admission_rate);
    let mode = view.snapshot.mode;
    if let Some(opens_at) = state.opens_at {
        return serde_json::json!({
            "room": state.room.as_str(),
            "state": "prequeue",
            "ticket": state.ticket_token,
            "position": state.position,
            "ahead": null,
            "serving": view.snapshot.serving,
            "waiting": view.snapshot.waiting,
            "eta_seconds": null,
            "eta_basis": null,
            "next_poll_ms": next_poll_ms(0, &mut rand::thread_rng()),
            "opens_at": anteroom_core::config::format_time(opens_at),
        });
    }
    let paused = mode == Mode::QueueAll;
    // Nobody is admitted while paused: no estimate (SPEC §5.5, null when the rate is zero).
    let estimate = (!paused)
        .then(|| estimate(ahead, &rate, state.pace))
        .flatten();
    let (eta_seconds, eta_basis) = api::eta_fields(estimate);
    serde_json::json!({
        "room": state.room.as_str(),
        "state": if paused { "paused" } else { "waiting" },
        "ticket": state.ticket_token,
        "position": state.position,
        "ahead": ahead,
        "serving": view.snapshot.serving,
        "waiting": view.snapshot.waiting,
        "eta_seconds": eta_seconds,
        "eta_basis": eta_basis,
        "next_poll_ms": next_poll_ms_within(ahead, eta_seconds, &mut rand::thread_rng()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn eta_steps_are_relative() {
        assert_eq!(eta_step(0), 0);
        assert_eq!(eta_step(59), 0, "under a minute is one step");
        assert_ne!(eta_step(60), eta_step(59));
        // Far back, a change of 1 % is no event; 10 % is.
        assert_eq!(eta_step(45_000), eta_step(45_450));
        assert_ne!(eta_step(45_000), eta_step(49_500));
        // Near the front the steps are seconds wide.
        assert_ne!(eta_step(120), eta_step(130));
    }
}
