//! The signing algorithms a key set can hold.

use std::fmt;
use std::str::FromStr;

use crate::TokenError;

/// A JWS signing algorithm supported for passes.
///
/// The names are the JOSE `alg` values; `EdDSA` (Ed25519) is the default.
///
/// ```
/// use anteroom_token::SigningAlgorithm;
///
/// let algorithm: SigningAlgorithm = "ES256".parse().unwrap();
/// assert_eq!(algorithm, SigningAlgorithm::Es256);
/// assert_eq!(algorithm.as_str(), "ES256");
/// assert!("none".parse::<SigningAlgorithm>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SigningAlgorithm {
    /// Ed25519 signatures (`EdDSA`).
    #[default]
    EdDsa,
    /// ECDSA over P-256 with SHA-256 (`ES256`).
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (`RS256`).
    Rs256,
    /// HMAC with SHA-256 (`HS256`); its keys are secret and never published.
    Hs256,
}

impl SigningAlgorithm {
    /// Every supported algorithm.
    pub const ALL: [SigningAlgorithm; 4] = [
        SigningAlgorithm::EdDsa,
        SigningAlgorithm::Es256,
        SigningAlgorithm::Rs256,
        SigningAlgorithm::Hs256,
    ];

    /// The JOSE `alg` name.
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::EdDsa => "EdDSA",
            SigningAlgorithm::Es256 => "ES256",
            SigningAlgorithm::Rs256 => "RS256",
            SigningAlgorithm::Hs256 => "HS256",
        }
    }

    /// Whether the key is asymmetric and so appears in the JWKS.
    pub fn is_asymmetric(self) -> bool {
        self != SigningAlgorithm::Hs256
    }

    /// The lowercase name used in key file names.
    pub(crate) fn file_tag(self) -> &'static str {
        match self {
            SigningAlgorithm::EdDsa => "eddsa",
            SigningAlgorithm::Es256 => "es256",
            SigningAlgorithm::Rs256 => "rs256",
            SigningAlgorithm::Hs256 => "hs256",
        }
    }

    /// The algorithm whose exact JOSE name is `alg`, if supported.
    pub(crate) fn from_jose(alg: &str) -> Option<SigningAlgorithm> {
        SigningAlgorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.as_str() == alg)
    }

    pub(crate) fn jsonwebtoken(self) -> jsonwebtoken::Algorithm {
        match self {
            SigningAlgorithm::EdDsa => jsonwebtoken::Algorithm::EdDSA,
            SigningAlgorithm::Es256 => jsonwebtoken::Algorithm::ES256,
            SigningAlgorithm::Rs256 => jsonwebtoken::Algorithm::RS256,
            SigningAlgorithm::Hs256 => jsonwebtoken::Algorithm::HS256,
        }
    }
}

impl FromStr for SigningAlgorithm {
    type Err = TokenError;

    /// Parses a JOSE name, ignoring ASCII case (`EdDSA`, `eddsa`, `ES256`, `es256`, …).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        SigningAlgorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| TokenError::UnknownAlgorithm(name.to_owned()))
    }
}

impl fmt::Display for SigningAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, expected: Option<SigningAlgorithm>) {
        match (name.parse::<SigningAlgorithm>(), expected) {
            (Ok(actual), Some(expected)) => assert_eq!(actual, expected, "{name}"),
            (Err(TokenError::UnknownAlgorithm(rejected)), None) => assert_eq!(rejected, name),
            (actual, expected) => panic!("{name:?}: got {actual:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn parses_jose_names() {
        for algorithm in SigningAlgorithm::ALL {
            check(algorithm.as_str(), Some(algorithm));
            assert_eq!(algorithm.to_string(), algorithm.as_str());
        }
        check("eddsa", Some(SigningAlgorithm::EdDsa));
        check("es256", Some(SigningAlgorithm::Es256));
        check("none", None);
        check("", None);
        check("Ed25519", None);
        check("HS512", None);
    }

    #[test]
    fn default_is_eddsa() {
        assert_eq!(SigningAlgorithm::default(), SigningAlgorithm::EdDsa);
        assert!(!SigningAlgorithm::Hs256.is_asymmetric());
    }
}
