//! Real nginx with `auth_request` against `/_anteroom/verify` (SPEC §7.3), configured with the
//! shipped `deploy/nginx.conf` (ports and paths changed, one process): allow, the waiting redirect, and
//! the rate limit.

use reqwest::StatusCode;
use serde_json::Value;

use super::support::Site;
use super::support::proxies::Nginx;
use super::upstream::Upstream;
use super::{Jar, client, echoed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_allows_sends_to_the_waiting_page_and_rate_limits() {
    let upstream = Upstream::start().await;
    let site = Site::new();
    site.write_config(
        "EdDSA",
        r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[room]]
id = "shop"
max_active = 1

[[rate_limit]]
name = "search"
key = ["ip"]
limit = 2
period = "1m"

[[route]]
paths = ["/search/**"]
rate_limits = ["search"]

[[route]]
paths = ["/**"]
rooms = ["shop"]
"#,
    );
    // [server] is already written by the helper: fold the trusted proxy into it.
    let path = site.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replacen(
            "[server]\n",
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            1,
        )
        .replace(
            "\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[[room]]",
            "\n[[room]]",
        );
    std::fs::write(&path, text).unwrap();
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let nginx = Nginx::start(server.port, upstream.addr.port());
    let base = format!("http://127.0.0.1:{}", nginx.port);
    let get = |path: &str, jar: &Jar| {
        let mut request = client
            .get(format!("{base}{path}"))
            .header("accept", "text/html");
        if let Some(cookies) = jar.header() {
            request = request.header("cookie", cookies);
        }
        request.send()
    };

    // Allow: the room has room, the visitor is admitted on the spot and nginx proxies.
    let mut first = Jar::default();
    let response = get("/products", &first).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "log: {}",
        nginx.error_log()
    );
    first.absorb(response.headers());
    assert!(
        first.get("anteroom_p_shop").is_some(),
        "the pass cookie came through nginx"
    );
    assert!(echoed(response).await.is_some());
    let response = get("/products", &first).await.unwrap();
    assert!(
        echoed(response).await.is_some(),
        "the pass lets the visitor through"
    );

    // Waiting: the room is full; nginx turns the 401 into a redirect to the waiting page.
    let mut second = Jar::default();
    let response = get("/products?id=3", &second).await.unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    // nginx makes the location absolute.
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.ends_with("/_anteroom/wait/shop?return=/products%3Fid%3D3"),
        "{location}"
    );
    second.absorb(response.headers());
    // The waiting page itself is served through nginx.
    let page = get("/_anteroom/wait/shop?return=/products", &second)
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("<html"));

    // Rate limited: the third search in a minute gets 429 with the rate-limit headers.
    for _ in 0..2 {
        let response = get("/search/q", &Jar::default()).await.unwrap();
        assert!(echoed(response).await.is_some());
    }
    let response = get("/search/q", &Jar::default()).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "log: {}",
        nginx.error_log()
    );
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    assert!(response.headers().contains_key("ratelimit-policy"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
}

/// The forms Envoy (`path_prefix`: the visitor's path appended, its method), Traefik and Caddy
/// (`X-Forwarded-Uri`, `X-Forwarded-Method`) send, each read with its `[verify] proxy`, and
/// the redirect answer they pass on as is. The same store and keys serve both forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reads_every_proxy_s_form_and_can_answer_with_the_redirect() {
    let site = Site::new();
    let config = |proxy: &str| {
        let path = site.write_config(
            "EdDSA",
            &format!(
                "[verify]\nproxy = \"{proxy}\"\n\n[[room]]\nid = \"shop\"\nmax_active = 1\n\n\
                 [[route]]\npaths = [\"/**\"]\nrooms = [\"shop\"]\n"
            ),
        );
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            "[server]\n",
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            1,
        );
        std::fs::write(&path, text).unwrap();
    };
    config("envoy");
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let verify = format!("{}/_anteroom/verify", server.url());

    // Envoy: POST /_anteroom/verify/cart?x=1 is the visitor's POST /cart?x=1. Admitted.
    let response = client
        .post(format!("{verify}/cart?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut holder = Jar::default();
    holder.absorb(response.headers());
    assert!(holder.get("anteroom_p_shop").is_some());
    // Envoy's form names no URI in headers: one sent anyway is not read (the visitor is sent
    // back to the appended path, not to the header's).
    let response = client
        .get(format!("{verify}/cart"))
        .header("x-original-uri", "/elsewhere")
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["x-anteroom-location"],
        "/_anteroom/wait/shop?return=/cart"
    );

    server.kill();
    config("traefik");
    let mut server = site.start();
    server.wait_ready(&client).await;

    // Traefik / Caddy: headers, and the redirect answers for navigations: held back, the
    // waiting page; admitted on the spot, back to the page with the pass.
    let response = client
        .get(format!("{verify}?wait=redirect"))
        .header("x-forwarded-uri", "/cart")
        .header("accept", "text/html")
        .header(
            "cookie",
            format!("anteroom_p_shop={}", holder.get("anteroom_p_shop").unwrap()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "a valid pass, nothing to set"
    );
    let response = client
        .get(format!("{verify}?wait=redirect"))
        .header("x-forwarded-uri", "/cart")
        .header("x-forwarded-method", "GET")
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(
        response.headers()["location"],
        "/_anteroom/wait/shop?return=/cart"
    );
    // The same from an API client: 429 waiting_room.
    let response = client
        .get(&verify)
        .header("x-anteroom-verify", "redirect")
        .header("x-forwarded-uri", "/api/cart")
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "waiting_room");

    // Without a URI anywhere: 400.
    let response = client.get(&verify).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
