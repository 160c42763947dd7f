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

use http::{Method, StatusCode, header};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Deserialize;
use tokio::time::Instant;

use super::client::{Answer, Client, ClientError, Streaming};
use super::record::{Join, Observation, Outcome, VisitorRecord};
use super::scenario::{Behaviour, Plan, uniform};

/// The request header that asks the simulator's origin to release the session.
pub(crate) const RELEASE_REQUEST: &str = "x-crowd-release";

/// Requests give up after this long (an event stream: its opening, not its events).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Consecutive failed polls after which a visitor stops.
const MAX_POLL_FAILURES: u32 = 5;

/// What every visitor of one process shares.
pub(crate) struct Context {
    pub(crate) client: Client,
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
    let node = plan.node;
    let path = format!("/_anteroom/v1/rooms/{}/join", context.room);
    let sent = context.now();
    let request = context
        .client
        .request(node, &Method::POST, &path)
        .field("accept", "application/json");
    let answer = context.client.send(request, REQUEST_TIMEOUT).await;
    let status = match read_status(answer) {
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
            match wait(context, node, plan, status, give_up_at, record).await {
                Waited::Pass(pass) => pass,
                Waited::Stopped => {
                    // Stopped without a failure: the visitor gave up.
                    if record.outcome == Outcome::Unfinished {
                        leave_or_vanish(context, node, plan, &ticket, record).await;
                    }
                    return;
                }
            }
        }
    };
    use_the_site(context, node, plan, pass, record).await;
}

/// Follows the line until admission, giving up at `give_up_at`: over an event stream when the
/// behaviour says so, then (or else) by polling.
async fn wait(
    context: &Context,
    node: usize,
    plan: &Plan,
    status: Status,
    give_up_at: Option<Instant>,
    record: &mut VisitorRecord,
) -> Waited {
    let ticket = status.ticket.clone();
    if plan.follows_stream {
        tokio::select! {
            outcome = follow_stream(context, node, &ticket, record) => match outcome {
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
        node,
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
    node: usize,
    ticket: &str,
    next_poll_ms: u64,
    mut shown_ahead: u64,
    give_up_at: Option<Instant>,
    record: &mut VisitorRecord,
) -> Waited {
    let give_up = until(give_up_at);
    tokio::pin!(give_up);
    let path = format!("/_anteroom/v1/rooms/{}/status", context.room);
    let mut delay = Duration::from_millis(next_poll_ms.clamp(1_000, 60_000));
    let mut failures = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = &mut give_up => return Waited::Stopped,
        }
        let sent = context.now();
        let request = context
            .client
            .request(node, &Method::GET, &path)
            .field("x-anteroom-ticket", ticket)
            .field("x-anteroom-ahead", itoa::Buffer::new().format(shown_ahead))
            .field("accept", "application/json");
        let answer = context.client.send(request, REQUEST_TIMEOUT).await;
        match read_status(answer) {
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
    node: usize,
    ticket: &str,
    record: &mut VisitorRecord,
) -> Stream {
    let mut body = match open_stream(context, node, ticket, record).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    record.sse = true;
    let mut buffer = Vec::new();
    loop {
        let chunk = match body.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Stream::Ended,
            Err(error) => {
                record.errors.push(format!("events: {error}"));
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
    node: usize,
    ticket: &str,
    record: &mut VisitorRecord,
) -> Result<Streaming, Stream> {
    // Ticket tokens are URL-safe (base64url and dots).
    let path = format!(
        "/_anteroom/v1/rooms/{}/events?ticket={ticket}",
        context.room
    );
    let request = context
        .client
        .request(node, &Method::GET, &path)
        .field("accept", "text/event-stream");
    let opened = tokio::time::timeout(REQUEST_TIMEOUT, context.client.stream(request))
        .await
        .unwrap_or(Err(ClientError::Timeout));
    match opened {
        Ok((StatusCode::OK, _, body)) => Ok(body),
        Ok((status, headers, mut body)) => {
            // Not a stream: a node at its stream limit says so (503 `too_many_connections`);
            // anything else is an error. Either way the visitor polls, as the page does.
            let answer = tokio::time::timeout(REQUEST_TIMEOUT, body.read_whole())
                .await
                .unwrap_or(Err(ClientError::Timeout))
                .map(|body| Answer {
                    status,
                    headers,
                    body,
                });
            match read_status(answer) {
                Err(failure) if failure.code.as_deref() == Some("too_many_connections") => {
                    record.sse_refused = true;
                }
                Err(failure) => record.errors.push(format!("events: {failure}")),
                Ok(_) => record.errors.push("events: not a stream".to_owned()),
            }
            Err(Stream::Refused)
        }
        Err(error) => {
            record.errors.push(format!("events: {error}"));
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
    node: usize,
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
    let path = format!("/_anteroom/v1/rooms/{}/ticket", context.room);
    let request = context
        .client
        .request(node, &Method::DELETE, &path)
        .field("x-anteroom-ticket", ticket);
    match context.client.send(request, REQUEST_TIMEOUT).await {
        Ok(answer) if answer.status.is_success() => {}
        Ok(answer) => record
            .errors
            .push(format!("leave: HTTP {}", answer.status.as_u16())),
        Err(error) => record.errors.push(format!("leave: {error}")),
    }
}

/// Uses the site with the pass for the planned session length.
async fn use_the_site(
    context: &Context,
    node: usize,
    plan: &Plan,
    mut pass: String,
    record: &mut VisitorRecord,
) {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let claimed = Instant::now();
    let pass_cookie = format!("anteroom_p_{}=", context.room);
    loop {
        let think = uniform(&mut rng, context.behaviour.think);
        let last = claimed.elapsed() + think >= plan.session;
        let mut request = context
            .client
            .request(node, &Method::GET, &context.behaviour.path)
            .field("x-anteroom-pass", &pass);
        if last && !plan.expires {
            request = request.field(RELEASE_REQUEST, "1");
        }
        record.requests += 1;
        match context.client.send(request, REQUEST_TIMEOUT).await {
            Ok(answer) => {
                if let Some(renewed) = renewed_pass(&answer, &pass_cookie) {
                    pass = renewed;
                }
                if !answer.status.is_success() {
                    record.request_failures += 1;
                    record
                        .errors
                        .push(format!("request: HTTP {}", answer.status.as_u16()));
                }
            }
            Err(error) => {
                record.request_failures += 1;
                record.errors.push(format!("request: {error}"));
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
fn renewed_pass(answer: &Answer, pass_cookie: &str) -> Option<String> {
    answer
        .headers
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

fn read_status(answer: Result<Answer, ClientError>) -> Result<Status, Failure> {
    let answer = answer.map_err(|error| Failure {
        text: error.to_string(),
        code: None,
        retry_after: None,
    })?;
    let code = answer.status;
    let retry_after = answer
        .headers
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .map(Duration::from_secs);
    if !code.is_success() {
        let problem = serde_json::from_slice::<serde_json::Value>(&answer.body)
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
    let mut status: Status = serde_json::from_slice(&answer.body).map_err(|_| Failure {
        text: "not a status".to_owned(),
        code: None,
        retry_after,
    })?;
    status.from_view = answer.headers.contains_key(header::AGE);
    Ok(status)
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
