//! Trust boundaries (SPEC §14.1): headers that make a claim about the visitor are believed
//! only from `[server] trusted_proxies`. The tests tell a trusted proxy from a visitor by the
//! loopback address they connect from: the proxy from 127.0.0.2, the visitor from 127.0.0.1.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::Gate;

/// The address a test's "trusted proxy" connects from.
const PROXY_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A client connecting from `address`.
pub(crate) fn client_from(address: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(address)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Trusts the proxy at 127.0.0.2.
pub(crate) const TRUST_PROXY: &str = "trusted_proxies = [\"127.0.0.2/32\"]";

/// A room nobody is admitted to, protecting `/shop/**`, with the proxy at 127.0.0.2 trusted
/// and `verify` as the `[verify]` section.
async fn shop(verify: &str) -> Gate {
    Gate::start_with(
        TRUST_PROXY,
        &format!(
            "[upstream]\nurl = \"{{upstream}}\"\n\n{verify}\n\n\
             [[room]]\nid = \"shop\"\nmode = \"queue_all\"\nroutes = [\"/shop/**\"]\n"
        ),
    )
    .await
}

/// `GET /_anteroom/verify` from `client` with `headers`.
async fn verify(
    client: &reqwest::Client,
    gate: &Gate,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client.get(gate.url("/_anteroom/verify"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// A visitor calls `/_anteroom/verify` directly (or through a proxy that is not listed) and
/// names any URI they like: the endpoint answers nobody but a trusted proxy (403
/// `untrusted_proxy`). Before, it answered anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verify_endpoint_answers_only_trusted_proxies() {
    let gate = shop("").await;
    let visitor = client_from(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let answer = verify(&visitor, &gate, &[("x-original-uri", "/shop/cart")]).await;
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(problem["code"], "untrusted_proxy");

    // The listed proxy is answered: the visitor it names waits.
    let proxy = client_from(PROXY_ADDRESS);
    let answer = verify(&proxy, &gate, &[("x-original-uri", "/shop/cart")]).await;
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
}

/// Behind Caddy or Traefik, which pass the visitor's own headers on and set only
/// `X-Forwarded-Uri`, a visitor adds `X-Original-URI: /` to a protected request. The endpoint
/// reads the configured proxy's header alone, so the visitor still waits. Before, the first
/// header present (`X-Original-URI`) won and the visitor was let through without a pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitor_cannot_name_another_uri_through_a_header_their_proxy_passes_on() {
    let gate = shop("[verify]\nproxy = \"caddy\"").await;
    let proxy = client_from(PROXY_ADDRESS);
    let answer = verify(
        &proxy,
        &gate,
        &[
            ("x-forwarded-uri", "/shop/cart"),
            ("x-forwarded-method", "GET"),
            ("x-original-uri", "/"),
            ("x-envoy-original-path", "/"),
        ],
    )
    .await;
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    assert!(
        answer.headers()["x-anteroom-location"]
            .to_str()
            .unwrap()
            .starts_with("/_anteroom/wait/shop?return=/shop/cart")
    );

    // An unprotected path named the configured way is allowed, so the header is what counts.
    let allowed = verify(&proxy, &gate, &[("x-forwarded-uri", "/about")]).await;
    assert_eq!(allowed.status(), StatusCode::OK);
}

/// A client floods a path the site lets through without a room (`bypass = true`) but a
/// rate-limit rule covers. Must hold: the verify endpoint limits it as the gateway does (the
/// third request in the minute is refused 429 in both). Before, verify answered 200 to every
/// request on a bypass route before any rate limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypass_routes_are_rate_limited_at_verify_as_at_the_gateway() {
    let gate = Gate::start_with(
        TRUST_PROXY,
        "[upstream]\nurl = \"{upstream}\"\n\n\
         [[rate_limit]]\nname = \"health\"\nmatch = { paths = [\"/health\"] }\nkey = [\"ip\"]\n\
         algorithm = \"fixed_window\"\nlimit = 2\nperiod = \"1m\"\n\n\
         [[route]]\npaths = [\"/health\"]\nbypass = true\n",
    )
    .await;
    let proxy = client_from(PROXY_ADDRESS);
    let mut verified = Vec::new();
    for _ in 0..3 {
        let answer = verify(&proxy, &gate, &[("x-original-uri", "/health")]).await;
        verified.push(answer.status());
    }
    assert_eq!(
        verified,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let visitor = client_from(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let mut proxied = Vec::new();
    for _ in 0..3 {
        let answer = visitor.get(gate.url("/health")).send().await.unwrap();
        proxied.push(answer.status());
    }
    assert_eq!(
        proxied,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

/// In a room with `identity = "header:X-User-Id"`, a visitor sends `X-User-Id: alice` to take
/// over alice's place (and so her pass). The header is believed only from the trusted proxy:
/// the visitor is refused (403 `untrusted_proxy`) and alice's place is untouched. Before, the
/// visitor resumed alice's ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_header_is_believed_only_from_a_trusted_proxy() {
    let gate = Gate::start_with(
        TRUST_PROXY,
        "[[room]]\nid = \"sale\"\nmode = \"queue_all\"\nidentity = \"header:X-User-Id\"\n",
    )
    .await;
    let join = gate.url("/_anteroom/v1/rooms/sale/join");
    let proxy = client_from(PROXY_ADDRESS);
    let alice: Value = proxy
        .post(&join)
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(alice["position"], 1, "{alice}");

    let visitor = client_from(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let refused = visitor
        .post(&join)
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["code"], "untrusted_proxy");
    assert!(
        !problem
            .to_string()
            .contains(alice["ticket"].as_str().unwrap()),
        "alice's ticket must not leak: {problem}"
    );

    // Through the proxy alice resumes her own place; nobody else joined.
    let again: Value = proxy
        .post(&join)
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["position"], 1);
    assert_eq!(again["waiting"], 1, "{again}");
}
