//! `[server]`'s timeouts and connection caps for the public listener (SPEC §14.4): how long a
//! client may take at each step of a request, and how many connections the node and one
//! address may hold.
//!
//! The default `max_connections` follows the process's open-file limit
//! ([`ConnectionLimits::sized_for`]): the binary reads the limit and hands it in, since the
//! core reads none itself.

use std::time::Duration;

use super::gateway::read_positive_duration;
use super::tree::{Problems, Table};

/// `[server]` timeouts and caps of client connections on the public listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `header_timeout`: the longest a request head may take to arrive, from its first byte
    /// (from the accept for a connection's first request) to its end: a slow-loris bound.
    pub header_timeout: Duration,
    /// `body_timeout`: the longest a request body may go without a byte arriving.
    pub body_timeout: Duration,
    /// `idle_timeout`: the longest a kept-alive connection waits for its next request.
    pub idle_timeout: Duration,
    /// `write_timeout`: the longest a write to the client may make no progress (a client that
    /// stopped reading) before its connection is closed.
    pub write_timeout: Duration,
    /// `drain_timeout`: how long requests in flight may take to finish after shutdown begins.
    pub drain_timeout: Duration,
    /// `max_connections`: open client connections on the node; `None`: sized from the
    /// process's open-file limit when the node starts ([`ConnectionLimits::sized_for`]).
    pub max_connections: Option<usize>,
    /// `max_connections_per_address`: open connections from one client address (behind trusted
    /// proxies: requests in flight for one forwarded client address).
    pub max_connections_per_address: usize,
}

/// Descriptors kept out of `max_connections` by default, at least: the admin listener and its
/// connections, the store, upstream connections, key and template files, the runtime's own.
pub const MIN_DESCRIPTOR_RESERVE: u64 = 128;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
            max_connections: None,
            max_connections_per_address: 256,
        }
    }
}

impl ConnectionLimits {
    /// The node-wide cap for a process that may open `open_files` descriptors: the configured
    /// one, else the limit less a reserve of a tenth of it and at least
    /// [`MIN_DESCRIPTOR_RESERVE`], so the admin listener, the store and the upstream are still
    /// served when the public listener is full.
    ///
    /// ```
    /// use anteroom_core::config::ConnectionLimits;
    ///
    /// let limits = ConnectionLimits::default();
    /// assert_eq!(limits.sized_for(1024), 896);
    /// assert_eq!(limits.sized_for(65_536), 58_983);
    /// assert_eq!(limits.sized_for(100), 1);
    /// ```
    pub fn sized_for(&self, open_files: u64) -> usize {
        if let Some(max) = self.max_connections {
            return max;
        }
        let reserve = (open_files / 10).max(MIN_DESCRIPTOR_RESERVE);
        usize::try_from(open_files.saturating_sub(reserve))
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

/// The longest any of the timeouts may be: a longer `header_timeout` or `idle_timeout` is no
/// slow-loris bound at all, and a longer `drain_timeout` outlasts any orchestrator's grace
/// period (the node would be killed mid-drain anyway).
pub const MAX_CONNECTION_TIMEOUT: Duration = Duration::from_secs(3600);

/// Reads the timeouts and caps from the `[server]` table.
pub(super) fn read(table: &Table, problems: &mut Problems) -> ConnectionLimits {
    let defaults = ConnectionLimits::default();
    let duration = |key: &str, default: Duration, problems: &mut Problems| {
        let Some(entry) = table.get(key) else {
            return default;
        };
        match read_positive_duration(entry, problems) {
            Some(duration) if duration > MAX_CONNECTION_TIMEOUT => {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "`{key}` must be at most {MAX_CONNECTION_TIMEOUT:?}, found {duration:?}"
                    ),
                );
                default
            }
            duration => duration.unwrap_or(default),
        }
    };
    let count = |key: &str, problems: &mut Problems| {
        let entry = table.get(key)?;
        match entry.unsigned(problems)? {
            0 => {
                problems.add(&entry.key_origin, format!("`{key}` must be at least 1"));
                None
            }
            count => Some(usize::try_from(count).unwrap_or(usize::MAX)),
        }
    };
    ConnectionLimits {
        header_timeout: duration("header_timeout", defaults.header_timeout, problems),
        body_timeout: duration("body_timeout", defaults.body_timeout, problems),
        idle_timeout: duration("idle_timeout", defaults.idle_timeout, problems),
        write_timeout: duration("write_timeout", defaults.write_timeout, problems),
        drain_timeout: duration("drain_timeout", defaults.drain_timeout, problems),
        max_connections: count("max_connections", problems),
        max_connections_per_address: count("max_connections_per_address", problems)
            .unwrap_or(defaults.max_connections_per_address),
    }
}
