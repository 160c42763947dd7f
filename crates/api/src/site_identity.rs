//! The visitor's identity from the site's own JWT (`identity = "jwt:<claim>"` with
//! `[room.identity_jwt]`, SPEC §3, §14.1): the token is found in the configured cookie or
//! header, its signature checked with the site's key set (JWKS URL) or HS256 secret, then its
//! `iss`, `aud`, `exp` and `nbf`; the configured claim is the identity.
//!
//! Everything in the token is the visitor's to forge, so nothing in it is believed before the
//! signature holds, and nothing in it decides how much work the node does:
//! - a key set is fetched at most once per `REFETCH_COOLDOWN` per URL, whatever the `kid`s
//!   tokens name (a token naming an unknown `kid` asks for a refetch, which also picks up a
//!   rotation at the site), and concurrent misses share one fetch; between fetches an unknown
//!   `kid` is refused without any network traffic;
//! - a fetch is bounded in time (`FETCH_TIMEOUT`) and size (`MAX_JWKS_BYTES`); a failed
//!   one keeps the keys already known;
//! - key sets give only asymmetric keys (`HS*` tokens are refused against a JWKS, so a public
//!   key can never be used as an HMAC secret), and a key that names its `alg` is used with no
//!   other; the HS256 secret is used for HS256 only and must be at least 32 bytes;
//! - tokens longer than `MAX_TOKEN_LEN` and claim values longer than the engine's identity
//!   limit are refused, never truncated (two long identities must not become one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use anteroom_core::engine::MAX_IDENTITY_LEN;
use anteroom_core::room::{SiteJwt, SiteKeys, TokenLocation};

use crate::cookies::read_cookie;
use crate::webhook_client::{WebhookClient, webhook_client};

/// A key set is fetched again at most this often, whatever tokens ask for.
pub(crate) const REFETCH_COOLDOWN: Duration = Duration::from_secs(5);
/// Known keys are refreshed when a token arrives this long after the last fetch.
const MAX_KEY_AGE: Duration = Duration::from_secs(600);
/// How long a key set fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest key set read.
const MAX_JWKS_BYTES: usize = 256 * 1024;
/// The longest site token looked at.
const MAX_TOKEN_LEN: usize = 8 * 1024;
/// The shortest HS256 secret accepted: shorter ones can be guessed offline from one token.
const MIN_SECRET_LEN: usize = 32;
/// The largest secret file read.
const MAX_SECRET_FILE_LEN: u64 = 4096;
/// Leeway on `exp` and `nbf`, as for passes.
const LEEWAY_SECS: u64 = 30;

/// Why a site token gives no identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteTokenError {
    /// The request carries no token.
    #[error("no site token")]
    Missing,
    /// Not a JWT, too long, or claims that are not JSON.
    #[error("the site token is not a well-formed JWT")]
    Malformed,
    /// An algorithm the configured keys do not allow.
    #[error("the site token is signed with {0}, which this room does not accept")]
    Algorithm(String),
    /// No key of the site's key set has the token's `kid`.
    #[error("the site token is signed with a key the site does not publish")]
    UnknownKey,
    /// The signature does not hold.
    #[error("the site token's signature does not verify")]
    BadSignature,
    /// Another issuer.
    #[error("the site token was issued by another issuer")]
    Issuer,
    /// Another audience.
    #[error("the site token is meant for another audience")]
    Audience,
    /// Past `exp`.
    #[error("the site token has expired")]
    Expired,
    /// Before `nbf`.
    #[error("the site token is not valid yet")]
    NotYetValid,
    /// The identity claim is absent, not a string or number, or too long.
    #[error("the site token has no usable `{0}` claim")]
    NoClaim(String),
    /// The keys could not be had (the key set cannot be fetched, the secret file read).
    #[error("the site's keys are unavailable: {0}")]
    KeysUnavailable(String),
}

/// Why a secret file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file cannot be read.
    #[error("cannot read hs256_secret_file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than any secret.
    #[error("hs256_secret_file {path} is larger than {MAX_SECRET_FILE_LEN} bytes")]
    TooLong {
        /// The file.
        path: PathBuf,
    },
    /// The secret is too short to resist guessing.
    #[error("hs256_secret_file {path} holds {len} bytes; at least {MIN_SECRET_LEN} are needed")]
    TooShort {
        /// The file.
        path: PathBuf,
        /// The secret's length, trimmed.
        len: usize,
    },
}

/// Reads an HS256 secret file: its content without surrounding whitespace, at least 32 bytes
/// and at most `MAX_SECRET_FILE_LEN` (a path naming a device or a large file is refused
/// rather than read whole).
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, SecretFileError> {
    use std::io::Read as _;
    let read_error = |source| SecretFileError::Read {
        path: path.to_owned(),
        source,
    };
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SECRET_FILE_LEN + 1).read_to_end(&mut text))
        .map_err(read_error)?;
    if text.len() as u64 > MAX_SECRET_FILE_LEN {
        return Err(SecretFileError::TooLong {
            path: path.to_owned(),
        });
    }
    let secret = text.trim_ascii().to_vec();
    if secret.len() < MIN_SECRET_LEN {
        return Err(SecretFileError::TooShort {
            path: path.to_owned(),
            len: secret.len(),
        });
    }
    Ok(secret)
}

/// The node's site keys: one cached key set per JWKS URL, one secret per file, shared by
/// every room that names them.
#[derive(Default)]
pub struct SiteKeyCache {
    key_sets: parking_lot::Mutex<HashMap<String, Arc<KeySetCache>>>,
    secrets: parking_lot::RwLock<HashMap<PathBuf, Arc<[u8]>>>,
    client: OnceLock<Option<WebhookClient>>,
}

impl SiteKeyCache {
    /// The token's identity claim, or `None` when the request carries no token.
    pub async fn identify(
        &self,
        site: &SiteJwt,
        headers: &HeaderMap,
        now_ms: u64,
    ) -> Result<Option<String>, SiteTokenError> {
        let Some(token) = site_token(&site.token_in, headers) else {
            return Ok(None);
        };
        if token.len() > MAX_TOKEN_LEN {
            return Err(SiteTokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| SiteTokenError::Malformed)?;
        let key = self.key_for(site, &header, now_ms).await?;
        let claims = verify(token, &key, header.alg, site)?;
        check_time(&claims, now_ms / 1000)?;
        identity_claim(&claims, &site.claim).map(Some)
    }

    /// Puts a secret read at start in the cache, so no request waits on the file.
    pub(crate) fn preload_secret(&self, path: PathBuf, secret: Vec<u8>) {
        self.secrets.write().insert(path, secret.into());
    }

    async fn key_for(
        &self,
        site: &SiteJwt,
        header: &jsonwebtoken::Header,
        now_ms: u64,
    ) -> Result<DecodingKey, SiteTokenError> {
        match &site.keys {
            SiteKeys::Hs256SecretFile(path) => {
                if header.alg != Algorithm::HS256 {
                    return Err(SiteTokenError::Algorithm(format!("{:?}", header.alg)));
                }
                Ok(DecodingKey::from_secret(&self.secret(path)?))
            }
            SiteKeys::JwksUrl(url) => {
                if matches!(
                    header.alg,
                    Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
                ) {
                    return Err(SiteTokenError::Algorithm(format!("{:?}", header.alg)));
                }
                let kid = header.kid.as_deref().ok_or(SiteTokenError::UnknownKey)?;
                let key = self.key_set(url).find(self.client(), kid, now_ms).await?;
                if key
                    .algorithm
                    .is_some_and(|algorithm| algorithm != header.alg)
                {
                    return Err(SiteTokenError::Algorithm(format!("{:?}", header.alg)));
                }
                Ok(key.key)
            }
        }
    }

    fn secret(&self, path: &Path) -> Result<Arc<[u8]>, SiteTokenError> {
        if let Some(secret) = self.secrets.read().get(path) {
            return Ok(secret.clone());
        }
        let secret: Arc<[u8]> = read_secret_file(path)
            .map_err(|error| SiteTokenError::KeysUnavailable(error.to_string()))?
            .into();
        self.secrets.write().insert(path.to_owned(), secret.clone());
        Ok(secret)
    }

    fn key_set(&self, url: &str) -> Arc<KeySetCache> {
        self.key_sets
            .lock()
            .entry(url.to_owned())
            .or_insert_with(|| Arc::new(KeySetCache::new(url.to_owned())))
            .clone()
    }

    fn client(&self) -> Option<&WebhookClient> {
        self.client
            .get_or_init(|| match webhook_client(None) {
                Ok(client) => Some(client),
                Err(error) => {
                    tracing::error!(%error, "cannot set up the client that fetches site key sets");
                    None
                }
            })
            .as_ref()
    }
}

/// The token where the site puts it: a cookie, a header, or `Authorization: Bearer`.
fn site_token<'a>(location: &TokenLocation, headers: &'a HeaderMap) -> Option<&'a str> {
    let token = match location {
        TokenLocation::Cookie(name) => read_cookie(headers, name)?,
        TokenLocation::Header(name) => {
            let value = headers.get(name.as_str())?.to_str().ok()?.trim();
            if name.eq_ignore_ascii_case(header::AUTHORIZATION.as_str()) {
                let (scheme, token) = value.split_once(' ')?;
                if !scheme.eq_ignore_ascii_case("bearer") {
                    return None;
                }
                token
            } else {
                value
            }
        }
    };
    Some(token.trim()).filter(|token| !token.is_empty())
}

/// Checks the signature, `iss` and `aud`; time is checked against the node's clock after.
fn verify(
    token: &str,
    key: &DecodingKey,
    algorithm: Algorithm,
    site: &SiteJwt,
) -> Result<Map<String, Value>, SiteTokenError> {
    use jsonwebtoken::errors::ErrorKind;
    let mut validation = Validation::new(algorithm);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.required_spec_claims = ["exp", "iss", "aud"].map(str::to_owned).into();
    validation.set_issuer(&[&site.issuer]);
    validation.set_audience(&[&site.audience]);
    match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
        Ok(data) => Ok(data.claims),
        Err(error) => Err(match error.kind() {
            ErrorKind::InvalidIssuer => SiteTokenError::Issuer,
            ErrorKind::InvalidAudience => SiteTokenError::Audience,
            ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
                SiteTokenError::Algorithm(format!("{algorithm:?}"))
            }
            ErrorKind::InvalidToken
            | ErrorKind::Base64(_)
            | ErrorKind::Json(_)
            | ErrorKind::Utf8(_)
            | ErrorKind::InvalidClaimFormat(_)
            | ErrorKind::MissingRequiredClaim(_) => SiteTokenError::Malformed,
            _ => SiteTokenError::BadSignature,
        }),
    }
}

fn check_time(claims: &Map<String, Value>, now_secs: u64) -> Result<(), SiteTokenError> {
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or(SiteTokenError::Malformed)?;
    if now_secs >= exp.saturating_add(LEEWAY_SECS) {
        return Err(SiteTokenError::Expired);
    }
    match claims.get("nbf") {
        None => Ok(()),
        Some(nbf) => match nbf.as_u64() {
            Some(nbf) if now_secs.saturating_add(LEEWAY_SECS) < nbf => {
                Err(SiteTokenError::NotYetValid)
            }
            Some(_) => Ok(()),
            None => Err(SiteTokenError::Malformed),
        },
    }
}

/// The claim as text: a non-empty string or a whole number, within the identity limit.
fn identity_claim(claims: &Map<String, Value>, claim: &str) -> Result<String, SiteTokenError> {
    let value = match claims.get(claim) {
        Some(Value::String(text)) => text.trim().to_owned(),
        Some(Value::Number(number)) if number.is_u64() || number.is_i64() => number.to_string(),
        _ => String::new(),
    };
    if value.is_empty() || value.len() > MAX_IDENTITY_LEN {
        return Err(SiteTokenError::NoClaim(claim.to_owned()));
    }
    Ok(value)
}

/// One site key set: the keys known, and when they were last fetched (or tried).
struct KeySetCache {
    url: String,
    known: parking_lot::RwLock<KnownKeys>,
    /// Held while fetching: concurrent misses wait for one fetch instead of starting theirs.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct KnownKeys {
    keys: HashMap<String, SiteKey>,
    fetched_at_ms: Option<u64>,
    tried_at_ms: Option<u64>,
    last_error: Option<String>,
}

#[derive(Clone)]
struct SiteKey {
    key: DecodingKey,
    /// The key's own `alg`, when the key set names one.
    algorithm: Option<Algorithm>,
}

impl KeySetCache {
    fn new(url: String) -> KeySetCache {
        KeySetCache {
            url,
            known: parking_lot::RwLock::new(KnownKeys::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The key `kid`: known and fresh, or after a fetch when one is allowed now.
    async fn find(
        &self,
        client: Option<&WebhookClient>,
        kid: &str,
        now_ms: u64,
    ) -> Result<SiteKey, SiteTokenError> {
        let (seen_try, known_key) = {
            let known = self.known.read();
            let stale = known
                .fetched_at_ms
                .is_none_or(|at| now_ms.saturating_sub(at) >= MAX_KEY_AGE.as_millis() as u64);
            match known.keys.get(kid) {
                Some(key) if !stale || !known.may_try(now_ms) => return Ok(key.clone()),
                None if !known.may_try(now_ms) => return Err(known.miss()),
                key => (known.tried_at_ms, key.cloned()),
            }
        };
        // A known key past its age is refreshed by one request; the others go on with it
        // rather than wait for a slow or unreachable site.
        let _fetching = match (known_key, self.fetching.try_lock()) {
            (_, Ok(guard)) => guard,
            (Some(key), Err(_)) => return Ok(key),
            (None, Err(_)) => self.fetching.lock().await,
        };
        // Another request fetched while this one waited: its answer stands.
        if self.known.read().tried_at_ms == seen_try {
            self.refresh(client, now_ms).await;
        }
        let known = self.known.read();
        known.keys.get(kid).cloned().ok_or_else(|| known.miss())
    }

    async fn refresh(&self, client: Option<&WebhookClient>, now_ms: u64) {
        let fetched = match client {
            Some(client) => fetch_key_set(client, &self.url).await,
            None => Err("no HTTP client".to_owned()),
        };
        let mut known = self.known.write();
        known.tried_at_ms = Some(now_ms);
        match fetched {
            Ok(keys) => {
                tracing::info!(url = %self.url, keys = keys.len(), "fetched the site's key set");
                known.keys = keys;
                known.fetched_at_ms = Some(now_ms);
                known.last_error = None;
            }
            Err(error) => {
                tracing::warn!(url = %self.url, %error, "cannot fetch the site's key set; keeping the keys known");
                known.last_error = Some(error);
            }
        }
    }
}

impl KnownKeys {
    fn may_try(&self, now_ms: u64) -> bool {
        self.tried_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= REFETCH_COOLDOWN.as_millis() as u64)
    }

    /// An unknown `kid`: the visitor's fault, unless the node has no keys because it could
    /// not fetch any.
    fn miss(&self) -> SiteTokenError {
        match (&self.last_error, self.keys.is_empty()) {
            (Some(error), true) => SiteTokenError::KeysUnavailable(error.clone()),
            _ => SiteTokenError::UnknownKey,
        }
    }
}

/// GETs the key set (bounded in time and size) and keeps its usable asymmetric keys by `kid`.
async fn fetch_key_set(
    client: &WebhookClient,
    url: &str,
) -> Result<HashMap<String, SiteKey>, String> {
    let request = http::Request::get(url)
        .header(header::ACCEPT, "application/json")
        .header(header::USER_AGENT, "anteroom")
        .body(Full::new(Bytes::new()))
        .map_err(|error| error.to_string())?;
    let body = tokio::time::timeout(FETCH_TIMEOUT, async {
        let response = client
            .request(request)
            .await
            .map_err(|error| error.to_string())?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|error| format!("reading the body: {error}"))
    })
    .await
    .map_err(|_| format!("no answer within {FETCH_TIMEOUT:?}"))??;
    parse_key_set(&body)
}

/// The usable keys of a JWKS document; a key that cannot be read is skipped, not fatal.
fn parse_key_set(body: &[u8]) -> Result<HashMap<String, SiteKey>, String> {
    let document: Value =
        serde_json::from_slice(body).map_err(|error| format!("not JSON: {error}"))?;
    let listed = document
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("not a JWKS: no `keys` array")?;
    let mut keys = HashMap::new();
    for value in listed {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
            continue;
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        // A symmetric key published in a key set would let anyone who reads it sign.
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            continue;
        }
        let algorithm = jwk
            .common
            .key_algorithm
            .and_then(|algorithm| algorithm.to_string().parse::<Algorithm>().ok());
        if let Ok(key) = DecodingKey::from_jwk(&jwk) {
            keys.insert(kid, SiteKey { key, algorithm });
        }
    }
    if keys.is_empty() {
        return Err("the key set has no usable key with a `kid`".to_owned());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_token_is_read_where_the_site_puts_it() {
        let bearer = TokenLocation::Header("Authorization".to_owned());
        let check = |location: &TokenLocation, pairs: &[(&'static str, &str)], expected| {
            assert_eq!(site_token(location, &headers(pairs)), expected, "{pairs:?}");
        };
        check(
            &bearer,
            &[("authorization", "Bearer abc.def.ghi")],
            Some("abc.def.ghi"),
        );
        check(&bearer, &[("authorization", "bearer  abc ")], Some("abc"));
        check(&bearer, &[("authorization", "Basic dXNlcjpwdw==")], None);
        check(&bearer, &[("authorization", "Bearer ")], None);
        let custom = TokenLocation::Header("X-Site-Token".to_owned());
        check(&custom, &[("x-site-token", " abc ")], Some("abc"));
        let cookie = TokenLocation::Cookie("site".to_owned());
        check(&cookie, &[("cookie", "a=1; site=abc")], Some("abc"));
        check(&cookie, &[("cookie", "a=1")], None);
    }

    #[test]
    fn claims_give_a_bounded_identity() {
        let claims = |value: Value| {
            let mut map = Map::new();
            map.insert("sub".to_owned(), value);
            map
        };
        assert_eq!(
            identity_claim(&claims("u-1".into()), "sub"),
            Ok("u-1".to_owned())
        );
        assert_eq!(
            identity_claim(&claims(42.into()), "sub"),
            Ok("42".to_owned())
        );
        let refused = Err(SiteTokenError::NoClaim("sub".to_owned()));
        assert_eq!(identity_claim(&claims("".into()), "sub"), refused);
        assert_eq!(identity_claim(&claims(1.5.into()), "sub"), refused);
        assert_eq!(identity_claim(&claims(Value::Null), "sub"), refused);
        assert_eq!(
            identity_claim(&claims("x".repeat(MAX_IDENTITY_LEN + 1).into()), "sub"),
            refused
        );
        assert_eq!(
            identity_claim(&claims("u".into()), "email"),
            Err(SiteTokenError::NoClaim("email".to_owned()))
        );
    }

    #[test]
    fn time_is_checked_with_leeway() {
        let claims = |exp: u64, nbf: Option<u64>| {
            let mut map = Map::new();
            map.insert("exp".to_owned(), exp.into());
            if let Some(nbf) = nbf {
                map.insert("nbf".to_owned(), nbf.into());
            }
            map
        };
        assert_eq!(check_time(&claims(1000, None), 1029), Ok(()));
        assert_eq!(
            check_time(&claims(1000, None), 1030),
            Err(SiteTokenError::Expired)
        );
        assert_eq!(check_time(&claims(2000, Some(1030)), 1000), Ok(()));
        assert_eq!(
            check_time(&claims(2000, Some(1031)), 1000),
            Err(SiteTokenError::NotYetValid)
        );
    }

    #[test]
    fn key_sets_keep_asymmetric_keys_with_a_kid() {
        let ec = r#"{"kty":"EC","crv":"P-256","kid":"ec-1","alg":"ES256",
            "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y":"x_FEzRjm2OrGyhuL3fyJx-_xQ4YxUOHQIHTWk7rtc8Y"}"#;
        let secret = r#"{"kty":"oct","kid":"hs","k":"c2VjcmV0"}"#;
        let no_kid = r#"{"kty":"EC","crv":"P-256",
            "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y":"x_FEzRjm2OrGyhuL3fyJx-_xQ4YxUOHQIHTWk7rtc8Y"}"#;
        let unknown = r#"{"kty":"XYZ","kid":"odd"}"#;
        let body = format!(r#"{{"keys":[{ec},{secret},{no_kid},{unknown}]}}"#);
        let keys = parse_key_set(body.as_bytes()).unwrap();
        assert_eq!(keys.keys().collect::<Vec<_>>(), ["ec-1"]);
        assert_eq!(keys["ec-1"].algorithm, Some(Algorithm::ES256));
        assert!(parse_key_set(format!(r#"{{"keys":[{secret}]}}"#).as_bytes()).is_err());
        assert!(parse_key_set(b"{}").is_err());
        assert!(parse_key_set(b"<html>").is_err());
    }
}
