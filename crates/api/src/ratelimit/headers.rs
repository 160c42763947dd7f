//! The rate-limit response headers (SPEC §10.3): the IETF draft-10 structured fields
//! `RateLimit-Policy` and `RateLimit`, the de-facto `X-RateLimit-Limit/-Remaining/-Reset`, and
//! `Retry-After`.
//!
//! - `RateLimit-Policy` lists every reported rule: `"join-per-ip";q=10;w=60` (the quota `q`
//!   per window `w` seconds; `w` is left out when the period is not a whole number of
//!   seconds, which the field cannot express).
//! - `RateLimit` and `X-RateLimit-*` describe one rule, the one closest to refusing: on a
//!   rejection the refusing rule with the longest wait, otherwise the rule with the fewest
//!   requests remaining. `t` and `X-RateLimit-Reset` are seconds (rounded up): on a rejection
//!   until a retry can pass, otherwise until the quota is whole again.
//! - `Retry-After` (rejections only) is the same number of seconds as `t`, at least 1, so it
//!   never points earlier than `t` (draft-10 §5).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use anteroom_core::ratelimit::Decision;
use anteroom_core::ratelimit::rules::RateLimitRule;

/// `RateLimit-Policy`.
pub(crate) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub(crate) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub(crate) static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub(crate) static X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub(crate) static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// One rule's decision, to report.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reported<'a> {
    pub(crate) rule: &'a RateLimitRule,
    pub(crate) decision: Decision,
}

/// The headers of an allowed response reporting `reported` (empty when nothing is reported).
pub(crate) fn allowed_headers(reported: &[Reported<'_>]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(closest) = reported.iter().min_by(|left, right| {
        left.decision
            .remaining
            .cmp(&right.decision.remaining)
            .then(right.decision.reset_after.cmp(&left.decision.reset_after))
    }) else {
        return headers;
    };
    let reset = ceil_secs(closest.decision.reset_after);
    write(&mut headers, reported, closest, reset);
    headers
}

/// The headers of a rejection.
#[derive(Debug)]
pub(crate) struct Rejection {
    pub(crate) headers: HeaderMap,
    /// The `Retry-After` seconds.
    pub(crate) retry_after: u64,
    /// The index in `refusing` of the rule the headers describe.
    pub(crate) binding: usize,
}

/// The headers of a rejection by `refusing` (not empty), also listing the policies of
/// `others`.
pub(crate) fn rejection_headers(refusing: &[Reported<'_>], others: &[Reported<'_>]) -> Rejection {
    let mut headers = HeaderMap::new();
    let binding = (0..refusing.len())
        .max_by_key(|index| wait(&refusing[*index]))
        .unwrap_or_default();
    let Some(bound) = refusing.get(binding) else {
        return Rejection {
            headers,
            retry_after: 1,
            binding,
        };
    };
    let retry_after = ceil_secs(wait(bound)).max(1);
    let listed: Vec<Reported<'_>> = refusing.iter().chain(others).copied().collect();
    write(&mut headers, &listed, bound, retry_after);
    headers.insert(
        axum::http::header::RETRY_AFTER,
        HeaderValue::from(retry_after),
    );
    Rejection {
        headers,
        retry_after,
        binding,
    }
}

/// How long the refused request should wait: its retry time, or the reset when the store
/// gave none.
fn wait(reported: &Reported<'_>) -> Duration {
    reported
        .decision
        .retry_after
        .unwrap_or(reported.decision.reset_after)
}

fn write(headers: &mut HeaderMap, listed: &[Reported<'_>], binding: &Reported<'_>, t: u64) {
    let policies: Vec<String> = listed
        .iter()
        .map(|reported| policy_item(reported.rule))
        .collect();
    let remaining = binding.decision.remaining;
    let limit = binding.rule.params.limit;
    let status = format!("\"{}\";r={remaining};t={t}", binding.rule.name);
    let values = [
        (&RATELIMIT_POLICY, policies.join(", ")),
        (&RATELIMIT, status),
        (&X_RATELIMIT_LIMIT, limit.to_string()),
        (&X_RATELIMIT_REMAINING, remaining.to_string()),
        (&X_RATELIMIT_RESET, t.to_string()),
    ];
    for (name, value) in values {
        // Rule names are plain ASCII (config validation), so every value is a valid header.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name.clone(), value);
        }
    }
}

/// `"name";q=<limit>;w=<period seconds>`.
pub(crate) fn policy_item(rule: &RateLimitRule) -> String {
    let period = rule.params.period;
    let mut item = format!("\"{}\";q={}", rule.name, rule.params.limit);
    if period.subsec_nanos() == 0 && period.as_secs() > 0 {
        item.push_str(&format!(";w={}", period.as_secs()));
    }
    item
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use anteroom_core::ratelimit::Algorithm;
    use anteroom_core::ratelimit::rules::default_params;

    use super::*;

    fn rule(name: &str, limit: u64, period: Duration) -> RateLimitRule {
        RateLimitRule::new(name, default_params(Algorithm::TokenBucket, limit, period))
    }

    fn decision(remaining: u64, reset_ms: u64, retry_ms: Option<u64>) -> Decision {
        Decision {
            allowed: retry_ms.is_none(),
            limit: 0,
            remaining,
            reset_after: Duration::from_millis(reset_ms),
            retry_after: retry_ms.map(Duration::from_millis),
            delay: Duration::ZERO,
        }
    }

    /// The headers as (name, value) pairs, sorted by name.
    fn pairs(headers: &HeaderMap) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        pairs.sort();
        pairs
    }

    fn check(headers: &HeaderMap, expected: &[(&str, &str)]) {
        let mut expected: Vec<(String, String)> = expected
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        expected.sort();
        assert_eq!(pairs(headers), expected);
    }

    #[test]
    fn policy_items() {
        let check_item = |limit: u64, period: Duration, expected: &str| {
            assert_eq!(policy_item(&rule("p", limit, period)), expected);
        };
        check_item(10, Duration::from_secs(60), "\"p\";q=10;w=60");
        check_item(1, Duration::from_secs(86_400), "\"p\";q=1;w=86400");
        // The field has no sub-second windows: leave `w` out rather than round it.
        check_item(5, Duration::from_millis(500), "\"p\";q=5");
        check_item(5, Duration::from_millis(1500), "\"p\";q=5");
    }

    #[test]
    fn rounding_up() {
        let check_secs = |millis: u64, expected: u64| {
            assert_eq!(
                ceil_secs(Duration::from_millis(millis)),
                expected,
                "{millis} ms"
            );
        };
        check_secs(0, 0);
        check_secs(1, 1);
        check_secs(999, 1);
        check_secs(1000, 1);
        check_secs(1001, 2);
        check_secs(11_200, 12);
    }

    #[test]
    fn allowed_reports_the_rule_with_the_fewest_remaining() {
        let per_ip = rule("join-per-ip", 10, Duration::from_secs(60));
        let global = rule("global", 1000, Duration::from_secs(1));
        let headers = allowed_headers(&[
            Reported {
                rule: &global,
                decision: decision(998, 2, None),
            },
            Reported {
                rule: &per_ip,
                decision: decision(3, 42_100, None),
            },
        ]);
        check(
            &headers,
            &[
                (
                    "ratelimit-policy",
                    "\"global\";q=1000;w=1, \"join-per-ip\";q=10;w=60",
                ),
                ("ratelimit", "\"join-per-ip\";r=3;t=43"),
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "3"),
                ("x-ratelimit-reset", "43"),
            ],
        );
        // Equal remaining: the one that takes longer to reset is reported.
        let headers = allowed_headers(&[
            Reported {
                rule: &global,
                decision: decision(3, 500, None),
            },
            Reported {
                rule: &per_ip,
                decision: decision(3, 9000, None),
            },
        ]);
        assert_eq!(headers[&RATELIMIT], "\"join-per-ip\";r=3;t=9");
        assert!(allowed_headers(&[]).is_empty());
    }

    #[test]
    fn rejection_reports_the_longest_wait() {
        let per_ip = rule("join-per-ip", 10, Duration::from_secs(60));
        let burst = rule("burst", 2, Duration::from_secs(1));
        let other = rule("other", 100, Duration::from_secs(60));
        let rejection = rejection_headers(
            &[
                Reported {
                    rule: &burst,
                    decision: decision(0, 1000, Some(400)),
                },
                Reported {
                    rule: &per_ip,
                    decision: decision(0, 60_000, Some(11_200)),
                },
            ],
            &[Reported {
                rule: &other,
                decision: decision(50, 30_000, None),
            }],
        );
        assert_eq!((rejection.retry_after, rejection.binding), (12, 1));
        check(
            &rejection.headers,
            &[
                (
                    "ratelimit-policy",
                    "\"burst\";q=2;w=1, \"join-per-ip\";q=10;w=60, \"other\";q=100;w=60",
                ),
                ("ratelimit", "\"join-per-ip\";r=0;t=12"),
                ("retry-after", "12"),
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "12"),
            ],
        );
        // A sub-second wait still asks for a whole second.
        let rejection = rejection_headers(
            &[Reported {
                rule: &burst,
                decision: decision(0, 0, Some(0)),
            }],
            &[],
        );
        assert_eq!(rejection.retry_after, 1);
        assert_eq!(rejection.headers[&axum::http::header::RETRY_AFTER], "1");
        assert_eq!(rejection.headers[&RATELIMIT], "\"burst\";r=0;t=1");
    }
}
