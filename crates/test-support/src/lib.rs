//! What the workspace's tests start for real, each kept once: free loopback ports, Redis
//! servers and clusters, `anteroom serve` processes and TLS origins; and the parts of a JWT.
//!
//! A dev-dependency only (`publish = false`). The parts that need an HTTP stack sit behind
//! features (`node`, `tls`), so a crate whose tests need only Redis builds none of it.

pub mod jwt;
pub mod ports;
pub mod redis;

#[cfg(feature = "node")]
pub mod config_text;
#[cfg(feature = "node")]
pub mod node;
#[cfg(feature = "tls")]
pub mod tls;
