//! One virtual visitor, as the waiting page and a person behave (SPEC §6.1-§6.3).
//!
//! It arrives at its planned time and joins (`POST …/join`). While it waits it follows the
//! line over SSE when the node offers it, and polls the status after `next_poll_ms` when the
//! node refuses the stream (503 at its connection limit) or the stream ends. It may give up
//! (leaving with `DELETE`, or silently). Admitted, it takes its pass and requests the protected
//! path through the gateway with it (`X-Anteroom-Pass`) for its session length, pausing
//! between requests; the last request asks the origin to release the session, unless the
//! visitor lets it expire. Everything it sees goes into its [`VisitorRecord`].

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use reqwest::{Client, StatusCode, header};
use serde::Deserialize;
use tokio::time::Instant;

use super::record::{Join, Observation, Outcome, VisitorRecord};
use super::scenario::{Behaviour, Plan, uniform};

/// The request header that asks the simulator's origin to release the session.
pub(crate) const RELEASE_REQUEST: &str = "x-crowd-release";

/// Requests other than the event stream give up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Consecutive failed polls after which a visitor stops.
const MAX_POLL_FAILURES: u32 = 5;

/// What every visitor of one process shares.
pub(crate) struct Context {
    pub(crate) client: Client,
    pub(crate) targets: Vec<String>,
    pub(crate) room: String,
    pub(crate) behaviour: Behaviour,
    pub(crate) start: Instant,
}

impl Context {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// The status JSON (SPEC §6.1), the fields the visitor uses.
#[derive(Debug, Deserialize)]
struct Status {
    state: String,
    #[serde(default)]
    ticket: String,
    #[serde(default)]
    position: u64,
    #[serde(default)]
    ahead: u64,
    #[serde(default)]
    serving: u64,
    #[serde(default)]
    waiting: u64,
    #[serde(default)]
    eta_seconds: Option<u64>,
    #[serde(default)]
    next_poll_ms: u64,
    #[serde(default)]
    pass: Option<String>,
    /// The answer had an `Age` header: a node answered from its view of the line.
    #[serde(skip)]
    from_view: bool,
}

/// How waiting ended.
enum Waited {
    Pass(String),
    Stopped,
}

/// Runs one visitor until it is done; the caller bounds it in time (the record keeps what
/// happened so far).
pub(crate) async fn visit(context: &Context, plan: &Plan, record: &mut VisitorRecord) {
    record.id = plan.id;
    record.node = plan.node;
    record.arrival = plan.arrival.as_secs_f64();
    tokio::time::sleep_until(context.start + plan.arrival).await;
    let target = &context.targets[plan.node];
    let url = format!("{target}/_anteroom/v1/rooms/{}/join", context.room);
    let sent = context.now();
    let answer = context
        .client
        .post(&url)
        .header(header::ACCEPT, "application/json")
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await;
    let status = match read_status(answer).await {
        Ok(status) => status,
        Err(error) => {
            record.errors.push(format!("join: {error}"));
            record.outcome = Outcome::Failed;
            return;
        }
    };
    let received = context.now();
    record.join = Some(Join {
        sent,
        received,
        position: status.position,
        ahead: status.ahead,
        eta: status.eta_seconds,
    });
    let pass = match (status.state.as_str(), status.pass.clone()) {
        ("admitted", Some(pass)) => {
            record.admitted = Some(received);
            pass
        }
        _ => {
            record.waited = true;
            let give_up_at = plan
                .abandon_after
                .map(|after| context.start + Duration::from_secs_f64(received) + after);
            let ticket = status.ticket.clone();
            match wait(context, target, plan, status, give_up_at, record).await {
                Waited::Pass(pass) => pass,
                Waited::Stopped => {
                    // Stopped without a failure: the visitor gave up.
                    if record.outcome == Outcome::Unfinished {
                        leave_or_vanish(context, target, plan, &ticket, record).await;
                    }
                    return;
                }
            }
        }
    };
    use_the_site(context, target, plan, pass, record).await;
}

/// Follows the line until admission, giving up at `give_up_at`: over an event stream when the
/// behaviour says so, then (or else) by polling.
async fn wait(
    context: &Context,
    target: &str,
    plan: &Plan,
    status: Status,
    give_up_at: Option<Instant>,
    record: &mut VisitorRecord,
) -> Waited {
    let ticket = status.ticket.clone();
    if plan.follows_stream {
        tokio::select! {
            outcome = follow_stream(context, target, &ticket, record) => match outcome {
                Stream::Admitted(pass) => return Waited::Pass(pass),
                Stream::Closed => {
                    record.errors.push("events: room closed".to_owned());
                    record.outcome = Outcome::Failed;
                    return Waited::Stopped;
                }
                Stream::Refused | Stream::Ended => {}
            },
            () = until(give_up_at) => return Waited::Stopped,
        }
    }
    // The `ahead` last shown, by the join or the stream, is what the first poll sends back.
    let shown_ahead = record
        .observations
        .last()
        .map_or(status.ahead, |seen| seen.ahead);
    poll(
        context,
        target,
        &ticket,
        status.next_poll_ms,
        shown_ahead,
        give_up_at,
        record,
    )
    .await
}

/// Resolves at `at`; never without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Polls the status, as the page does without a stream, until admission, a failure that ends
/// the wait, or `give_up_at`. The first poll comes after `next_poll_ms`, as the join said.
/// Each poll sends the `ahead` it was last shown (`X-Anteroom-Ahead`, starting with
/// `shown_ahead`), as the page does, so a node may answer from its view of the line.
async fn poll(
    context: &Context,
    target: &str,
    ticket: &str,
    next_poll_ms: u64,
    mut shown_ahead: u64,
    give_up_at: Option<Instant>,
    record: &mut VisitorRecord,
) -> Waited {
    let give_up = until(give_up_at);
    tokio::pin!(give_up);
    let url = format!("{target}/_anteroom/v1/rooms/{}/status", context.room);
    let mut delay = Duration::from_millis(next_poll_ms.clamp(1_000, 60_000));
    let mut failures = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = &mut give_up => return Waited::Stopped,
        }
        let sent = context.now();
        let answer = context
            .client
            .get(&url)
            .header("x-anteroom-ticket", ticket)
            .header("x-anteroom-ahead", shown_ahead)
            .header(header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await;
        match read_status(answer).await {
            Ok(next) => {
                failures = 0;
                shown_ahead = next.ahead;
                let received = context.now();
                if next.state == "admitted"
                    && let Some(pass) = next.pass
                {
                    record.admitted = Some(received);
                    return Waited::Pass(pass);
                }
                observe(record, sent, received, false, &next);
                delay = Duration::from_millis(next.next_poll_ms.clamp(1_000, 60_000));
            }
            Err(error) => {
                record.errors.push(format!("status: {error}"));
                failures += 1;
                if error.ticket_ended() || failures >= MAX_POLL_FAILURES {
                    record.gave_up = Some(context.now());
                    record.outcome = Outcome::Failed;
                    return Waited::Stopped;
                }
                delay = error
                    .retry_after
                    .unwrap_or(delay * 2)
                    .clamp(Duration::from_secs(1), Duration::from_secs(60));
            }
        }
    }
}

fn observe(record: &mut VisitorRecord, sent: f64, received: f64, sse: bool, status: &Status) {
    record.observations.push(Observation {
        sent,
        received,
        sse,
        from_view: status.from_view,
        ahead: status.ahead,
        serving: status.serving,
        waiting: status.waiting,
        eta: status.eta_seconds,
    });
}

/// How an event stream ended.
enum Stream {
    Admitted(String),
    Closed,
    /// The node did not open it (503 `too_many_connections` at its limit, or an error): poll.
    Refused,
    /// It ended or broke without admission: poll instead.
    Ended,
}

/// Follows the room's event stream until it admits the visitor, closes or ends.
async fn follow_stream(
    context: &Context,
    target: &str,
    ticket: &str,
    record: &mut VisitorRecord,
) -> Stream {
    let mut response = match open_stream(context, target, ticket, record).await {
        Ok(response) => response,
        Err(refused) => return refused,
    };
    record.sse = true;
    let mut buffer = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Stream::Ended,
            Err(error) => {
                record
                    .errors
                    .push(format!("events: {}", error_kind(&error)));
                return Stream::Ended;
            }
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = find_event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            let received = context.now();
            let Some((name, data)) = parse_event(&event) else {
                continue;
            };
            if let Some(ended) = stream_event(&name, &data, received, record) {
                return ended;
            }
        }
    }
}

/// Opens the event stream; [`Stream::Refused`] when the node answers with anything else.
async fn open_stream(
    context: &Context,
    target: &str,
    ticket: &str,
    record: &mut VisitorRecord,
) -> Result<reqwest::Response, Stream> {
    // Ticket tokens are URL-safe (base64url and dots).
    let url = format!(
        "{target}/_anteroom/v1/rooms/{}/events?ticket={ticket}",
        context.room
    );
    let answer = context
        .client
        .get(&url)
        .header(header::ACCEPT, "text/event-stream")
        .send()
        .await;
    match answer {
        Ok(response) if response.status() == StatusCode::OK => Ok(response),
        Ok(response) => {
            // Not a stream: a node at its stream limit says so (503 `too_many_connections`);
            // anything else is an error. Either way the visitor polls, as the page does.
            match read_status(Ok(response)).await {
                Err(failure) if failure.code.as_deref() == Some("too_many_connections") => {
                    record.sse_refused = true;
                }
                Err(failure) => record.errors.push(format!("events: {failure}")),
                Ok(_) => record.errors.push("events: not a stream".to_owned()),
            }
            Err(Stream::Refused)
        }
        Err(error) => {
            record
                .errors
                .push(format!("events: {}", error_kind(&error)));
            Err(Stream::Refused)
        }
    }
}

/// Records one event received at `received`; `Some` when it ends the stream.
fn stream_event(
    name: &str,
    data: &str,
    received: f64,
    record: &mut VisitorRecord,
) -> Option<Stream> {
    match name {
        "status" => {
            if let Ok(status) = serde_json::from_str::<Status>(data) {
                observe(record, received, received, true, &status);
            }
            None
        }
        "admitted" => Some(match serde_json::from_str::<Status>(data) {
            Ok(Status {
                pass: Some(pass), ..
            }) => {
                record.admitted = Some(received);
                Stream::Admitted(pass)
            }
            _ => {
                record
                    .errors
                    .push("events: admitted without a pass".to_owned());
                Stream::Ended
            }
        }),
        "closed" => Some(Stream::Closed),
        _ => None,
    }
}

/// The end (after the blank line) of the first complete event in `buffer`.
fn find_event_end(buffer: &[u8]) -> Option<usize> {
    let lf = buffer
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|at| at + 2);
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// An event's name (`message` when unnamed) and data lines; `None` for a comment-only block.
fn parse_event(block: &[u8]) -> Option<(String, String)> {
    let text = String::from_utf8_lossy(block);
    let mut name = None;
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    if data.is_empty() {
        return None;
    }
    Some((
        name.unwrap_or_else(|| "message".to_owned()),
        data.join("\n"),
    ))
}

async fn leave_or_vanish(
    context: &Context,
    target: &str,
    plan: &Plan,
    ticket: &str,
    record: &mut VisitorRecord,
) {
    let now = context.now();
    record.gave_up = Some(now);
    if !plan.leaves {
        record.outcome = Outcome::Abandoned;
        return;
    }
    record.outcome = Outcome::Left;
    let url = format!("{target}/_anteroom/v1/rooms/{}/ticket", context.room);
    let answer = context
        .client
        .delete(&url)
        .header("x-anteroom-ticket", ticket)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await;
    match answer {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => record
            .errors
            .push(format!("leave: HTTP {}", response.status().as_u16())),
        Err(error) => record.errors.push(format!("leave: {}", error_kind(&error))),
    }
}

/// Uses the site with the pass for the planned session length.
async fn use_the_site(
    context: &Context,
    target: &str,
    plan: &Plan,
    mut pass: String,
    record: &mut VisitorRecord,
) {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let url = format!("{target}{}", context.behaviour.path);
    let claimed = Instant::now();
    let pass_cookie = format!("anteroom_p_{}=", context.room);
    loop {
        let think = uniform(&mut rng, context.behaviour.think);
        let last = claimed.elapsed() + think >= plan.session;
        let mut request = context
            .client
            .get(&url)
            .header("x-anteroom-pass", &pass)
            .timeout(REQUEST_TIMEOUT);
        if last && !plan.expires {
            request = request.header(RELEASE_REQUEST, "1");
        }
        record.requests += 1;
        match request.send().await {
            Ok(response) => {
                if let Some(renewed) = renewed_pass(&response, &pass_cookie) {
                    pass = renewed;
                }
                let code = response.status();
                // Read the body so the connection goes back to the pool.
                let _ = response.bytes().await;
                if !code.is_success() {
                    record.request_failures += 1;
                    record
                        .errors
                        .push(format!("request: HTTP {}", code.as_u16()));
                }
            }
            Err(error) => {
                record.request_failures += 1;
                record
                    .errors
                    .push(format!("request: {}", error_kind(&error)));
            }
        }
        if last {
            break;
        }
        tokio::time::sleep(think).await;
    }
    record.ended = Some(context.now());
    record.outcome = if plan.expires {
        Outcome::Expired
    } else {
        Outcome::Completed
    };
}

/// The renewed pass an answer sets as the cookie starting `pass_cookie` (`anteroom_p_<room>=`),
/// the last one when it sets several.
fn renewed_pass(response: &reqwest::Response, pass_cookie: &str) -> Option<String> {
    response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| {
            value
                .to_str()
                .ok()
                .and_then(|cookie| cookie.strip_prefix(pass_cookie))
                .and_then(|rest| rest.split(';').next())
                .filter(|token| !token.is_empty())
        })
        .next_back()
        .map(str::to_owned)
}

/// Why an answer was not a status.
#[derive(Debug)]
struct Failure {
    text: String,
    code: Option<String>,
    retry_after: Option<Duration>,
}

impl Failure {
    fn ticket_ended(&self) -> bool {
        self.code.as_deref() == Some("ticket_expired")
            || self.code.as_deref() == Some("ticket_invalid")
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

async fn read_status(answer: reqwest::Result<reqwest::Response>) -> Result<Status, Failure> {
    let response = answer.map_err(|error| Failure {
        text: error_kind(&error),
        code: None,
        retry_after: None,
    })?;
    let code = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .map(Duration::from_secs);
    let response_age = response.headers().get(header::AGE).cloned();
    let body = response.bytes().await.map_err(|error| Failure {
        text: error_kind(&error),
        code: None,
        retry_after: None,
    })?;
    if !code.is_success() {
        let problem = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|value| {
                value
                    .get("code")
                    .and_then(|code| code.as_str())
                    .map(str::to_owned)
            });
        return Err(Failure {
            text: match &problem {
                Some(problem) => format!("HTTP {} {problem}", code.as_u16()),
                None => format!("HTTP {}", code.as_u16()),
            },
            code: problem,
            retry_after,
        });
    }
    let from_view = response_age.is_some();
    let mut status: Status = serde_json::from_slice(&body).map_err(|_| Failure {
        text: "not a status".to_owned(),
        code: None,
        retry_after,
    })?;
    status.from_view = from_view;
    Ok(status)
}

/// A short, stable name for a transport error, to count errors by kind.
fn error_kind(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timeout".to_owned()
    } else if error.is_connect() {
        "connect".to_owned()
    } else if error.is_body() || error.is_decode() {
        "body".to_owned()
    } else {
        "transport".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_and_read() {
        let buffer = b"retry: 3000\nevent: status\ndata: {\"a\":1}\n\n: keep-alive\n\nevent: adm";
        let end = find_event_end(buffer).expect("a whole event");
        let (name, data) = parse_event(&buffer[..end]).expect("an event");
        assert_eq!((name.as_str(), data.as_str()), ("status", "{\"a\":1}"));
        let rest = &buffer[end..];
        let end = find_event_end(rest).expect("the comment block");
        assert!(parse_event(&rest[..end]).is_none());
        assert!(find_event_end(&rest[end..]).is_none());
    }
}
