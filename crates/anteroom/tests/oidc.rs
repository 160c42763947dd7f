//! The OpenID Connect adapter (SPEC §11) driven end to end by an independent OIDC client
//! library, Python's `authlib` (`oidc_client.py`), against the real `anteroom` binary:
//!
//! - one node on the embedded store: discovery, the code flow for a visitor let in at once
//!   and for one who must wait (max_active = 1, sent back only after the first one leaves),
//!   ID tokens verified with the JWKS, userinfo, and the refusals: unregistered redirect URI
//!   (an error page, no redirect), missing and incorrect PKCE verifier, reused code (which
//!   revokes the first tokens), wrong client secret, expired code, tampered ID token;
//! - two nodes on one `redis-server`: the code issued by one node is redeemed on the other,
//!   and reusing it on the first fails and revokes the tokens.
//!
//! The test creates a Python virtual environment with `authlib` and `requests` under the
//! cargo target directory the first time it runs (pip needs the package index then).
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anteroom_test_support::redis::RedisServer;
use support::{SERVICE_KEY, Server, Site, client, key_hash, toml_string};

const CALLBACK: &str = "https://app.example/oauth2/callback";

/// The rooms both tests use: `portal` (confidential, one visitor at a time), `spa` (a public
/// client: PKCE required) and `brief` (confidential, codes live one second).
fn rooms() -> String {
    format!(
        "[[room]]\n\
         id = \"portal\"\n\
         max_active = 1\n\
         [room.oidc]\n\
         client_secret = \"{portal}\"\n\
         redirect_uris = [\"{CALLBACK}\"]\n\
         \n\
         [[room]]\n\
         id = \"spa\"\n\
         [room.oidc]\n\
         redirect_uris = [\"{CALLBACK}\"]\n\
         \n\
         [[room]]\n\
         id = \"brief\"\n\
         [room.oidc]\n\
         client_secret = \"{brief}\"\n\
         redirect_uris = [\"{CALLBACK}\"]\n\
         code_ttl = \"1s\"\n",
        portal = key_hash("portal-secret"),
        brief = key_hash("brief-secret"),
    )
}

/// The virtual environment's python, created (with authlib and requests) when missing.
fn python() -> PathBuf {
    static VENV: Mutex<()> = Mutex::new(());
    let _guard = VENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oidc-venv");
    let python = venv.join("bin").join("python");
    let ready = || {
        python.exists()
            && Command::new(&python)
                .args(["-c", "import authlib, requests"])
                .status()
                .is_ok_and(|status| status.success())
    };
    if !ready() {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(status.success(), "python3 -m venv failed");
        let status = Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "authlib", "requests"])
            .status()
            .expect("run pip");
        assert!(status.success(), "pip install authlib requests failed");
    }
    python
}

/// Runs the client script: its result line, or its output when a check failed.
fn run_client(args: &[&str]) -> Result<serde_json::Value, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc_client.py");
    let output = Command::new(python())
        .arg(script)
        .args(args)
        .env("NO_PROXY", "*")
        .output()
        .expect("run the OIDC client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the OIDC client failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
        ));
    }
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).map_err(|_| format!("no result line in {stdout:?}"))
}

/// Runs the client script off the async runtime; panics with the servers' logs on failure.
async fn drive(args: Vec<String>, servers: &[&Server]) -> serde_json::Value {
    let result = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_client(&args)
    })
    .await
    .unwrap();
    result.unwrap_or_else(|failure| {
        let logs: Vec<String> = servers.iter().map(|server| server.log()).collect();
        panic!("{failure}\nserver logs:\n{}", logs.join("\n---\n"))
    })
}

#[tokio::test]
async fn authlib_drives_the_code_flow_through_the_queue() {
    let site = Site::new();
    site.write_config("EdDSA", &rooms());
    let mut server = site.start();
    server.wait_ready(&client()).await;
    let args = vec!["single".to_owned(), server.url(), SERVICE_KEY.to_owned()];
    let result = drive(args, &[&server]).await;
    // The second visitor was let in once the first left: within the admitter's second.
    let waited = result["wait_after_leave_ms"].as_u64().unwrap();
    assert!(waited < 5_000, "{result}; log:\n{}", server.log());
}

/// Writes a node's config: the shared redis store and key directory, one issuer.
fn write_node_config(site: &Site, redis_url: &str, keys_dir: &Path) {
    let text = format!(
        "[server]\n\
         listen = \"127.0.0.1:{port}\"\n\
         admin_listen = \"127.0.0.1:0\"\n\
         public_url = \"{url}\"\n\
         issuer = \"http://anteroom.test\"\n\
         \n\
         [store]\n\
         backend = \"redis\"\n\
         url = \"{redis_url}\"\n\
         \n\
         [keys]\n\
         dir = {keys}\n\
         algorithm = \"ES256\"\n\
         \n\
         {rooms}\n",
        port = site.port,
        url = site.public_url(),
        keys = toml_string(keys_dir),
        rooms = rooms(),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

#[tokio::test]
async fn a_code_is_redeemed_once_across_nodes() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let sites = [Site::new(), Site::new()];
    for site in &sites {
        write_node_config(site, &redis.url(), keys.path());
    }
    let http = client();
    // The first node creates the keys; the second loads them.
    let mut first = sites[0].start();
    first.wait_ready(&http).await;
    let mut second = sites[1].start();
    second.wait_ready(&http).await;
    let args = vec!["multinode".to_owned(), first.url(), second.url()];
    let result = drive(args, &[&first, &second]).await;
    assert!(result["sub"].is_string(), "{result}");
    assert!(
        !redis
            .cli(&["--scan", "--pattern", "anteroom:oidc-code:*"])
            .trim()
            .is_empty(),
        "the redemption is recorded in redis; logs:\n{}\n{}",
        first.log(),
        second.log()
    );
}
