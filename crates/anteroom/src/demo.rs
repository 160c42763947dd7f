//! `anteroom demo`: a waiting room and a demo site on this machine, with nothing to install.
//!
//! The room is small on purpose (3 visitors at a time, 12 admissions a minute) so a newcomer
//! sees the queue form and move. The demo site checks the pass offline, with the signing keys,
//! as an origin verifying anteroom's passes would.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse};
use clap::Args;

use anteroom_core::Clock;
use anteroom_core::config::parse_config;
use anteroom_http::{pass_cookie_name, read_cookie};
use anteroom_token::{KeySet, PassExpectations};

use crate::clock::SystemClock;
use crate::serve;

/// The demo's room.
const DEMO_ROOM: &str = "demo";

/// Options of `anteroom demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Where the demo keeps its store and keys.
    #[arg(long, default_value = "anteroom-demo")]
    data_dir: PathBuf,
    /// The waiting room's public listener.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The demo site's listener.
    #[arg(long, default_value = "127.0.0.1:3000")]
    origin_listen: SocketAddr,
}

/// Starts the room and the demo site; runs until Ctrl-C.
pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let public_url = format!("http://{}", args.listen);
    let source = format!(
        r#"
[server]
listen = "{listen}"
public_url = "{public_url}"

[store]
backend = "embedded"
path = "{store}"

[keys]
dir = "{keys}"

[[room]]
id = "{DEMO_ROOM}"
max_active = 3
admit_per_minute = 12
admit_burst = 2
session_ttl = "2m"
claim_ttl = "1m"
ticket_idle_ttl = "2m"
"#,
        listen = args.listen,
        store = toml_path(&args.data_dir.join("anteroom.redb")),
        keys = toml_path(&args.data_dir.join("keys")),
    );
    let config =
        parse_config(&source, &[]).map_err(|errors| anyhow::anyhow!("demo config: {errors}"))?;
    let runtime = serve::prepare(&config).await?;
    let keys = runtime.keys.clone();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {} (is another demo running?)", args.listen))?;
    let origin_listener = tokio::net::TcpListener::bind(args.origin_listen)
        .await
        .with_context(|| format!("binding {} for the demo site", args.origin_listen))?;
    let origin = axum::Router::new()
        .route("/", axum::routing::get(origin_page))
        .with_state(OriginState {
            keys,
            issuer: config.server.issuer.clone(),
            store: runtime.store.clone(),
        });
    tokio::spawn(async move {
        if let Err(error) = axum::serve(origin_listener, origin).await {
            tracing::error!(%error, "demo site stopped");
        }
    });
    print_welcome(&public_url, args.origin_listen);
    serve::run_until_shutdown(runtime, listener, crate::shutdown_signal()).await
}

fn toml_path(path: &std::path::Path) -> String {
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[allow(clippy::print_stdout)]
fn print_welcome(public_url: &str, origin: SocketAddr) {
    let room = DEMO_ROOM;
    println!(
        r#"
anteroom demo is running (Ctrl-C to stop).

  waiting room API   {public_url}/_anteroom/v1/rooms/{room}
  public keys        {public_url}/.well-known/jwks.json
  demo site          http://{origin}/   (lets in only visitors with a valid pass)

The room admits 3 visitors at a time and 12 a minute, so a small crowd queues.
Try it from a shell (each cookie jar is one visitor):

  curl -s -c v1 -X POST {public_url}/_anteroom/v1/rooms/{room}/join     # visitor 1: admitted at once
  for v in v2 v3 v4 v5; do curl -s -c $v -X POST {public_url}/_anteroom/v1/rooms/{room}/join; echo; done
  curl -s -b v5 {public_url}/_anteroom/v1/rooms/{room}/status            # place in line, ahead, ETA
  curl -s -b v1 http://{origin}/                                           # the demo site lets visitor 1 in
  curl -s -X DELETE -b v1 {public_url}/_anteroom/v1/rooms/{room}/ticket  # leave

Poll the status again and watch `ahead` fall as visitors are admitted.
"#
    );
}

#[derive(Clone)]
struct OriginState {
    keys: KeySet,
    issuer: String,
    store: std::sync::Arc<dyn anteroom_store::RoomStore>,
}

/// The demo site's one page: open to pass holders, closed to everyone else.
async fn origin_page(State(origin): State<OriginState>, headers: HeaderMap) -> impl IntoResponse {
    let pass = read_cookie(&headers, &pass_cookie_name(DEMO_ROOM))
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .map(str::to_owned)
        });
    let Some(pass) = pass else {
        return (
            StatusCode::FORBIDDEN,
            Html(page(
                "No pass yet",
                "Join the queue first: see the commands printed by <code>anteroom demo</code>.",
            )),
        );
    };
    let Ok(room) = anteroom_core::RoomId::new(DEMO_ROOM) else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Html(page("Demo broken", "invalid room id")),
        );
    };
    let generation = match origin.store.snapshot(&room).await {
        Ok(snapshot) => snapshot.generation,
        Err(_) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Html(page("Unavailable", "the store cannot be reached")),
            );
        }
    };
    let expect = PassExpectations {
        room: DEMO_ROOM,
        issuer: &origin.issuer,
        generation,
    };
    match origin
        .keys
        .verify_pass(&pass, &expect, SystemClock.now().as_secs())
    {
        Ok(claims) if session_is_active(&origin, &room, &claims.sub).await => (
            StatusCode::OK,
            Html(page(
                "You are in",
                &format!(
                    "Welcome to the demo site. Your pass is for position {} (session {}).",
                    claims.pos, claims.sub
                ),
            )),
        ),
        Ok(_) => (
            StatusCode::FORBIDDEN,
            Html(page("Pass refused", "this session has ended")),
        ),
        Err(error) => (
            StatusCode::FORBIDDEN,
            Html(page("Pass refused", &format!("{error}"))),
        ),
    }
}

/// Whether the pass's session still holds its slot (a completed or revoked one does not).
async fn session_is_active(
    origin: &OriginState,
    room: &anteroom_core::RoomId,
    session: &str,
) -> bool {
    let Ok(session) = session.parse() else {
        return false;
    };
    matches!(
        origin.store.session(room, session).await,
        Ok(Some(found)) if found.state == anteroom_core::engine::SessionState::Active
    )
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title>\
         <body style=\"font-family:system-ui;max-width:40rem;margin:4rem auto\"><h1>{title}</h1><p>{body}</p></body></html>\n"
    )
}
