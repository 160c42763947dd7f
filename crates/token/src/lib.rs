//! Signing keys, JWT passes, signed ticket tokens and the JWKS.
