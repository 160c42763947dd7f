//! What one node lets its public listener hold (SPEC §14.4): the timeouts of every client
//! connection, and the caps on open connections, in all and per client address, counted
//! across every worker thread of the node.
//!
//! A connection over a cap is refused as soon as it is accepted: a 503 is written without
//! waiting (one non-blocking write into an empty socket buffer) and the connection is closed,
//! so a flood of connections costs the node an accept and a close each, never a task, a
//! buffer or a timer. Refusals and accept failures (out of descriptors) are logged at most
//! once a second, with how many the quiet second hid, so a flood cannot fill the log.
//!
//! Behind trusted proxies the peer is the proxy, whose one address carries every visitor:
//! its connections count towards the node's cap only, and the per-address cap applies instead
//! to the requests in flight for each forwarded client address (read as the rate limiter
//! reads it), answered 429 over the cap while the proxy's connection stays open.
//!
//! A connection is counted from its accept until its IO (`ClientIo`) is dropped, whichever
//! engine holds it then. The admin listener gets the timeouts, never the caps.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use anteroom_core::config::{Cidr, ConnectionLimits};
use anteroom_core::ratelimit::client_ip::{is_trusted, subscriber};

/// Independent locks the per-address counts are spread over, so workers accepting at once
/// seldom wait for each other.
const SHARDS: usize = 16;

/// Failures of one kind are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The answer written to a connection refused over a cap, without waiting for the socket.
const REFUSED_ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n";

/// The public listener's timeouts and caps, with the node's counts of open connections:
/// clone it into every worker's app (`PublicApp::with_limits`) so the caps hold for the node,
/// not per thread.
#[derive(Clone)]
pub struct ServerLimits {
    pub(crate) timeouts: ConnectionLimits,
    open: Arc<OpenConnections>,
}

impl ServerLimits {
    /// The configured timeouts and caps for a process that may open `open_files` descriptors
    /// ([`ConnectionLimits::sized_for`]); connections from `trusted_proxies` are capped per
    /// forwarded client instead of per address.
    pub fn new(limits: ConnectionLimits, open_files: u64, trusted_proxies: Vec<Cidr>) -> Self {
        let max_connections = limits.sized_for(open_files);
        ServerLimits {
            timeouts: limits,
            open: Arc::new(OpenConnections::new(
                max_connections,
                limits.max_connections_per_address,
                trusted_proxies,
            )),
        }
    }

    /// The timeouts alone, with no cap on connections (the admin listener, which the caps
    /// keep descriptors for).
    pub fn uncapped(limits: ConnectionLimits) -> Self {
        ServerLimits {
            timeouts: limits,
            open: Arc::new(OpenConnections::new(usize::MAX, usize::MAX, Vec::new())),
        }
    }

    /// The node-wide cap on open connections.
    pub fn max_connections(&self) -> usize {
        self.open.max
    }

    /// Open connections counted now.
    pub fn open_connections(&self) -> usize {
        self.open.total.load(Ordering::Relaxed)
    }

    /// Counts a connection just accepted from `peer`; `None`, and the connection refused
    /// ([`ServerLimits::refuse`]), when a cap is reached.
    pub(crate) fn admit(&self, peer: SocketAddr) -> Option<ConnectionPermit> {
        let open = &self.open;
        if open.total.fetch_add(1, Ordering::AcqRel) >= open.max {
            open.total.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let address = peer.ip().to_canonical();
        // A trusted proxy's connections carry many visitors: its requests are counted instead.
        // Uncapped (the admin listener), no address is counted at all. An IPv6 peer counts by
        // its /64, as rate limits count it.
        let address =
            if open.per_address == usize::MAX || is_trusted(address, &open.trusted_proxies) {
                None
            } else if open.enter(subscriber(address)) {
                Some(subscriber(address))
            } else {
                open.total.fetch_sub(1, Ordering::AcqRel);
                return None;
            };
        Some(ConnectionPermit {
            open: open.clone(),
            address,
        })
    }

    /// Writes the 503 if the socket takes it at once, then closes the connection (dropping
    /// it), and notes the refusal for the log.
    pub(crate) fn refuse(&self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let _ = stream.try_write(REFUSED_ANSWER);
        drop(stream);
        if let Some(hidden) = self.open.refusals.note() {
            tracing::warn!(
                %peer,
                max_connections = self.open.max,
                max_connections_per_address = self.open.per_address,
                refused_since_last_line = hidden,
                "refusing connections over the caps"
            );
        }
    }

    /// Notes a failed accept for the log (at most one line a second).
    pub(crate) fn accept_failed(&self, error: &std::io::Error) {
        if let Some(hidden) = self.open.accept_errors.note() {
            tracing::warn!(%error, failed_since_last_line = hidden, "cannot accept a connection");
        }
    }

    /// Whether a request from `peer` is one a trusted proxy forwards (its client's requests
    /// are then counted with [`ServerLimits::admit_request`]).
    pub(crate) fn is_from_proxy(&self, peer: SocketAddr) -> bool {
        !self.open.trusted_proxies.is_empty()
            && is_trusted(peer.ip().to_canonical(), &self.open.trusted_proxies)
    }

    /// The trusted proxies, to read a forwarded client address with.
    pub(crate) fn trusted_proxies(&self) -> &[Cidr] {
        &self.open.trusted_proxies
    }

    /// Counts a request in flight for the forwarded client `client`; `None` over the
    /// per-address cap.
    pub(crate) fn admit_request(&self, client: IpAddr) -> Option<AddressPermit> {
        let client = subscriber(client);
        self.open.enter(client).then(|| AddressPermit {
            open: self.open.clone(),
            address: client,
        })
    }
}

/// The answer to a request a trusted proxy forwards for a client already holding its
/// per-address cap of requests in flight: 429, and the proxy's connection stays open.
pub(crate) fn over_address_cap() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    anteroom_api::error::ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "too_many_connections",
        "this client address has too many requests in flight",
    )
    .retry_after(1)
    .into_response()
}

/// The node's counts (see the module documentation).
struct OpenConnections {
    max: usize,
    per_address: usize,
    trusted_proxies: Vec<Cidr>,
    total: AtomicUsize,
    by_address: [Mutex<HashMap<IpAddr, usize>>; SHARDS],
    refusals: QuietLog,
    accept_errors: QuietLog,
}

impl OpenConnections {
    fn new(max: usize, per_address: usize, trusted_proxies: Vec<Cidr>) -> Self {
        OpenConnections {
            max,
            per_address,
            trusted_proxies,
            total: AtomicUsize::new(0),
            by_address: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            refusals: QuietLog::default(),
            accept_errors: QuietLog::default(),
        }
    }

    fn shard(&self, address: IpAddr) -> &Mutex<HashMap<IpAddr, usize>> {
        let index = match address {
            IpAddr::V4(v4) => usize::from(v4.octets()[3]) ^ usize::from(v4.octets()[2]),
            IpAddr::V6(v6) => usize::from(v6.octets()[15]) ^ usize::from(v6.octets()[7]),
        };
        &self.by_address[index % SHARDS]
    }

    /// Counts one more for `address`, unless it holds its cap already.
    fn enter(&self, address: IpAddr) -> bool {
        let mut counts = self.shard(address).lock();
        let count = counts.entry(address).or_insert(0);
        if *count >= self.per_address {
            if *count == 0 {
                counts.remove(&address);
            }
            return false;
        }
        *count += 1;
        true
    }

    fn leave(&self, address: IpAddr) {
        let mut counts = self.shard(address).lock();
        if let Some(count) = counts.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&address);
            }
        }
    }
}

/// One open client connection, counted until dropped (with the connection's IO).
pub(crate) struct ConnectionPermit {
    open: Arc<OpenConnections>,
    address: Option<IpAddr>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        if let Some(address) = self.address {
            self.open.leave(address);
        }
        self.open.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request in flight for a forwarded client address, counted until dropped (with the
/// answer's body).
pub(crate) struct AddressPermit {
    open: Arc<OpenConnections>,
    address: IpAddr,
}

impl Drop for AddressPermit {
    fn drop(&mut self) {
        self.open.leave(self.address);
    }
}

/// A log line at most every [`LOG_EVERY`], with how many events the quiet time hid.
#[derive(Default)]
struct QuietLog {
    /// When the last line was written, and events since.
    state: Mutex<Option<(Instant, u64)>>,
}

impl QuietLog {
    /// Notes one event: `Some(hidden)` when a line should be written now.
    fn note(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock();
        match &mut *state {
            Some((logged_at, hidden)) if now.duration_since(*logged_at) < LOG_EVERY => {
                *hidden += 1;
                None
            }
            Some((logged_at, hidden)) => {
                let count = *hidden;
                *logged_at = now;
                *hidden = 0;
                Some(count)
            }
            None => {
                *state = Some((now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn limits(max: usize, per_address: usize, trusted: &[&str]) -> ServerLimits {
        let config = ConnectionLimits {
            max_connections: Some(max),
            max_connections_per_address: per_address,
            ..ConnectionLimits::default()
        };
        let trusted = trusted.iter().map(|cidr| cidr.parse().unwrap()).collect();
        ServerLimits::new(config, 1024, trusted)
    }

    fn peer(text: &str) -> SocketAddr {
        format!("{text}:1000").parse().unwrap()
    }

    #[test]
    fn an_address_is_capped_and_frees_its_place_when_a_connection_closes() {
        let limits = limits(10, 2, &[]);
        let first = limits.admit(peer("192.0.2.1")).unwrap();
        let _second = limits.admit(peer("192.0.2.1")).unwrap();
        assert!(limits.admit(peer("192.0.2.1")).is_none());
        // The same address written as IPv4-mapped IPv6 is the same client.
        assert!(limits.admit(peer("[::ffff:192.0.2.1]")).is_none());
        let _other = limits.admit(peer("192.0.2.2")).unwrap();
        assert_eq!(limits.open_connections(), 3);
        drop(first);
        assert_eq!(limits.open_connections(), 2);
        assert!(limits.admit(peer("192.0.2.1")).is_some());
    }

    #[test]
    fn an_ipv6_subscriber_is_capped_by_its_64_not_by_each_address() {
        let limits = limits(10, 2, &["2001:db8:ffff::/48"]);
        let _first = limits.admit(peer("[2001:db8:1:2::1]")).unwrap();
        let _second = limits.admit(peer("[2001:db8:1:2::2]")).unwrap();
        assert!(limits.admit(peer("[2001:db8:1:2:ffff::3]")).is_none());
        assert!(limits.admit(peer("[2001:db8:1:3::1]")).is_some());
        let client: IpAddr = "2001:db8:5:6::1".parse().unwrap();
        let _held = [
            limits.admit_request(client).unwrap(),
            limits
                .admit_request("2001:db8:5:6::2".parse().unwrap())
                .unwrap(),
        ];
        assert!(
            limits
                .admit_request("2001:db8:5:6:7::8".parse().unwrap())
                .is_none()
        );
    }

    #[test]
    fn the_node_is_capped_across_addresses() {
        let limits = limits(2, 5, &[]);
        let _one = limits.admit(peer("192.0.2.1")).unwrap();
        let two = limits.admit(peer("192.0.2.2")).unwrap();
        assert!(limits.admit(peer("192.0.2.3")).is_none());
        assert_eq!(limits.open_connections(), 2);
        drop(two);
        assert!(limits.admit(peer("192.0.2.3")).is_some());
    }

    #[test]
    fn a_trusted_proxy_is_capped_per_forwarded_client_not_per_address() {
        let limits = limits(100, 1, &["10.0.0.0/8"]);
        let proxy = peer("10.0.0.5");
        let _connections: Vec<_> = (0..5).map(|_| limits.admit(proxy).unwrap()).collect();
        assert!(limits.is_from_proxy(proxy));
        assert!(!limits.is_from_proxy(peer("192.0.2.1")));
        let client: IpAddr = "203.0.113.9".parse().unwrap();
        let request = limits.admit_request(client).unwrap();
        assert!(limits.admit_request(client).is_none());
        assert!(
            limits
                .admit_request("203.0.113.10".parse().unwrap())
                .is_some()
        );
        drop(request);
        assert!(limits.admit_request(client).is_some());
    }

    #[test]
    fn the_admin_listener_is_not_capped() {
        let limits = ServerLimits::uncapped(ConnectionLimits::default());
        let held: Vec<_> = (0..1000)
            .map(|_| limits.admit(peer("127.0.0.1")).unwrap())
            .collect();
        assert_eq!(limits.open_connections(), held.len());
    }

    #[test]
    fn a_flood_of_events_is_logged_once_a_second() {
        let log = QuietLog::default();
        assert_eq!(log.note(), Some(0));
        assert!((0..1000).all(|_| log.note().is_none()));
        *log.state.lock() = Some((Instant::now() - LOG_EVERY, 1000));
        assert_eq!(log.note(), Some(1000));
        assert_eq!(log.note(), None);
    }
}
