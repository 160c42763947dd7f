//! `[room.oidc]`: a room as an OpenID Connect client (SPEC §11), in raw form and validated.
//!
//! It travels inside `RawRoom`, so the config file, the admin API and every store carry it
//! unchanged; resolved, it is `RoomConfig::oidc` (the client secret's hash, the redirect URIs,
//! the code lifetime).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::KeyHash;
use super::raw_keys::raw_keys;
use super::tree::{Origin, Problems, Table};
use crate::duration::{format_duration, parse_duration};
use crate::room::{MAX_CODE_TTL, OidcClient};

/// `[room.oidc]` as written: the client secret's hash, the redirect URIs, the code lifetime.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOidc {
    /// `"sha256:<hex>"` of the client secret; absent for a public client (PKCE required).
    pub client_secret: Option<String>,
    /// Absolute `https://` (or `http://`) URIs without a fragment, matched exactly.
    pub redirect_uris: Option<Vec<String>>,
    /// How long an authorization code can be redeemed, such as `"30s"`; at most 60 s.
    pub code_ttl: Option<String>,
}

/// The longest redirect URI accepted.
const MAX_REDIRECT_URI_LEN: usize = 1024;

impl RawOidc {
    /// Validates every field; problems are reported as (`oidc.<key>`, message).
    pub(super) fn resolve(&self, report: &mut impl FnMut(&str, String)) -> Option<OidcClient> {
        let mut valid = true;
        let client_secret = match self.client_secret.as_deref() {
            None => None,
            Some(text) => match text.parse::<KeyHash>() {
                Ok(hash) => Some(hash),
                Err(error) => {
                    report("oidc.client_secret", error.to_string());
                    valid = false;
                    None
                }
            },
        };
        let redirect_uris = self.redirect_uris.clone().unwrap_or_default();
        if redirect_uris.is_empty() {
            report(
                "oidc.redirect_uris",
                "must list at least one redirect URI".to_owned(),
            );
            valid = false;
        }
        for uri in &redirect_uris {
            if let Err(reason) = check_redirect_uri(uri) {
                report("oidc.redirect_uris", format!("{uri:?} {reason}"));
                valid = false;
            }
        }
        let code_ttl = match self.code_ttl.as_deref() {
            None => MAX_CODE_TTL,
            Some(text) => match parse_duration(text) {
                Ok(ttl) if ttl.as_secs() >= 1 && ttl <= MAX_CODE_TTL => ttl,
                Ok(_) => {
                    report(
                        "oidc.code_ttl",
                        format!("must be between 1s and 60s, found {text:?}"),
                    );
                    valid = false;
                    MAX_CODE_TTL
                }
                Err(error) => {
                    report("oidc.code_ttl", error.to_string());
                    valid = false;
                    MAX_CODE_TTL
                }
            },
        };
        valid.then_some(OidcClient {
            client_secret,
            redirect_uris,
            code_ttl,
        })
    }

    /// The raw form of a validated client, every field present.
    pub(super) fn from_client(client: &OidcClient) -> RawOidc {
        RawOidc {
            client_secret: client.client_secret.map(|hash| hash.to_string()),
            redirect_uris: Some(client.redirect_uris.clone()),
            code_ttl: Some(format_duration(client.code_ttl)),
        }
    }
}

/// A redirect URI must be an absolute http(s) URL with a host, no fragment (RFC 6749 §3.1.2)
/// and no whitespace or control characters.
fn check_redirect_uri(uri: &str) -> Result<(), &'static str> {
    if uri.len() > MAX_REDIRECT_URI_LEN {
        return Err("is longer than 1024 bytes");
    }
    let Some(rest) = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))
    else {
        return Err("must be an absolute https:// or http:// URI");
    };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err("must name a host (and no user information)");
    }
    if uri.contains('#') {
        return Err("must not contain a fragment");
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters");
    }
    Ok(())
}

/// Reads the `[room.oidc]` table, recording where each key was written under `oidc.<key>`.
pub(super) fn read_oidc(
    table: &Table,
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
) -> RawOidc {
    problems.unknown_keys(table, raw_keys::<RawOidc>(), "[room.oidc]");
    let mut raw = RawOidc::default();
    for entry in &table.entries {
        match entry.key.as_str() {
            "client_secret" => {
                origins.insert("oidc.client_secret".to_owned(), entry.key_origin.clone());
                raw.client_secret = entry.string(problems);
            }
            "redirect_uris" => {
                origins.insert("oidc.redirect_uris".to_owned(), entry.key_origin.clone());
                raw.redirect_uris = entry
                    .strings(problems)
                    .map(|list| list.into_iter().map(|(text, _)| text).collect());
            }
            "code_ttl" => {
                origins.insert("oidc.code_ttl".to_owned(), entry.key_origin.clone());
                raw.code_ttl = entry.duration_text(problems);
            }
            _ => {}
        }
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawOidc, expected: Result<(), &[&str]>) {
        let mut problems = Vec::new();
        let resolved = raw.resolve(&mut |field: &str, message: String| {
            problems.push(format!("{field}: {message}"));
        });
        match expected {
            Ok(()) => {
                assert!(problems.is_empty(), "{problems:?}");
                let client = resolved.expect("valid");
                assert_eq!(
                    RawOidc::from_client(&client).resolve(&mut |_, _| {}),
                    Some(client)
                );
            }
            Err(fragments) => {
                assert!(resolved.is_none());
                assert_eq!(problems.len(), fragments.len(), "{problems:?}");
                for (problem, fragment) in problems.iter().zip(fragments) {
                    assert!(problem.contains(fragment), "{problem:?} lacks {fragment:?}");
                }
            }
        }
    }

    fn uris(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|uri| (*uri).to_owned()).collect())
    }

    #[test]
    fn valid_clients() {
        check(
            RawOidc {
                client_secret: Some(format!("sha256:{}", "0f".repeat(32))),
                redirect_uris: uris(&["https://app.example/oauth2/callback?x=1"]),
                code_ttl: Some("30s".to_owned()),
            },
            Ok(()),
        );
        check(
            RawOidc {
                redirect_uris: uris(&["http://127.0.0.1:4180/cb"]),
                ..RawOidc::default()
            },
            Ok(()),
        );
    }

    #[test]
    fn every_problem_is_reported() {
        check(
            RawOidc {
                client_secret: Some("hunter2".to_owned()),
                redirect_uris: uris(&[
                    "/callback",
                    "https://app.example/cb#frag",
                    "https://user@app.example/cb",
                    "https:///cb",
                ]),
                code_ttl: Some("2m".to_owned()),
            },
            Err(&[
                "oidc.client_secret: invalid key hash",
                "oidc.redirect_uris: \"/callback\" must be an absolute",
                "oidc.redirect_uris: \"https://app.example/cb#frag\" must not contain a fragment",
                "oidc.redirect_uris: \"https://user@app.example/cb\" must name a host",
                "oidc.redirect_uris: \"https:///cb\" must name a host",
                "oidc.code_ttl: must be between 1s and 60s, found \"2m\"",
            ]),
        );
        check(
            RawOidc::default(),
            Err(&["oidc.redirect_uris: must list at least one"]),
        );
        check(
            RawOidc {
                redirect_uris: uris(&["https://app.example/cb"]),
                code_ttl: Some("500ms".to_owned()),
                ..RawOidc::default()
            },
            Err(&["oidc.code_ttl: must be between 1s and 60s"]),
        );
    }
}
