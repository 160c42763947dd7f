//! The protected site, run inside the simulator so that what anteroom lets through is counted
//! outside anteroom.
//!
//! The gateway proxies admitted visitors' requests here with their pass (`X-Anteroom-Pass`,
//! `Authorization: Bearer` or the pass cookie). The origin reads the session id (`sub`) from
//! the pass's claims without verifying it (the gateway did), and keeps for each session the
//! span from its first request to its end: the answer that releases it (`Anteroom-Release: 1`,
//! sent when the visitor's last request asks for it) or, for a session left to expire, its last
//! request. A span is inside the session anteroom counts (which opens when the pass is issued
//! and closes after the release is read), so more overlapping spans than `max_active` is a
//! broken cap, seen from outside. It also counts sessions with a request in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::record::{OriginLog, Span};
use super::visitor::RELEASE_REQUEST;

/// A running origin.
pub(crate) struct Origin {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    start: Mutex<Instant>,
    latency: Duration,
    state: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    sessions: HashMap<String, SessionState>,
    requests: u64,
    without_pass: u64,
    in_flight_sessions: usize,
    max_in_flight: usize,
}

struct SessionState {
    first: f64,
    last: f64,
    released: bool,
    in_flight: usize,
}

impl Origin {
    /// Listens on `listen` and answers every path.
    pub(crate) async fn start(listen: SocketAddr, latency: Duration) -> anyhow::Result<Origin> {
        let shared = Arc::new(Shared {
            start: Mutex::new(Instant::now()),
            latency,
            state: Mutex::new(Ledger::default()),
        });
        let router = axum::Router::new()
            .fallback(serve)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                eprintln!("origin stopped: {error}");
            }
        });
        Ok(Origin { shared, task })
    }

    /// Times are counted from here on (the run's start).
    pub(crate) fn set_start(&self, start: Instant) {
        *self.shared.start.lock() = start;
    }

    /// Stops serving and hands over what it saw.
    pub(crate) fn finish(self) -> OriginLog {
        self.task.abort();
        let state = std::mem::take(&mut *self.shared.state.lock());
        let mut spans: Vec<Span> = state
            .sessions
            .into_values()
            .map(|session| Span {
                first: session.first,
                last: session.last,
                released: session.released,
            })
            .collect();
        spans.sort_by(|a, b| a.first.total_cmp(&b.first));
        OriginLog {
            spans,
            requests: state.requests,
            without_pass: state.without_pass,
            max_in_flight: state.max_in_flight,
        }
    }
}

async fn serve(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let now = || shared.start.lock().elapsed().as_secs_f64();
    let Some(session) = session_of(&headers) else {
        shared.state.lock().without_pass += 1;
        return (StatusCode::OK, "no pass").into_response();
    };
    {
        let at = now();
        let mut state = shared.state.lock();
        state.requests += 1;
        let entry = state
            .sessions
            .entry(session.clone())
            .or_insert(SessionState {
                first: at,
                last: at,
                released: false,
                in_flight: 0,
            });
        entry.in_flight += 1;
        if entry.in_flight == 1 {
            state.in_flight_sessions += 1;
            state.max_in_flight = state.max_in_flight.max(state.in_flight_sessions);
        }
    }
    tokio::time::sleep(shared.latency).await;
    let release = headers.contains_key(RELEASE_REQUEST);
    {
        let at = now();
        let mut state = shared.state.lock();
        let mut ended = false;
        if let Some(entry) = state.sessions.get_mut(&session) {
            entry.in_flight -= 1;
            ended = entry.in_flight == 0;
            // A released session is over: later requests (refused by the gateway, they should
            // not arrive) do not stretch it.
            if !entry.released {
                entry.last = at;
                entry.released = release;
            }
        }
        if ended {
            state.in_flight_sessions -= 1;
        }
    }
    let mut response = (StatusCode::OK, "ok").into_response();
    if release {
        response
            .headers_mut()
            .insert("anteroom-release", HeaderValue::from_static("1"));
    }
    response
}

/// The `sub` claim of the pass the request carries.
fn session_of(headers: &HeaderMap) -> Option<String> {
    let from_header = headers
        .get("x-anteroom-pass")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let from_bearer = || {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::to_owned)
    };
    let from_cookie = || {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| name.starts_with("anteroom_p_"))
            .map(|(_, token)| token.to_owned())
    };
    let token = from_header.or_else(from_bearer).or_else(from_cookie)?;
    let claims = token.split('.').nth(1)?;
    let claims = URL_SAFE_NO_PAD.decode(claims).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&claims).ok()?;
    claims.get("sub")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_comes_from_the_pass_claims() {
        let claims = URL_SAFE_NO_PAD.encode(br#"{"sub":"s-1","aud":"r"}"#);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; anteroom_p_r=h.{claims}.sig"))
                .expect("a header value"),
        );
        assert_eq!(session_of(&headers).as_deref(), Some("s-1"));
        headers.insert("x-anteroom-pass", HeaderValue::from_static("not-a-jwt"));
        assert_eq!(session_of(&headers), None);
    }
}
