//! The engine's shortcut for a lone local rule (one rule, local store, `reject`) decides every
//! request exactly as the general engine does: generated rules and request sequences, each
//! request decided by two limiters over the same rule and equal stores, one through the
//! shortcut, the other made to take the general path (a route naming a rule that does not
//! exist adds nothing to the decision but keeps the shortcut out).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::to_bytes;
use http::Method;
use http::request::Parts;
use proptest::prelude::*;

use anteroom_api::ratelimit::{RateLimitOptions, RateLimitVerdict, RateLimiter, RouteRateLimits};
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::{
    Action, KeyPart, OnStoreError, RateLimitRule, RequestMatcher, default_params,
};

use crate::support::{TestStore, limiter, request};

/// One generated request: where it goes, from whom, with which header, whether the store is
/// down for it, and how long after the one before it comes.
#[derive(Debug, Clone)]
struct Visit {
    path: &'static str,
    method: Method,
    peer: &'static str,
    user: Option<&'static str>,
    store_down: bool,
    after_ms: u64,
}

fn visits() -> impl Strategy<Value = Vec<Visit>> {
    let visit = (
        prop::sample::select(vec!["/", "/api/items", "/api/x/y", "/static/a.css"]),
        prop::sample::select(vec![Method::GET, Method::POST]),
        prop::sample::select(vec![
            "203.0.113.7:1",
            "203.0.113.8:2",
            "[2001:db8::1]:3",
            "[2001:db8::2]:4",
        ]),
        prop::option::of(prop::sample::select(vec!["alice", "bob"])),
        prop::bool::weighted(0.05),
        prop::sample::select(vec![0u64, 1, 10, 100, 400, 1_000, 2_500]),
    )
        .prop_map(|(path, method, peer, user, store_down, after_ms)| Visit {
            path,
            method,
            peer,
            user,
            store_down,
            after_ms,
        });
    prop::collection::vec(visit, 1..40)
}

fn rules() -> impl Strategy<Value = RateLimitRule> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..4,
        1u64..3,
        prop::sample::select(vec![
            vec![KeyPart::Ip],
            vec![KeyPart::Header("x-user".to_owned())],
            vec![KeyPart::Ip, KeyPart::Path],
        ]),
        prop::sample::select(vec![0usize, 1, 2, 3]),
        prop::sample::select(vec![Action::Reject, Action::Shadow]),
        (
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec![429u16, 503]),
        ),
    )
        .prop_map(
            |(algorithm, limit, period, key, matcher, action, (headers, deny, status))| {
                let params = default_params(algorithm, limit, Duration::from_secs(period));
                let mut rule = RateLimitRule::new("lone", params);
                rule.key = key;
                rule.matcher = match matcher {
                    0 => Some(RequestMatcher::default()),
                    1 => Some(RequestMatcher::default().with_paths(["/api/**"]).unwrap()),
                    2 => Some(RequestMatcher::default().with_methods(["POST"]).unwrap()),
                    // Route-only: no route names it here, so it never applies.
                    _ => None,
                };
                rule.action = action;
                rule.headers = headers;
                rule.status = status;
                rule.on_store_error = if deny {
                    OnStoreError::Deny
                } else {
                    OnStoreError::Allow
                };
                rule
            },
        )
}

fn parts_of(visit: &Visit, general: bool) -> Parts {
    let mut request = request(visit.method.clone(), visit.path, visit.peer);
    if let Some(user) = visit.user {
        request
            .headers_mut()
            .insert("x-user", http::HeaderValue::from_static(user));
    }
    if general {
        request
            .extensions_mut()
            .insert(RouteRateLimits(vec!["no-such-rule".to_owned()]));
    }
    request.into_parts().0
}

/// A verdict as text: its kind, and the status, headers and body of what it answers.
async fn described(verdict: RateLimitVerdict) -> String {
    let (kind, response) = match verdict {
        RateLimitVerdict::Allowed { headers } => return format!("allowed {headers:?}"),
        RateLimitVerdict::Refused(response) => ("refused", response),
        RateLimitVerdict::Unavailable(response) => ("unavailable", response),
    };
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, usize::MAX).await.unwrap();
    format!("{kind} {} {:?} {body:?}", parts.status, parts.headers)
}

async fn run(rule: RateLimitRule, visits: Vec<Visit>) -> Result<(), TestCaseError> {
    let shortcut_store = Arc::new(TestStore::default());
    let general_store = Arc::new(TestStore::default());
    let shortcut = limiter(
        vec![rule.clone()],
        &shortcut_store,
        RateLimitOptions::default(),
    );
    let general: RateLimiter = limiter(vec![rule], &general_store, RateLimitOptions::default());
    for visit in &visits {
        tokio::time::advance(Duration::from_millis(visit.after_ms)).await;
        shortcut_store
            .failing
            .store(visit.store_down, Ordering::SeqCst);
        general_store
            .failing
            .store(visit.store_down, Ordering::SeqCst);
        let by_shortcut = described(shortcut.check(&mut parts_of(visit, false)).await).await;
        let by_general = described(general.check(&mut parts_of(visit, true)).await).await;
        prop_assert_eq!(by_shortcut, by_general, "{:?}", visit);
    }
    prop_assert_eq!(
        shortcut_store.calls.load(Ordering::SeqCst),
        general_store.calls.load(Ordering::SeqCst)
    );
    prop_assert_eq!(
        format!("{:?}", shortcut.metrics().rule("lone")),
        format!("{:?}", general.metrics().rule("lone"))
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_lone_local_rule_decides_as_the_general_engine_does(rule in rules(), visits in visits()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run(rule, visits))?;
    }
}
