//! Address ranges in CIDR notation, used for `trusted_proxies`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network such as `10.0.0.0/8` or `::1/128`.
///
/// Parsing clears the host bits and writes an IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`)
/// as the IPv4 network it denotes, so one spelling compares equal to the other.
///
/// ```
/// use anteroom_core::config::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse().expect("valid");
/// assert!(private.contains("10.1.2.3".parse().expect("valid")));
/// assert!(private.contains("::ffff:10.1.2.3".parse().expect("valid")));
/// assert!(!private.contains("11.0.0.1".parse().expect("valid")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network's address.
    pub network: IpAddr,
    /// How many leading bits of an address must equal the network's.
    pub prefix_len: u8,
}

/// Why a CIDR string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid CIDR {input:?}: expected an address with an optional prefix length, such as \"10.0.0.0/8\" or \"::1/128\""
)]
pub struct CidrError {
    input: String,
}

impl Cidr {
    /// Whether `ip` lies in this network. IPv4-mapped IPv6 addresses count as their IPv4 form.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = mask_u32(self.prefix_len);
                u32::from(network) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => same_v6_prefix(network, ip, self.prefix_len),
            (IpAddr::V6(network), IpAddr::V4(ip)) => {
                same_v6_prefix(network, ip.to_ipv6_mapped(), self.prefix_len)
            }
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

fn same_v6_prefix(network: Ipv6Addr, ip: Ipv6Addr, prefix_len: u8) -> bool {
    let mask = mask_u128(prefix_len);
    u128::from(network) & mask == u128::from(ip) & mask
}

fn mask_u32(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0)
}

fn mask_u128(prefix_len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix_len.min(128)))
        .unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = || CidrError {
            input: input.to_owned(),
        };
        let (address, prefix) = match input.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (input, None),
        };
        let address: IpAddr = address.parse().map_err(|_| error())?;
        let full_len = if address.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix {
            None => full_len,
            Some(prefix) if prefix.bytes().all(|b| b.is_ascii_digit()) => prefix
                .parse::<u8>()
                .ok()
                .filter(|len| *len <= full_len)
                .ok_or_else(error)?,
            Some(_) => return Err(error()),
        };
        let (network, prefix_len) = match address {
            IpAddr::V6(v6) if prefix_len >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix_len - 96),
                None => (address, prefix_len),
            },
            _ => (address, prefix_len),
        };
        let network = match network {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask_u32(prefix_len))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask_u128(prefix_len))),
        };
        Ok(Cidr {
            network,
            prefix_len,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}
