//! `anteroom demo`: a waiting room and a demo site on this machine, with nothing to install.
//!
//! The room is small on purpose (3 visitors at a time, 12 admissions a minute) so a newcomer
//! sees the queue form and move. The demo site checks the pass offline, with the signing keys,
//! as an origin verifying anteroom's passes would.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use clap::Args;

use anteroom_api::cookies::{pass_cookie_name, read_cookie};
use anteroom_core::Clock;
use anteroom_core::config::{KeyHash, parse_config};
use anteroom_token::PassExpectations;

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
    /// Where the demo listens: the waiting room and the demo site behind it.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the admin API, the control panel and the metrics listen.
    #[arg(long, default_value = "127.0.0.1:9090")]
    admin_listen: SocketAddr,
    /// Simulated visitors who join in the first seconds and are let in like everybody else.
    #[arg(long, default_value_t = 0)]
    crowd: u32,
}

/// Starts the room and the demo site; runs until Ctrl-C.
pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let public_url = format!("http://{}", args.listen);
    // A fresh admin key each run, printed once: only its hash goes into the config.
    let admin_key = random_admin_key();
    let source = demo_config(&args, &public_url, &admin_key);
    let config =
        parse_config(&source, &[]).map_err(|errors| anyhow::anyhow!("demo config: {errors}"))?;
    let runtime = serve::prepare(&config).await?;
    let listeners = serve::bind_public(args.listen, config.server.workers)
        .with_context(|| format!("is another demo running on {}?", args.listen))?;
    let admin = crate::admin::start(
        &runtime,
        &config,
        args.admin_listen,
        None,
        crate::shutdown_signal(),
    )
    .await?;
    let site = axum::Router::new()
        .route("/", axum::routing::get(site_page))
        .with_state(OriginState {
            app: runtime.state.clone(),
            issuer: config.server.issuer.clone(),
            store: runtime.store.clone(),
        });
    let router = anteroom_api::public_router_with_site(runtime.state.clone(), site);
    if args.crowd > 0 {
        tokio::spawn(simulate_crowd(runtime.store.clone(), args.crowd));
    }
    print_welcome(&public_url, args.crowd);
    print_admin(admin.address, &admin_key);
    let limits = serve::server_limits(&config);
    serve::run_until_shutdown(
        runtime,
        listeners,
        move || anteroom_edge::PublicApp::from(router.clone()).with_limits(limits.clone()),
        None,
        crate::shutdown_signal(),
    )
    .await
}

/// The demo's config file: its listeners, the admin key's hash, a store and keys under
/// `--data-dir`, and the small demo room.
fn demo_config(args: &DemoArgs, public_url: &str, admin_key: &str) -> String {
    format!(
        r#"
[server]
listen = "{listen}"
admin_listen = "{admin_listen}"
public_url = "{public_url}"

[auth]
admin_keys = ["{admin_key_hash}"]

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
        admin_listen = args.admin_listen,
        admin_key_hash = key_hash(admin_key),
        store = toml_path(&args.data_dir.join("anteroom.redb")),
        keys = toml_path(&args.data_dir.join("keys")),
    )
}

fn toml_path(path: &std::path::Path) -> String {
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[allow(clippy::print_stdout)]
fn print_welcome(public_url: &str, crowd: u32) {
    let room = DEMO_ROOM;
    let crowd_line = if crowd > 0 {
        format!("{crowd} simulated visitors are joining now, so you will wait behind them.\n")
    } else {
        "Add --crowd 40 to have simulated visitors queue in front of you.\n".to_owned()
    };
    println!(
        r#"
anteroom demo is running (Ctrl-C to stop).

  open this in a browser   {public_url}/
  the waiting page         {public_url}/_anteroom/wait/{room}?return=/
  room figures (JSON)      {public_url}/_anteroom/v1/rooms/{room}
  public keys              {public_url}/.well-known/jwks.json

The demo site at / lets in only visitors holding a pass; everybody else is sent to the waiting
page. The room admits 3 visitors at a time and 12 a minute.
{crowd_line}
From a shell (each cookie jar is one visitor):
  curl -s -c me -X POST {public_url}/_anteroom/v1/rooms/{room}/join
  curl -s -b me {public_url}/_anteroom/v1/rooms/{room}/status
"#
    );
}

/// 32 random bytes as hex.
fn random_admin_key() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `sha256:<hex>` of a key, as `[auth]` holds it.
fn key_hash(key: &str) -> String {
    use sha2::Digest;
    KeyHash(sha2::Sha256::digest(key.as_bytes()).into()).to_string()
}

#[allow(clippy::print_stdout)]
fn print_admin(address: Option<SocketAddr>, admin_key: &str) {
    let Some(address) = address else {
        println!("The admin listener could not start (see the log above).\n");
        return;
    };
    println!(
        r#"Operators:
  control panel            http://{address}/
  admin key (this run)     {admin_key}
  admin API                curl -s -H "Authorization: Bearer {admin_key}" http://{address}/admin/v1/rooms
  metrics                  http://{address}/metrics
"#
    );
}

/// Simulated visitors: they join over a few seconds, keep their place by polling, and once let
/// in stay a little while and then leave, so the line moves as it would with real people.
async fn simulate_crowd(store: std::sync::Arc<dyn anteroom_store::RoomStore>, visitors: u32) {
    let Ok(room) = anteroom_core::RoomId::new(DEMO_ROOM) else {
        return;
    };
    for visitor in 0..visitors {
        let store = store.clone();
        let room = room.clone();
        tokio::spawn(async move {
            let joined = store
                .join(&room, anteroom_core::engine::JoinRequest::default())
                .await;
            let Ok(entry) = joined else { return };
            let reference = match &entry {
                anteroom_core::engine::Entry::Waiting(view) => anteroom_core::engine::TicketRef {
                    id: view.ticket,
                    generation: view.generation,
                },
                anteroom_core::engine::Entry::Admitted(view) => anteroom_core::engine::TicketRef {
                    id: view.ticket,
                    generation: view.session.generation,
                },
            };
            loop {
                match store.status(&room, reference).await {
                    Ok(anteroom_core::engine::Entry::Waiting(_)) => {
                        tokio::time::sleep(Duration::from_millis(2_000 + jitter_ms(3_000))).await;
                    }
                    Ok(anteroom_core::engine::Entry::Admitted(view)) => {
                        tokio::time::sleep(Duration::from_millis(8_000 + jitter_ms(20_000))).await;
                        let _ = store
                            .end_session(
                                &room,
                                view.session.id,
                                anteroom_core::engine::SessionEnd::Completed,
                            )
                            .await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(100 + u64::from(visitor % 3) * 50)).await;
    }
}

fn jitter_ms(max: u64) -> u64 {
    rand::Rng::gen_range(&mut rand::thread_rng(), 0..max)
}

#[derive(Clone)]
struct OriginState {
    /// The node's state: its keys change when an operator rotates them.
    app: anteroom_api::AppState,
    issuer: String,
    store: std::sync::Arc<dyn anteroom_store::RoomStore>,
}

/// The demo site's one page: open to pass holders; everybody else is sent to the waiting
/// page, as the gateway will do for protected routes.
async fn site_page(State(origin): State<OriginState>, headers: HeaderMap) -> Response {
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
        return to_waiting_room();
    };
    let Ok(room) = anteroom_core::RoomId::new(DEMO_ROOM) else {
        return to_waiting_room();
    };
    let generation = match origin.store.snapshot(&room).await {
        Ok(snapshot) => snapshot.generation,
        Err(_) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Html(page("Unavailable", "The store cannot be reached.")),
            )
                .into_response();
        }
    };
    let expect = PassExpectations {
        room: DEMO_ROOM,
        issuer: &origin.issuer,
        generation,
    };
    match origin.app.keys().verify_pass(&pass, &expect, SystemClock.now().as_secs()) {
        Ok(claims) if session_is_active(&origin, &room, &claims.sub).await => Html(page(
            "You are in",
            &format!(
                "Welcome to the demo site. You held number {} in line; your pass (session <code>{}</code>) \
                 was verified here offline with the waiting room's public key.",
                claims.pos, claims.sub
            ),
        ))
        .into_response(),
        _ => to_waiting_room(),
    }
}

fn to_waiting_room() -> Response {
    Redirect::to(&format!("/_anteroom/wait/{DEMO_ROOM}?return=/")).into_response()
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
