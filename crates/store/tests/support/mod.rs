//! Helpers the store's integration tests start for real: Redis servers and clusters.

#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

pub mod redis;
