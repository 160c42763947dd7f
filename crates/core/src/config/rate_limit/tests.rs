//! `[[rate_limit]]` in whole files: SPEC §10.2's example, defaults, every problem with its
//! line, environment overrides and the redis store requirement.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::super::parse_config;
use super::super::tests::{check_problems, env};
use crate::ratelimit::Algorithm;
use crate::ratelimit::LimitParams;
use crate::ratelimit::rules::{
    Action, DEFAULT_MAX_KEYS, KeyPart, LimitBackend, OnKeysFull, OnStoreError, RateLimitRule,
    RequestMatcher,
};

/// SPEC §10.2's example, verbatim.
const SPEC_EXAMPLE: &str = r#"
[[rate_limit]]
name = "join-per-ip"
match = { paths = ["/_anteroom/v1/rooms/*/join"], methods = ["POST"] }
key = ["ip"]                 # ip | "header:X-Api-Key" | "cookie:name" | "claim:sub" | path | host | several
algorithm = "token_bucket"   # token_bucket | leaky_bucket | fixed_window | sliding_log | sliding_window | gcra
limit = 10                   # per period
period = "1m"
burst = 5
cost = 1
delay = 0                    # leaky_bucket: excess beyond this many is delayed (nginx delay=N)
nodelay = false              # leaky_bucket: never delay; excess within burst passes at once
action = "reject"            # reject | delay | shadow (log and count only)
store = "local"              # local | redis
status = 429
"#;

fn rules(source: &str, env_pairs: &[(&str, &str)]) -> Vec<RateLimitRule> {
    match parse_config(source, &env(env_pairs)) {
        Ok(config) => config.rate_limits,
        Err(errors) => panic!("unexpected problems:\n{errors}"),
    }
}

#[test]
fn spec_example_parses_verbatim() {
    let expected = RateLimitRule {
        name: "join-per-ip".to_owned(),
        matcher: Some(
            RequestMatcher::default()
                .with_paths(["/_anteroom/v1/rooms/*/join"])
                .unwrap()
                .with_methods(["POST"])
                .unwrap(),
        ),
        key: vec![KeyPart::Ip],
        ipv6_prefix: 64,
        params: LimitParams {
            algorithm: Algorithm::TokenBucket,
            limit: 10,
            period: Duration::from_secs(60),
            burst: 5,
            delay: 0,
            nodelay: false,
        },
        cost: 1,
        action: Action::Reject,
        store: LimitBackend::Local,
        status: 429,
        headers: true,
        on_store_error: OnStoreError::Allow,
        max_keys: DEFAULT_MAX_KEYS,
        on_keys_full: OnKeysFull::Reject,
    };
    assert_eq!(rules(SPEC_EXAMPLE, &[]), vec![expected]);
}

#[test]
fn every_field_and_the_defaults() {
    let source = r#"
[[rate_limit]]
name = "api"
match = { paths = ["/api/**"] }
limit = 100
period = "1s"

[[rate_limit]]
name = "writes-per-key"
key = ["header:X-Api-Key", "path"]
algorithm = "leaky_bucket"
limit = 5
period = "1s"
burst = 12
delay = 8
cost = 2
action = "delay"
status = 503
headers = false
on_store_error = "deny"
ipv6_prefix = 56

[rate_limit.match]
hosts = ["api.example", "*.api.example"]
paths = ["/v1/**", "/v2/*/write"]
methods = ["post", "PUT"]
headers = ["X-Api-Key", "X-Tier=free"]

[[rate_limit]]
name = "login.shadow"
match = {}
key = "cookie:session"
algorithm = "fixed_window"
limit = 3
period = "10m"
action = "shadow"
nodelay = false
"#;
    let found = rules(source, &[]);
    assert_eq!(found.len(), 4);
    assert_eq!(
        found[3].name, "join-per-ip",
        "the built-in join limit comes last"
    );

    // Absent fields take their defaults: token bucket, burst = limit, key by IP.
    let api = &found[0];
    assert_eq!(api.name, "api");
    assert_eq!(api.key, vec![KeyPart::Ip]);
    assert_eq!(
        api.params,
        LimitParams {
            algorithm: Algorithm::TokenBucket,
            limit: 100,
            period: Duration::from_secs(1),
            burst: 100,
            delay: 0,
            nodelay: false,
        }
    );
    assert_eq!(
        (api.cost, api.action, api.store, api.status, api.headers),
        (1, Action::Reject, LimitBackend::Local, 429, true)
    );
    assert_eq!(api.on_store_error, OnStoreError::Allow);
    assert_eq!(api.ipv6_prefix, 64);
    assert_eq!(
        (api.max_keys, api.on_keys_full),
        (DEFAULT_MAX_KEYS, OnKeysFull::Reject)
    );

    let writes = &found[1];
    let matcher = writes.matcher.as_ref().unwrap();
    assert_eq!(
        matcher,
        &RequestMatcher::default()
            .with_hosts(["api.example", "*.api.example"])
            .unwrap()
            .with_paths(["/v1/**", "/v2/*/write"])
            .unwrap()
            .with_methods(["POST", "PUT"])
            .unwrap()
            .with_headers(["x-api-key", "x-tier=free"])
            .unwrap()
    );
    assert_eq!(
        writes.key,
        vec![KeyPart::Header("x-api-key".to_owned()), KeyPart::Path]
    );
    assert_eq!(
        writes.params,
        LimitParams {
            algorithm: Algorithm::LeakyBucket,
            limit: 5,
            period: Duration::from_secs(1),
            burst: 12,
            delay: 8,
            nodelay: false,
        }
    );
    assert_eq!(
        (writes.cost, writes.action, writes.status, writes.headers),
        (2, Action::Delay, 503, false)
    );
    assert_eq!(writes.on_store_error, OnStoreError::Deny);
    assert_eq!(writes.ipv6_prefix, 56);

    // An empty `match` selects every request; a single key part may skip the brackets.
    let shadow = &found[2];
    assert_eq!(shadow.matcher, Some(RequestMatcher::default()));
    assert_eq!(shadow.key, vec![KeyPart::Cookie("session".to_owned())]);
    assert_eq!(shadow.action, Action::Shadow);
    assert_eq!(shadow.params.algorithm, Algorithm::FixedWindow);

    // The leaky bucket's burst defaults to none (nginx), nodelay is read.
    let leaky = rules(
        "[[rate_limit]]\nname = \"l\"\nmatch = {}\nalgorithm = \"leaky_bucket\"\nlimit = 5\nperiod = \"1s\"\nnodelay = true\n",
        &[],
    );
    assert_eq!((leaky[0].params.burst, leaky[0].params.nodelay), (0, true));
}

#[test]
fn every_problem_is_reported_with_its_line() {
    let source = r#"[[rate_limit]]
name = "join"
match = { paths = ["rooms/*/join"], methods = ["PO ST"] }
algorithm = "token_bucket"
limit = 0
period = "1m"

[[rate_limit]]
name = "join"
match = { paths = ["/**"] }
algorithm = "tokenbucket"
limit = 10
period = "soon"
status = 200

[[rate_limit]]
match = { paths = ["/**"] }
limit = 10
period = "1s"
key = ["ip", "query:x"]
acton = "reject"
"#;
    check_problems(
        source,
        &[],
        &[
            // The parser hands an inline table's keys over in name order.
            (
                Some(3),
                "rate limit \"join\": match.methods: invalid method \"PO ST\"",
            ),
            (
                Some(3),
                "rate limit \"join\": match.paths: path glob \"rooms/*/join\" must start with '/'",
            ),
            (Some(5), "rate limit \"join\": limit: must be at least 1"),
            (
                Some(9),
                "duplicate rate limit name \"join\", first defined at line 2",
            ),
            (
                Some(11),
                "rate limit \"join\": algorithm: unknown algorithm \"tokenbucket\": expected one of token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_window, gcra; did you mean \"token_bucket\"?",
            ),
            (
                Some(13),
                "rate limit \"join\": period: invalid duration \"soon\"",
            ),
            (
                Some(14),
                "status: must be an error status between 400 and 599, found 200",
            ),
            (Some(16), "[[rate_limit]] has no `name`"),
            (
                Some(20),
                "key: invalid key part \"query:x\": expected \"ip\", \"header:<Name>\"",
            ),
            (
                Some(21),
                "unknown key `acton` in [[rate_limit]]; did you mean `action`?",
            ),
        ],
    );
}

#[test]
fn a_rule_sets_its_own_key_budget() {
    let source = "[[rate_limit]]\nname = \"api-key\"\nmatch = {}\nkey = \"header:X-Api-Key\"\nlimit = 10\nperiod = \"1m\"\nmax_keys = 5000\non_keys_full = \"allow\"\n";
    let found = rules(source, &[]);
    assert_eq!(
        (found[0].max_keys, found[0].on_keys_full),
        (5000, OnKeysFull::Allow)
    );
}

#[test]
fn field_rules() {
    // Line 5 holds the rule's `match`, line 6 on the fields under test.
    let rule_matching = |matcher: &str, fields: &str| {
        format!("[[rate_limit]]\nname = \"r\"\nlimit = 10\nperiod = \"1m\"\n{matcher}\n{fields}\n")
    };
    let rule = |fields: &str| rule_matching("match = {}", fields);
    // The problem is on the last line of `fields`.
    let check_rule = |fields: &str, expected: &str| {
        let line = 5 + fields.lines().count();
        check_problems(&rule(fields), &[], &[(Some(line), expected)]);
    };
    let check_match = |matcher: &str, expected: &str| {
        check_problems(&rule_matching(matcher, ""), &[], &[(Some(5), expected)]);
    };
    check_rule("cost = 0", "rate limit \"r\": cost: must be at least 1");
    check_rule(
        "max_keys = 0",
        "max_keys: must be between 1 and 100000000, found 0",
    );
    check_rule(
        "on_keys_full = \"open\"",
        "unknown on_keys_full \"open\": expected one of reject, allow",
    );
    check_rule(
        "cost = 11",
        "cost: 11 is more than the rule's burst (10), so no request could ever pass",
    );
    check_rule(
        "burst = 3\ncost = 4",
        "cost: 4 is more than the rule's burst (3), so no request could ever pass",
    );
    check_rule("burst = 0", "burst: must be at least 1");
    check_rule(
        "algorithm = \"fixed_window\"\nburst = 5",
        "burst: does not apply to the fixed_window algorithm",
    );
    check_rule(
        "algorithm = \"sliding_log\"\ncost = 11",
        "cost: 11 is more than the rule's limit (10)",
    );
    check_rule(
        "delay = 2",
        "delay: applies only to the leaky_bucket algorithm, not token_bucket",
    );
    check_rule(
        "nodelay = true",
        "nodelay: applies only to the leaky_bucket algorithm, not token_bucket",
    );
    check_rule(
        "algorithm = \"leaky_bucket\"\nburst = 5\ndelay = 2\nnodelay = true",
        "nodelay: `nodelay = true` lets the whole burst through at once",
    );
    check_rule(
        "nodelay = \"yes\"",
        "`nodelay` must be true or false, found string \"yes\"",
    );
    check_rule(
        "action = \"block\"",
        "action: unknown action \"block\": expected one of reject, delay, shadow",
    );
    check_rule(
        "store = \"memory\"",
        "store: unknown store \"memory\": expected one of local, redis",
    );
    check_rule(
        "on_store_error = \"open\"",
        "on_store_error: unknown on_store_error \"open\": expected one of allow, deny",
    );
    check_rule(
        "status = 302",
        "status: must be an error status between 400 and 599",
    );
    check_rule("status = 600", "found 600");
    check_rule(
        "headers = 1",
        "`headers` must be true or false, found integer 1",
    );
    check_rule(
        "ipv6_prefix = 0",
        "ipv6_prefix: must be between 1 and 128, found 0",
    );
    check_rule("ipv6_prefix = 129", "found 129");
    check_rule("key = []", "key: must list at least one part");
    check_rule(
        "key = 5",
        "`key` must be an array of strings, found integer 5",
    );
    // Line 3 holds `limit`, line 4 `period`.
    let check_limit = |limit: &str, period: &str, line: usize, expected: &str| {
        let source = format!("[[rate_limit]]\nname = \"r\"\n{limit}\n{period}\nmatch = {{}}\n");
        check_problems(&source, &[], &[(Some(line), expected)]);
    };
    check_limit(
        "limit = 1",
        "period = \"0s\"",
        4,
        "period: must be longer than zero",
    );
    check_limit(
        "limit = 1",
        "period = 60",
        4,
        "`period` must be a duration string such as \"10m\"",
    );
    check_limit(
        "limit = -1",
        "period = \"1s\"",
        3,
        "`limit` must not be negative, found -1",
    );
    check_limit(
        "limit = \"ten\"",
        "period = \"1s\"",
        3,
        "`limit` must be a non-negative integer",
    );
    check_match(
        "match = \"/api\"",
        "`match` must be a table, found string \"/api\"",
    );
    check_match(
        "match = { path = [\"/a\"] }",
        "unknown key `path` in `match` of [[rate_limit]]; did you mean `paths`?",
    );
    check_match(
        "match = { hosts = [\"a b\"] }",
        "match.hosts: invalid host \"a b\"",
    );
    check_match(
        "match = { headers = [\"X Key\"] }",
        "match.headers: invalid header condition \"X Key\"",
    );
    check_match(
        "match = { paths = [\"/a/x**\"] }",
        "`**` must be a whole segment",
    );

    // Several problems in one key list, each at its own element.
    check_problems(
        &rule("key = [\n  \"ip\",\n  \"ip\",\n  \"header:\",\n]"),
        &[],
        &[
            (Some(8), "key: lists \"ip\" more than once"),
            (Some(9), "key: invalid key part \"header:\""),
        ],
    );
    let missing = "[[rate_limit]]\nname = \"r\"\nmatch = {}\n";
    check_problems(
        missing,
        &[],
        &[
            (Some(1), "rate limit \"r\": needs a `limit`"),
            (Some(1), "rate limit \"r\": needs a `period`"),
        ],
    );
    check_problems(
        "[[rate_limit]]\nname = \"bad name\"\nmatch = {}\nlimit = 1\nperiod = \"1s\"\n",
        &[],
        &[(Some(2), "invalid rate limit name \"bad name\"")],
    );
    check_problems(
        "rate_limit = { name = \"x\" }\n",
        &[],
        &[(Some(1), "`rate_limit` must be an array of tables")],
    );
}

#[test]
fn rules_without_match_need_routes() {
    let rule = "\n[[rate_limit]]\nname = \"checkout\"\nlimit = 10\nperiod = \"1m\"\n";
    check_problems(
        rule,
        &[],
        &[(
            Some(3),
            "rate limit \"checkout\": has no `match` and no [[route]] lists it in `rate_limits`, so it never applies",
        )],
    );
    let routed =
        format!("{rule}\n[[route]]\npaths = [\"/checkout/**\"]\nrate_limits = [\"checkout\"]\n");
    let config = parse_config(&routed, &[]).unwrap();
    assert!(config.rate_limits[0].route_only());
    assert_eq!(config.routes[0].rate_limits, ["checkout"]);
}

#[test]
fn redis_rules_need_the_redis_store() {
    let rule = "[[rate_limit]]\nname = \"shared\"\nmatch = {}\nlimit = 10\nperiod = \"1m\"\nstore = \"redis\"\n";
    check_problems(
        rule,
        &[],
        &[(
            Some(6),
            "rate limit \"shared\": store: store = \"redis\" needs the redis store: set [store] backend = \"redis\"",
        )],
    );
    let with_redis =
        format!("[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n\n{rule}");
    assert_eq!(rules(&with_redis, &[])[0].store, LimitBackend::Redis);
    // The environment can select the backend too.
    let from_env = rules(
        rule,
        &[
            ("ANTEROOM_STORE__BACKEND", "redis"),
            ("ANTEROOM_STORE__URL", "redis://127.0.0.1:6379"),
        ],
    );
    assert_eq!(from_env[0].store, LimitBackend::Redis);
    // A Redis Cluster holds them too.
    let with_cluster =
        format!("[store]\nbackend = \"redis\"\ncluster = [\"redis://10.0.0.1:7000\"]\n\n{rule}");
    assert_eq!(rules(&with_cluster, &[])[0].store, LimitBackend::Redis);
}

#[test]
fn environment_overrides_address_rules_by_name() {
    let found = rules(
        SPEC_EXAMPLE,
        &[
            ("ANTEROOM_RATE_LIMIT__JOIN_PER_IP__LIMIT", "20"),
            ("ANTEROOM_RATE_LIMIT__join-per-ip__ACTION", "shadow"),
            (
                "ANTEROOM_RATE_LIMIT__JOIN_PER_IP__KEY",
                "ip,header:X-Api-Key",
            ),
            (
                "ANTEROOM_RATE_LIMIT__JOIN_PER_IP__MATCH__PATHS",
                "/a/**, /b",
            ),
        ],
    );
    assert_eq!(found[0].params.limit, 20);
    assert_eq!(found[0].action, Action::Shadow);
    assert_eq!(
        found[0].key,
        vec![KeyPart::Ip, KeyPart::Header("x-api-key".to_owned())]
    );
    let paths: Vec<&str> = found[0]
        .matcher
        .as_ref()
        .unwrap()
        .paths
        .iter()
        .map(|glob| glob.as_str())
        .collect();
    assert_eq!(paths, vec!["/a/**", "/b"]);

    check_problems(
        SPEC_EXAMPLE,
        &[("ANTEROOM_RATE_LIMIT__OTHER__LIMIT", "5")],
        &[(
            None,
            "environment variable ANTEROOM_RATE_LIMIT__OTHER__LIMIT: no rate limit named \"other\" in the config file",
        )],
    );
    check_problems(
        SPEC_EXAMPLE,
        &[("ANTEROOM_RATE_LIMIT__JOIN_PER_IP__LIMIT", "0")],
        &[(
            None,
            "environment variable ANTEROOM_RATE_LIMIT__JOIN_PER_IP__LIMIT: rate limit \"join-per-ip\": limit: must be at least 1",
        )],
    );
    check_problems(
        SPEC_EXAMPLE,
        &[("ANTEROOM_RATE_LIMIT__JOIN_PER_IP", "5")],
        &[(
            None,
            "name a rate limit field, as in ANTEROOM_RATE_LIMIT__<NAME>__<FIELD>",
        )],
    );
}
