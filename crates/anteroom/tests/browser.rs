//! The waiting page in a real browser (SPEC §6.2, §6.3): headless Chromium, driven through
//! chromedriver, against the real `anteroom serve` on an embedded store; and an OpenID Connect
//! sign-in (§11) that waits in line on that page and lands back at the client with a code.
//!
//! Every test reads what a visitor sees (the page's text, its address, its cookies) and saves a
//! screenshot of each state under `<target>/browser-artifacts/`. Each test starts its own
//! server and its own chromedriver on free ports, kills both when it ends (chromedriver with its
//! whole process group, so no Chromium outlives it), and is bounded in time. At most two
//! browsers run at once: they are the heaviest thing the test suite starts.
//!
//! Every language and state of the page is also run against axe-core's accessibility rules
//! (`support/axe.rs`), measured for overflow at a phone's and a desktop's width, and used by
//! keyboard alone.
//!
//! Needs `chromium`, `chromium-driver` and, for the Korean, Japanese and Chinese pages,
//! `fonts-noto-cjk` (Debian), and npm for axe-core; `scripts/test` installs them when missing.
#![allow(clippy::unwrap_used)]

#[path = "support/axe.rs"]
mod axe;
mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use support::{SERVICE_KEY, Site};

/// How long one test may take, browser start-up included.
const TEST_LIMIT: Duration = Duration::from_secs(150);

/// How long the page may take to show a change the server made.
const SEEN_WITHIN: Duration = Duration::from_secs(15);

/// Browsers running at once.
static BROWSER_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Where admission sends the visitor: a path nobody would reach by accident, with a query.
const RETURN_PATH: &str = "/after-the-line/landed?from=browser";

/// One visitor at a time, unlimited admissions per minute: the line moves exactly when a
/// session ends, so the tests decide when it moves.
const HALL: &str = r#"
[[room]]
id = "hall"
max_active = 1
admit_per_minute = 0
session_ttl = "10m"
claim_ttl = "2m"
ticket_idle_ttl = "10m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_page_follows_the_line_over_sse_and_lands_on_the_return_path() {
    bounded(async {
        let (site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        let first = api.join().await;
        assert_eq!(first["state"], "admitted", "an empty room admits at once");
        let second = api.join().await;
        assert_eq!(second["state"], "waiting");
        assert_eq!(second["position"], 2);

        let browser = Browser::start(BrowserOptions::default()).await;
        browser.goto(&wait_url(&server.url(), "hall", RETURN_PATH)).await;
        assert_eq!(browser.text("#heading").await, "You are in line");
        assert_eq!(browser.text("#position").await, "3", "the visitor's number");
        assert_eq!(browser.text("#ahead").await, "1", "one live ticket ahead");
        assert_eq!(browser.text("#waiting").await, "2", "people waiting");
        let eta = browser.text("#eta").await;
        assert!(is_english_eta(&eta), "the ETA reads as a wait: {eta:?}");
        assert!(
            browser.find("[role=progressbar]").await.is_some(),
            "a progress bar"
        );
        assert!(
            browser.find("[aria-live]").await.is_some(),
            "the figures are an aria-live region"
        );
        browser.screenshot("waiting").await;
        browser.client.set_window_size(390, 760).await.unwrap();
        assert_eq!(
            browser
                .eval("return document.documentElement.scrollWidth <= window.innerWidth")
                .await,
            true,
            "nothing sticks out sideways on a phone-sized screen"
        );
        browser.screenshot("waiting-narrow").await;
        browser.client.set_window_size(720, 640).await.unwrap();

        // From here on the page must change by itself: a reload would lose the marker, and a
        // status poll would go through the counted `fetch`.
        browser
            .run(
                "window.anteroomMarker = 'kept'; window.anteroomFetches = 0; \
                 var original = window.fetch; \
                 window.fetch = function () { window.anteroomFetches += 1; return original.apply(this, arguments); };",
            )
            .await;
        let updated_before = browser.text("#updated").await;
        // The last-update time shows seconds: let one pass so a change can be seen.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        api.complete(&session_of(&first)).await;
        browser.wait_for_text("#ahead", "0").await;
        assert_eq!(browser.text("#position").await, "3", "the number never moves");
        assert_eq!(
            browser.eval("return window.anteroomMarker").await,
            "kept",
            "the page updated without reloading"
        );
        assert_eq!(
            browser.eval("return window.anteroomFetches").await,
            0,
            "the update came over the event stream, not a status poll"
        );
        assert_ne!(
            browser.text("#updated").await,
            updated_before,
            "the last-update time moved"
        );
        let progress_before = progress_percent(&browser).await;
        assert!(
            progress_before > 2,
            "the bar moved once the line did: {progress_before}%"
        );

        // The second visitor takes the slot and leaves; the browser's turn comes.
        let second_admitted = api.status(second["ticket"].as_str().unwrap()).await;
        assert_eq!(second_admitted["state"], "admitted");
        api.complete(&session_of(&second_admitted)).await;
        let landed = browser.wait_for_path(RETURN_PATH).await;
        assert_eq!(landed, "127.0.0.1", "stayed on this site");
        let pass = browser
            .cookie("anteroom_p_hall")
            .await
            .expect("the visitor lands holding the room's pass cookie");
        let claims = support::jwt_claims(&pass);
        assert_eq!(claims["aud"], "hall");
        assert_eq!(claims["pos"], 3, "the pass is the browser's own ticket's");
        browser.close().await;
        drop(site);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_and_a_second_tab_keep_the_same_ticket() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");

        let browser = Browser::start(BrowserOptions::default()).await;
        let url = wait_url(&server.url(), "hall", RETURN_PATH);
        browser.goto(&url).await;
        let position = browser.text("#position").await;
        assert_eq!(position, "2");
        let ticket = browser
            .cookie("anteroom_t_hall")
            .await
            .expect("ticket cookie");
        let ticket_id = support::ticket_id_of(&ticket);

        browser.client.refresh().await.unwrap();
        browser.wait_for_text("#heading", "You are in line").await;
        assert_eq!(
            browser.text("#position").await,
            position,
            "reload keeps the place"
        );
        assert_eq!(browser.text("#ahead").await, "0");
        let after_reload = browser.cookie("anteroom_t_hall").await.unwrap();
        assert_eq!(support::ticket_id_of(&after_reload), ticket_id);

        let first_tab = browser.client.window().await.unwrap();
        let second_tab = browser.client.new_window(true).await.unwrap().handle;
        browser.client.switch_to_window(second_tab).await.unwrap();
        browser.goto(&url).await;
        assert_eq!(
            browser.text("#position").await,
            position,
            "a second tab shows the same place"
        );
        let in_second_tab = browser.cookie("anteroom_t_hall").await.unwrap();
        assert_eq!(support::ticket_id_of(&in_second_tab), ticket_id);
        browser.client.switch_to_window(first_tab).await.unwrap();
        assert_eq!(browser.text("#position").await, position);

        let summary = api.summary().await;
        assert_eq!(
            summary["waiting"], 1,
            "one visitor, one ticket, however many loads and tabs: {summary}"
        );
        browser.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn korean_page_with_lang_ko() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");

        let browser = Browser::start(BrowserOptions::default()).await;
        let url = format!("{}&lang=ko", wait_url(&server.url(), "hall", RETURN_PATH));
        browser.goto(&url).await;
        assert_eq!(browser.attribute("html", "lang").await, "ko");
        assert_eq!(browser.text("#heading").await, "대기열에 있습니다");
        assert_eq!(
            browser.text("#lead").await,
            "기다려 주셔서 감사합니다. 차례가 되면 자동으로 입장합니다."
        );
        let labels = browser.texts(".figure span").await;
        assert_eq!(labels, ["내 번호", "앞 사람", "예상 대기 시간"]);
        assert_eq!(browser.text("#leave").await, "대기 취소");
        assert_eq!(browser.text("#position").await, "2");
        // The script re-renders the figures in the page's language once it runs.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let eta = browser.text("#eta").await;
        assert!(is_korean_eta(&eta), "the ETA reads in Korean: {eta:?}");
        browser.screenshot("korean").await;

        // The language links keep the return path.
        browser.click("footer a[href^='?lang=en']").await;
        browser.wait_for_text("#heading", "You are in line").await;
        let current = browser.client.current_url().await.unwrap();
        assert!(
            current
                .query_pairs()
                .any(|(key, value)| key == "return" && value == RETURN_PATH),
            "the English link keeps the return path: {current}"
        );
        assert_eq!(
            browser.text("#position").await,
            "2",
            "same ticket in English"
        );
        browser.close().await;
    })
    .await;
}

/// Every language the page speaks, as `?lang=` names it, with the text its heading has while
/// waiting.
const LANGUAGES: [(&str, &str); 10] = [
    ("en", "You are in line"),
    ("ko", "대기열에 있습니다"),
    ("ja", "順番待ちをしています"),
    ("zh-Hans", "您正在排队"),
    ("zh-Hant", "您正在排隊"),
    ("es", "Estás en la fila"),
    ("fr", "Vous êtes dans la file"),
    ("de", "Sie sind in der Warteschlange"),
    ("pt-BR", "Você está na fila"),
    ("id", "Anda sedang mengantre"),
];

/// A phone's width and a desktop's, in CSS pixels.
const WIDTHS: [(u32, u32, &str); 2] = [(360, 740, "phone"), (1280, 800, "desktop")];

/// The live page in each language: it speaks it, shows an estimate from the first second (the
/// room's configured pace; nobody has been admitted by the admitter yet), fits a phone and a
/// desktop without anything sticking out, and passes axe-core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_fits_a_phone_and_a_desktop_shows_an_estimate_and_passes_axe() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        assert_eq!(api.join().await["state"], "waiting");

        let browser = Browser::start(BrowserOptions::default()).await;
        for (code, heading) in LANGUAGES {
            let url = format!("{}&lang={code}", wait_url(&server.url(), "hall", RETURN_PATH));
            browser.goto(&url).await;
            assert_eq!(browser.attribute("html", "lang").await, code);
            assert_eq!(browser.text("#heading").await, heading, "{code}");
            assert_eq!(browser.text("#ahead").await, "1", "{code}");
            let estimating = browser.eval("return JSON.parse(document.getElementById('anteroom-config').textContent).text.eta_unknown").await;
            let eta = browser.text("#eta").await;
            assert_ne!(
                Value::String(eta.clone()),
                estimating,
                "{code}: an estimate before any admission was measured"
            );
            for (width, height, device) in WIDTHS {
                browser.client.set_window_size(width, height).await.unwrap();
                assert_eq!(
                    browser.eval("return window.innerWidth").await,
                    width,
                    "the viewport is {width} px wide"
                );
                let overflowing = browser.overflowing().await;
                assert!(
                    overflowing.is_empty(),
                    "{code} on a {device}: {overflowing:?}"
                );
                browser.screenshot(&format!("lang-{code}-{device}")).await;
            }
            browser
                .assert_accessible(&format!("the waiting page in {code}"))
                .await;
        }
        browser.close().await;
    })
    .await;
}

/// The paused line and the pre-queue (the room's preview with sample figures) in every
/// language: no violation of axe-core's rules, nothing sticking out on a phone or a desktop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_and_prequeue_pages_in_every_language_pass_axe_without_overflow() {
    bounded(states_pass_axe_without_overflow(&["paused", "prequeue"])).await;
}

/// The closed, unavailable and challenge pages, likewise. (Split from the states above so
/// each test stays well inside [`TEST_LIMIT`] on a busy machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_unavailable_and_challenge_pages_in_every_language_pass_axe_without_overflow() {
    bounded(states_pass_axe_without_overflow(&[
        "closed",
        "unavailable",
        "challenge",
    ]))
    .await;
}

async fn states_pass_axe_without_overflow(states: &[&str]) {
    let (_site, server) = start_server(HALL).await;
    let browser = Browser::start(BrowserOptions::default()).await;
    for state in states {
        for (code, _) in LANGUAGES {
            browser
                .goto(&format!(
                    "{}/_anteroom/wait/hall/preview?state={state}&lang={code}",
                    server.url()
                ))
                .await;
            assert_eq!(browser.attribute("main", "data-state").await, *state);
            for (width, height, device) in WIDTHS {
                browser.client.set_window_size(width, height).await.unwrap();
                let overflowing = browser.overflowing().await;
                assert!(
                    overflowing.is_empty(),
                    "{state} in {code} on a {device}: {overflowing:?}"
                );
            }
            browser
                .assert_accessible(&format!("the {state} page in {code}"))
                .await;
        }
    }
    browser.close().await;
}

/// The dark colour scheme keeps every state readable (axe-core's contrast rules among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dark_scheme_passes_axe_in_every_state() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        let browser = Browser::start(BrowserOptions {
            dark: true,
            ..BrowserOptions::default()
        })
        .await;
        browser
            .goto(&wait_url(&server.url(), "hall", RETURN_PATH))
            .await;
        assert_eq!(
            browser
                .eval("return matchMedia('(prefers-color-scheme: dark)').matches")
                .await,
            true
        );
        browser.assert_accessible("the dark waiting page").await;
        browser.screenshot("dark-waiting").await;
        for state in ["paused", "prequeue", "closed", "unavailable", "challenge"] {
            browser
                .goto(&format!(
                    "{}/_anteroom/wait/hall/preview?state={state}&lang=en",
                    server.url()
                ))
                .await;
            browser
                .assert_accessible(&format!("the dark {state} page"))
                .await;
        }
        browser.close().await;
    })
    .await;
}

/// The leave rule: a visitor who navigates away (or just closes the page) keeps the place
/// until the idle TTL; one who ticked "give up my place when I close this page" gives it up
/// when the page is closed, though not when following one of the page's own links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_page_with_the_leave_intent_frees_the_place_and_navigating_keeps_it() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        let browser = Browser::start(BrowserOptions::default()).await;
        let url = wait_url(&server.url(), "hall", RETURN_PATH);

        // Without the intent, going elsewhere keeps the place.
        browser.goto(&url).await;
        assert_eq!(browser.text("#position").await, "2");
        browser
            .goto(&format!("{}/_anteroom/v1/rooms/hall", server.url()))
            .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            api.summary().await["waiting"],
            1,
            "navigating away keeps the place"
        );
        browser.goto(&url).await;
        assert_eq!(
            browser.text("#position").await,
            "2",
            "the same place on return"
        );

        // With the intent, the page's own language link keeps it (and the intent).
        browser.click("#leave-on-close").await;
        browser.click("footer a[hreflang=ko]").await;
        browser.wait_for_text("#heading", "대기열에 있습니다").await;
        assert_eq!(
            browser.text("#position").await,
            "2",
            "a language link keeps the place"
        );
        assert_eq!(
            browser
                .eval("return document.getElementById('leave-on-close').checked")
                .await,
            true,
            "the intent lasts for the tab"
        );
        assert_eq!(api.summary().await["waiting"], 1);

        // Closing the page with the intent sends the leave beacon. (Another window keeps the
        // browser session open.)
        let waiting_tab = browser.client.window().await.unwrap();
        let other_tab = browser.client.new_window(true).await.unwrap().handle;
        browser.client.switch_to_window(waiting_tab).await.unwrap();
        browser.client.close_window().await.unwrap();
        browser.client.switch_to_window(other_tab).await.unwrap();
        let started = Instant::now();
        while api.summary().await["waiting"] != 0 {
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "the beacon on closing the page gave the place up"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        browser.close().await;
    })
    .await;
}

/// Keyboard only: Tab reaches the leave button first, with a visible focus ring, then the
/// leave-on-close box; Enter on the button leaves the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyboard_reaches_the_leave_button_with_a_visible_focus_ring() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        let browser = Browser::start(BrowserOptions::default()).await;
        browser.goto(&wait_url(&server.url(), "hall", RETURN_PATH)).await;
        // Tab from a page still being laid out or replaced lands on the body: press it only
        // once the waiting page is the one on screen and its script has run.
        browser.wait_for_text("#heading", "You are in line").await;
        browser.wait_until_loaded().await;
        assert_eq!(browser.tab().await, "leave", "the first stop of Tab");
        let ring = browser
            .eval(
                "var el = document.activeElement, style = getComputedStyle(el);                  return { visible: el.matches(':focus-visible'), style: style.outlineStyle, width: parseFloat(style.outlineWidth) };",
            )
            .await;
        assert_eq!(ring["visible"], true, "{ring}");
        assert_eq!(ring["style"], "solid", "{ring}");
        assert!(ring["width"].as_f64().unwrap() >= 2.0, "{ring}");
        browser.screenshot("keyboard-focus").await;
        assert_eq!(browser.tab().await, "leave-on-close", "then the leave intent");

        // Back to the button and press Enter.
        browser
            .run("document.getElementById('leave').focus()")
            .await;
        let enter = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down {
                value: Key::Enter.into(),
            })
            .then(KeyAction::Up {
                value: Key::Enter.into(),
            });
        browser.client.perform_actions(enter).await.unwrap();
        browser.wait_for_text("#heading", "You left the line").await;
        let started = Instant::now();
        while api.summary().await["waiting"] != 0 {
            assert!(started.elapsed() < SEEN_WITHIN, "the keyboard's leave gave the place up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        browser.close().await;
    })
    .await;
}

/// A visitor who asked for less motion gets a progress bar that jumps rather than slides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reduced_motion_is_honoured() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        let transition =
            "return getComputedStyle(document.getElementById('progress')).transitionDuration";
        for (reduced_motion, expected) in [(false, "0.8s"), (true, "0s")] {
            let browser = Browser::start(BrowserOptions {
                reduced_motion,
                ..BrowserOptions::default()
            })
            .await;
            browser
                .goto(&wait_url(&server.url(), "hall", RETURN_PATH))
                .await;
            assert_eq!(
                browser
                    .eval("return matchMedia('(prefers-reduced-motion: reduce)').matches")
                    .await,
                reduced_motion
            );
            assert_eq!(
                browser.eval(transition).await,
                expected,
                "reduced motion: {reduced_motion}"
            );
            browser.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_and_protocol_relative_return_urls_are_refused() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        let browser = Browser::start(BrowserOptions::default()).await;
        for target in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example/",
            "https:evil.example",
            "javascript:alert(1)",
        ] {
            let url = wait_url(&server.url(), "hall", target);
            let answer = api.client.get(&url).send().await.unwrap();
            assert_eq!(answer.status(), 400, "return={target:?} is refused");
            assert!(
                answer.headers().get("location").is_none(),
                "return={target:?} redirects nowhere"
            );
            browser.goto(&url).await;
            let body = browser.text("body").await;
            assert!(
                body.contains("That return address is not allowed"),
                "return={target:?} shows why: {body:?}"
            );
            if target.starts_with("https") {
                browser.screenshot("refused-return").await;
            }
        }
        // Nothing may take the browser away later either.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let current = browser.client.current_url().await.unwrap();
        assert_eq!(
            current.host_str(),
            Some("127.0.0.1"),
            "still here: {current}"
        );
        assert_eq!(
            browser.cookie("anteroom_t_hall").await,
            None,
            "a refused page joins nobody"
        );
        assert_eq!(api.summary().await["waiting"], 0);
        browser.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_javascript_the_page_refreshes_itself_and_admits() {
    bounded(async {
        let (_site, server) = start_server(HALL).await;
        let api = Api::new(&server.url(), "hall");
        let first = api.join().await;
        assert_eq!(first["state"], "admitted");

        let browser = Browser::start(BrowserOptions {
            javascript: false,
            ..BrowserOptions::default()
        })
        .await;
        browser
            .goto(&wait_url(&server.url(), "hall", RETURN_PATH))
            .await;
        assert_eq!(browser.text("#heading").await, "You are in line");
        assert_eq!(browser.text("#position").await, "2");
        assert_eq!(browser.text("#ahead").await, "0");
        let updated = browser.text("#updated").await;
        assert!(
            updated.ends_with("UTC"),
            "the server's own time is shown, so no script ran: {updated:?}"
        );
        let leave = browser.find("#leave").await.unwrap();
        assert!(
            !leave.is_displayed().await.unwrap(),
            "no button that needs a script to work"
        );
        browser.screenshot("no-javascript").await;

        // The page reloads by itself (no script, no click): the server's time moves.
        let started = Instant::now();
        loop {
            let now = browser.text("#updated").await;
            if !now.is_empty() && now != updated {
                break;
            }
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "the page did not refresh itself within {SEEN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(
            browser.text("#position").await,
            "2",
            "same ticket after refresh"
        );

        api.complete(&session_of(&first)).await;
        let landed = browser.wait_for_path(RETURN_PATH).await;
        assert_eq!(landed, "127.0.0.1");
        assert!(
            browser.cookie("anteroom_p_hall").await.is_some(),
            "the pass cookie came with the redirect"
        );
        browser.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_closed_and_closing_rooms_show_their_state() {
    bounded(async {
        let rooms = format!(
            "{HALL}\n\
             [[room]]\nid = \"hold\"\nmode = \"queue_all\"\n\n\
             [[room]]\nid = \"shut\"\nmode = \"closed\"\n"
        );
        let (site, server) = start_server(&rooms).await;
        let browser = Browser::start(BrowserOptions::default()).await;

        browser.goto(&wait_url(&server.url(), "hold", "/x")).await;
        assert_eq!(browser.text("#heading").await, "The line is paused");
        assert_eq!(
            browser.text("#notice").await,
            "Admissions are paused by the organiser."
        );
        assert_eq!(browser.text("#position").await, "1", "a place is kept");
        assert_eq!(
            browser.text("#eta").await,
            "on hold",
            "no estimate while nobody is let in"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            browser.text("#heading").await,
            "The line is paused",
            "the stream keeps the paused state"
        );
        browser.screenshot("paused").await;

        browser.goto(&wait_url(&server.url(), "shut", "/x")).await;
        assert_eq!(browser.text("#heading").await, "This room is closed");
        assert!(
            browser.text("main").await.contains("Please try again"),
            "a closed room says what to do"
        );
        assert!(
            browser.find("#position").await.is_none(),
            "a closed room hands out no number"
        );
        browser.screenshot("closed").await;

        // A room that closes while the visitor waits: the stream says so and the page shows it.
        let api = Api::new(&server.url(), "hall");
        assert_eq!(api.join().await["state"], "admitted");
        browser.goto(&wait_url(&server.url(), "hall", "/x")).await;
        assert_eq!(browser.text("#position").await, "2");
        let closing = rooms.replacen("id = \"hall\"\n", "id = \"hall\"\nmode = \"closed\"\n", 1);
        site.write_config("EdDSA", &closing);
        hang_up(&server);
        browser
            .wait_for_text("#heading", "This room is closed")
            .await;
        browser.close().await;
    })
    .await;
}

/// A scheduled sale whose pre-queue is on now and opens in a few seconds (SPEC §5.3): the page
/// counts down without a place in line, then the draw (a cohort of one) lets the visitor in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prequeue_counts_down_and_the_opening_lets_the_visitor_in() {
    bounded(async {
        // The browser first: it is the slow start, and the countdown below has only seconds.
        let browser = Browser::start(BrowserOptions::default()).await;
        // The schedule is written in wall-clock time, the only clock the real server has.
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let at = |offset_secs: u64| {
            anteroom_core::config::format_time(anteroom_core::Timestamp(
                now.as_millis() as u64 + offset_secs * 1000,
            ))
        };
        let rooms = format!(
            "[[room]]\nid = \"sale\"\nmax_active = 1\nbefore = \"closed\"\n\
             [[room.schedule]]\nprequeue_at = \"{}\"\nopens_at = \"{}\"\n\
             closes_at = \"{}\"\nshuffle = true\n",
            at(0),
            // Room for a slow start of the server and the page under a loaded test run (8 s
            // were once used up before the second look at the countdown).
            at(15),
            at(3600)
        );
        let (site, server) = start_server(&rooms).await;
        browser
            .goto(&wait_url(&server.url(), "sale", RETURN_PATH))
            .await;
        assert_eq!(browser.text("#heading").await, "The sale opens soon");
        assert_eq!(
            browser.text("#ahead").await,
            "–",
            "no place before the draw"
        );
        let first = browser.text("#eta").await;
        assert!(first.starts_with("opens in 0:"), "a countdown: {first:?}");
        assert!(
            !browser.text("#prequeue").await.is_empty(),
            "the pre-queue notice"
        );
        browser.screenshot("prequeue").await;
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let later = browser.text("#eta").await;
        assert!(
            later.starts_with("opens in 0:") && later < first,
            "the countdown runs: {first:?} then {later:?}"
        );
        let landed = browser.wait_for_path(RETURN_PATH).await;
        assert_eq!(landed, "127.0.0.1");
        assert!(browser.cookie("anteroom_p_sale").await.is_some());
        browser.close().await;
        drop(site);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// What the tests share.

/// Runs a test body with a browser slot held and within [`TEST_LIMIT`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oidc_sign_in_waits_in_line_and_returns_to_the_client_with_a_code() {
    bounded(async {
        // The client's callback is a path of this site, so the browser can land on it.
        let site = Site::new();
        let callback = format!("{}/client/callback", site.public_url());
        let rooms = format!("{HALL}[room.oidc]\nredirect_uris = [\"{callback}\"]\n");
        site.write_config("EdDSA", &rooms);
        let mut server = site.start();
        server.wait_ready(&support::client()).await;
        let api = Api::new(&server.url(), "hall");
        let first = api.join().await;
        assert_eq!(first["state"], "admitted", "an empty room admits at once");

        // RFC 7636 Appendix B's verifier and challenge.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        let authorize = format!(
            "{}/_anteroom/oidc/authorize?client_id=hall&redirect_uri={}&response_type=code\
             &scope=openid&state=browser-state&nonce=browser-nonce\
             &code_challenge={challenge}&code_challenge_method=S256",
            server.url(),
            percent_encode(&callback)
        );
        let browser = Browser::start(BrowserOptions::default()).await;
        browser.goto(&authorize).await;
        assert_eq!(browser.text("#heading").await, "You are in line");
        browser.screenshot("oidc-waiting").await;

        api.complete(&session_of(&first)).await;
        let started = Instant::now();
        let landed = loop {
            let current = browser.client.current_url().await.unwrap();
            if current.path() == "/client/callback" {
                break current;
            }
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "the browser is at {current}, not back at the client"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let parameter = |name: &str| {
            landed
                .query_pairs()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.into_owned())
        };
        assert_eq!(parameter("state").as_deref(), Some("browser-state"));
        let code = parameter("code").expect("the client receives a code");

        let body = format!(
            "grant_type=authorization_code&client_id=hall&code={}&redirect_uri={}&code_verifier={verifier}",
            percent_encode(&code),
            percent_encode(&callback)
        );
        let answer = support::client()
            .post(format!("{}/_anteroom/oidc/token", server.url()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let tokens: Value = answer.json().await.unwrap();
        let claims = support::jwt_claims(tokens["id_token"].as_str().unwrap());
        assert_eq!(claims["aud"], "hall");
        assert_eq!(claims["nonce"], "browser-nonce");
        let pass = browser
            .cookie("anteroom_p_hall")
            .await
            .expect("the visitor holds the room's pass");
        assert_eq!(
            claims["sub"],
            support::jwt_claims(&pass)["sub"],
            "the ID token names the browser's own session"
        );
        browser.close().await;
        drop(site);
    })
    .await;
}

/// The name the HTTPS test's certificate is for.
const TLS_HOST: &str = "shop.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_page_over_https_comes_by_h2_and_follows_the_line() {
    bounded(async {
        let site = Site::new();
        let certified = rcgen::generate_simple_self_signed(vec![TLS_HOST.to_owned()]).unwrap();
        let (cert_file, key_file) = (site.path().join("cert.pem"), site.path().join("key.pem"));
        std::fs::write(&cert_file, certified.cert.pem()).unwrap();
        std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
        site.write_config(
            "EdDSA",
            &format!(
                "[server.tls]\ncert_file = {}\nkey_file = {}\n{HALL}",
                support::toml_string(&cert_file),
                support::toml_string(&key_file)
            ),
        );
        let server = site.start();
        let base = format!("https://{TLS_HOST}:{}", site.port);
        let curl = |args: &[&str]| -> Value {
            let output = Command::new("curl")
                .args(["--silent", "--insecure", "--max-time", "10", "--resolve"])
                .arg(format!("{TLS_HOST}:{}:127.0.0.1", site.port))
                .args(args)
                .output()
                .unwrap();
            serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
        };
        let started = Instant::now();
        loop {
            let healthz = Command::new("curl")
                .args(["--silent", "--insecure", "--output", "/dev/null"])
                .args(["--write-out", "%{http_code}"])
                .arg(format!("https://127.0.0.1:{}/_anteroom/healthz", site.port))
                .output()
                .unwrap();
            if healthz.stdout == b"200" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no HTTPS answer; log:\n{}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let join = format!("{base}/_anteroom/v1/rooms/hall/join");
        let first = curl(&["--request", "POST", &join]);
        assert_eq!(first["state"], "admitted", "{}", server.log());

        let browser = Browser::start(BrowserOptions {
            tls: true,
            ..BrowserOptions::default()
        })
        .await;
        browser.goto(&wait_url(&base, "hall", RETURN_PATH)).await;
        assert_eq!(browser.text("#heading").await, "You are in line");
        assert_eq!(
            browser
                .eval("return performance.getEntriesByType('navigation')[0].nextHopProtocol")
                .await,
            "h2",
            "ALPN chose HTTP/2"
        );
        browser.screenshot("waiting-over-https").await;
        let ticket = browser
            .client
            .get_named_cookie("anteroom_t_hall")
            .await
            .expect("the ticket cookie");
        assert_eq!(ticket.secure(), Some(true), "cookies are Secure under TLS");

        // The slot frees; the page hears it over the event stream (on HTTP/2) and lands.
        let session = session_of(&first);
        curl(&[
            "--request",
            "POST",
            "--header",
            &format!("Authorization: Bearer {SERVICE_KEY}"),
            &format!("{base}/_anteroom/v1/rooms/hall/sessions/{session}/complete"),
        ]);
        browser.wait_for_path(RETURN_PATH).await;
        assert!(browser.cookie("anteroom_p_hall").await.is_some());
        browser.close().await;
        drop(server);
        drop(site);
    })
    .await;
}

async fn bounded(body: impl Future<Output = ()>) {
    let _slot = BROWSER_SLOTS.acquire().await.unwrap();
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {TEST_LIMIT:?}"));
}

async fn start_server(rooms: &str) -> (Site, support::Server) {
    let site = Site::new();
    site.write_config("EdDSA", rooms);
    let mut server = site.start();
    server.wait_ready(&support::client()).await;
    (site, server)
}

/// SIGHUP: the server reloads its rooms from the config file.
fn hang_up(server: &support::Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -HUP");
}

fn wait_url(base: &str, room: &str, return_to: &str) -> String {
    format!(
        "{base}/_anteroom/wait/{room}?return={}",
        percent_encode(return_to)
    )
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The session id of an admitted status JSON (the pass's `sub`).
fn session_of(status: &Value) -> String {
    let pass = status["pass"]
        .as_str()
        .expect("an admitted status has a pass");
    support::jwt_claims(pass)["sub"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn is_english_eta(text: &str) -> bool {
    text == "estimating…"
        || text == "under a minute"
        || (text.starts_with("about ") && text.ends_with(" min"))
}

fn is_korean_eta(text: &str) -> bool {
    text == "계산 중…" || text == "1분 이내" || (text.starts_with("약 ") && text.ends_with('분'))
}

async fn progress_percent(browser: &Browser) -> u64 {
    let value = browser
        .eval("return document.getElementById('progress').style.width")
        .await;
    value
        .as_str()
        .and_then(|width| width.trim_end_matches('%').parse().ok())
        .unwrap_or(0)
}

/// The public API as a second visitor and as the site's backend would call it.
struct Api {
    client: reqwest::Client,
    base: String,
    room: String,
}

impl Api {
    fn new(base: &str, room: &str) -> Api {
        Api {
            client: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap(),
            base: base.to_owned(),
            room: room.to_owned(),
        }
    }

    fn url(&self, rest: &str) -> String {
        format!("{}/_anteroom/v1/rooms/{}{rest}", self.base, self.room)
    }

    /// Joins as a new visitor (no cookie jar: every call is somebody else).
    async fn join(&self) -> Value {
        let response = self.client.post(self.url("/join")).send().await.unwrap();
        assert_eq!(response.status(), 200, "join");
        response.json().await.unwrap()
    }

    async fn status(&self, ticket: &str) -> Value {
        let response = self
            .client
            .get(self.url("/status"))
            .header("x-anteroom-ticket", ticket)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "status");
        response.json().await.unwrap()
    }

    /// Ends a session as the site's backend does when the visitor is done.
    async fn complete(&self, session: &str) {
        let response = self
            .client
            .post(self.url(&format!("/sessions/{session}/complete")))
            .bearer_auth(SERVICE_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "complete {session}");
    }

    async fn summary(&self) -> Value {
        self.client
            .get(self.url(""))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

#[derive(Debug, Clone, Copy)]
struct BrowserOptions {
    javascript: bool,
    /// Accept the test's own certificates and resolve [`TLS_HOST`] to loopback.
    tls: bool,
    /// The visitor asked their system for less motion (`prefers-reduced-motion: reduce`).
    reduced_motion: bool,
    /// The visitor's system is in dark mode (`prefers-color-scheme: dark`).
    dark: bool,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        BrowserOptions {
            javascript: true,
            tls: false,
            reduced_motion: false,
            dark: false,
        }
    }
}

/// One headless Chromium session behind its own chromedriver.
struct Browser {
    client: Client,
    _driver: Driver,
}

impl Browser {
    async fn start(options: BrowserOptions) -> Browser {
        let driver = Driver::start().await;
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--lang=en-US".to_owned(),
            "--force-device-scale-factor=1".to_owned(),
            "--window-size=720,640".to_owned(),
            format!("--user-data-dir={}", driver.profile.path().display()),
        ];
        if !options.javascript {
            args.push("--blink-settings=scriptEnabled=false".to_owned());
        }
        if options.tls {
            args.push(format!("--host-resolver-rules=MAP {TLS_HOST} 127.0.0.1"));
        }
        if options.reduced_motion {
            args.push("--force-prefers-reduced-motion".to_owned());
        }
        if options.dark {
            args.push("--force-dark-mode".to_owned());
        }
        let mut chrome_options = json!({ "args": args });
        if let Some(binary) = chromium_binary() {
            chrome_options["binary"] = json!(binary.display().to_string());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".to_owned(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".to_owned(), chrome_options);
        capabilities.insert("pageLoadStrategy".to_owned(), json!("normal"));
        if options.tls {
            capabilities.insert("acceptInsecureCerts".to_owned(), json!(true));
        }
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&driver.url())
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start headless Chromium through chromedriver: {error}\n{}",
                    driver.log()
                )
            });
        Browser {
            client,
            _driver: driver,
        }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    async fn find(&self, css: &str) -> Option<fantoccini::elements::Element> {
        self.client.find(Locator::Css(css)).await.ok()
    }

    /// The visible text of the first element matching `css`. A page that reloads itself (the
    /// `Refresh` of the page without JavaScript) may replace the element between finding it
    /// and reading it: it is then found again on the new page.
    async fn text(&self, css: &str) -> String {
        let mut tries = 0;
        loop {
            let element = self
                .find(css)
                .await
                .unwrap_or_else(|| panic!("no element {css} on the page"));
            match element.text().await {
                Ok(text) => return text,
                Err(fantoccini::error::CmdError::Standard(error))
                    if error.error == fantoccini::error::ErrorStatus::StaleElementReference
                        && tries < 5 =>
                {
                    tries += 1;
                }
                Err(error) => panic!("cannot read {css}: {error}"),
            }
        }
    }

    async fn texts(&self, css: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for element in self.client.find_all(Locator::Css(css)).await.unwrap() {
            texts.push(element.text().await.unwrap());
        }
        texts
    }

    async fn attribute(&self, css: &str, name: &str) -> String {
        let element = self.find(css).await.unwrap();
        element.attr(name).await.unwrap().unwrap_or_default()
    }

    async fn click(&self, css: &str) {
        self.find(css)
            .await
            .unwrap_or_else(|| panic!("no element {css} to click"))
            .click()
            .await
            .unwrap();
    }

    async fn run(&self, script: &str) {
        self.client.execute(script, Vec::new()).await.unwrap();
    }

    async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.unwrap()
    }

    async fn cookie(&self, name: &str) -> Option<String> {
        self.client
            .get_named_cookie(name)
            .await
            .ok()
            .map(|cookie| cookie.value().to_owned())
    }

    /// Waits until the element's text is `expected` (the element may come and go meanwhile).
    async fn wait_for_text(&self, css: &str, expected: &str) {
        let started = Instant::now();
        let mut last = None;
        while started.elapsed() < SEEN_WITHIN {
            if let Some(element) = self.find(css).await {
                let text = element.text().await.ok();
                if text.as_deref() == Some(expected) {
                    return;
                }
                last = text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{css} did not read {expected:?} within {SEEN_WITHIN:?} (last: {last:?})");
    }

    /// Waits until the browser is at `path_and_query` on any host; returns the host.
    async fn wait_for_path(&self, path_and_query: &str) -> String {
        let started = Instant::now();
        loop {
            let current = self.client.current_url().await.unwrap();
            let here = match current.query() {
                Some(query) => format!("{}?{query}", current.path()),
                None => current.path().to_owned(),
            };
            if here == path_and_query {
                return current.host_str().unwrap_or_default().to_owned();
            }
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "the browser is at {current}, not {path_and_query}, after {SEEN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs axe-core on the current page and fails the test listing any violation.
    async fn assert_accessible(&self, page: &str) {
        let violations = self
            .client
            .execute(&axe::script(), Vec::new())
            .await
            .unwrap_or_else(|error| panic!("axe-core did not run on {page}: {error}"));
        axe::assert_no_violations(page, &violations);
    }

    /// The boxes of the page whose content is wider than they are, and the page itself when
    /// it scrolls sideways: `"<element>: <content width> > <box width>"` each.
    async fn overflowing(&self) -> Vec<String> {
        let found = self
            .eval(
                "var found = [], page = document.documentElement;                  if (page.scrollWidth > window.innerWidth) { found.push('page: ' + page.scrollWidth + ' > ' + window.innerWidth); }                  document.querySelectorAll('main, main h1, main p, main div, main nav, main ul, main li, main button, main label, footer').forEach(function (el) {                    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth && getComputedStyle(el).overflowX !== 'hidden') {                      found.push((el.id ? '#' + el.id : el.tagName.toLowerCase() + '.' + el.className) + ': ' + el.scrollWidth + ' > ' + el.clientWidth); }                    var box = el.getBoundingClientRect();                    if (box.right > window.innerWidth + 0.5) { found.push((el.id || el.tagName.toLowerCase()) + ' ends at ' + box.right + ' past ' + window.innerWidth); }                  }); return found;",
            )
            .await;
        serde_json::from_value(found).unwrap()
    }

    /// Presses Tab once in the page, as a keyboard user moves on; returns the id (or tag) of
    /// the element that has the focus then.
    /// Waits until the document and everything it loads are in (`readyState` "complete").
    async fn wait_until_loaded(&self) {
        let started = Instant::now();
        while self.eval("return document.readyState").await != "complete" {
            assert!(started.elapsed() < SEEN_WITHIN, "the page finished loading");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn tab(&self) -> String {
        let actions = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down {
                value: Key::Tab.into(),
            })
            .then(KeyAction::Up {
                value: Key::Tab.into(),
            });
        self.client.perform_actions(actions).await.unwrap();
        let focused = self
            .eval("var el = document.activeElement; return el ? (el.id || el.tagName.toLowerCase()) : '';")
            .await;
        focused.as_str().unwrap_or_default().to_owned()
    }

    /// Saves a PNG of the window as `<target>/browser-artifacts/<name>.png`.
    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let dir = artifacts_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the browser session (Chromium quits); the driver is killed on drop.
    async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// `<target>/browser-artifacts`, beside the build's own directories.
fn artifacts_dir() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_anteroom"));
    binary
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("browser-artifacts")
}

/// A chromedriver on a free port, in its own process group with the browsers it starts.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
    log: PathBuf,
}

impl Driver {
    async fn start() -> Driver {
        let Some(chromedriver) = find_program(&["chromedriver"]) else {
            panic!(
                "chromedriver is not installed: run scripts/test, which installs Debian's \
                 chromium and chromium-driver"
            );
        };
        let profile = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let log = profile.path().join("chromedriver.log");
        let mut command = Command::new(chromedriver);
        command
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("start chromedriver");
        let mut driver = Driver {
            child,
            port,
            profile,
            log,
        };
        driver.wait_ready().await;
        driver
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let client = support::client();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("chromedriver exited early ({status}):\n{}", self.log());
            }
            let answer = client
                .get(format!("{}/status", self.url()))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(response) = answer
                && let Ok(body) = response.json::<Value>().await
                && body["value"]["ready"] == true
            {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver not ready after 30 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: chromedriver and every Chromium process it started.
        #[cfg(unix)]
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's Chromium, or another Chromium-based browser on `PATH`; `None` lets chromedriver
/// look for itself.
fn chromium_binary() -> Option<PathBuf> {
    find_program(&["chromium", "chromium-browser", "google-chrome"])
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// A room asking for a proof of work at the default difficulty (18 bits).
const GUARDED: &str = r#"
[[room]]
id = "guarded"
challenge = { kind = "pow" }
"#;

/// Solves measured by `a_proof_of_work_is_solved_in_a_worker_then_joins`.
const SOLVES: usize = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_of_work_is_solved_in_a_worker_then_joins() {
    bounded(async {
        let (_site, server) = start_server(GUARDED).await;
        let browser = Browser::start(BrowserOptions::default()).await;
        let mut solve_ms = Vec::new();
        for solve in 0..SOLVES {
            // A new visitor each time: no ticket, so a new challenge.
            browser.client.delete_all_cookies().await.unwrap();
            browser
                .goto(&wait_url(&server.url(), "guarded", RETURN_PATH))
                .await;
            if solve == 0 {
                // The page may already have moved on; the heading is read only when shown.
                if let Some(heading) = browser.find("main[data-state=challenge] #heading").await {
                    let text = heading.text().await.unwrap_or_default();
                    assert!(
                        text.is_empty() || text == "Getting you a place in line",
                        "{text:?}"
                    );
                    browser.screenshot("challenge").await;
                }
            }
            // The empty room admits the solved join at once, straight to the return path.
            assert_eq!(browser.wait_for_path(RETURN_PATH).await, "127.0.0.1");
            assert!(
                browser.cookie("anteroom_p_guarded").await.is_some(),
                "the solved join got a pass"
            );
            let measured = browser
                .eval("return Number(sessionStorage.getItem('anteroom_solve_ms'))")
                .await
                .as_u64()
                .unwrap();
            solve_ms.push(measured);
        }
        browser.close().await;
        solve_ms.sort_unstable();
        let median = solve_ms[SOLVES / 2];
        eprintln!("proof of work at difficulty 18 in headless Chromium: solves {solve_ms:?} ms, median {median} ms");
        assert!(median > 0, "a solve takes time");
        assert!(
            median < SEEN_WITHIN.as_millis() as u64,
            "a solve fits the page's patience"
        );
        let summary = Api::new(&server.url(), "guarded").summary().await;
        assert_eq!(summary["serving"], SOLVES, "one place per solve: {summary}");
    })
    .await;
}
