//! Status polls answered from the node's view of the line (SPEC §6.1, §5.5), without a store
//! call, whenever that view can answer them exactly as a poll would have a moment earlier.
//!
//! The view is the one the node's event streams already share (`sse_hub.rs`): the room's
//! figures and the regular line's live positions, refreshed by the ticker and the change
//! notices. A poll is answered from it only when all of these hold:
//!
//! - the client says which `ahead` it was last shown (`X-Anteroom-Ahead`), and the view shows
//!   no more than that. Views on different nodes are read at different times, and an older
//!   one shows more people ahead: a poll landing on a node whose view is older than the
//!   answer the visitor last saw goes to the store, so the `ahead` a visitor is shown never
//!   grows (I5) whichever nodes its polls reach. The value needs no signature: it only
//!   chooses between the view and the store, each of which tells the truth at its time, so a
//!   client that sends a false one can neither advance nor be shown a line that was not;
//! - the view's read began at most [`VIEW_MAX_AGE`] ago, and the room admits in order
//!   (`fifo`) no faster than a bound, so the ticket cannot have been admitted since unless
//!   people ahead of it left: the view shows at least as many ahead as the room may admit in
//!   the view's age
//!   (I3: `admit_per_minute` over that time plus `admit_burst`; the adaptive controller's
//!   ceiling when it sets the rate). The front of the line, which the next admissions reach,
//!   always asks the store, so an admitted visitor hears of it at its next poll;
//! - the ticket's signed token places it (its position and generation) in the view's line:
//!   positions are unique within a generation and a ticket keeps its own, except in a
//!   pre-queue's draw, so a room in a pre-queue or in an event that shuffles, and a ticket of
//!   a drawn cohort, are left to the store, as is the priority lane (not in the view);
//! - the room queues (`queue`, not paused, closed or passing through).
//!
//! Anything else goes to the store: a ticket the view no longer shows waiting (admitted,
//! left, expired, unknown) above all, so passes only ever come from the store (I7). A poll
//! is contact (§5.2): the tickets answered here are touched in batches beside the ticker, at
//! most `ticket_idle_ttl / 3` after their poll.
//!
//! An answer from the view carries an `Age` header (RFC 9111 §5.1, whole seconds since the
//! view's read began), as a cache's answer does: it describes the line as it was then. The
//! people ahead may have left since (nothing bounds how fast), so unlike the store's answer
//! it does not prove the ticket was waiting when the request was sent.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName};
use metrics::counter;

use anteroom_core::RoomId;
use anteroom_core::engine::{Entry, TicketRef, WaitingView};
use anteroom_core::eta::{AdmissionRate, eta_seconds};
use anteroom_core::room::{Mode, Order, Phase, RoomConfig};

use crate::AppState;
use crate::error::ApiError;

/// The oldest view a poll is answered from. The ticker rereads a polled room's view every
/// `tick_interval` (at most a second), so an older view means the store is slow to answer;
/// a bound much tighter than that turns a slow refresh into every poll asking the store at
/// once, just when it is slowest. Age costs no correctness: the front guard grows with it
/// (the room may admit more in a longer time), and `ahead` never exceeds what was shown.
pub(crate) const VIEW_MAX_AGE: Duration = Duration::from_secs(5);

/// The header a polling client sends the `ahead` of the last status it was shown in.
static SHOWN_AHEAD_HEADER: HeaderName = HeaderName::from_static("x-anteroom-ahead");

/// The `ahead` the client says it was last shown: `None` without the header, an error for a
/// value that is not a whole number.
pub(crate) fn shown_ahead(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(&SHOWN_AHEAD_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_ahead",
                "X-Anteroom-Ahead must be the `ahead` of the last status shown, a whole number",
            )
        })
}

/// A status answered from the node's view.
pub(crate) struct ViewAnswer {
    /// The ticket's entry as the view shows it.
    pub(crate) entry: Entry,
    /// How long ago the view's read began.
    pub(crate) age: Duration,
}

/// The ticket's entry from the node's view, when the view can answer for it (see the module
/// documentation); `None` sends the poll to the store.
pub(crate) fn answer(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    ticket: TicketRef,
    position: u64,
    shown_ahead: Option<u64>,
) -> Option<ViewAnswer> {
    let shown_ahead = shown_ahead?;
    if config.mode != Mode::Queue || config.order != Order::Fifo || !positions_settled(config, app)
    {
        return None;
    }
    let (view, age) = app.hub().view_for_poll(room, VIEW_MAX_AGE)?;
    let snapshot = &view.snapshot;
    if snapshot.mode != Mode::Queue || snapshot.generation != ticket.generation {
        return None;
    }
    // A ticket of a drawn cohort may hold a token signed before the draw moved it.
    if snapshot
        .draw
        .is_some_and(|draw| position <= draw.through_position)
    {
        return None;
    }
    let ahead = view.ahead_of(position)?;
    if ahead < admissions_within(config, app, age)? {
        // Near enough the front to have been admitted since the view was read.
        return None;
    }
    if ahead > shown_ahead {
        // The view was read before the answer the client last saw.
        counter!("anteroom_status_from_view_total", "answer" => "older_than_shown").increment(1);
        return None;
    }
    app.hub().polled_from_view(room, ticket);
    counter!("anteroom_status_from_view_total", "answer" => "view").increment(1);
    let rate = AdmissionRate::from_estimate(snapshot.admission_rate);
    let entry = Entry::Waiting(WaitingView {
        ticket: ticket.id,
        position,
        generation: ticket.generation,
        ahead,
        serving: snapshot.serving,
        waiting: snapshot.waiting,
        eta_seconds: eta_seconds(ahead, &rate),
        paused: false,
        opens_at: None,
        return_to: None,
    });
    Some(ViewAnswer { entry, age })
}

/// The most admissions the room may make within `age` (I3: the rate over that time plus the
/// burst), at the fastest rate its configuration allows now; `None` when nothing bounds it
/// (`admit_per_minute = 0`).
fn admissions_within(config: &RoomConfig, app: &AppState, age: Duration) -> Option<u64> {
    let limits = config.limits_at(app.now());
    let per_minute = match &config.adaptive {
        Some(adaptive) => adaptive.max_per_minute.max(limits.admit_per_minute),
        None => limits.admit_per_minute,
    };
    if per_minute == 0 {
        return None;
    }
    let over_age = (u128::from(per_minute) * age.as_millis()).div_ceil(60_000);
    Some(
        u64::try_from(over_age)
            .unwrap_or(u64::MAX)
            .saturating_add(limits.admit_burst),
    )
}

/// Whether a ticket's position is the one its token was signed with, for good: the room has
/// no schedule, or is open in an event without a shuffle (a pre-queue's draw gives its tickets
/// new positions, and before it the order means nothing).
fn positions_settled(config: &RoomConfig, app: &AppState) -> bool {
    match config.phase(app.now()) {
        Phase::Unscheduled => true,
        Phase::Open { event } => config
            .schedule
            .events
            .get(event)
            .is_some_and(|event| !event.shuffle),
        Phase::Idle(_) | Phase::Prequeue { .. } => false,
    }
}
