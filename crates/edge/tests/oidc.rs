//! The OpenID Connect adapter (SPEC §11) through the router, on a manual clock: code lifetime
//! to the millisecond, `prompt=none`, forged continuations, reuse revoking the session, and
//! tokens that are not access tokens refused by userinfo. The whole flow with an independent
//! client library is `crates/anteroom/tests/oidc.rs`.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
mod support;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::StatusCode;
use sha2::{Digest, Sha256};

use anteroom_core::SessionId;
use anteroom_core::engine::{SessionEnd, SessionState};
use anteroom_core::room::{OidcClient, RoomConfig};

use support::{Call, Harness, Reply, key_hash, room, room_id};

const CALLBACK: &str = "https://app.example/cb";
const SECRET: &str = "the-client-secret";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

fn client_room(id: &str, code_ttl: Duration) -> RoomConfig {
    RoomConfig {
        oidc: Some(OidcClient {
            client_secret: Some(key_hash(SECRET)),
            redirect_uris: vec![CALLBACK.to_owned()],
            code_ttl,
        }),
        ..room(id)
    }
}

fn authorize_uri(room: &str, extra: &str) -> String {
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()));
    format!(
        "/_anteroom/oidc/authorize?client_id={room}&redirect_uri={}&response_type=code\
         &scope=openid&state=st&nonce=nn&code_challenge={challenge}&code_challenge_method=S256{extra}",
        form(CALLBACK)
    )
}

fn form(text: &str) -> String {
    let mut query = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            query.push(char::from(byte));
        } else {
            query.push_str(&format!("%{byte:02X}"));
        }
    }
    query
}

/// The query parameter `name` of a `Location`.
fn location_parameter(reply: &Reply, name: &str) -> Option<String> {
    let location = reply.header("location")?;
    let (_, query) = location.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| value.to_owned())
    })
}

/// A visitor's way from the authorize endpoint to the client's callback, in a room that lets
/// them in at once: authorize, the waiting page (which admits and sets the pass), the
/// continuation. Returns the code and the pass cookie.
async fn code_for(harness: &Harness, room: &str) -> (String, String) {
    let authorized = harness.check(Call::get(&authorize_uri(room, ""))).await;
    assert_eq!(authorized.status, StatusCode::FOUND, "{}", authorized.body);
    let page = authorized.header("location").unwrap().to_owned();
    assert!(
        page.starts_with(&format!("/_anteroom/wait/{room}?return=")),
        "{page}"
    );
    let admitted = harness.check(Call::get(&page)).await;
    assert_eq!(admitted.status, StatusCode::SEE_OTHER, "{}", admitted.body);
    let cookie_name = format!("anteroom_p_{room}");
    let pass = admitted.set_cookie(&cookie_name).unwrap();
    let pass = pass[cookie_name.len() + 1..]
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let continuation = admitted.header("location").unwrap().to_owned();
    assert!(
        continuation.starts_with("/_anteroom/oidc/continue?request="),
        "{continuation}"
    );
    let answered = harness
        .check(Call::get(&continuation).cookie(&cookie_name, &pass))
        .await;
    assert_eq!(answered.status, StatusCode::FOUND, "{}", answered.body);
    assert!(answered.header("location").unwrap().starts_with(CALLBACK));
    assert_eq!(
        location_parameter(&answered, "state").as_deref(),
        Some("st")
    );
    (location_parameter(&answered, "code").unwrap(), pass)
}

async fn redeem(harness: &Harness, code: &str) -> Reply {
    let basic = STANDARD.encode(format!("launch:{SECRET}"));
    let body = format!(
        "grant_type=authorization_code&code={code}&redirect_uri={}&code_verifier={VERIFIER}",
        form(CALLBACK)
    );
    harness
        .check(
            Call::post("/_anteroom/oidc/token")
                .header("authorization", &format!("Basic {basic}"))
                .header("content-type", "application/x-www-form-urlencoded")
                .bytes(body.into_bytes()),
        )
        .await
}

async fn userinfo(harness: &Harness, token: &str) -> Reply {
    harness
        .check(
            Call::get("/_anteroom/oidc/userinfo")
                .header("authorization", &format!("Bearer {token}")),
        )
        .await
}

#[tokio::test]
async fn a_code_lives_exactly_its_ttl() {
    let harness = Harness::new(vec![client_room("launch", Duration::from_secs(5))]).await;
    let (code, _) = code_for(&harness, "launch").await;
    harness.advance(Duration::from_millis(5_000));
    let expired = redeem(&harness, &code).await;
    assert_eq!(expired.status, StatusCode::BAD_REQUEST);
    assert_eq!(expired.body["error"], "invalid_grant");
    assert_eq!(expired.body["error_description"], "the code has expired");

    let (code, _) = code_for(&harness, "launch").await;
    harness.advance(Duration::from_millis(4_999));
    let redeemed = redeem(&harness, &code).await;
    assert_eq!(redeemed.status, StatusCode::OK, "{}", redeemed.body);
    assert_eq!(redeemed.header("cache-control"), Some("no-store"));
    assert_eq!(redeemed.body["token_type"], "Bearer");
    assert_eq!(redeemed.body["expires_in"], 300);
}

#[tokio::test]
async fn reuse_ends_the_session_and_revokes_its_tokens() {
    let harness = Harness::new(vec![client_room("launch", Duration::from_secs(60))]).await;
    let (code, pass) = code_for(&harness, "launch").await;
    let first = redeem(&harness, &code).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let access = first.body["access_token"].as_str().unwrap().to_owned();
    let info = userinfo(&harness, &access).await;
    assert_eq!(info.status, StatusCode::OK, "{}", info.body);
    let session: SessionId = info.body["sub"].as_str().unwrap().parse().unwrap();

    // Neither the ID token nor the pass is an access token.
    let id_token = first.body["id_token"].as_str().unwrap();
    for token in [id_token, pass.as_str()] {
        let refused = userinfo(&harness, token).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert!(
            refused
                .header("www-authenticate")
                .unwrap()
                .contains("invalid_token")
        );
    }

    let again = redeem(&harness, &code).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert_eq!(again.body["error"], "invalid_grant");
    let ended = harness
        .store
        .session(&room_id("launch"), session)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        ended.state,
        SessionState::Ended {
            reason: SessionEnd::Revoked,
            ..
        }
    ));
    let revoked = userinfo(&harness, &access).await;
    assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);
    assert_eq!(revoked.body["error"], "invalid_token");
}

#[tokio::test]
async fn requests_that_cannot_be_trusted_are_refused() {
    let harness = Harness::new(vec![
        client_room("launch", Duration::from_secs(60)),
        room("plain"),
    ])
    .await;
    // A parameter given twice, or a room that is no OIDC client: an error page.
    for uri in [
        format!("{}&state=again", authorize_uri("launch", "")),
        authorize_uri("plain", ""),
    ] {
        let refused = harness.check(Call::get(&uri)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(refused.header("location"), None, "{uri}");
    }
    // prompt=none without a pass: back to the client, no queue.
    let silent = harness
        .check(Call::get(&authorize_uri("launch", "&prompt=none")))
        .await;
    assert_eq!(silent.status, StatusCode::FOUND);
    assert_eq!(
        location_parameter(&silent, "error").as_deref(),
        Some("login_required")
    );
    assert_eq!(location_parameter(&silent, "state").as_deref(), Some("st"));
    // A continuation whose request was altered is not followed.
    let authorized = harness.check(Call::get(&authorize_uri("launch", ""))).await;
    let page = authorized.header("location").unwrap();
    let sealed = page.rsplit("request%3D").next().unwrap();
    let mut forged = sealed.to_owned();
    forged.replace_range(4..5, if &sealed[4..5] == "A" { "B" } else { "A" });
    let refused = harness
        .check(Call::get(&format!(
            "/_anteroom/oidc/continue?request={forged}"
        )))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.header("location"), None);
    // Nothing was joined by the refused requests.
    assert_eq!(harness.counters("plain").await.waiting, 0);
}

/// `launch` is given `requires = ["site"]` at run time, after a visitor got its pass. Must
/// hold: the authorize endpoint gives no code on the `launch` pass alone (`prompt=none`:
/// `login_required`; otherwise `site`'s page, which returns to `launch`'s), and gives one
/// once the visitor holds a pass of `site` too.
#[tokio::test]
async fn a_code_needs_the_passes_its_room_requires() {
    let ttl = Duration::from_secs(60);
    let harness = Harness::new(vec![client_room("launch", ttl), room("site")]).await;
    let (_, pass) = code_for(&harness, "launch").await;
    let required = RoomConfig {
        requires: vec![room_id("site")],
        ..client_room("launch", ttl)
    };
    harness.store.put_room(required).await.unwrap();
    harness.advance(Duration::from_secs(2));
    let ask = |cookies: String| {
        Call::get(&authorize_uri("launch", "&prompt=none")).header("cookie", &cookies)
    };
    let asked = harness
        .check(ask(format!("anteroom_p_launch={pass}")))
        .await;
    assert_eq!(asked.status, StatusCode::FOUND, "{}", asked.body);
    assert_eq!(
        location_parameter(&asked, "error").as_deref(),
        Some("login_required"),
        "{:?}",
        asked.header("location")
    );
    assert_eq!(location_parameter(&asked, "code"), None);
    // Without `prompt=none`, to `site`'s page first, which returns to `launch`'s (that page
    // alone would resume the admitted ticket and send the visitor straight back here).
    let asked = harness
        .check(
            Call::get(&authorize_uri("launch", ""))
                .header("cookie", &format!("anteroom_p_launch={pass}")),
        )
        .await;
    assert_eq!(asked.status, StatusCode::FOUND, "{}", asked.body);
    let location = asked.header("location").unwrap().to_owned();
    assert!(
        location.starts_with("/_anteroom/wait/site?return=/_anteroom/wait/launch%3Freturn%3D"),
        "{location}"
    );
    let site_page = harness.check(Call::get(&location)).await;
    assert_eq!(
        site_page.status,
        StatusCode::SEE_OTHER,
        "{}",
        site_page.body
    );
    assert!(
        site_page
            .header("location")
            .unwrap()
            .starts_with("/_anteroom/wait/launch?return="),
        "{:?}",
        site_page.header("location")
    );

    let admitted = harness.check(Call::get("/_anteroom/wait/site")).await;
    let site_pass = admitted.set_cookie("anteroom_p_site").unwrap();
    let site_pass = site_pass["anteroom_p_site=".len()..]
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let asked = harness
        .check(ask(format!(
            "anteroom_p_launch={pass}; anteroom_p_site={site_pass}"
        )))
        .await;
    assert!(
        location_parameter(&asked, "code").is_some(),
        "{:?}",
        asked.header("location")
    );
}
