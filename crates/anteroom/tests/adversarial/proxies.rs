//! The shipped proxy snippets (`deploy/`) run for real in front of anteroom (SPEC §14.1): a
//! visitor's own copies of the headers that name the request never decide, and the verify
//! endpoint is not reachable through the proxy.

use reqwest::StatusCode;
use reqwest::header::ACCEPT;

use super::Gate;
use super::support::proxies::{Caddy, Nginx};

const HTML: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";

/// A room nobody is admitted to, protecting `/shop/**`; the proxy on 127.0.0.1 trusted.
async fn shop(verify_proxy: &str) -> Gate {
    Gate::start_with(
        "trusted_proxies = [\"127.0.0.1/32\"]",
        &format!(
            "[upstream]\nurl = \"{{upstream}}\"\n\n[verify]\nproxy = \"{verify_proxy}\"\n\n\
             [[room]]\nid = \"shop\"\nmode = \"queue_all\"\nroutes = [\"/shop/**\"]\n"
        ),
    )
    .await
}

/// Behind the shipped Caddyfile a visitor asks for a protected page and adds `X-Original-URI:
/// /` (which `forward_auth` passes on with every other visitor header). The visitor is sent to
/// the waiting page, not let through to the site. Before, anteroom read `X-Original-URI` first
/// and let the visitor in without a pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_caddy_a_visitor_s_uri_header_does_not_let_them_in() {
    let gate = shop("caddy").await;
    let caddy = Caddy::start(gate.site.port, gate.upstream.addr.port());
    let base = format!("http://127.0.0.1:{}", caddy.port);
    let client = super::trust::client_from(std::net::Ipv4Addr::LOCALHOST.into());
    let answer = client
        .get(format!("{base}/shop/cart"))
        .header(ACCEPT, HTML)
        .header("x-original-uri", "/")
        .header("x-envoy-original-path", "/")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FOUND, "{}", caddy.log());
    assert_eq!(
        answer.headers()["location"],
        "/_anteroom/wait/shop?return=/shop/cart"
    );
    // An unprotected page goes through to the site.
    let open = client.get(format!("{base}/about")).send().await.unwrap();
    assert_eq!(open.status(), StatusCode::OK, "{}", caddy.log());
    // The check is Caddy's alone.
    let direct = client
        .get(format!("{base}/_anteroom/verify"))
        .header("x-forwarded-uri", "/")
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), StatusCode::NOT_FOUND);
}

/// Behind the shipped nginx.conf the visitor's copies are overwritten, and the verify endpoint
/// itself cannot be called through nginx (a visitor could otherwise ask it about any URI
/// with nginx's trusted address). Before, `/_anteroom/verify` was served through nginx's
/// `/_anteroom/` location.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_the_visitor_s_copies_are_overwritten_and_verify_is_internal() {
    let gate = shop("nginx").await;
    let nginx = Nginx::start(gate.site.port, gate.upstream.addr.port());
    let base = format!("http://127.0.0.1:{}", nginx.port);
    let client = super::trust::client_from(std::net::Ipv4Addr::LOCALHOST.into());
    let answer = client
        .get(format!("{base}/shop/cart"))
        .header(ACCEPT, HTML)
        .header("x-original-uri", "/")
        .header("x-forwarded-uri", "/")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FOUND, "{}", nginx.error_log());
    assert!(
        answer.headers()["location"]
            .to_str()
            .unwrap()
            .ends_with("/_anteroom/wait/shop?return=/shop/cart"),
        "{:?}",
        answer.headers()["location"]
    );
    for path in ["/_anteroom/verify", "/_anteroom/verify/shop/cart"] {
        let direct = client
            .get(format!("{base}{path}"))
            .header("x-original-uri", "/")
            .send()
            .await
            .unwrap();
        assert_eq!(direct.status(), StatusCode::NOT_FOUND, "{path}");
    }
}
