//! `identity = "jwt:<claim>"` with `[room.identity_jwt]`: a room that takes the visitor's
//! identity from the site's own signed token (SPEC §3, §14.1), in raw form and validated.
//!
//! Which files and URLs are reachable is not checked here (the core does no I/O): the binary's
//! `check-config` reads the secret file, and the node fetches the key set when a token needs it.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::raw_keys::raw_keys;
use super::tree::{Origin, Problems, Table};
use crate::room::{Identity, SiteJwt, SiteKeys, TokenLocation};

/// `[room.identity_jwt]` as written.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentityJwt {
    /// The cookie that carries the site's token (or `header`).
    pub cookie: Option<String>,
    /// The header that carries the site's token (`Authorization` reads `Bearer <token>`).
    pub header: Option<String>,
    /// The site's key set, `https://` (or `http://`), fetched and cached (or
    /// `hs256_secret_file`).
    pub jwks_url: Option<String>,
    /// A file holding the site's HS256 secret.
    pub hs256_secret_file: Option<String>,
    /// The `iss` tokens must carry.
    pub issuer: Option<String>,
    /// An `aud` tokens must carry.
    pub audience: Option<String>,
    /// Refuse visitors without a valid token [false: they join as anonymous].
    pub required: Option<bool>,
}

/// The longest claim name, URL, issuer or audience accepted.
const MAX_TEXT_LEN: usize = 2048;

/// Resolves `identity` (and, for `jwt:<claim>`, its table); problems are reported as
/// (`identity` or `identity_jwt.<key>`, message).
pub(super) fn resolve_identity(
    text: Option<&str>,
    table: Option<&RawIdentityJwt>,
    report: &mut impl FnMut(&str, String),
) -> Option<Identity> {
    let claim = match text {
        Some(text) if text.starts_with("jwt:") => &text["jwt:".len()..],
        _ if table.is_some() => {
            report(
                "identity_jwt",
                "is read only with identity = \"jwt:<claim>\"".to_owned(),
            );
            return None;
        }
        None | Some("anonymous") => return Some(Identity::Anonymous),
        Some(text) => return resolve_header_identity(text, report),
    };
    if claim.is_empty() || claim.len() > MAX_TEXT_LEN || claim.chars().any(char::is_whitespace) {
        report(
            "identity",
            format!("{claim:?} is not a claim name: expected \"jwt:<claim>\", such as \"jwt:sub\""),
        );
        return None;
    }
    let Some(table) = table else {
        report(
            "identity",
            format!(
                "\"jwt:{claim}\" needs a [room.identity_jwt] table saying where the token is \
                 and how it is checked"
            ),
        );
        return None;
    };
    table
        .resolve(claim, report)
        .map(|site| Identity::JwtClaim(Box::new(site)))
}

fn resolve_header_identity(text: &str, report: &mut impl FnMut(&str, String)) -> Option<Identity> {
    match text.strip_prefix("header:") {
        Some(name) if is_header_name(name) => Some(Identity::Header(name.to_owned())),
        Some(name) => {
            report("identity", format!("{name:?} is not a valid header name"));
            None
        }
        None => {
            report(
                "identity",
                format!(
                    "invalid identity {text:?}: expected \"anonymous\", \"header:<name>\" or \"jwt:<claim>\""
                ),
            );
            None
        }
    }
}

impl RawIdentityJwt {
    /// Validates every field for the identity claim `claim`.
    fn resolve(&self, claim: &str, report: &mut impl FnMut(&str, String)) -> Option<SiteJwt> {
        let token_in = self.token_location(report);
        let keys = self.keys(report);
        let mut required_text = |key: &str, value: &Option<String>, what: &str| match value {
            Some(text) if !text.is_empty() && text.len() <= MAX_TEXT_LEN => Some(text.clone()),
            Some(_) => {
                report(
                    &format!("identity_jwt.{key}"),
                    format!("must not be empty nor longer than {MAX_TEXT_LEN} bytes"),
                );
                None
            }
            None => {
                report(
                    &format!("identity_jwt.{key}"),
                    format!("is required: {what}"),
                );
                None
            }
        };
        let issuer = required_text("issuer", &self.issuer, "the `iss` the site's tokens carry");
        let audience = required_text(
            "audience",
            &self.audience,
            "the `aud` the site's tokens carry for this site",
        );
        Some(SiteJwt {
            claim: claim.to_owned(),
            token_in: token_in?,
            keys: keys?,
            issuer: issuer?,
            audience: audience?,
            required: self.required.unwrap_or(false),
        })
    }

    fn token_location(&self, report: &mut impl FnMut(&str, String)) -> Option<TokenLocation> {
        let (key, location) = match (&self.cookie, &self.header) {
            (Some(name), None) => ("cookie", TokenLocation::Cookie(name.clone())),
            (None, Some(name)) => ("header", TokenLocation::Header(name.clone())),
            (Some(_), Some(_)) => {
                report(
                    "identity_jwt.header",
                    "give either `cookie` or `header`, not both".to_owned(),
                );
                return None;
            }
            (None, None) => {
                report(
                    "identity_jwt",
                    "needs `cookie` or `header` (such as header = \"Authorization\"): where the \
                     request carries the site's token"
                        .to_owned(),
                );
                return None;
            }
        };
        let (TokenLocation::Cookie(name) | TokenLocation::Header(name)) = &location;
        if !is_header_name(name) {
            report(
                &format!("identity_jwt.{key}"),
                format!("{name:?} is not a valid {key} name"),
            );
            return None;
        }
        Some(location)
    }

    fn keys(&self, report: &mut impl FnMut(&str, String)) -> Option<SiteKeys> {
        match (&self.jwks_url, &self.hs256_secret_file) {
            (Some(url), None) => match check_jwks_url(url) {
                Ok(()) => Some(SiteKeys::JwksUrl(url.clone())),
                Err(reason) => {
                    report("identity_jwt.jwks_url", format!("{url:?} {reason}"));
                    None
                }
            },
            (None, Some(path)) if !path.is_empty() => {
                Some(SiteKeys::Hs256SecretFile(PathBuf::from(path)))
            }
            (None, Some(_)) => {
                report(
                    "identity_jwt.hs256_secret_file",
                    "must name a file".to_owned(),
                );
                None
            }
            (Some(_), Some(_)) => {
                report(
                    "identity_jwt.hs256_secret_file",
                    "give either `jwks_url` or `hs256_secret_file`, not both".to_owned(),
                );
                None
            }
            (None, None) => {
                report(
                    "identity_jwt",
                    "needs `jwks_url` or `hs256_secret_file`: what the site's tokens are \
                     checked with"
                        .to_owned(),
                );
                None
            }
        }
    }

    /// The raw form of a validated setting, every field present.
    pub(super) fn from_site(site: &SiteJwt) -> RawIdentityJwt {
        let (cookie, header) = match &site.token_in {
            TokenLocation::Cookie(name) => (Some(name.clone()), None),
            TokenLocation::Header(name) => (None, Some(name.clone())),
        };
        let (jwks_url, hs256_secret_file) = match &site.keys {
            SiteKeys::JwksUrl(url) => (Some(url.clone()), None),
            SiteKeys::Hs256SecretFile(path) => (None, Some(path.display().to_string())),
        };
        RawIdentityJwt {
            cookie,
            header,
            jwks_url,
            hs256_secret_file,
            issuer: Some(site.issuer.clone()),
            audience: Some(site.audience.clone()),
            required: Some(site.required),
        }
    }
}

/// A key set URL is an absolute http(s) URL with a host and no whitespace.
fn check_jwks_url(url: &str) -> Result<(), &'static str> {
    if url.len() > MAX_TEXT_LEN {
        return Err("is longer than 2048 bytes");
    }
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return Err("must be an absolute https:// or http:// URL");
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err("must name a host (and no user information)");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters");
    }
    Ok(())
}

/// Reads the `[room.identity_jwt]` table, recording where each key was written under
/// `identity_jwt.<key>`.
pub(super) fn read_identity_jwt(
    table: &Table,
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
) -> RawIdentityJwt {
    let keys = raw_keys::<RawIdentityJwt>();
    problems.unknown_keys(table, keys, "[room.identity_jwt]");
    let mut raw = RawIdentityJwt::default();
    for entry in &table.entries {
        let Some(key) = keys.iter().find(|key| **key == entry.key) else {
            continue;
        };
        origins.insert(format!("identity_jwt.{key}"), entry.key_origin.clone());
        match *key {
            "cookie" => raw.cookie = entry.string(problems),
            "header" => raw.header = entry.string(problems),
            "jwks_url" => raw.jwks_url = entry.string(problems),
            "hs256_secret_file" => raw.hs256_secret_file = entry.string(problems),
            "issuer" => raw.issuer = entry.string(problems),
            "audience" => raw.audience = entry.string(problems),
            "required" => raw.required = entry.boolean(problems),
            _ => {}
        }
    }
    raw
}

/// An HTTP header name is a non-empty token (RFC 9110 §5.6.2).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(identity: &str, table: Option<RawIdentityJwt>, expected: Result<Identity, &[&str]>) {
        let mut problems = Vec::new();
        let resolved = resolve_identity(Some(identity), table.as_ref(), &mut |field, message| {
            problems.push(format!("{field}: {message}"));
        });
        match expected {
            Ok(identity) => {
                assert!(problems.is_empty(), "{problems:?}");
                assert_eq!(resolved.as_ref(), Some(&identity));
                if let Identity::JwtClaim(site) = &identity {
                    let raw = RawIdentityJwt::from_site(site);
                    assert_eq!(
                        resolve_identity(
                            Some(identity.to_config_string().as_str()),
                            Some(&raw),
                            &mut |_, _| {}
                        ),
                        Some(identity.clone())
                    );
                }
            }
            Err(fragments) => {
                assert!(resolved.is_none(), "{resolved:?}");
                assert_eq!(problems.len(), fragments.len(), "{problems:?}");
                for (problem, fragment) in problems.iter().zip(fragments) {
                    assert!(problem.contains(fragment), "{problem:?} lacks {fragment:?}");
                }
            }
        }
    }

    fn jwks_table() -> RawIdentityJwt {
        RawIdentityJwt {
            header: Some("Authorization".to_owned()),
            jwks_url: Some("https://login.example/.well-known/jwks.json".to_owned()),
            issuer: Some("https://login.example/".to_owned()),
            audience: Some("shop".to_owned()),
            ..RawIdentityJwt::default()
        }
    }

    #[test]
    fn valid_settings() {
        check(
            "jwt:sub",
            Some(jwks_table()),
            Ok(Identity::JwtClaim(Box::new(SiteJwt {
                claim: "sub".to_owned(),
                token_in: TokenLocation::Header("Authorization".to_owned()),
                keys: SiteKeys::JwksUrl("https://login.example/.well-known/jwks.json".to_owned()),
                issuer: "https://login.example/".to_owned(),
                audience: "shop".to_owned(),
                required: false,
            }))),
        );
        check(
            "jwt:email",
            Some(RawIdentityJwt {
                cookie: Some("session".to_owned()),
                hs256_secret_file: Some("secrets/site.key".to_owned()),
                issuer: Some("shop".to_owned()),
                audience: Some("shop".to_owned()),
                required: Some(true),
                ..RawIdentityJwt::default()
            }),
            Ok(Identity::JwtClaim(Box::new(SiteJwt {
                claim: "email".to_owned(),
                token_in: TokenLocation::Cookie("session".to_owned()),
                keys: SiteKeys::Hs256SecretFile(PathBuf::from("secrets/site.key")),
                issuer: "shop".to_owned(),
                audience: "shop".to_owned(),
                required: true,
            }))),
        );
        check("anonymous", None, Ok(Identity::Anonymous));
        check(
            "header:X-User",
            None,
            Ok(Identity::Header("X-User".to_owned())),
        );
    }

    #[test]
    fn every_problem_is_reported() {
        check(
            "jwt:sub",
            None,
            Err(&["identity: \"jwt:sub\" needs a [room.identity_jwt] table"]),
        );
        check(
            "jwt:",
            Some(jwks_table()),
            Err(&["identity: \"\" is not a claim name"]),
        );
        check(
            "anonymous",
            Some(jwks_table()),
            Err(&["identity_jwt: is read only with identity = \"jwt:<claim>\""]),
        );
        check(
            "jwt:sub",
            Some(RawIdentityJwt {
                cookie: Some("a b".to_owned()),
                jwks_url: Some("ftp://keys.example/jwks".to_owned()),
                audience: Some(String::new()),
                ..RawIdentityJwt::default()
            }),
            Err(&[
                "identity_jwt.cookie: \"a b\" is not a valid cookie name",
                "identity_jwt.jwks_url: \"ftp://keys.example/jwks\" must be an absolute",
                "identity_jwt.issuer: is required",
                "identity_jwt.audience: must not be empty",
            ]),
        );
        check(
            "jwt:sub",
            Some(RawIdentityJwt {
                header: Some("Authorization".to_owned()),
                cookie: Some("session".to_owned()),
                hs256_secret_file: Some("k".to_owned()),
                ..jwks_table()
            }),
            Err(&[
                "identity_jwt.header: give either `cookie` or `header`, not both",
                "identity_jwt.hs256_secret_file: give either `jwks_url` or `hs256_secret_file`",
            ]),
        );
        check(
            "jwt:sub",
            Some(RawIdentityJwt::default()),
            Err(&[
                "identity_jwt: needs `cookie` or `header`",
                "identity_jwt: needs `jwks_url` or `hs256_secret_file`",
                "identity_jwt.issuer: is required",
                "identity_jwt.audience: is required",
            ]),
        );
    }
}
