//! Every way into the line is guarded alike (SPEC §14.2): the join API, the waiting page, the
//! gateway's protected navigations (and the OIDC authorize endpoint, which sends visitors to
//! the page) pass the same per-IP join limit, proof of work, `requires` and code limits.

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, COOKIE, LOCATION};
use serde_json::{Value, json};

use super::Gate;
use super::support::key_hash;

const HTML: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";

/// `[server]` line that turns the built-in per-IP join limit (10 a minute) back on: the test
/// config switches it off.
const JOIN_LIMIT_ON: &str = "join_rate_limit = true";

impl Gate {
    /// The room's public summary.
    async fn summary(&self, room: &str) -> Value {
        self.client
            .get(self.url(&format!("/_anteroom/v1/rooms/{room}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// GETs `path` as a browser without cookies would, `times` times: the statuses.
    async fn cookieless_navigations(&self, path: &str, times: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..times {
            let answer = self
                .client
                .get(self.url(path))
                .header(ACCEPT, HTML)
                .send()
                .await
                .unwrap();
            statuses.push(answer.status().as_u16());
        }
        statuses
    }
}

/// A client that keeps no cookies loads the waiting page again and again: each load used to
/// make a ticket (later admitted as a no-show holding a slot for `claim_ttl`). The page's join
/// now spends the same per-IP join limit as the API: ten, then 429, and the line grows by ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookieless_page_loads_spend_the_join_limit() {
    let gate = Gate::start_with(
        JOIN_LIMIT_ON,
        "[[room]]\nid = \"launch\"\nmode = \"queue_all\"\n",
    )
    .await;
    let statuses = gate
        .cookieless_navigations("/_anteroom/wait/launch", 13)
        .await;
    assert_eq!(statuses[..10], [200; 10], "{statuses:?}");
    assert_eq!(statuses[10..], [429; 3], "{statuses:?}");
    assert_eq!(gate.summary("launch").await["waiting"], 10);
}

/// The same flood as navigations to a protected path at the gateway, whose inline waiting page
/// joins the visitor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookieless_protected_navigations_spend_the_join_limit() {
    let gate = Gate::start_with(
        JOIN_LIMIT_ON,
        "[upstream]\nurl = \"{upstream}\"\n\n\
         [[room]]\nid = \"launch\"\nmode = \"queue_all\"\nroutes = [\"/shop/**\"]\n",
    )
    .await;
    let statuses = gate.cookieless_navigations("/shop/item", 12).await;
    assert_eq!(statuses[..10], [200; 10], "{statuses:?}");
    assert_eq!(statuses[10..], [429; 2], "{statuses:?}");
    assert_eq!(gate.summary("launch").await["waiting"], 10);
}

/// One proof of work buys one ticket. The visitor solves a challenge, joins, leaves, and
/// joins again presenting the left ticket (which still verifies) instead of a new solution:
/// refused with `challenge_required`, and no ticket is made, through the API or the page.
/// Before, any ticket token that verified skipped the challenge and the store made a new
/// ticket: one solution, unlimited tickets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_ticket_does_not_stand_in_for_a_proof_of_work() {
    let gate = Gate::start(
        "[[room]]\nid = \"drop\"\nmode = \"queue_all\"\n\
         challenge = { kind = \"pow\", difficulty = 6 }\n",
    )
    .await;
    let challenge: Value = gate
        .client
        .post(gate.url("/_anteroom/v1/rooms/drop/challenge"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = challenge["challenge"].as_str().unwrap();
    let counter = anteroom_core::challenge::solve(token, 6);
    let join = gate.url("/_anteroom/v1/rooms/drop/join");
    let joined: Value = gate
        .client
        .post(&join)
        .json(&json!({"challenge": {"token": token, "counter": counter}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"].as_str().unwrap().to_owned();
    let left = gate
        .client
        .delete(gate.url("/_anteroom/v1/rooms/drop/ticket"))
        .header("x-anteroom-ticket", &ticket)
        .send()
        .await
        .unwrap();
    assert_eq!(left.status(), StatusCode::NO_CONTENT);

    let again = gate
        .client
        .post(&join)
        .header("x-anteroom-ticket", &ticket)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    let problem: Value = again.json().await.unwrap();
    assert_eq!(problem["code"], "challenge_required");

    let page = gate
        .client
        .get(gate.url("/_anteroom/wait/drop"))
        .header(ACCEPT, HTML)
        .header(COOKIE, format!("anteroom_t_drop={ticket}"))
        .send()
        .await
        .unwrap();
    assert!(page.headers().get("set-cookie").is_none(), "no new ticket");
    let summary = gate.summary("drop").await;
    assert_eq!(summary["waiting"], 0, "{summary}");
}

/// Tier 2 needs tier 1's pass (seed 000's two tiers): joining tier 2 without it is refused
/// (403 `pass_required`) and its page sends the visitor to tier 1's page, which comes back
/// to tier 2 once admitted. Before, tier 2 could be joined by anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tier_two_cannot_be_joined_without_a_tier_one_pass() {
    let gate = Gate::start(
        "[[room]]\nid = \"tier1\"\nmax_active = 10\n\n\
         [[room]]\nid = \"tier2\"\nmode = \"queue_all\"\nrequires = [\"tier1\"]\n",
    )
    .await;
    let join_tier2 = gate.url("/_anteroom/v1/rooms/tier2/join");
    let refused = gate.client.post(&join_tier2).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["code"], "pass_required");

    let page = super::trust::client_from(std::net::Ipv4Addr::LOCALHOST.into())
        .get(gate.url("/_anteroom/wait/tier2?return=/checkout"))
        .header(ACCEPT, HTML)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        page.headers()[LOCATION],
        "/_anteroom/wait/tier1?return=/_anteroom/wait/tier2%3Freturn%3D/checkout"
    );
    assert_eq!(gate.summary("tier2").await["waiting"], 0);

    let tier1: Value = gate
        .client
        .post(gate.url("/_anteroom/v1/rooms/tier1/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tier1["state"], "admitted", "{tier1}");
    let pass = tier1["pass"].as_str().unwrap();
    let joined = gate
        .client
        .post(&join_tier2)
        .header(COOKIE, format!("anteroom_p_tier1={pass}"))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status(), StatusCode::OK);
    assert_eq!(gate.summary("tier2").await["waiting"], 1);
}

/// A visitor opens tier 2's page without tier 1's pass: they are sent to tier 1's page, which
/// says a second line follows, and once tier 1 lets them in they come back to tier 2 and then
/// to where they were going. Every hop is a same-site path; a return that leads off-site is
/// refused at the first page, before any place is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_two_page_goes_through_tier_one_and_back() {
    let gate = Gate::start(
        "[[room]]\nid = \"tier1\"\nmax_active = 10\n\n\
         [[room]]\nid = \"tier2\"\nmax_active = 10\nrequires = [\"tier1\"]\n\n\
         [[room]]\nid = \"hold\"\nmode = \"queue_all\"\n\n\
         [[room]]\nid = \"after-hold\"\nrequires = [\"hold\"]\n",
    )
    .await;
    let browser = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut cookies: Vec<String> = Vec::new();
    let mut location = "/_anteroom/wait/tier2?return=/checkout".to_owned();
    let mut hops = Vec::new();
    while location.starts_with("/_anteroom/wait/") {
        let mut request = browser.get(gate.url(&location)).header(ACCEPT, HTML);
        if !cookies.is_empty() {
            request = request.header(COOKIE, cookies.join("; "));
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{location}");
        for set in answer.headers().get_all("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
            cookies.push(pair);
        }
        location = answer.headers()[LOCATION].to_str().unwrap().to_owned();
        assert!(
            location.starts_with('/') && !location.starts_with("//"),
            "{location}"
        );
        hops.push(location.clone());
        assert!(hops.len() <= 4, "{hops:?}");
    }
    assert_eq!(
        hops,
        [
            "/_anteroom/wait/tier1?return=/_anteroom/wait/tier2%3Freturn%3D/checkout",
            "/_anteroom/wait/tier2?return=/checkout",
            "/checkout",
        ]
    );
    assert!(
        cookies
            .iter()
            .any(|pair| pair.starts_with("anteroom_p_tier1="))
    );
    assert!(
        cookies
            .iter()
            .any(|pair| pair.starts_with("anteroom_p_tier2="))
    );

    // While tier 1 holds the visitor, its page says that tier 2's line comes next.
    let sent = browser
        .get(gate.url("/_anteroom/wait/after-hold?return=/x"))
        .header(ACCEPT, HTML)
        .send()
        .await
        .unwrap();
    let first_tier = sent.headers()[LOCATION].to_str().unwrap().to_owned();
    let page = browser
        .get(gate.url(&first_tier))
        .header(ACCEPT, HTML)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains(
            "the first of two lines: once you are let in here, you go on to the line for after-hold"
        ),
        "{html}"
    );

    for bad in [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
    ] {
        let path = format!("/_anteroom/wait/tier2?return={}", urlencode(bad));
        let answer = browser
            .get(gate.url(&path))
            .header(ACCEPT, HTML)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(answer.headers().get(LOCATION).is_none());
    }
    assert_eq!(
        gate.summary("tier1").await["active"],
        1,
        "one visitor, one session"
    );
}

fn urlencode(text: &str) -> String {
    text.bytes().map(|byte| format!("%{byte:02X}")).collect()
}

/// Somebody guesses priority codes (each wrong guess is a cheap 403), each guess from another
/// address of one IPv6 /64 (behind the site's proxy). After ten attempts from one subscriber
/// (an IPv6 client counts by its /64) in ten minutes further joins with a code are refused
/// with 429 `code_attempts_exceeded` before the code is even looked at, the right one
/// included; another subscriber's code is looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_codes_cannot_be_guessed_from_one_address() {
    let gate = Gate::start_with(
        r#"trusted_proxies = ["127.0.0.1/32"]"#,
        &format!(
            "[[room]]\nid = \"vip\"\nmode = \"queue_all\"\n\n\
             [[room.priority]]\ncodes = [\"{}\"]\n",
            key_hash("GOLD-7731")
        ),
    )
    .await;
    let join = gate.url("/_anteroom/v1/rooms/vip/join");
    let join_from = |client: String, code: &str| {
        gate.client
            .post(&join)
            .header("x-forwarded-for", client)
            .json(&json!({ "priority_code": code }))
            .send()
    };
    for guess in 0..10 {
        let from = format!("2001:db8:1:2::{:x}", guess + 1);
        let answer = join_from(from, &format!("GOLD-{guess:04}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "guess {guess}");
    }
    let blocked = join_from("2001:db8:1:2:ffff::1".to_owned(), "GOLD-7731")
        .await
        .unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(blocked.headers().contains_key("retry-after"));
    let problem: Value = blocked.json().await.unwrap();
    assert_eq!(problem["code"], "code_attempts_exceeded");
    assert_eq!(gate.summary("vip").await["waiting"], 0);
    let other = join_from("2001:db8:1:3::1".to_owned(), "GOLD-7731")
        .await
        .unwrap();
    assert!(other.status().is_success(), "{}", other.status());
}
