//! The path checks, one spelling per line: what is refused and why, and the canonical form of
//! what is not.

use super::*;

use AmbiguousPath::*;

/// `input` is refused for `expected`'s reason, or canonical as `expected` says.
fn check(input: &str, expected: Result<&str, AmbiguousPath>) {
    let actual = canonical_path(input);
    assert_eq!(
        actual.as_deref().map_err(|reason| *reason),
        expected,
        "{input:?}"
    );
}

#[test]
fn canonical_paths_are_returned_as_they_are() {
    for path in [
        "/",
        "/events/1/book",
        "/events/1/book/",
        "/a-b_c~d.e/f.css",
        "/x/...",
        "/x/.a",
    ] {
        check(path, Ok(path));
        assert!(
            matches!(canonical_path(path), Ok(Cow::Borrowed(_))),
            "{path}"
        );
    }
    // Characters that mean nothing special to any server pass raw.
    check("/a:b@c!$&'()*+,=", Ok("/a:b@c!$&'()*+,="));
}

#[test]
fn paths_are_put_in_one_spelling() {
    check("//events//1///book", Ok("/events/1/book"));
    check("//", Ok("/"));
    check("///", Ok("/"));
    check("/a//", Ok("/a/"));
    check("/%65vents/%31/b%6Fok", Ok("/events/1/book"));
    check("/%7euser/%2D%5f%2e%41", Ok("/~user/-_.A"));
    check("/caf%c3%a9", Ok("/caf%C3%A9"));
    check("/a%20b%3f%23%3Cc%3e", Ok("/a%20b%3F%23%3Cc%3E"));
    check("/%2e%2e%2e", Ok("/..."));
}

#[test]
fn segment_parameters_are_refused() {
    check("/events/1/book;x=1", Err(SegmentParameter));
    check("/static/..;/events/1/book", Err(SegmentParameter));
    check("/a;", Err(SegmentParameter));
    check("/events/1/book%3bx=1", Err(SegmentParameter));
    check("/events/1/book%3B", Err(SegmentParameter));
}

#[test]
fn slashes_and_backslashes_in_disguise_are_refused() {
    check("/events/1\\book", Err(Backslash));
    check("/events/1%5cbook", Err(Backslash));
    check("/events/1%5Cbook", Err(Backslash));
    check("/events%2F1/book", Err(EncodedSlash));
    check("/events%2f1/book", Err(EncodedSlash));
}

#[test]
fn dot_segments_are_refused_plain_or_encoded() {
    for path in [
        "/.",
        "/..",
        "/a/./b",
        "/a/../b",
        "/a/..",
        "/a/./",
        "/a/%2e/b",
        "/a/%2E%2e/b",
        "/a/.%2e/b",
        "/a/%2e./b",
        "//../a",
    ] {
        check(path, Err(DotSegment));
    }
}

#[test]
fn encodings_read_differently_are_refused() {
    check("/%2562ook", Err(EncodedPercent));
    check("/book%00.css", Err(ControlCharacter));
    check("/a%0d%0ab", Err(ControlCharacter));
    check("/a%7F", Err(ControlCharacter));
    check("/%u0062ook", Err(MalformedEncoding));
    check("/book%", Err(MalformedEncoding));
    check("/book%4", Err(MalformedEncoding));
    check("/book%4g", Err(MalformedEncoding));
    check("/%c0%ae%c0%ae/x", Err(InvalidUtf8));
    check("/%ff", Err(InvalidUtf8));
    check("/%c3", Err(InvalidUtf8));
}

#[test]
fn raw_characters_outside_a_request_target_are_refused() {
    check("", Err(NotAbsolute));
    check("*", Err(NotAbsolute));
    check("events/1", Err(NotAbsolute));
    check("/a b", Err(InvalidCharacter));
    check("/a#b", Err(InvalidCharacter));
    check("/a?b", Err(InvalidCharacter));
    check("/café", Err(InvalidCharacter));
    check("/a\tb", Err(ControlCharacter));
    check("/a\0", Err(ControlCharacter));
}
