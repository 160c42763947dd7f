//! Free loopback ports for the servers tests start.
//!
//! Ports come from below the kernel's ephemeral range (32768 and up): a port from that range
//! can be handed to some test's outgoing connection as its source port before the server meant
//! for it binds it (the connection-flood tests open more than a thousand at once).

use std::net::TcpListener;

use rand::Rng as _;

/// A port nobody listens on right now, below the ephemeral range.
pub fn free_port() -> u16 {
    let mut rng = rand::thread_rng();
    loop {
        let port: u16 = rng.gen_range(10_000..30_000);
        if is_free(port) {
            return port;
        }
    }
}

/// A port `P` below the ephemeral range whose Redis Cluster bus port `P + 10000` is free too.
pub fn free_port_pair() -> u16 {
    let mut rng = rand::thread_rng();
    loop {
        let port: u16 = rng.gen_range(10_000..22_000);
        if is_free(port) && is_free(port + 10_000) {
            return port;
        }
    }
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}
