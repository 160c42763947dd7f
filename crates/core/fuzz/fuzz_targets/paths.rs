//! Fuzz target `paths`: a path the gateway accepts ([`canonical_path`]) is forwarded in a form
//! that every server reading it reaches the same protected routes as the gateway matched.
//!
//! The readers are models of how origins resolve a path: Tomcat (drops `;parameters`,
//! decodes, resolves dot segments), IIS (`\` is `/`, decodes, ignores case, resolves dot
//! segments), nginx (decodes, merges slashes, resolves dot segments), Express (matches the
//! path as it came, ignoring case) and a chain of two decoding proxies. Case-folding readers
//! are held to the routes as `case_insensitive = true` makes them, the others to the
//! case-sensitive routes.
//!
//! A known gap, left out of the Express reading: a glob with `*` inside a segment (`b*c`)
//! whose literal piece meets an encoded character (`/a/b9%7C/d`) matches the still-encoded
//! path of a server that matches paths without decoding them, and not the decoded path the
//! gateway matches. Whole-segment `*` and `**`, and literal segments, have no such gap.
#![no_main]

use anteroom_core::ratelimit::rules::{PathGlob, normalize_path};
use anteroom_core::request_path::canonical_path;
use libfuzzer_sys::fuzz_target;

/// Protected routes of the kinds sites write: literal, one-segment `*`, `**`, wildcards in a
/// segment.
const PROTECTED: [&str; 7] = [
    "/events/*/book/**",
    "/admin/**",
    "/api/v1/orders",
    "/static/*.css",
    "/a/b*c/d",
    "/*",
    "/x/**/y",
];

fuzz_target!(|data: &[u8]| {
    let Ok(sent) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(forwarded) = canonical_path(sent) else {
        return;
    };
    // One spelling: the forwarded path is its own canonical form.
    assert_eq!(
        canonical_path(&forwarded).as_deref(),
        Ok(&*forwarded),
        "{sent:?}"
    );
    let matched = normalize_path(&forwarded);
    let case_sensitive_readers = [
        ("tomcat", tomcat(&forwarded)),
        ("nginx", nginx(&forwarded)),
        ("decoded twice", decoded_twice(&forwarded)),
    ];
    let iis = iis(&forwarded);
    let express = express(&forwarded);
    for glob in PROTECTED {
        let wildcard_in_segment = glob
            .split('/')
            .any(|segment| segment.contains('*') && !matches!(segment, "*" | "**"));
        let case_folding_readers: &[(&str, &String)] = if wildcard_in_segment {
            &[("iis", &iis)]
        } else {
            &[("iis", &iis), ("express", &express)]
        };
        let exact = PathGlob::new(glob).expect("a valid glob");
        let any_case = exact.clone().ignoring_ascii_case();
        let ours = exact.matches_normalized(&matched);
        for (reader, read) in &case_sensitive_readers {
            assert_eq!(
                exact.matches_normalized(read),
                ours,
                "{reader} reads {sent:?} (forwarded {forwarded:?}) as {read:?}, against {glob}"
            );
        }
        let ours = any_case.matches_normalized(&matched);
        for (reader, read) in case_folding_readers {
            assert_eq!(
                any_case.matches_normalized(read),
                ours,
                "{reader} reads {sent:?} (forwarded {forwarded:?}) as {read:?}, against {glob}"
            );
        }
    }
});

fn tomcat(path: &str) -> String {
    let without_parameters: Vec<&str> = path
        .split('/')
        .map(|segment| segment.split(';').next().unwrap_or_default())
        .collect();
    resolve_dots(&decode(&without_parameters.join("/")))
}

fn iis(path: &str) -> String {
    resolve_dots(&decode(&path.replace('\\', "/")).replace('\\', "/")).to_ascii_lowercase()
}

fn nginx(path: &str) -> String {
    resolve_dots(&decode(path))
}

fn express(path: &str) -> String {
    path.to_ascii_lowercase()
}

fn decoded_twice(path: &str) -> String {
    resolve_dots(&decode(&decode(path)))
}

/// `%XX` decoded once; invalid UTF-8 read leniently, as most servers do.
fn decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(value)) => {
                out.push(value);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Empty and `.` segments dropped, `..` removing the one before.
fn resolve_dots(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    format!("/{}", segments.join("/"))
}
