//! Which address a request comes from: the connection's peer, or behind a trusted proxy
//! the client its forwarding headers name; and the address and CIDR matching that both
//! the proxy list and a token's `ip_allowlist` use.

use std::net::IpAddr;

/// Whether `ip` is the address or inside the CIDR block an allowlist entry names.
pub(super) fn ip_in(entry: &str, ip: IpAddr) -> bool {
    let (addr, bits) = match entry.split_once('/') {
        Some((a, b)) => (a, b.parse::<u32>().ok()),
        None => (entry, None),
    };
    let Ok(net) = addr.trim().parse::<IpAddr>() else {
        return false;
    };
    let (net, ip, width) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        (IpAddr::V6(n), IpAddr::V4(i)) => (u128::from(n), u128::from(i.to_ipv6_mapped()), 128),
        (IpAddr::V4(n), IpAddr::V6(i)) => match i.to_ipv4_mapped() {
            Some(i) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32),
            None => return false,
        },
    };
    let bits = bits.unwrap_or(width).min(width);
    if bits == 0 {
        return true;
    }
    let shift = width - bits;
    (net >> shift) == (ip >> shift)
}

/// Proxies whose forwarding headers are believed: addresses or CIDR blocks
/// (`--trusted-proxies`). Empty (the default) believes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<String>);

impl TrustedProxies {
    /// Parses a comma-separated list of addresses and CIDR blocks, naming a bad entry.
    pub fn parse(list: &str) -> std::result::Result<TrustedProxies, String> {
        let mut entries = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (addr, bits) = match entry.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (entry, None),
            };
            let ip: IpAddr = addr.parse().map_err(|_| {
                format!("trusted proxy '{entry}' is not an IP address or CIDR block")
            })?;
            let width = if ip.is_ipv4() { 32 } else { 128 };
            if let Some(bits) = bits
                && bits.parse::<u32>().map_or(true, |b| b > width)
            {
                return Err(format!(
                    "trusted proxy '{entry}': the prefix length must be 0 to {width}"
                ));
            }
            entries.push(entry.to_string());
        }
        Ok(TrustedProxies(entries))
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|entry| ip_in(entry, ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The client address of a request: the TCP peer, unless the peer is a trusted proxy;
/// then the nearest untrusted hop of its forwarding chain (`Forwarded: for=`, else
/// `X-Forwarded-For`), read from the right, since only the hops trusted proxies appended
/// can be believed (the leftmost is whatever the client wrote).
pub fn client_ip(
    peer: Option<IpAddr>,
    forwarded: Option<&str>,
    x_forwarded_for: Option<&str>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let peer = peer?;
    if !trusted.trusts(peer) {
        return Some(peer);
    }
    let hops: Vec<&str> = match (forwarded, x_forwarded_for) {
        (Some(f), _) => f
            .split([',', ';'])
            .filter_map(|part| {
                let (key, value) = part.trim().split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("for")
                    .then_some(value.trim())
            })
            .collect(),
        (None, Some(x)) => x.split(',').map(str::trim).collect(),
        (None, None) => Vec::new(),
    };
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = hop_address(hop) else {
            // A hop that is not an address: what a trusted proxy said before it stands.
            break;
        };
        client = ip;
        if !trusted.trusts(ip) {
            break;
        }
    }
    Some(client)
}

/// The address of one forwarding hop: `1.2.3.4`, `"[2001:db8::1]:80"`, `1.2.3.4:80`.
fn hop_address(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    hop.parse().ok().or_else(|| {
        let (addr, port) = hop.rsplit_once(':')?;
        port.parse::<u16>().ok()?;
        addr.parse().ok()
    })
}
