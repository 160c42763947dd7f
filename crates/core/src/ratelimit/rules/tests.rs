//! Rules against plain-data requests: path normalisation and globs, hosts, header conditions,
//! whole matchers, key parts and keys, and which rules apply to a request.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use super::*;

/// A request as plain data.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    host: Option<String>,
    path: String,
    headers: HashMap<String, String>,
    cookies: HashMap<String, String>,
    claims: HashMap<String, String>,
    ip: IpAddr,
}

impl Request {
    fn new(method: &str, path: &str) -> Request {
        Request {
            method: method.to_owned(),
            host: Some("shop.example".to_owned()),
            path: normalize_path(path).into_owned(),
            headers: HashMap::new(),
            cookies: HashMap::new(),
            claims: HashMap::new(),
            ip: "203.0.113.7".parse().unwrap(),
        }
    }

    fn host(mut self, host: Option<&str>) -> Request {
        self.host = host.map(normalize_host);
        self
    }

    fn header(mut self, name: &str, value: &str) -> Request {
        self.headers
            .insert(name.to_ascii_lowercase(), value.to_owned());
        self
    }

    fn cookie(mut self, name: &str, value: &str) -> Request {
        self.cookies.insert(name.to_owned(), value.to_owned());
        self
    }

    fn claim(mut self, name: &str, value: &str) -> Request {
        self.claims.insert(name.to_owned(), value.to_owned());
        self
    }

    fn ip(mut self, ip: &str) -> Request {
        self.ip = ip.parse().unwrap();
        self
    }
}

impl RequestView for Request {
    fn method(&self) -> &str {
        &self.method
    }
    fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies.get(name).map(String::as_str)
    }
    fn claim(&self, name: &str) -> Option<&str> {
        self.claims.get(name).map(String::as_str)
    }
    fn client_ip(&self) -> IpAddr {
        self.ip
    }
}

fn params() -> LimitParams {
    default_params(Algorithm::TokenBucket, 10, Duration::from_secs(60))
}

fn rule(name: &str) -> RateLimitRule {
    RateLimitRule::new(name, params())
}

#[test]
fn path_normalisation() {
    let check = |raw: &str, expected: &str| {
        assert_eq!(normalize_path(raw), expected, "{raw:?}");
    };
    check("/", "/");
    check("", "/");
    check("/a/b", "/a/b");
    check("/a/b/", "/a/b");
    check("//a///b//", "/a/b");
    check("/a/./b", "/a/b");
    check("/a/../b", "/b");
    check("/../../a", "/a");
    check("/a/b/..", "/a");
    check("/a?x=1", "/a");
    check("/a/?x=/b", "/a");
    check("/a#frag", "/a");
    check("/%61%62c", "/abc");
    check("/a%2Fb", "/a/b");
    check("/a%2fb/", "/a/b");
    check("/a%252Fb", "/a%2Fb");
    check("/%2F%2Fa", "/a");
    check("/a%20b", "/a b");
    check("/a%3Fb", "/a?b");
    check("/%2e%2E/x", "/x");
    check("/a%2e%2e", "/a..");
    check("/100%", "/100%");
    check("/%zz", "/%zz");
    check("/caf%C3%A9", "/café");
    check("/x%FFy", "/x\u{fffd}y");
    check("/café/", "/café");
    check("relative", "/relative");
}

#[test]
fn path_globs() {
    let check = |glob: &str, path: &str, expected: bool| {
        let compiled = PathGlob::new(glob).unwrap();
        assert_eq!(
            compiled.matches(path),
            expected,
            "{glob:?} against {path:?}"
        );
    };
    check("/", "/", true);
    check("/", "/a", false);
    check("/a/b", "/a/b", true);
    check("/a/b", "/a/b/", true);
    check("/a/b", "//a/./b", true);
    check("/a/b", "/a/B", false);
    check("/a/b", "/a/b/c", false);
    check("/a/b/", "/a/b", true);
    // `*` is exactly one non-empty segment.
    check("/rooms/*/join", "/rooms/launch/join", true);
    check("/rooms/*/join", "/rooms/join", false);
    check("/rooms/*/join", "/rooms/a/b/join", false);
    check("/rooms/*/join", "/rooms//join", false);
    check("/rooms/*", "/rooms", false);
    check("/rooms/*", "/rooms/", false);
    check("/*", "/anything", true);
    check("/*", "/", false);
    // `**` is any depth, none included.
    check("/api/**", "/api", true);
    check("/api/**", "/api/", true);
    check("/api/**", "/api/x", true);
    check("/api/**", "/api/x/y/z", true);
    check("/api/**", "/apis/x", false);
    check("/**", "/", true);
    check("/**", "/a/b", true);
    check("/**/join", "/join", true);
    check("/**/join", "/a/b/join", true);
    check("/**/join", "/a/b/join/x", false);
    check("/a/**/b/**/c", "/a/b/c", true);
    check("/a/**/b/**/c", "/a/x/b/y/z/c", true);
    check("/a/**/b/**/c", "/a/x/y/c", false);
    check("/a/**/**/c", "/a/c", true);
    check("/events/*/book/**", "/events/42/book/seat/7", true);
    check("/events/*/book/**", "/events/42/view", false);
    // `*` inside a segment stays inside it.
    check("/static/*.css", "/static/site.css", true);
    check("/static/*.css", "/static/.css", true);
    check("/static/*.css", "/static/site.js", false);
    check("/static/*.css", "/static/a/site.css", false);
    check("/v*/x", "/v1/x", true);
    check("/v*/x", "/x/x", false);
    check("/a*b*c", "/abc", true);
    check("/a*b*c", "/a-b-b-c", true);
    check("/a*b*c", "/ac", false);
    check("/a*b*c", "/acb", false);
    // Requests are normalised before matching, so encodings cannot slip past a rule.
    check("/rooms/*/join", "/rooms/launch/%6Aoin", true);
    check("/rooms/*/join", "/rooms/launch/x/../join/", true);
    check("/rooms/*/join", "/rooms%2Flaunch%2Fjoin", true);
}

#[test]
fn path_glob_errors() {
    let check = |glob: &str, expected: GlobError| {
        assert_eq!(PathGlob::new(glob), Err(expected), "{glob:?}");
    };
    check("api/**", GlobError::NotAbsolute("api/**".to_owned()));
    check("", GlobError::NotAbsolute(String::new()));
    check(
        "/api/a**",
        GlobError::DoubleStarInSegment("/api/a**".to_owned()),
    );
    check("/a b", GlobError::InvalidCharacter("/a b".to_owned()));
    check("/a?b", GlobError::InvalidCharacter("/a?b".to_owned()));
    assert_eq!(PathGlob::new("/a/**").unwrap().to_string(), "/a/**");
}

#[test]
fn hosts() {
    let check = |pattern: &str, host: &str, expected: bool| {
        let pattern: HostPattern = pattern.parse().unwrap();
        assert_eq!(
            pattern.matches(&normalize_host(host)),
            expected,
            "{pattern} against {host:?}"
        );
    };
    check("shop.example", "shop.example", true);
    check("shop.example", "SHOP.Example", true);
    check("shop.example", "shop.example:8080", true);
    check("shop.example", "shop.example.", true);
    check("Shop.Example.", "shop.example", true);
    check("shop.example", "api.shop.example", false);
    check("*.shop.example", "api.shop.example", true);
    check("*.shop.example", "a.b.shop.example:443", true);
    check("*.shop.example", "shop.example", false);
    check("*.shop.example", "evilshop.example", false);
    check("[::1]", "[::1]:8080", true);
    check("127.0.0.1", "127.0.0.1:80", true);
    for bad in [
        "",
        "*.",
        "a b",
        "a..b",
        "*",
        "shop.example/x",
        ".shop.example",
    ] {
        assert!(bad.parse::<HostPattern>().is_err(), "{bad:?} is refused");
    }
}

#[test]
fn header_conditions() {
    let request = Request::new("GET", "/")
        .header("X-Api-Key", "k1")
        .header("X-Tier", " free ");
    let check = |condition: &str, expected: bool| {
        let parsed: HeaderCondition = condition.parse().unwrap();
        assert_eq!(parsed.holds(&request), expected, "{condition:?}");
    };
    check("X-Api-Key", true);
    check("x-api-key", true);
    check("X-Other", false);
    check("X-Tier=free", true);
    check("X-Tier = free", true);
    check("X-Tier=Free", false);
    check("X-Api-Key=k2", false);
    check("X-Other=x", false);
    for bad in ["", "X Tier", "=x", "X:y=1", "X=\u{7f}"] {
        assert!(
            bad.parse::<HeaderCondition>().is_err(),
            "{bad:?} is refused"
        );
    }
    assert_eq!(
        "X-Tier=free"
            .parse::<HeaderCondition>()
            .unwrap()
            .to_string(),
        "x-tier=free"
    );
}

#[test]
fn matchers() {
    let check = |matcher: &RequestMatcher, request: &Request, expected: bool| {
        assert_eq!(
            matcher.matches(request),
            expected,
            "{matcher:?} against {request:?}"
        );
    };
    let join = Request::new("POST", "/_anteroom/v1/rooms/launch/join");
    let status = Request::new("GET", "/_anteroom/v1/rooms/launch/status");

    // An empty matcher selects everything.
    check(&RequestMatcher::default(), &join, true);
    check(&RequestMatcher::default(), &status, true);

    let spec_example = RequestMatcher::default()
        .with_paths(["/_anteroom/v1/rooms/*/join"])
        .unwrap()
        .with_methods(["POST"])
        .unwrap();
    check(&spec_example, &join, true);
    check(&spec_example, &status, false);
    check(
        &spec_example,
        &Request::new("GET", "/_anteroom/v1/rooms/launch/join"),
        false,
    );

    // Methods are upper-cased in the matcher and compared without case: an origin that reads
    // `post` as `POST` must not see a `post` pass a rule for `POST` unchecked.
    let lower = RequestMatcher::default().with_methods(["post"]).unwrap();
    assert_eq!(lower.methods, vec!["POST".to_owned()]);
    check(&lower, &join, true);
    check(&lower, &Request::new("post", "/"), true);
    check(&lower, &Request::new("pOsT", "/"), true);
    check(&lower, &Request::new("PUT", "/"), false);
    // A HEAD is the GET without its body: a rule or route for GET selects it too.
    let get = RequestMatcher::default().with_methods(["GET"]).unwrap();
    check(&get, &Request::new("HEAD", "/"), true);
    check(&get, &Request::new("head", "/"), true);
    check(&get, &Request::new("POST", "/"), false);
    let head = RequestMatcher::default().with_methods(["HEAD"]).unwrap();
    check(&head, &Request::new("GET", "/"), false);
    check(
        &spec_example,
        &Request::new("post", "/_anteroom/v1/rooms/launch/join"),
        true,
    );

    // Any path, any host, any method of each list.
    let either = RequestMatcher::default()
        .with_paths(["/a/**", "/b"])
        .unwrap()
        .with_hosts(["shop.example", "*.api.example"])
        .unwrap();
    check(&either, &Request::new("GET", "/a/x"), true);
    check(&either, &Request::new("GET", "/b"), true);
    check(&either, &Request::new("GET", "/c"), false);
    check(
        &either,
        &Request::new("GET", "/b").host(Some("v2.api.example:443")),
        true,
    );
    check(
        &either,
        &Request::new("GET", "/b").host(Some("other.example")),
        false,
    );
    // A host list needs a host.
    check(&either, &Request::new("GET", "/b").host(None), false);

    // Every header condition must hold.
    let both = RequestMatcher::default()
        .with_headers(["X-Api-Key", "X-Tier=free"])
        .unwrap();
    let keyed = Request::new("GET", "/").header("X-Api-Key", "k");
    check(&both, &keyed, false);
    check(&both, &keyed.clone().header("X-Tier", "free"), true);
    check(&both, &keyed.header("X-Tier", "pro"), false);

    for (result, expected) in [
        (
            RequestMatcher::default().with_paths(["api"]).map(|_| ()),
            "path glob \"api\" must start with '/'",
        ),
        (
            RequestMatcher::default().with_methods(["GE T"]).map(|_| ()),
            "invalid method \"GE T\"",
        ),
        (
            RequestMatcher::default().with_hosts(["a b"]).map(|_| ()),
            "invalid host \"a b\"",
        ),
        (
            RequestMatcher::default().with_headers(["a b"]).map(|_| ()),
            "invalid header condition \"a b\"",
        ),
    ] {
        let message = result.unwrap_err().to_string();
        assert!(message.contains(expected), "{message:?}");
    }
}

#[test]
fn key_parts() {
    let check = |text: &str, expected: Option<KeyPart>| {
        let parsed = text.parse::<KeyPart>().ok();
        assert_eq!(parsed, expected, "{text:?}");
        if let Some(part) = parsed {
            let written = part.to_string();
            assert_eq!(written.parse::<KeyPart>().unwrap(), part, "{written:?}");
        }
    };
    check("ip", Some(KeyPart::Ip));
    check("path", Some(KeyPart::Path));
    check("host", Some(KeyPart::Host));
    check(
        "header:X-Api-Key",
        Some(KeyPart::Header("x-api-key".to_owned())),
    );
    check(
        "cookie:session",
        Some(KeyPart::Cookie("session".to_owned())),
    );
    check("claim:sub", Some(KeyPart::Claim("sub".to_owned())));
    check(
        "claim:https://x/tenant",
        Some(KeyPart::Claim("https://x/tenant".to_owned())),
    );
    check("IP", None);
    check("ip:x", None);
    check("header:", None);
    check("header:X Key", None);
    check("cookie:a=b", None);
    check("claim:", None);
    check("claim:a b", None);
    check("query:x", None);
    check("", None);
}

#[test]
fn keys() {
    let request = Request::new("GET", "/a//b/")
        .header("X-Api-Key", " key-1 ")
        .cookie("session", "s1")
        .claim("sub", "user-9")
        .host(Some("Shop.Example:8443"));
    let check = |parts: &[&str], request: &Request, expected: Option<&str>| {
        let mut keyed = rule("r");
        keyed.key = parts.iter().map(|part| part.parse().unwrap()).collect();
        assert_eq!(keyed.key_for(request).as_deref(), expected, "{parts:?}");
        // Written into text on the stack (as the lone rule's key is), whether it fits or
        // spills to the heap: the same key.
        let mut short = crate::inline_text::InlineText::<8>::new();
        let mut long = crate::inline_text::InlineText::<256>::new();
        let written = [
            keyed
                .write_key(request, &mut short)
                .map(|()| short.as_str()),
            keyed.write_key(request, &mut long).map(|()| long.as_str()),
        ];
        assert_eq!(written, [expected, expected], "{parts:?}");
    };
    check(&["ip"], &request, Some("r|203.0.113.7"));
    check(&["header:X-Api-Key"], &request, Some("r|key-1"));
    check(&["cookie:session"], &request, Some("r|s1"));
    check(&["claim:sub"], &request, Some("r|user-9"));
    check(&["path"], &request, Some("r|/a/b"));
    check(&["host"], &request, Some("r|shop.example"));
    check(
        &["ip", "header:x-api-key", "path"],
        &request,
        Some("r|203.0.113.7|key-1|/a/b"),
    );
    // A missing or empty part: the rule does not count the request.
    check(&["header:X-Other"], &request, None);
    check(&["ip", "cookie:other"], &request, None);
    check(&["claim:tenant"], &request, None);
    check(&["host"], &request.clone().host(None), None);
    check(
        &["header:X-Api-Key"],
        &request.clone().header("X-Api-Key", "  "),
        None,
    );
    // IPv6 clients by /64, or the rule's prefix.
    let v6 = request.clone().ip("2001:db8:1:2:aaaa::1");
    check(&["ip"], &v6, Some("r|2001:db8:1:2::/64"));
    let mut wide = rule("r");
    wide.ipv6_prefix = 48;
    assert_eq!(wide.key_for(&v6).as_deref(), Some("r|2001:db8:1::/48"));
    // Separators are escaped, so values cannot run into each other.
    let tricky = Request::new("GET", "/").header("A", "x|y").header("B", "z");
    let shifted = Request::new("GET", "/").header("A", "x").header("B", "y|z");
    check(&["header:A", "header:B"], &tricky, Some("r|x%7Cy|z"));
    check(&["header:A", "header:B"], &shifted, Some("r|x|y%7Cz"));
    check(
        &["header:A"],
        &Request::new("GET", "/").header("A", "100%#1"),
        Some("r|100%25%231"),
    );
    // Long values are hashed: bounded, and distinct values stay distinct.
    let long_a = "a".repeat(MAX_KEY_PART_LEN + 1);
    let long_b = format!("{}b", "a".repeat(MAX_KEY_PART_LEN));
    let key_of = |value: &str| {
        let mut keyed = rule("r");
        keyed.key = vec![KeyPart::Header("a".to_owned())];
        keyed
            .key_for(&Request::new("GET", "/").header("A", value))
            .unwrap()
    };
    assert_eq!(key_of(&long_a).len(), "r|#".len() + 32);
    assert_ne!(key_of(&long_a), key_of(&long_b));
    assert_eq!(key_of(&long_a), key_of(&long_a));
    assert_eq!(
        key_of(&"a".repeat(MAX_KEY_PART_LEN)),
        format!("r|{}", "a".repeat(MAX_KEY_PART_LEN))
    );
}

#[test]
fn applicable_rules_select_by_match_and_route_once_each() {
    let join_matcher = RequestMatcher::default()
        .with_paths(["/_anteroom/v1/rooms/*/join"])
        .unwrap()
        .with_methods(["POST"])
        .unwrap();
    let join = RateLimitRule {
        matcher: Some(join_matcher),
        ..rule("join-per-ip")
    };
    let everything = rule("global");
    let per_key = RateLimitRule {
        key: vec![KeyPart::Header("x-api-key".to_owned())],
        ..rule("per-key")
    };
    let route_only = RateLimitRule {
        matcher: None,
        ..rule("checkout")
    };
    assert!(route_only.route_only());
    assert!(!join.route_only());
    let rules = vec![join, everything, per_key, route_only];

    let check = |request: &Request, route_rules: &[&str], expected: &[(&str, &str)]| {
        let applied: Vec<(&str, String)> = applicable_rules(&rules, request, route_rules)
            .map(|applied| (applied.rule.name.as_str(), applied.key))
            .collect();
        let expected: Vec<(&str, String)> = expected
            .iter()
            .map(|(name, key)| (*name, (*key).to_owned()))
            .collect();
        assert_eq!(applied, expected, "{request:?} on route {route_rules:?}");
    };
    let join_request = Request::new("POST", "/_anteroom/v1/rooms/launch/join");
    check(
        &join_request,
        &[],
        &[
            ("join-per-ip", "join-per-ip|203.0.113.7"),
            ("global", "global|203.0.113.7"),
        ],
    );
    check(
        &join_request.clone().header("X-Api-Key", "k"),
        &[],
        &[
            ("join-per-ip", "join-per-ip|203.0.113.7"),
            ("global", "global|203.0.113.7"),
            ("per-key", "per-key|k"),
        ],
    );
    // Route-only rules apply when the route names them; a rule named by the route that also
    // matches applies once.
    check(
        &Request::new("GET", "/checkout"),
        &["checkout", "global", "global", "unknown"],
        &[
            ("global", "global|203.0.113.7"),
            ("checkout", "checkout|203.0.113.7"),
        ],
    );
    check(
        &Request::new("GET", "/checkout"),
        &[],
        &[("global", "global|203.0.113.7")],
    );
}

#[test]
fn config_spellings() {
    for action in [Action::Reject, Action::Delay, Action::Shadow] {
        assert_eq!(Action::parse(action.as_str()), Some(action));
    }
    for backend in [LimitBackend::Local, LimitBackend::Redis] {
        assert_eq!(LimitBackend::parse(backend.as_str()), Some(backend));
    }
    for policy in [OnStoreError::Allow, OnStoreError::Deny] {
        assert_eq!(OnStoreError::parse(policy.as_str()), Some(policy));
    }
    assert_eq!(Action::parse("block"), None);
    assert_eq!(LimitBackend::parse("memory"), None);
    assert_eq!(OnStoreError::parse("open"), None);
}

#[test]
fn rule_names() {
    let check = |name: &str, expected: bool| {
        assert_eq!(is_valid_rule_name(name), expected, "{name:?}");
    };
    check("join-per-ip", true);
    check("api_v2.writes", true);
    check("A1", true);
    check(&"a".repeat(64), true);
    check(&"a".repeat(65), false);
    check("", false);
    check("-x", false);
    check("a b", false);
    check("a\"b", false);
    check("a|b", false);
}

#[test]
fn default_parameters() {
    let check = |algorithm: Algorithm, expected_burst: u64| {
        let params = default_params(algorithm, 10, Duration::from_secs(1));
        assert_eq!(params.burst, expected_burst, "{algorithm:?}");
        assert_eq!((params.delay, params.nodelay), (0, false));
    };
    check(Algorithm::TokenBucket, 10);
    check(Algorithm::Gcra, 10);
    check(Algorithm::LeakyBucket, 0);
    check(Algorithm::FixedWindow, 10);
    check(Algorithm::SlidingLog, 10);
    check(Algorithm::SlidingWindow, 10);
}
