//! Tests of the gateway's sections: `[upstream]`, `[[route]]`, the rooms' `routes` shorthand
//! and `[websocket]`.

use std::time::Duration;

use super::{check_problems, room_id};
use crate::config::{OnExceed, PageMode, UpstreamConfig, parse_config, parse_size};
use crate::ratelimit::Algorithm;

const ROOMS: &str =
    "[[room]]\nid = \"site\"\n\n[[room]]\nid = \"checkout\"\nrequires = [\"site\"]\n";

fn parse(source: &str) -> crate::config::Config {
    parse_config(source, &[]).unwrap_or_else(|errors| panic!("{errors}"))
}

#[test]
fn upstream_takes_defaults_and_overrides() {
    let config = parse("[upstream]\nurl = \"http://127.0.0.1:3000/\"\n");
    assert_eq!(
        config.upstream,
        Some(UpstreamConfig::new("http://127.0.0.1:3000"))
    );
    let config = parse(
        "[upstream]\nurl = \"http://origin:80\"\nconnect_timeout = \"2s\"\nheader_timeout = \"500ms\"\nidle_timeout = \"1m\"\nmax_request_body = \"2GiB\"\nmax_response_body = 1000\nhttp2 = true\n",
    );
    let upstream = config.upstream.unwrap();
    assert_eq!(upstream.connect_timeout, Duration::from_secs(2));
    assert_eq!(upstream.header_timeout, Duration::from_millis(500));
    assert_eq!(upstream.idle_timeout, Duration::from_secs(60));
    assert_eq!(upstream.max_request_body, Some(2 << 30));
    assert_eq!(upstream.max_response_body, Some(1000));
    assert!(upstream.http2);
    let unlimited = parse("[upstream]\nurl = \"http://origin\"\nmax_request_body = 0\n");
    assert_eq!(unlimited.upstream.unwrap().max_request_body, None);
}

#[test]
fn upstream_problems_have_lines() {
    check_problems(
        "[upstream]\nurl = \"ftp://origin\"\n",
        &[],
        &[(Some(2), "`url` must start with http:// or https://")],
    );
    check_problems(
        "[upstream]\nurl = \"http://origin:http\"\n",
        &[],
        &[(Some(2), "a port from 1 to 65535")],
    );
    check_problems(
        "[upstream]\nurl = \"http://origin/app\"\n",
        &[],
        &[(Some(2), "must be the site's root")],
    );
    check_problems(
        "[upstream]\nurl = \"http://origin\"\nheader_timeout = \"0s\"\nmax_request_body = \"ten\"\nretries = 3\n",
        &[],
        &[
            (Some(3), "`header_timeout` must be longer than zero"),
            (Some(4), "invalid size \"ten\" for `max_request_body`"),
            (Some(5), "unknown key `retries` in [upstream]"),
        ],
    );
    check_problems(
        "[upstream]\n",
        &[],
        &[(Some(1), "[upstream] needs a `url`")],
    );
}

#[test]
fn sizes() {
    assert_eq!(parse_size("100"), Some(100));
    assert_eq!(parse_size("10KB"), Some(10_000));
    assert_eq!(parse_size("10KiB"), Some(10_240));
    assert_eq!(parse_size("1 MiB"), Some(1 << 20));
    assert_eq!(parse_size("3GB"), Some(3_000_000_000));
    assert_eq!(parse_size("1TiB"), None);
    assert_eq!(parse_size("MiB"), None);
}

#[test]
fn routes_are_read_in_order_then_room_shorthands() {
    let source = format!(
        "{ROOMS}routes = [\"/checkout/**\"]\n\n[[rate_limit]]\nname = \"api\"\nlimit = 10\nperiod = \"1s\"\n\n\
         [[route]]\nname = \"health\"\npaths = [\"/healthz\", \"/static/**\"]\nbypass = true\n\n\
         [[route]]\nhosts = [\"shop.example\"]\npaths = [\"/buy/**\"]\nmethods = [\"POST\"]\nrooms = [\"site\", \"checkout\"]\nrate_limits = [\"api\"]\npage = \"redirect\"\n"
    );
    let config = parse(&source);
    let names: Vec<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["health", "route-2"]);
    assert!(config.routes[0].bypass);
    assert_eq!(config.routes[0].matcher.paths.len(), 2);
    let buy = &config.routes[1];
    assert_eq!(buy.rooms, [room_id("site"), room_id("checkout")]);
    assert_eq!(buy.rate_limits, ["api"]);
    assert_eq!(buy.page, PageMode::Redirect);
    assert_eq!(buy.matcher.methods, ["POST"]);
    assert_eq!(buy.matcher.hosts.len(), 1);
    let checkout = config
        .rooms
        .iter()
        .find(|room| room.id == room_id("checkout"));
    let shorthand = super::super::room_route(checkout.unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(shorthand.name, "room-checkout");
    assert_eq!(shorthand.rooms, [room_id("checkout")]);
}

#[test]
fn route_problems_have_lines() {
    let source = format!(
        "{ROOMS}\n[[route]]\npaths = [\"api/**\"]\nrooms = [\"site\", \"chekout\", \"site\"]\nrate_limits = [\"nope\"]\npage = \"popup\"\nmethods = [\"P OST\"]\n\n\
         [[route]]\npaths = [\"/x\"]\n\n[[route]]\nbypass = true\nrooms = [\"site\"]\nweight = 2\n"
    );
    check_problems(
        &source,
        &[],
        &[
            (
                Some(9),
                "route \"route-1\": paths: path glob \"api/**\" must start with '/'",
            ),
            (
                Some(10),
                "route \"route-1\": rooms: unknown room \"chekout\"; did you mean \"checkout\"?",
            ),
            (
                Some(10),
                "route \"route-1\": rooms: lists \"site\" more than once",
            ),
            (
                Some(11),
                "route \"route-1\": rate_limits: unknown rate limit \"nope\"",
            ),
            (Some(12), "route \"route-1\": page: unknown page \"popup\""),
            (
                Some(13),
                "route \"route-1\": methods: invalid method \"P OST\"",
            ),
            (
                Some(15),
                "route \"route-2\": needs `rooms`, `rate_limits` or `bypass = true`",
            ),
            (
                Some(19),
                "route \"route-3\": `bypass = true` lets requests through untouched",
            ),
            (Some(21), "unknown key `weight` in [[route]]"),
        ],
    );
}

#[test]
fn case_insensitive_routes_match_their_paths_in_any_case() {
    let config = parse(&format!(
        "{ROOMS}\n[[route]]\npaths = [\"/Admin/**\"]\nrooms = [\"site\"]\ncase_insensitive = true\n\n\
         [[route]]\npaths = [\"/Buy/**\"]\nrooms = [\"site\"]\ncase_insensitive = false\n"
    ));
    let any_case = &config.routes[0].matcher.paths[0];
    assert!(any_case.matches("/ADMIN/users") && any_case.matches("/admin"));
    let exact = &config.routes[1].matcher.paths[0];
    assert!(exact.matches("/Buy/1") && !exact.matches("/buy/1"));
    let source = format!(
        "{ROOMS}\n[[route]]\nname = \"iis\"\nrooms = [\"site\"]\ncase_insensitive = true\n\n\
         [[route]]\npaths = [\"/x\"]\nrooms = [\"site\"]\ncase_insensitive = \"yes\"\n"
    );
    check_problems(
        &source,
        &[],
        &[
            (
                Some(11),
                "route \"iis\": `case_insensitive` applies to `paths`, and the route has none",
            ),
            (Some(16), "`case_insensitive` must be true or false"),
        ],
    );
}

#[test]
fn room_shorthand_globs_are_checked() {
    check_problems(
        "[[room]]\nid = \"a\"\nroutes = [\"/x/**y\"]\n",
        &[],
        &[(Some(3), "room \"a\": routes: path glob \"/x/**y\"")],
    );
}

#[test]
fn websocket_limits() {
    let config = parse("[websocket]\nlimit = 20\nperiod = \"1s\"\n");
    let websocket = config.websocket.unwrap();
    let limit = websocket.limit.unwrap();
    assert_eq!(limit.algorithm, Algorithm::TokenBucket);
    assert_eq!((limit.limit, limit.burst), (20, 20));
    assert_eq!(websocket.on_exceed, OnExceed::Drop);

    let config = parse(
        "[websocket]\nlimit = 5\nperiod = \"1s\"\nburst = 10\nalgorithm = \"gcra\"\non_exceed = \"close\"\nmax_message_size = \"64KiB\"\n",
    );
    let websocket = config.websocket.unwrap();
    assert_eq!(websocket.limit.unwrap().burst, 10);
    assert_eq!(websocket.on_exceed, OnExceed::Close);
    assert_eq!(websocket.max_message_size, 65_536);

    let sizes_only = parse("[websocket]\nmax_message_size = 4096\n");
    assert_eq!(sizes_only.websocket.unwrap().limit, None);
}

#[test]
fn websocket_problems_have_lines() {
    check_problems(
        "[websocket]\nlimit = 20\n",
        &[],
        &[(Some(1), "[websocket] needs both `limit` and `period`")],
    );
    check_problems(
        "[websocket]\nlimit = 20\nperiod = \"1s\"\nalgorithm = \"fixed_window\"\nburst = 3\non_exceed = \"kick\"\n",
        &[],
        &[
            (
                Some(5),
                "`burst` does not apply to the fixed_window algorithm",
            ),
            (
                Some(6),
                "unknown on_exceed \"kick\": expected one of drop, close",
            ),
        ],
    );
}
