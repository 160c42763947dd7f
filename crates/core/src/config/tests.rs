//! Tests of the config model: whole files in, typed values or located problems out.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::clock::Timestamp;
use crate::config::RawRoom;
use crate::ids::RoomId;
use crate::ratelimit::rules::RequestMatcher;
use crate::room::{
    Identity, IdleMode, Mode, Order, Phase, RoomConfig, Schedule, SiteJwt, SiteKeys,
    StoreErrorPolicy, TokenLocation,
};

mod gateway;
mod tls;

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

fn room_id(id: &str) -> RoomId {
    RoomId::new(id).unwrap()
}

fn hash(byte: u8) -> KeyHash {
    KeyHash([byte; 32])
}

/// Parses `source` with `env` and asserts the config is `expected`.
pub(super) fn check_config(source: &str, env_pairs: &[(&str, &str)], expected: &Config) {
    match parse_config(source, &env(env_pairs)) {
        Ok(config) => assert_eq!(&config, expected),
        Err(errors) => panic!("unexpected problems:\n{errors}"),
    }
}

/// Parses `source` with `env` and asserts exactly the `expected` problems: each a line and a
/// piece of its message, in the order reported.
pub(super) fn check_problems(
    source: &str,
    env_pairs: &[(&str, &str)],
    expected: &[(Option<usize>, &str)],
) {
    let errors = match parse_config(source, &env(env_pairs)) {
        Ok(config) => panic!("expected problems, got {config:#?}"),
        Err(errors) => errors,
    };
    let found: Vec<(Option<usize>, &str)> = errors
        .0
        .iter()
        .map(|problem| (problem.line, problem.message.as_str()))
        .collect();
    assert_eq!(found.len(), expected.len(), "problems:\n{errors}");
    for ((line, message), (expected_line, expected_text)) in found.iter().zip(expected) {
        assert_eq!(
            line, expected_line,
            "line of {message:?}; problems:\n{errors}"
        );
        assert!(
            message.contains(expected_text),
            "{message:?} should contain {expected_text:?}"
        );
    }
}

const FULL: &str = r#"
[server]
listen = "127.0.0.1:8000"
admin_listen = "[::1]:9999"
public_url = "https://queue.example.com/"
issuer = "https://issuer.example.com"
trusted_proxies = ["10.0.0.0/8", "::1"]
templates_dir = "/srv/anteroom/pages"

[upstream]
url = "http://127.0.0.1:3000"

[store]
backend = "embedded"
path = "/var/lib/anteroom/state.redb"

[keys]
dir = "/etc/anteroom/keys"
algorithm = "ES256"

[auth]
admin_keys = ["sha256:0101010101010101010101010101010101010101010101010101010101010101"]
read_keys = []
service_keys = [
  "sha256:0202020202020202020202020202020202020202020202020202020202020202",
  "SHA256:03" ,
]

[[room]]
id = "launch"
routes = ["/events/*/book/**", "/api/v1/reservations/**"]
max_active = 1000
admit_per_minute = 3000
admit_burst = 100
session_ttl = "10m"
session_max = "1h"
claim_ttl = "2m"
ticket_idle_ttl = "5m"
mode = "queue"
order = "fifo"
identity = "anonymous"
requires = []
page_template = ""
on_store_error = "open"

[[room]]
id = "checkout"
max_active = 50
admit_per_minute = 600
session_ttl = "15m"
claim_ttl = "90s"
ticket_idle_ttl = "1m"
history_retention = "10m"
mode = "queue_all"
order = "random"
identity = "header:X-User-Id"
requires = ["launch"]
page_template = "pages/checkout.html"
on_store_error = "closed"
"#;

#[test]
fn full_file_resolves_to_typed_values() {
    // The last service key is malformed on purpose: fix it, then check the whole value.
    check_problems(
        FULL,
        &[],
        &[(Some(26), "invalid key hash: expected \"sha256:\"")],
    );
    let source = FULL.replace(r#"  "SHA256:03" ,"#, "");

    let launch = RoomConfig {
        id: room_id("launch"),
        routes: vec![
            "/events/*/book/**".to_owned(),
            "/api/v1/reservations/**".to_owned(),
        ],
        max_active: 1000,
        admit_per_minute: 3000,
        admit_burst: 100,
        session_ttl: Duration::from_secs(600),
        session_max: Some(Duration::from_secs(3600)),
        claim_ttl: Duration::from_secs(120),
        ticket_idle_ttl: Duration::from_secs(300),
        history_retention: Duration::from_secs(3600),
        mode: Mode::Queue,
        order: Order::Fifo,
        identity: Identity::Anonymous,
        requires: vec![],
        page_template: String::new(),
        on_store_error: StoreErrorPolicy::Open,
        oidc: None,
        adaptive: None,
        challenge: None,
        schedule: Schedule::default(),
        priority: Vec::new(),
    };
    let checkout = RoomConfig {
        id: room_id("checkout"),
        routes: vec![],
        max_active: 50,
        admit_per_minute: 600,
        admit_burst: 10,
        session_ttl: Duration::from_secs(900),
        session_max: None,
        claim_ttl: Duration::from_secs(90),
        ticket_idle_ttl: Duration::from_secs(60),
        history_retention: Duration::from_secs(600),
        mode: Mode::QueueAll,
        order: Order::Random,
        identity: Identity::Header("X-User-Id".to_owned()),
        requires: vec![room_id("launch")],
        page_template: "pages/checkout.html".to_owned(),
        on_store_error: StoreErrorPolicy::Closed,
        oidc: None,
        adaptive: None,
        challenge: None,
        schedule: Schedule::default(),
        priority: Vec::new(),
    };
    let expected = Config {
        server: ServerConfig {
            listen: "127.0.0.1:8000".parse().unwrap(),
            admin_listen: "[::1]:9999".parse().unwrap(),
            public_url: "https://queue.example.com".to_owned(),
            issuer: "https://issuer.example.com".to_owned(),
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            workers: None,
            templates_dir: Some(PathBuf::from("/srv/anteroom/pages")),
            ..ServerConfig::default()
        },
        upstream: Some(UpstreamConfig::new("http://127.0.0.1:3000")),
        store: StoreConfig::Embedded {
            path: PathBuf::from("/var/lib/anteroom/state.redb"),
            checkpoint_bytes: super::DEFAULT_CHECKPOINT_BYTES,
        },
        keys: KeysConfig {
            dir: PathBuf::from("/etc/anteroom/keys"),
            algorithm: "ES256".to_owned(),
            ticket_secret_retention: super::DEFAULT_TICKET_SECRET_RETENTION,
            shared: None,
        },
        auth: AuthConfig {
            admin_keys: vec![hash(1)],
            read_keys: vec![],
            service_keys: vec![hash(2)],
        },
        routes: vec![],
        rooms: vec![launch, checkout],
        rate_limits: default_join_rule().into_iter().collect(),
        websocket: None,
        events: vec![],
        verify: VerifyConfig::default(),
        log: LogConfig::default(),
        tracing: TracingConfig::default(),
    };
    // The room's `routes` shorthand is a route built from the room.
    assert_eq!(
        super::room_route(&expected.rooms[0]).unwrap(),
        Some(RouteConfig {
            name: "room-launch".to_owned(),
            matcher: RequestMatcher::default()
                .with_paths(["/events/*/book/**", "/api/v1/reservations/**"])
                .unwrap(),
            rooms: vec![room_id("launch")],
            rate_limits: vec![],
            bypass: false,
            page: PageMode::Inline,
        })
    );
    assert_eq!(super::room_route(&expected.rooms[1]).unwrap(), None);
    check_config(&source, &[], &expected);
}

#[test]
fn absent_sections_take_defaults() {
    let defaults = Config {
        server: ServerConfig {
            listen: "0.0.0.0:8080".parse().unwrap(),
            admin_listen: "127.0.0.1:9090".parse().unwrap(),
            public_url: "http://localhost:8080".to_owned(),
            issuer: "http://localhost:8080".to_owned(),
            trusted_proxies: vec![],
            workers: None,
            ..ServerConfig::default()
        },
        upstream: None,
        store: StoreConfig::Embedded {
            path: PathBuf::from("data/anteroom.redb"),
            checkpoint_bytes: super::DEFAULT_CHECKPOINT_BYTES,
        },
        keys: KeysConfig {
            dir: PathBuf::from("data/keys"),
            algorithm: "EdDSA".to_owned(),
            ticket_secret_retention: std::time::Duration::from_secs(24 * 3600),
            shared: None,
        },
        auth: AuthConfig::default(),
        rooms: vec![],
        // The built-in per-IP join limit is on by default (§12).
        rate_limits: default_join_rule().into_iter().collect(),
        routes: vec![],
        websocket: None,
        events: vec![],
        verify: VerifyConfig::default(),
        log: LogConfig::default(),
        tracing: TracingConfig::default(),
    };
    // `Config::default()` is every section's default; the file adds the built-in join rule.
    let with_join_rule = Config {
        rate_limits: default_join_rule().into_iter().collect(),
        ..Config::default()
    };
    assert_eq!(with_join_rule, defaults);
    check_config("", &[], &defaults);
    check_config("# nothing but a comment\n", &[], &defaults);
    check_config("[server]\n[store]\n[keys]\n[auth]\n", &[], &defaults);

    // The issuer follows the public URL unless set.
    let mut expected = defaults.clone();
    expected.server.public_url = "https://q.example".to_owned();
    expected.server.issuer = "https://q.example".to_owned();
    check_config(
        "[server]\npublic_url = \"https://q.example//\"\n",
        &[],
        &expected,
    );

    // A room with only an id takes every §3 default.
    let mut expected = defaults;
    expected.rooms = vec![RoomConfig::with_defaults(room_id("a"))];
    check_config("[[room]]\nid = \"a\"\n", &[], &expected);
}

#[test]
fn every_problem_is_reported_with_its_line() {
    let source = r#"[server]
listen = "0.0.0.0:8080"
admin_listn = "127.0.0.1:9090"

[[room]]
id = "launch"
session_ttl = "ten minutes"
mode = "queu"

[[room]]
id = "launch"
max_active = -1
admit_burst = 0

[[route]]
paths = ["/**"]
"#;
    check_problems(
        source,
        &[],
        &[
            (
                Some(3),
                "unknown key `admin_listn` in [server]; did you mean `admin_listen`?",
            ),
            (
                Some(7),
                "room \"launch\": session_ttl: invalid duration \"ten minutes\"",
            ),
            (
                Some(8),
                "room \"launch\": mode: unknown mode \"queu\": expected one of queue, queue_all, passthrough, closed; did you mean \"queue\"?",
            ),
            (
                Some(11),
                "duplicate room id \"launch\", first defined at line 6",
            ),
            (Some(12), "`max_active` must not be negative, found -1"),
            (Some(13), "room \"launch\": admit_burst: must be at least 1"),
            (
                Some(15),
                "route \"route-1\": needs `rooms`, `rate_limits` or `bypass = true`",
            ),
        ],
    );
}

#[test]
fn room_field_rules() {
    let room = |fields: &str| format!("[[room]]\nid = \"a\"\n{fields}\n");
    let check_room = |fields: &str, expected: &str| {
        check_problems(&room(fields), &[], &[(Some(3), expected)]);
    };
    check_room(
        "session_ttl = \"0s\"",
        "session_ttl: must be longer than zero, found \"0s\"",
    );
    check_room(
        "claim_ttl = 120",
        "`claim_ttl` must be a duration string such as \"10m\", found integer 120",
    );
    check_room(
        "history_retention = \"30s\"",
        "history_retention: must be between 1m and 7d, found \"30s\"",
    );
    check_room(
        "history_retention = \"8d\"",
        "history_retention: must be between 1m and 7d, found \"8d\"",
    );
    check_room(
        "history_retention = \"an hour\"",
        "history_retention: invalid duration \"an hour\"",
    );
    check_room(
        "session_max = \"5m\"",
        "session_max: must be at least session_ttl (10m), found \"5m\"",
    );
    check_room(
        "order = \"lifo\"",
        "unknown order \"lifo\": expected one of fifo, random",
    );
    check_room("identity = \"cookie:x\"", "invalid identity \"cookie:x\"");
    check_room(
        "identity = \"header:X User\"",
        "\"X User\" is not a valid header name",
    );
    check_room(
        "on_store_error = \"shut\"",
        "unknown on_store_error \"shut\"",
    );
    check_room(
        "requires = [\"a\"]",
        "requires: a room cannot require itself",
    );
    check_room("requires = [\"b\"]", "requires: unknown room \"b\"");
    check_room(
        "routes = [\"events/**\"]",
        "route \"events/**\" must be a path starting with '/'",
    );
    check_room(
        "max_activ = 5",
        "unknown key `max_activ` in [[room]]; did you mean `max_active`?",
    );
    check_room(
        "max_active = 1.5",
        "`max_active` must be a non-negative integer, found float 1.5",
    );
    check_room(
        "identity = \"jwt:sub\"",
        "identity: \"jwt:sub\" needs a [room.identity_jwt] table",
    );
    check_problems(
        &room(
            "identity = \"jwt:sub\"\n[room.identity_jwt]\nheader = \"Authorization\"\njwks_url = \"https://login.example/jwks\"\nissuer = \"https://login.example/\"\nrequird = true",
        ),
        &[],
        &[
            (Some(4), "identity_jwt.audience: is required"),
            (
                Some(8),
                "unknown key `requird` in [room.identity_jwt]; did you mean `required`?",
            ),
        ],
    );
    check_room(
        "challenge = { kind = \"captcha\" }",
        "room \"a\": challenge: unknown challenge kind \"captcha\": expected \"pow\"",
    );
    check_room(
        "challenge = { kind = \"pow\", difficulty = 40 }",
        "challenge: `difficulty` must be between 1 and 32, found 40",
    );
    check_room(
        "challenge = { kind = \"pow\", dificulty = 4 }",
        "unknown key `dificulty` in `challenge`; did you mean `difficulty`?",
    );
    check_room(
        "[room.adaptive]\ntarget_p95_ms = 200\nmin_per_minute = 600\nmax_per_minute = 60",
        "adaptive: `max_per_minute` (60) must be at least `min_per_minute` (600)",
    );
    check_room(
        "[room.adaptive]\ntarget_p95_ms = 200\nmax_per_minute = 60",
        "adaptive: `min_per_minute` is required",
    );
    check_room(
        "[room.adaptive]\ntarget_p95_ms = 200\nmin_per_minute = 1\nmax_per_minute = 60\nmax_error_rate = 1.5",
        "adaptive: `max_error_rate` must be between 0 and 1, found 1.5",
    );
    check_problems(
        &room(
            "[room.adaptive]\ntarget_p95_ms = 200\nmin_per_minute = 1\nmax_per_minute = 60\nmax_error_rate = \"5%\"",
        ),
        &[],
        &[(
            Some(7),
            "`max_error_rate` must be a number such as 0.05, found string \"5%\"",
        )],
    );
    check_problems(
        "[[room]]\nmax_active = 1\n",
        &[],
        &[(Some(1), "[[room]] has no `id`")],
    );
    check_problems(
        "[[room]]\nid = \"Launch\"\n",
        &[],
        &[(Some(2), "invalid room id \"Launch\"")],
    );
    check_problems(
        "room = { id = \"a\" }\n",
        &[],
        &[(Some(1), "must be an array of tables")],
    );

    // A jwt identity reads its [room.identity_jwt] table.
    let config = parse_config(
        &room(
            "identity = \"jwt:sub\"\n[room.identity_jwt]\ncookie = \"site_session\"\nhs256_secret_file = \"site.key\"\nissuer = \"shop\"\naudience = \"shop-web\"\nrequired = true",
        ),
        &[],
    )
    .unwrap();
    assert_eq!(
        config.rooms[0].identity,
        Identity::JwtClaim(Box::new(SiteJwt {
            claim: "sub".to_owned(),
            token_in: TokenLocation::Cookie("site_session".to_owned()),
            keys: SiteKeys::Hs256SecretFile("site.key".into()),
            issuer: "shop".to_owned(),
            audience: "shop-web".to_owned(),
            required: true,
        }))
    );

    // The default burst follows admit_per_minute.
    let config = parse_config(&room("admit_per_minute = 6000"), &[]).unwrap();
    assert_eq!(config.rooms[0].admit_burst, 100);
}

#[test]
fn room_oidc() {
    let secret = format!("sha256:{}", "ab".repeat(32));
    let source = format!(
        "[[room]]\nid = \"a\"\n[room.oidc]\nclient_secret = \"{secret}\"\nredirect_uris = [\"https://app.example/cb\"]\ncode_ttl = \"20s\"\n"
    );
    let config = parse_config(&source, &[]).unwrap();
    let client = config.rooms[0].oidc.clone().unwrap();
    assert_eq!(
        client.client_secret.map(|hash| hash.to_string()),
        Some(secret)
    );
    assert_eq!(client.redirect_uris, ["https://app.example/cb"]);
    assert_eq!(client.code_ttl, Duration::from_secs(20));
    // The raw form keeps the client, as the store and the admin API show it.
    let raw = RawRoom::from_config(&config.rooms[0]);
    assert_eq!(raw.resolve().unwrap(), config.rooms[0]);

    check_problems(
        "[[room]]\nid = \"a\"\n[room.oidc]\nclient_secret = \"hunter2\"\nredirect_uris = [\"/cb\"]\ncode_ttl = \"5m\"\nscope = \"openid\"\n",
        &[],
        &[
            (Some(4), "room \"a\": oidc.client_secret: invalid key hash"),
            (
                Some(5),
                "room \"a\": oidc.redirect_uris: \"/cb\" must be an absolute",
            ),
            (
                Some(6),
                "room \"a\": oidc.code_ttl: must be between 1s and 60s",
            ),
            (Some(7), "unknown key `scope` in [room.oidc]"),
        ],
    );
    check_problems(
        "[[room]]\nid = \"a\"\n[room.oidc]\ncode_ttl = \"30s\"\n",
        &[],
        &[(
            Some(3),
            "room \"a\": oidc.redirect_uris: must list at least one",
        )],
    );
    check_problems(
        "[[room]]\nid = \"a\"\noidc = 1\n",
        &[],
        &[(Some(3), "`oidc` must be a table")],
    );
}

#[test]
fn requirement_cycles() {
    let source = "[[room]]\nid = \"a\"\nrequires = [\"b\"]\n\n[[room]]\nid = \"b\"\nrequires = [\"c\"]\n\n[[room]]\nid = \"c\"\nrequires = [\"a\"]\n";
    check_problems(
        source,
        &[],
        &[(
            Some(3),
            "room \"a\": requires: rooms require each other in a cycle: a -> b -> c -> a",
        )],
    );
    let chain = "[[room]]\nid = \"a\"\nrequires = [\"b\"]\n\n[[room]]\nid = \"b\"\n";
    assert_eq!(
        parse_config(chain, &[]).unwrap().rooms[0].requires,
        vec![room_id("b")]
    );
}

#[test]
fn other_sections_of_later_versions_are_reported() {
    check_problems(
        "[[events.sink]]\nkind = \"webhook\"\n",
        &[],
        &[
            (Some(1), "a webhook sink needs a `url`"),
            (Some(1), "a webhook sink needs a `secret`"),
        ],
    );
    check_problems(
        "[sever]\nlisten = \"x\"\n",
        &[],
        &[(Some(1), "unknown key `sever`; did you mean `server`?")],
    );
}

#[test]
fn server_store_keys_and_auth_rules() {
    check_problems(
        "[server]\nlisten = \"8080\"\n",
        &[],
        &[(Some(2), "invalid socket address \"8080\" for `listen`")],
    );
    check_problems(
        "[server]\npublic_url = \"queue.example\"\n",
        &[],
        &[(Some(2), "`public_url` must start with http:// or https://")],
    );
    check_problems(
        "[server]\ntrusted_proxies = [\n  \"10.0.0.0/8\",\n  \"10.0.0.0/33\",\n]\n",
        &[],
        &[(Some(4), "invalid CIDR \"10.0.0.0/33\"")],
    );
    check_problems(
        "[upstream]\nurl = \"ftp://x\"\n",
        &[],
        &[(Some(2), "`url` must start with http://")],
    );
    check_problems(
        "[upstream]\n",
        &[],
        &[(Some(1), "[upstream] needs a `url`")],
    );
    check_problems(
        "[keys]\nalgorithm = \"eddsa\"\n",
        &[],
        &[(Some(2), "did you mean \"EdDSA\"?")],
    );
    check_problems(
        "[keys]\nticket_secret_retention = \"a day\"\n",
        &[],
        &[(
            Some(2),
            "`ticket_secret_retention`: invalid duration \"a day\"",
        )],
    );
    check_problems(
        "[auth]\nadmin_keys = \"hunter2\"\n",
        &[],
        &[(
            Some(2),
            "`admin_keys` must be an array of \"sha256:<hex>\" strings",
        )],
    );
    check_problems(
        "[auth]\nadmin_keys = [\"hunter2\"]\n",
        &[],
        &[(Some(2), "invalid key hash")],
    );
    for source in [
        "[auth]\nadmin_keys = \"hunter2\"\n",
        "[auth]\nadmin_keys = [\"hunter2\"]\n",
    ] {
        let errors = parse_config(source, &[]).unwrap_err().to_string();
        assert!(
            !errors.contains("hunter2"),
            "a mistaken key must not be echoed: {errors}"
        );
    }

    let store = |source: &str| parse_config(source, &[]).map(|config| config.store);
    assert_eq!(
        store("[store]\nbackend = \"memory\"\n"),
        Ok(StoreConfig::Memory)
    );
    assert_eq!(
        store("[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n"),
        Ok(StoreConfig::Redis {
            urls: vec!["redis://127.0.0.1:6379".to_owned()],
            cluster: false,
            timeout: DEFAULT_REDIS_TIMEOUT
        })
    );
    assert_eq!(
        store(
            "[store]\nbackend = \"redis\"\ncluster = [\"redis://a:7000\", \"rediss://b:7001\"]\n"
        ),
        Ok(StoreConfig::Redis {
            urls: vec!["redis://a:7000".to_owned(), "rediss://b:7001".to_owned()],
            cluster: true,
            timeout: DEFAULT_REDIS_TIMEOUT
        })
    );
    assert_eq!(
        store("[store]\nbackend = \"redis\"\nurl = \"redis://a\"\ntimeout = \"500ms\"\n"),
        Ok(StoreConfig::Redis {
            urls: vec!["redis://a".to_owned()],
            cluster: false,
            timeout: Duration::from_millis(500)
        })
    );
    check_problems(
        "[store]\nbackend = \"redis\"\nurl = \"redis://a\"\ntimeout = \"5ms\"\n",
        &[],
        &[(
            Some(4),
            "`timeout` must be between 10 ms and 60 s, found 5 ms",
        )],
    );
    check_problems(
        "[store]\nbackend = \"redis\"\nurl = \"redis://a\"\ntimeout = \"soon\"\n",
        &[],
        &[(Some(4), "`timeout`")],
    );
    check_problems(
        "[store]\nbackend = \"embedded\"\ntimeout = \"1s\"\n",
        &[],
        &[(
            Some(3),
            "`timeout` does not apply to the \"embedded\" store backend",
        )],
    );
    check_problems(
        "[store]\nbackend = \"redis\"\nurl = \"redis://a\"\ncluster = [\"redis://b\"]\n",
        &[],
        &[(Some(3), "either `url` (standalone) or `cluster`")],
    );
    check_problems(
        "[store]\nbackend = \"redis\"\n",
        &[],
        &[(Some(1), "the redis store needs `url")],
    );
    check_problems(
        "[store]\nbackend = \"redis\"\nurl = \"http://a\"\n",
        &[],
        &[(Some(3), "must start with redis://")],
    );
    check_problems(
        "[store]\nbackend = \"memory\"\npath = \"x.redb\"\n",
        &[],
        &[(
            Some(3),
            "`path` does not apply to the \"memory\" store backend",
        )],
    );
    check_problems(
        "[store]\nbackend = \"redb\"\n",
        &[],
        &[(Some(2), "unknown store backend \"redb\"")],
    );
    assert_eq!(
        store("[store]\ncheckpoint_bytes = 65536\n"),
        Ok(StoreConfig::Embedded {
            path: PathBuf::from("data/anteroom.redb"),
            checkpoint_bytes: 65536,
        })
    );
    check_problems(
        "[store]\npath = \"x.redb\"\ncheckpoint_bytes = 100\n",
        &[],
        &[(
            Some(3),
            "`checkpoint_bytes` must be at least 4096, found 100",
        )],
    );
    check_problems(
        "[store]\ncheckpoint_bytes = -1\n",
        &[],
        &[(Some(2), "`checkpoint_bytes` must not be negative")],
    );
    check_problems(
        "[store]\nbackend = \"memory\"\ncheckpoint_bytes = 65536\n",
        &[],
        &[(
            Some(3),
            "`checkpoint_bytes` does not apply to the \"memory\" store backend",
        )],
    );
}

#[test]
fn syntax_errors_carry_their_line() {
    check_problems(
        "[server]\nlisten = \"0.0.0.0:8080\n\n[[room]]\nid = \"a\"\nmode = queue\n",
        &[],
        &[
            (Some(2), "invalid TOML: invalid basic string"),
            (Some(6), "invalid TOML: string values must be quoted"),
        ],
    );
}

#[test]
fn environment_overrides() {
    let source =
        "[server]\nlisten = \"0.0.0.0:8080\"\n\n[[room]]\nid = \"sale-2026\"\nmax_active = 10\n";
    let config = parse_config(
        source,
        &env(&[
            ("ANTEROOM_SERVER__LISTEN", "127.0.0.1:9000"),
            ("anteroom_server__trusted_proxies", "10.0.0.0/8, ::1"),
            ("anteroom_server__templates_dir", "/srv/pages"),
            ("ANTEROOM_STORE__BACKEND", "memory"),
            (
                "ANTEROOM_AUTH__ADMIN_KEYS",
                &format!("[\"sha256:{}\"]", "07".repeat(32)),
            ),
            ("ANTEROOM_ROOM__SALE_2026__MAX_ACTIVE", "500"),
            ("ANTEROOM_ROOM__sale-2026__SESSION_TTL", "20m"),
            ("ANTEROOM_ROOM__SALE_2026__PAGE_TEMPLATE", "42"),
            ("ANTEROOM_UPSTREAM__URL", "http://origin:3000"),
            ("ANTEROOM_CONFIG", "/etc/anteroom.toml"),
            ("HOME", "/root"),
        ]),
    )
    .unwrap();
    assert_eq!(
        config.server.listen,
        "127.0.0.1:9000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(config.server.trusted_proxies.len(), 2);
    assert_eq!(config.store, StoreConfig::Memory);
    assert_eq!(config.auth.admin_keys, vec![hash(7)]);
    assert_eq!(config.rooms[0].max_active, 500);
    assert_eq!(config.rooms[0].session_ttl, Duration::from_secs(1200));
    assert_eq!(config.rooms[0].page_template, "42");
    assert_eq!(
        config.upstream,
        Some(UpstreamConfig::new("http://origin:3000"))
    );

    // Switching the backend from the environment ignores the file's keys for the other one.
    let redb = "[store]\npath = \"x.redb\"\n";
    assert_eq!(
        parse_config(redb, &env(&[("ANTEROOM_STORE__BACKEND", "memory")]))
            .unwrap()
            .store,
        StoreConfig::Memory
    );

    check_problems(
        source,
        &[("ANTEROOM_ROOM__CHECKOUT__MAX_ACTIVE", "5")],
        &[(
            None,
            "environment variable ANTEROOM_ROOM__CHECKOUT__MAX_ACTIVE: no room with id \"checkout\" in the config file",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_ROOM__SALE_2026__MAX_ACTIVE", "lots")],
        &[(
            None,
            "environment variable ANTEROOM_ROOM__SALE_2026__MAX_ACTIVE: `max_active` must be a non-negative integer, found string \"lots\"",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_SERVER__LISTEN", "localhost")],
        &[(
            None,
            "environment variable ANTEROOM_SERVER__LISTEN: invalid socket address \"localhost\"",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_SERVER__LISTN", "127.0.0.1:1")],
        &[(
            None,
            "ANTEROOM_SERVER__LISTN: unknown key `listn` in [server]; did you mean `listen`?",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_SERVER_LISTEN", "127.0.0.1:1")],
        &[(
            None,
            "ANTEROOM_SERVER_LISTEN: separate levels with two underscores, as in ANTEROOM_SERVER__LISTEN",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_SERVR__LISTEN", "127.0.0.1:1")],
        &[(
            None,
            "unknown config section `servr`; did you mean `server`?",
        )],
    );
    check_problems(
        source,
        &[("ANTEROOM_ROOM__SALE_2026", "1")],
        &[(None, "name a room field")],
    );
    // Environment problems come after the file's, which keep their lines.
    check_problems(
        "[server]\nlisen = 1\n",
        &[("ANTEROOM_KEYS__ALGORITHM", "HS512")],
        &[
            (Some(2), "unknown key `lisen`"),
            (
                None,
                "ANTEROOM_KEYS__ALGORITHM: unknown signing algorithm \"HS512\"",
            ),
        ],
    );
}

#[test]
fn raw_rooms_from_json() {
    let check_json = |json: &str, expected: Result<RoomConfig, Vec<(&str, &str)>>| {
        let raw: RawRoom = serde_json::from_str(json).unwrap();
        match (raw.resolve(), expected) {
            (Ok(room), Ok(expected)) => {
                assert_eq!(room, expected);
                let shown = RawRoom::from_config(&room);
                assert_eq!(shown.resolve(), Ok(room));
                let text = serde_json::to_string(&shown).unwrap();
                assert_eq!(serde_json::from_str::<RawRoom>(&text).unwrap(), shown);
            }
            (Err(problems), Err(expected)) => {
                let found: Vec<(&str, &str)> = problems
                    .iter()
                    .map(|p| (p.field.as_str(), p.message.as_str()))
                    .collect();
                assert_eq!(found.len(), expected.len(), "{found:?}");
                for ((field, message), (expected_field, expected_text)) in
                    found.iter().zip(&expected)
                {
                    assert_eq!(field, expected_field);
                    assert!(
                        message.contains(expected_text),
                        "{message:?} should contain {expected_text:?}"
                    );
                }
            }
            (found, expected) => panic!("found {found:?}, expected {expected:?}"),
        }
    };

    check_json(
        r#"{"id": "a"}"#,
        Ok(RoomConfig::with_defaults(room_id("a"))),
    );
    let mut expected = RoomConfig::with_defaults(room_id("b"));
    expected.max_active = 7;
    expected.session_max = Some(Duration::from_millis(5_400_500));
    expected.mode = Mode::Passthrough;
    expected.identity = Identity::JwtClaim(Box::new(SiteJwt {
        claim: "email".to_owned(),
        token_in: TokenLocation::Header("Authorization".to_owned()),
        keys: SiteKeys::JwksUrl("https://login.example/jwks".to_owned()),
        issuer: "https://login.example/".to_owned(),
        audience: "shop".to_owned(),
        required: false,
    }));
    expected.requires = vec![room_id("a")];
    check_json(
        r#"{"id": "b", "max_active": 7, "session_max": "1h30m500ms", "mode": "passthrough", "identity": "jwt:email",
            "identity_jwt": {"header": "Authorization", "jwks_url": "https://login.example/jwks", "issuer": "https://login.example/", "audience": "shop"},
            "requires": ["a"]}"#,
        Ok(expected),
    );
    check_json(
        r#"{"id": "B", "claim_ttl": "soon", "mode": "open", "requires": ["B"]}"#,
        Err(vec![
            ("id", "invalid room id \"B\""),
            ("claim_ttl", "invalid duration \"soon\""),
            ("mode", "unknown mode \"open\""),
            ("requires", "invalid room id \"B\""),
        ]),
    );

    assert!(serde_json::from_str::<RawRoom>(r#"{"id": "a", "max_actve": 1}"#).is_err());
    assert!(serde_json::from_str::<RawRoom>(r#"{"id": "a", "max_active": -1}"#).is_err());
    // Absent optional fields are left out when shown.
    let text = serde_json::to_string(&RawRoom::from_config(&RoomConfig::with_defaults(room_id(
        "a",
    ))))
    .unwrap();
    assert!(!text.contains("session_max"), "{text}");
}

#[test]
fn cidr_parsing_and_membership() {
    let check_cidr = |cidr: &str, ip: &str, expected: bool| {
        let cidr: Cidr = cidr.parse().unwrap();
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(cidr.contains(ip), expected, "{cidr} contains {ip}");
    };
    check_cidr("10.0.0.0/8", "10.255.0.1", true);
    check_cidr("10.0.0.0/8", "11.0.0.1", false);
    check_cidr("192.168.1.7", "192.168.1.7", true);
    check_cidr("192.168.1.7", "192.168.1.8", false);
    check_cidr("0.0.0.0/0", "203.0.113.9", true);
    check_cidr("0.0.0.0/0", "2001:db8::1", false);
    check_cidr("2001:db8::/32", "2001:db8:ffff::1", true);
    check_cidr("2001:db8::/32", "2001:db9::1", false);
    check_cidr("::1/128", "::1", true);
    check_cidr("::/0", "2001:db8::1", true);
    // IPv4-mapped IPv6 addresses count as IPv4, on either side.
    check_cidr("10.0.0.0/8", "::ffff:10.1.2.3", true);
    check_cidr("::ffff:10.0.0.0/104", "10.9.9.9", true);
    check_cidr("::ffff:10.0.0.0/104", "11.0.0.1", false);

    let check_text = |input: &str, expected: Option<&str>| {
        let parsed = input.parse::<Cidr>().ok().map(|cidr| cidr.to_string());
        assert_eq!(parsed.as_deref(), expected, "{input}");
    };
    check_text("10.1.2.3/8", Some("10.0.0.0/8"));
    check_text("::1", Some("::1/128"));
    check_text("::ffff:10.0.0.0/104", Some("10.0.0.0/8"));
    check_text("10.0.0.0/33", None);
    check_text("10.0.0.0/", None);
    check_text("10.0.0.0/+8", None);
    check_text("example.com/8", None);
}

#[test]
fn key_hashes() {
    let check_hash = |input: &str, expected: Option<KeyHash>| {
        assert_eq!(input.parse::<KeyHash>().ok(), expected, "{input}");
    };
    check_hash(&format!("sha256:{}", "0a".repeat(32)), Some(hash(10)));
    check_hash(&format!("sha256:{}", "0A".repeat(32)), Some(hash(10)));
    check_hash(&"0a".repeat(32), None);
    check_hash(&format!("sha256:{}", "0a".repeat(31)), None);
    check_hash(&format!("sha256:+a{}", "0a".repeat(31)), None);
    check_hash(&format!("sha256:{}", "zz".repeat(32)), None);
}

#[test]
fn adaptive_and_challenge_rooms() {
    let source = "[[room]]\nid = \"a\"\nchallenge = { kind = \"pow\" }\n\
                  [room.adaptive]\ntarget_p95_ms = 250\nmin_per_minute = 60\nmax_per_minute = 600\n\
                  interval = \"2s\"\n";
    let config = parse_config(source, &[]).expect("valid");
    let room = &config.rooms[0];
    assert_eq!(
        room.challenge,
        Some(crate::challenge::ProofOfWork { difficulty: 18 })
    );
    assert_eq!(
        room.adaptive,
        Some(crate::adaptive::AdaptiveSettings {
            target_p95_ms: 250,
            max_error_ppm: 50_000,
            min_per_minute: 60,
            max_per_minute: 600,
            interval: Duration::from_secs(2),
        })
    );
    // The raw form (admin API, persisted rooms) carries both back unchanged.
    assert_eq!(RawRoom::from_config(room).resolve().as_ref(), Ok(room));
}

#[test]
fn the_join_limit_is_on_by_default_replaceable_and_removable() {
    let names = |source: &str| -> Vec<String> {
        parse_config(source, &[])
            .expect("valid")
            .rate_limits
            .into_iter()
            .map(|rule| rule.name)
            .collect()
    };
    let rule = default_join_rule().expect("the built-in rule");
    assert_eq!(rule.name, "join-per-ip");
    assert_eq!(rule.params.limit, 10);
    assert_eq!(rule.params.burst, 10);
    assert_eq!(rule.params.period, Duration::from_secs(60));
    assert_eq!(names(""), ["join-per-ip"]);
    assert!(names("[server]\njoin_rate_limit = false\n").is_empty());
    assert_eq!(names("[server]\njoin_rate_limit = true\n"), ["join-per-ip"]);
    // A rule of the same name replaces it.
    let own = "[[rate_limit]]\nname = \"join-per-ip\"\nmatch = { paths = [\"/_anteroom/v1/rooms/*/join\"] }\nlimit = 3\nperiod = \"1m\"\n";
    let config = parse_config(own, &[]).expect("valid");
    assert_eq!(config.rate_limits.len(), 1);
    assert_eq!(config.rate_limits[0].params.limit, 3);
    check_problems(
        "[server]\njoin_rate_limit = \"no\"\n",
        &[],
        &[(Some(2), "`join_rate_limit` must be true or false")],
    );
}

#[test]
fn workers_are_a_positive_count() {
    for (value, message) in [
        ("0", "`workers` must be between 1 and 1024, found 0"),
        ("2000", "`workers` must be between 1 and 1024, found 2000"),
        ("-1", "`workers` must not be negative, found -1"),
        ("\"many\"", "`workers` must be a non-negative integer"),
    ] {
        check_problems(
            &format!("[server]\nworkers = {value}\n"),
            &[],
            &[(Some(2), message)],
        );
    }
    let config = parse_config("[server]\nworkers = 1\n", &[]).expect("valid");
    assert_eq!(config.server.workers, Some(1));
}

#[test]
fn schedule_rules() {
    let room = |fields: &str| format!("[[room]]\nid = \"a\"\n{fields}\n");
    check_problems(
        &room(
            "[[room.schedule]]\nopens_at = 2026-12-01T10:00:00Z\ncloses_at = \"2026-12-01T09:00:00Z\"",
        ),
        &[],
        &[(
            Some(5),
            "room \"a\": schedule[0].closes_at: must be after opens_at",
        )],
    );
    check_problems(
        &room(
            "[[room.schedule]]\nopens_at = \"tomorrow\"\ncloses_at = 2026-12-01T09:00:00Z\nshufle = true",
        ),
        &[],
        &[
            (
                Some(4),
                "room \"a\": schedule[0].opens_at: \"tomorrow\" is not an RFC 3339 time",
            ),
            (
                Some(6),
                "unknown key `shufle` in [[room.schedule]]; did you mean `shuffle`?",
            ),
        ],
    );
    check_problems(
        &room("before = \"open\"\n[[room.schedule]]\ncloses_at = 2026-12-01T09:00:00Z"),
        &[],
        &[
            (
                Some(3),
                "room \"a\": before: unknown before \"open\": expected one of passthrough, closed",
            ),
            (Some(4), "room \"a\": schedule[0].opens_at: is required"),
        ],
    );
    let two_events = concat!(
        "[[room.schedule]]\nopens_at = 2026-12-01T10:00:00Z\ncloses_at = 2026-12-01T12:00:00Z\n",
        "[[room.schedule]]\nprequeue_at = 2026-12-01T11:00:00Z\nopens_at = 2026-12-01T13:00:00Z\n",
        "closes_at = 2026-12-01T14:00:00Z",
    );
    check_problems(
        &room(two_events),
        &[],
        &[(
            Some(7),
            "schedule[1].prequeue_at: events must be in time order without overlap",
        )],
    );
}

#[test]
fn a_schedule_reads_into_events() {
    let source = concat!(
        "[[room]]\nid = \"sale\"\nmax_active = 100\nbefore = \"closed\"\n",
        "[[room.schedule]]\nprequeue_at = \"2026-12-01T09:30:00+00:00\"\n",
        "opens_at = 2026-12-01T10:00:00Z\ncloses_at = 2026-12-01T12:00:00.250Z\n",
        "shuffle = true\nadmit_per_minute = 600\n",
    );
    let config = parse_config(source, &env(&[])).unwrap();
    let room = &config.rooms[0];
    assert_eq!(room.schedule.before, IdleMode::Closed);
    assert_eq!(room.schedule.after, IdleMode::Passthrough);
    let event = &room.schedule.events[0];
    assert_eq!(event.prequeue_at, Timestamp(1_796_117_400_000));
    assert_eq!(event.opens_at, Timestamp(1_796_119_200_000));
    assert_eq!(event.closes_at, Timestamp(1_796_126_400_250));
    assert!(event.shuffle);
    assert_eq!(
        (event.max_active, event.admit_per_minute, event.admit_burst),
        (None, Some(600), Some(10)),
        "an overridden rate brings its own default burst"
    );
    let raw = RawRoom::from_config(room);
    assert_eq!(raw.resolve().as_ref(), Ok(room));
    assert_eq!(
        room.phase(Timestamp(1_796_117_400_000)),
        Phase::Prequeue {
            event: 0,
            opens_at: event.opens_at
        }
    );
    assert_eq!(room.mode_at(Timestamp(0)), Mode::Closed);
    assert_eq!(room.mode_at(event.closes_at), Mode::Passthrough);
    assert_eq!(room.limits_at(event.opens_at).admit_per_minute, 600);
}

#[test]
fn priority_codes_are_digests_with_uses() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let source = format!(
        "[[room]]\nid = \"vip\"\n[[room.priority]]\ncodes = [\"{digest}\"]\n[[room.priority]]\ncodes = [\"{digest}\"]\nuses = 3\n"
    );
    let config = parse_config(&source, &env(&[])).unwrap();
    let lanes = &config.rooms[0].priority;
    assert_eq!(lanes.len(), 2);
    assert_eq!((lanes[0].uses, lanes[1].uses), (1, 3));
    assert_eq!(lanes[0].hashes, vec![[0xab; 32]]);
    let raw = RawRoom::from_config(&config.rooms[0]);
    assert_eq!(raw.resolve().as_ref(), Ok(&config.rooms[0]));

    let room = |fields: &str| format!("[[room]]\nid = \"a\"\n{fields}\n");
    check_problems(
        &room("[[room.priority]]\ncodes = [\"GOLD-1\"]\nuses = 0"),
        &[],
        &[
            (Some(4), "room \"a\": priority[0].codes: invalid key hash"),
            (Some(5), "room \"a\": priority[0].uses: must be at least 1"),
        ],
    );
    check_problems(
        &room("[[room.priority]]\nuses = 2\ncode = \"x\""),
        &[],
        &[
            (
                Some(3),
                "room \"a\": priority[0].codes: must list at least one code",
            ),
            (
                Some(5),
                "unknown key `code` in [[room.priority]]; did you mean `codes`?",
            ),
        ],
    );
}

#[test]
fn verify_reads_one_header_set_named_by_its_proxy() {
    let check =
        |source: &str, expected: Result<(OriginalUri, Option<&str>, Option<&str>), &str>| match (
            parse_config(source, &[]),
            expected,
        ) {
            (Ok(config), Ok((uri, method, host))) => {
                assert_eq!(config.verify.uri, uri, "{source}");
                assert_eq!(config.verify.method_header.as_deref(), method, "{source}");
                assert_eq!(config.verify.host_header.as_deref(), host, "{source}");
            }
            (Err(errors), Err(message)) => {
                assert!(errors.to_string().contains(message), "{source}: {errors}");
            }
            (got, _) => panic!("{source}: {got:?}"),
        };
    let header = |name: &str| OriginalUri::Header(name.to_owned());
    let nginx = Ok((
        header("x-original-uri"),
        Some("x-original-method"),
        Some("x-forwarded-host"),
    ));
    check("", nginx.clone());
    check("[verify]\nproxy = \"nginx\"\n", nginx);
    check(
        "[verify]\nproxy = \"envoy\"\n",
        Ok((OriginalUri::AppendedPath, None, None)),
    );
    for proxy in ["traefik", "caddy"] {
        check(
            &format!("[verify]\nproxy = \"{proxy}\"\n"),
            Ok((
                header("x-forwarded-uri"),
                Some("x-forwarded-method"),
                Some("x-forwarded-host"),
            )),
        );
    }
    check(
        "[verify]\nproxy = \"envoy\"\nuri_header = \"X-Real-Uri\"\n",
        Ok((header("x-real-uri"), None, None)),
    );
    check(
        "[verify]\nproxy = \"haproxy\"\n",
        Err("line 2: unknown proxy \"haproxy\""),
    );
    check(
        "[verify]\nuri_header = \"X Uri\"\n",
        Err("line 2: \"X Uri\" is not a header name"),
    );
    check("[verify]\nheaders = []\n", Err("line 2: unknown key"));
}

#[test]
fn page_templates_stay_inside_the_templates_dir() {
    let room = |template: &str| {
        format!(
            "[server]\ntemplates_dir = \"/srv/pages\"\n\n[[room]]\nid = \"r\"\npage_template = \"{template}\"\n"
        )
    };
    assert!(parse_config(&room("sale.html"), &[]).is_ok());
    assert!(parse_config(&room("/srv/pages/sale.html"), &[]).is_ok());
    check_problems(
        &room("../keys/ticket.key"),
        &[],
        &[(
            Some(6),
            "page_template: \"../keys/ticket.key\" must name a file inside the templates directory, without `..`",
        )],
    );
    check_problems(
        &room("/etc/passwd"),
        &[],
        &[(
            Some(6),
            "page_template: \"/etc/passwd\" is outside the templates directory",
        )],
    );
    check_problems(
        "[[room]]\nid = \"r\"\npage_template = \"sale.html\"\n",
        &[],
        &[(
            Some(3),
            "page_template: custom pages are read only from `[server] templates_dir`, and none is set",
        )],
    );
}

#[test]
fn event_stream_bounds_are_configurable() {
    let config = parse_config(
        "[server]\nsse_max_streams = 500\nsse_max_streams_per_ticket = 2\nsse_max_streams_per_ip = 10\nmax_once_marks = 1000\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        (config.server.sse, config.server.max_once_marks),
        (
            super::SseLimits {
                max_streams: 500,
                per_ticket: 2,
                per_ip: 10
            },
            1000
        )
    );
    check_problems(
        "[server]\nsse_max_streams_per_ip = 0\n",
        &[],
        &[(
            Some(2),
            "`sse_max_streams_per_ip` must be between 1 and 100000000, found 0",
        )],
    );
}

#[test]
fn the_http_engine_is_chosen_by_name() {
    let engine = |text: &str| parse_config(text, &[]).unwrap().server.http_engine;
    assert_eq!(engine(""), super::HttpEngine::Own);
    assert_eq!(
        engine("[server]\nhttp_engine = \"own\"\n"),
        super::HttpEngine::Own
    );
    assert_eq!(
        engine("[server]\nhttp_engine = \"hyper\"\n"),
        super::HttpEngine::Hyper
    );
    check_problems(
        "[server]\nhttp_engine = \"nginx\"\n",
        &[],
        &[(
            Some(2),
            "unknown `http_engine` \"nginx\": expected \"own\" or \"hyper\"",
        )],
    );
}

#[test]
fn the_upstream_connection_cap_is_a_count_and_zero_means_none() {
    let cap = |line: &str| {
        let text = format!("[upstream]\nurl = \"http://127.0.0.1:3000\"\n{line}");
        parse_config(&text, &[])
            .unwrap()
            .upstream
            .unwrap()
            .max_connections
    };
    assert_eq!(cap(""), None);
    assert_eq!(cap("max_connections = 0\n"), None);
    assert_eq!(cap("max_connections = 64\n"), Some(64));
    check_problems(
        "[upstream]\nurl = \"http://127.0.0.1:3000\"\nmax_connections = -1\n",
        &[],
        &[(Some(3), "`max_connections` must not be negative, found -1")],
    );
    check_problems(
        "[upstream]\nurl = \"http://127.0.0.1:3000\"\nmax_connections = \"many\"\n",
        &[],
        &[(Some(3), "`max_connections` must be a non-negative integer")],
    );
}

#[test]
fn connection_timeouts_and_caps_are_read_from_server() {
    let limits = |text: &str, env_pairs: &[(&str, &str)]| {
        parse_config(text, &env(env_pairs))
            .unwrap()
            .server
            .connections
    };
    assert_eq!(limits("", &[]), ConnectionLimits::default());
    let source = "[server]
header_timeout = \"5s\"
body_timeout = \"1m\"
idle_timeout = \"75s\"
write_timeout = \"20s\"
drain_timeout = \"3s\"
max_connections = 5000
max_connections_per_address = 64
";
    assert_eq!(
        limits(source, &[("ANTEROOM_SERVER__IDLE_TIMEOUT", "2s")]),
        ConnectionLimits {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(20),
            drain_timeout: Duration::from_secs(3),
            max_connections: Some(5000),
            max_connections_per_address: 64,
        }
    );
    check_problems(
        "[server]\nheader_timeout = \"0s\"\nwrite_timeout = \"soon\"\nmax_connections = 0\n",
        &[],
        &[
            (Some(2), "`header_timeout` must be longer than zero"),
            (Some(3), "`write_timeout`"),
            (Some(4), "`max_connections` must be at least 1"),
        ],
    );
}

#[test]
fn connection_timeouts_longer_than_an_hour_are_refused() {
    check_problems(
        "[server]\ndrain_timeout = \"2h\"\nheader_timeout = \"3600s\"\nidle_timeout = \"61m\"\n",
        &[],
        &[
            (
                Some(2),
                "`drain_timeout` must be at most 3600s, found 7200s",
            ),
            (Some(4), "`idle_timeout` must be at most 3600s, found 3660s"),
        ],
    );
}

#[test]
fn ticker_intervals_are_read_from_server_within_their_bounds() {
    let intervals = |text: &str| parse_config(text, &[]).unwrap().server.ticker;
    assert_eq!(intervals(""), TickerIntervals::default());
    assert_eq!(
        TickerIntervals::default(),
        TickerIntervals {
            tick: Duration::from_millis(500),
            touch: Duration::from_secs(10),
        }
    );
    assert_eq!(
        intervals("[server]\ntick_interval = \"250ms\"\nsse_touch_interval = \"30s\"\n"),
        TickerIntervals {
            tick: Duration::from_millis(250),
            touch: Duration::from_secs(30),
        }
    );
    assert_eq!(
        intervals("[server]\ntick_interval = \"50ms\"\nsse_touch_interval = \"5m\"\n"),
        TickerIntervals {
            tick: Duration::from_millis(50),
            touch: Duration::from_secs(300),
        }
    );
    check_problems(
        "[server]\ntick_interval = \"2s\"\nsse_touch_interval = \"500ms\"\n",
        &[],
        &[
            (
                Some(2),
                "`tick_interval` must be between 50ms and 1s, found 2s",
            ),
            (
                Some(3),
                "`sse_touch_interval` must be between 1s and 300s, found 500ms",
            ),
        ],
    );
    check_problems(
        "[server]\ntick_interval = \"10ms\"\nsse_touch_interval = \"0s\"\n",
        &[],
        &[
            (
                Some(2),
                "`tick_interval` must be between 50ms and 1s, found 10ms",
            ),
            (Some(3), "`sse_touch_interval` must be longer than zero"),
        ],
    );
}

#[test]
fn max_connections_leaves_a_reserve_of_descriptors_unless_set() {
    let defaults = ConnectionLimits::default();
    // A tenth of the limit, and at least MIN_DESCRIPTOR_RESERVE.
    assert_eq!(defaults.sized_for(1024), 1024 - 128);
    assert_eq!(defaults.sized_for(1_048_576), 1_048_576 - 104_857);
    assert_eq!(defaults.sized_for(64), 1);
    let set = ConnectionLimits {
        max_connections: Some(10),
        ..defaults
    };
    assert_eq!(set.sized_for(1024), 10);
}

#[test]
fn keys_in_redis_need_a_redis_store_and_a_key_encryption_key() {
    let redis = "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n";
    let source = format!("{redis}[keys]\nstorage = \"redis\"\nkek_file = \"/etc/anteroom/kek\"\n");
    match parse_config(&source, &env(&[])) {
        Ok(config) => assert_eq!(
            config.keys.shared,
            Some(super::SharedKeysConfig {
                kek_file: PathBuf::from("/etc/anteroom/kek")
            })
        ),
        Err(errors) => panic!("unexpected problems:\n{errors}"),
    }
    // The file can come from the environment (a secret mounted by the orchestrator).
    let from_env = format!("{redis}[keys]\nstorage = \"redis\"\n");
    match parse_config(
        &from_env,
        &env(&[("ANTEROOM_KEYS__KEK_FILE", "/run/secrets/kek")]),
    ) {
        Ok(config) => assert_eq!(
            config.keys.shared,
            Some(super::SharedKeysConfig {
                kek_file: PathBuf::from("/run/secrets/kek")
            })
        ),
        Err(errors) => panic!("unexpected problems:\n{errors}"),
    }
    match parse_config("[keys]\nstorage = \"dir\"\n", &env(&[])) {
        Ok(config) => assert_eq!(config.keys.shared, None),
        Err(errors) => panic!("unexpected problems:\n{errors}"),
    }
    check_problems(
        &format!("{redis}[keys]\nstorage = \"redis\"\n"),
        &[],
        &[(Some(5), "`storage = \"redis\"` needs `kek_file`")],
    );
    check_problems(
        "[keys]\nstorage = \"redis\"\nkek_file = \"kek\"\n",
        &[],
        &[(Some(2), "it needs `[store] backend = \"redis\"`")],
    );
    check_problems(
        "[keys]\nkek_file = \"kek\"\n",
        &[],
        &[(Some(2), "`kek_file` is only for `storage = \"redis\"`")],
    );
    check_problems(
        &format!("{redis}[keys]\nstorage = \"vault\"\n"),
        &[],
        &[(
            Some(5),
            "`storage` must be \"dir\" or \"redis\", found \"vault\"",
        )],
    );
    check_problems(
        &format!("{redis}[keys]\nstorage = \"redis\"\nkek_file = \"\"\n"),
        &[],
        &[(Some(6), "`kek_file` must not be empty")],
    );
}

#[test]
fn ticket_secret_retention_is_any_duration_including_zero() {
    for (text, seconds) in [("90m", 5400), ("0s", 0)] {
        let source = format!("[keys]\nticket_secret_retention = \"{text}\"\n");
        match parse_config(&source, &env(&[])) {
            Ok(config) => assert_eq!(
                config.keys.ticket_secret_retention,
                std::time::Duration::from_secs(seconds)
            ),
            Err(errors) => panic!("unexpected problems:\n{errors}"),
        }
    }
}

#[test]
fn regression_every_syntax_error_has_a_line_and_a_broken_line_reports_once() {
    // Found by the `config` fuzz target: a line of stray characters gave 131 problems, the
    // last of them ("recursion limit") without a line.
    let text = format!(
        "z{}\u{7}fffffff{}\u{7}fffffff{}@",
        ".".repeat(42),
        ".".repeat(69),
        ".".repeat(18)
    );
    let errors = parse_config(&text, &[]).expect_err("not TOML");
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].line, Some(1));
    let two_lines = format!("[server]\nlisten = \"127.0.0.1:1\"\n{text}\nworkers = 0\n");
    let errors = parse_config(&two_lines, &[]).expect_err("not TOML");
    assert!(
        errors.0.iter().all(|problem| problem.line.is_some()),
        "{errors}"
    );
}

#[test]
fn log_access_is_json_combined_or_off_by_default() {
    let access = |source: &str| parse_config(source, &[]).map(|config| config.log.access);
    assert_eq!(access("").unwrap(), AccessLogFormat::Off);
    assert_eq!(
        access("[log]\naccess = \"json\"\n").unwrap(),
        AccessLogFormat::Json
    );
    assert_eq!(
        access("[log]\naccess = \"combined\"\n").unwrap(),
        AccessLogFormat::Combined
    );
    assert_eq!(
        access("[log]\naccess = \"off\"\n").unwrap(),
        AccessLogFormat::Off
    );
    let errors = access("[log]\naccess = \"xml\"\n").unwrap_err().to_string();
    assert!(
        errors.contains("line 2") && errors.contains("\"xml\""),
        "{errors}"
    );
    let errors = access("[log]\nformat = \"json\"\n")
        .unwrap_err()
        .to_string();
    assert!(errors.contains("format"), "{errors}");
    // The log filter's variables are the program's, not overrides of `[log]`.
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    };
    let program = env(&[("ANTEROOM_LOG", "warn"), ("ANTEROOM_LOG_FORMAT", "json")]);
    assert_eq!(
        parse_config("", &program).unwrap().log.access,
        AccessLogFormat::Off
    );
    let set = env(&[("ANTEROOM_LOG__ACCESS", "combined")]);
    assert_eq!(
        parse_config("", &set).unwrap().log.access,
        AccessLogFormat::Combined
    );
}

#[test]
fn tracing_otlp_endpoint_is_an_http_url() {
    let endpoint =
        |source: &str| parse_config(source, &[]).map(|config| config.tracing.otlp_endpoint);
    assert_eq!(endpoint("").unwrap(), None);
    assert_eq!(
        endpoint("[tracing]\notlp_endpoint = \"http://collector:4318/v1/traces\"\n").unwrap(),
        Some("http://collector:4318/v1/traces".to_owned())
    );
    for bad in [
        "collector:4318",
        "https://collector/v1/traces",
        "http:///v1/traces",
    ] {
        let errors = endpoint(&format!("[tracing]\notlp_endpoint = \"{bad}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            errors.contains("line 2") && errors.contains("otlp_endpoint"),
            "{errors}"
        );
    }
}
