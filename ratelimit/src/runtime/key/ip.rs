//! The client's address: the peer, or what trusted proxies say about it.
//!
//! `X-Forwarded-For` and `Forwarded` are client-controlled text unless the
//! peer is a proxy we trust. So: if the peer is not in the trusted set, the
//! peer *is* the client and headers are ignored. If it is, the chain in the
//! configured header is walked right to left (each proxy appends what it saw),
//! skipping trusted hops; the first untrusted address is the client. An entry
//! that is not an address (`unknown`, an obfuscated `_id`, garbage, non-ASCII
//! bytes) ends the walk at the last hop we trust, so such traffic shares that
//! hop's bucket rather than picking its own.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

use crate::shared::net::{normalize, prefix_of};

/// The most chain entries examined; a longer chain ends the walk (a real
/// proxy chain is a handful of hops, an attacker's can be thousands).
const MAX_HOPS: usize = 32;

/// Which header the trusted proxies use to pass the client's address.
///
/// Only one is read: trusting both would let a client forge the one its
/// proxies do not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the de facto standard).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

impl ForwardedHeader {
    /// The header's name.
    /// The header, as a `HeaderName` (no parsing per lookup).
    pub fn header_name(&self) -> &'static http::HeaderName {
        static XFF: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
        match self {
            ForwardedHeader::XForwardedFor => &XFF,
            ForwardedHeader::Forwarded => &http::header::FORWARDED,
        }
    }

    /// The header's name.
    pub fn name(&self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        }
    }
}

/// How to find and aggregate the client's address.
///
/// ```
/// use ratelimit::key::{ClientIpConfig, ForwardedHeader};
///
/// let config = ClientIpConfig::default()
///     .trust_proxies(["10.0.0.0/8", "fd00::/8"].iter().map(|c| c.parse().unwrap()))
///     .forwarded_header(ForwardedHeader::XForwardedFor)
///     .ipv6_prefix(64)
///     .unwrap();
/// assert_eq!(config.trusted_proxies().len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIpConfig {
    trusted: Vec<IpNet>,
    header: ForwardedHeader,
    ipv6_prefix: u8,
    ipv4_prefix: u8,
    ipv6_network: u8,
    ipv4_network: u8,
    /// A request without a peer address shares one bucket with every other
    /// such request, rather than being answered 500.
    shared_without_peer: bool,
}

impl Default for ClientIpConfig {
    /// No trusted proxies (the peer is the client), `X-Forwarded-For`, IPv6
    /// aggregated to /64 (one subscriber's usual allocation), IPv4 exact;
    /// networks of /48 (IPv6: one site's usual allocation) and /24 (IPv4).
    fn default() -> Self {
        ClientIpConfig {
            trusted: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: 64,
            ipv4_prefix: 32,
            ipv6_network: 48,
            ipv4_network: 24,
            shared_without_peer: false,
        }
    }
}

/// An invalid [`ClientIpConfig`] value.
#[derive(Clone, PartialEq, Eq)]
pub struct PrefixError {
    family: &'static str,
    prefix: u8,
    max: u8,
}

crate::engine::errors::debug_as_display!(PrefixError);

impl std::fmt::Display for PrefixError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} prefix /{} is out of range: expected 1 to {}",
            self.family, self.prefix, self.max
        )
    }
}

impl std::error::Error for PrefixError {}

impl ClientIpConfig {
    /// Adds proxies whose forwarded headers are believed. IPv4-mapped IPv6
    /// networks are normalised to IPv4.
    #[must_use]
    pub fn trust_proxies(mut self, nets: impl IntoIterator<Item = IpNet>) -> Self {
        self.trusted.extend(nets.into_iter().map(normalize_net));
        self
    }

    /// The header the trusted proxies set.
    #[must_use]
    pub fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// What a request whose key needs the client's address gets when the
    /// server gave it none (served without connect info): `false` (the
    /// default), a 500 whose body names the fix, as axum's `ConnectInfo`
    /// extractor answers; `true`, one bucket shared by every such request
    /// (a test setup that wants it says so: `[ip] without_peer = "shared"`).
    ///
    /// ```
    /// use ratelimit::key::ClientIpConfig;
    ///
    /// assert!(!ClientIpConfig::default().shares_bucket_without_peer());
    /// assert!(ClientIpConfig::default().share_bucket_without_peer(true).shares_bucket_without_peer());
    /// ```
    #[must_use]
    pub fn share_bucket_without_peer(mut self, shared: bool) -> Self {
        self.shared_without_peer = shared;
        self
    }

    /// Whether requests without a peer address share one bucket (see
    /// [`share_bucket_without_peer`](Self::share_bucket_without_peer)).
    pub fn shares_bucket_without_peer(&self) -> bool {
        self.shared_without_peer
    }

    /// Aggregates IPv6 clients to this prefix length (1 to 128; default 64).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Result<Self, PrefixError> {
        if !(1..=128).contains(&prefix) {
            return Err(PrefixError {
                family: "IPv6",
                prefix,
                max: 128,
            });
        }
        self.ipv6_prefix = prefix;
        Ok(self)
    }

    /// Aggregates IPv4 clients to this prefix length (1 to 32; default 32).
    pub fn ipv4_prefix(mut self, prefix: u8) -> Result<Self, PrefixError> {
        if !(1..=32).contains(&prefix) {
            return Err(PrefixError {
                family: "IPv4",
                prefix,
                max: 32,
            });
        }
        self.ipv4_prefix = prefix;
        Ok(self)
    }

    /// The IPv6 network a client belongs to (1 to 128; default 48): the
    /// new clients one network brings into the store are bounded (see
    /// [`network`](Self::network)).
    pub fn ipv6_network_prefix(mut self, prefix: u8) -> Result<Self, PrefixError> {
        if !(1..=128).contains(&prefix) {
            return Err(PrefixError {
                family: "IPv6 network",
                prefix,
                max: 128,
            });
        }
        self.ipv6_network = prefix;
        Ok(self)
    }

    /// The IPv4 network a client belongs to (1 to 32; default 24).
    pub fn ipv4_network_prefix(mut self, prefix: u8) -> Result<Self, PrefixError> {
        if !(1..=32).contains(&prefix) {
            return Err(PrefixError {
                family: "IPv4 network",
                prefix,
                max: 32,
            });
        }
        self.ipv4_network = prefix;
        Ok(self)
    }

    /// The network of a client address: the group whose new clients share
    /// one budget of cells in the store, so one network rotating addresses
    /// cannot fill it (see `docs/security.md`). Never finer than the
    /// client's own aggregation.
    ///
    /// ```
    /// use ratelimit::key::ClientIpConfig;
    /// use std::net::IpAddr;
    ///
    /// let config = ClientIpConfig::default();
    /// let a: IpAddr = "2001:db8:aaaa:1::".parse().unwrap();
    /// assert_eq!(config.network(a), "2001:db8:aaaa::".parse::<IpAddr>().unwrap());
    /// let b: IpAddr = "192.0.2.77".parse().unwrap();
    /// assert_eq!(config.network(b), "192.0.2.0".parse::<IpAddr>().unwrap());
    /// ```
    pub fn network(&self, ip: IpAddr) -> IpAddr {
        let (v6, v4) = self.network_prefixes();
        prefix_of(ip, v6, v4)
    }

    /// The subnet of a client address within its [network](Self::network):
    /// for IPv6, the network prefix plus 8 bits (a /56 of a /48, what a
    /// cloud provider gives one tenant); for IPv4, the address. A subnet
    /// may spend at most a quarter of its network's budgets, so one tenant
    /// of a shared network leaves the others most of them. Never finer
    /// than the client's own aggregation.
    ///
    /// ```
    /// use ratelimit::key::ClientIpConfig;
    /// use std::net::IpAddr;
    ///
    /// let config = ClientIpConfig::default();
    /// let a: IpAddr = "2001:db8:aaaa:1234::1".parse().unwrap();
    /// assert_eq!(config.subnet(a), "2001:db8:aaaa:1200::".parse::<IpAddr>().unwrap());
    /// let b: IpAddr = "192.0.2.77".parse().unwrap();
    /// assert_eq!(config.subnet(b), b);
    /// ```
    pub fn subnet(&self, ip: IpAddr) -> IpAddr {
        let (v6, _) = self.network_prefixes();
        prefix_of(ip, v6.saturating_add(8).min(self.ipv6_prefix), self.ipv4_prefix)
    }

    /// The network prefix lengths in force, IPv6 then IPv4 (never finer
    /// than the client's own aggregation).
    pub fn network_prefixes(&self) -> (u8, u8) {
        (
            self.ipv6_network.min(self.ipv6_prefix),
            self.ipv4_network.min(self.ipv4_prefix),
        )
    }

    /// The header trusted proxies set.
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// The trusted proxy networks.
    pub fn trusted_proxies(&self) -> &[IpNet] {
        &self.trusted
    }

    /// The aggregated client address of a request from `peer`: the
    /// forwarded header is looked up (a hash lookup) only when `peer` is a
    /// trusted proxy.
    pub(crate) fn client_key(&self, peer: IpAddr, headers: &http::HeaderMap) -> IpAddr {
        let peer = normalize(peer);
        // The peer is looked up among the trusted proxies once (a server
        // behind a proxy does it for every request).
        let client = if self.is_trusted(peer) {
            let values = headers
                .get_all(self.header.header_name())
                .iter()
                .map(http::HeaderValue::as_bytes);
            self.walk_from(peer, values)
        } else {
            peer
        };
        self.aggregate(client)
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client's address: `peer` unless it is a trusted proxy, in which
    /// case the walk described in the module docs over `header_values` (the
    /// values of the configured header, in the order received).
    ///
    /// ```
    /// use ratelimit::key::ClientIpConfig;
    /// use std::net::IpAddr;
    ///
    /// let config = ClientIpConfig::default().trust_proxies(["10.0.0.0/8".parse().unwrap()]);
    /// let peer: IpAddr = "10.0.0.7".parse().unwrap();
    /// let xff: &[&[u8]] = &[b"6.6.6.6, 203.0.113.9, 10.0.0.3"];
    /// // 10.0.0.3 is trusted, 203.0.113.9 is the client; 6.6.6.6 is whatever
    /// // the client wrote and is never read.
    /// assert_eq!(config.client_addr(peer, xff.iter().copied()), "203.0.113.9".parse::<IpAddr>().unwrap());
    /// ```
    pub fn client_addr<'a>(&self, peer: IpAddr, header_values: impl DoubleEndedIterator<Item = &'a [u8]>) -> IpAddr {
        let peer = normalize(peer);
        if !self.is_trusted(peer) {
            return peer;
        }
        self.walk_from(peer, header_values)
    }

    /// [`client_addr`](Self::client_addr) from `peer`, normalized and a
    /// trusted proxy. Out of line: inlined, its loop made every request's
    /// key lookup pay for its registers (44 more instructions a request
    /// with no proxy trusted).
    #[inline(never)]
    fn walk_from<'a>(&self, peer: IpAddr, header_values: impl DoubleEndedIterator<Item = &'a [u8]>) -> IpAddr {
        let mut last_trusted = peer;
        let mut seen = 0;
        for value in header_values.rev() {
            // `Forwarded` values may quote commas (`host="a,b"`), so its
            // elements are split outside quotes; XFF has no quoting.
            let entries: &mut dyn Iterator<Item = &[u8]> = match self.header {
                ForwardedHeader::XForwardedFor => &mut value.rsplit(|&b| b == b','),
                ForwardedHeader::Forwarded => &mut RevSplitUnquoted::new(value, b','),
            };
            for entry in entries {
                seen += 1;
                if seen > MAX_HOPS {
                    return last_trusted;
                }
                let parsed = match self.header {
                    ForwardedHeader::XForwardedFor => parse_xff_entry(entry),
                    ForwardedHeader::Forwarded => parse_forwarded_element(entry),
                };
                match parsed.map(normalize) {
                    Some(ip) if self.is_trusted(ip) => last_trusted = ip,
                    Some(ip) => return ip,
                    None => return last_trusted,
                }
            }
        }
        // Every hop is a trusted proxy: the leftmost one originated the request.
        last_trusted
    }

    /// The address the limiter keys on: `ip` with IPv6 masked to the IPv6
    /// prefix and IPv4 to the IPv4 prefix.
    ///
    /// ```
    /// use ratelimit::key::ClientIpConfig;
    /// use std::net::IpAddr;
    ///
    /// let config = ClientIpConfig::default();
    /// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    /// let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
    /// assert_eq!(config.aggregate(a), config.aggregate(b));
    /// ```
    pub fn aggregate(&self, ip: IpAddr) -> IpAddr {
        prefix_of(ip, self.ipv6_prefix, self.ipv4_prefix)
    }
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) as the IPv4 network
/// it maps (`10.0.0.0/8`): what [`ClientIpConfig::trust_proxies`] trusts.
pub(crate) fn normalize_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        other => other,
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_xff_entry(entry: &[u8]) -> Option<IpAddr> {
    parse_node(trim(entry))
}

/// Splits on `sep` from the right, never inside a double-quoted string.
/// Scanning from the right keeps the trusted (rightmost) elements intact even
/// when the client's part leaves a quote open.
struct RevSplitUnquoted<'a> {
    bytes: &'a [u8],
    end: usize,
    sep: u8,
    done: bool,
}

impl<'a> RevSplitUnquoted<'a> {
    fn new(bytes: &'a [u8], sep: u8) -> Self {
        RevSplitUnquoted {
            bytes,
            end: bytes.len(),
            sep,
            done: false,
        }
    }
}

impl<'a> Iterator for RevSplitUnquoted<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        let mut in_quote = false;
        for i in (0..self.end).rev() {
            match self.bytes[i] {
                b'"' => in_quote = !in_quote,
                b if b == self.sep && !in_quote => {
                    let piece = &self.bytes[i + 1..self.end];
                    self.end = i;
                    return Some(piece);
                }
                _ => {}
            }
        }
        self.done = true;
        Some(&self.bytes[..self.end])
    }
}

/// One RFC 7239 element: `for=192.0.2.60;proto=http;by=203.0.113.43`. The
/// `for` parameter (case-insensitive), token or quoted string. No `for`,
/// `unknown`, or an obfuscated identifier (`_hidden`) is not an address.
/// Escapes (`\`) and unbalanced quotes make the element malformed.
fn parse_forwarded_element(element: &[u8]) -> Option<IpAddr> {
    if element.contains(&b'\\') || element.iter().filter(|&&b| b == b'"').count() % 2 == 1 {
        return None;
    }
    let mut found = None;
    for pair in RevSplitUnquoted::new(element, b';') {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (name, value) = (trim(&pair[..eq]), trim(&pair[eq + 1..]));
        if name.eq_ignore_ascii_case(b"for") {
            if found.is_some() {
                return None; // a repeated `for` is malformed
            }
            let value = match value {
                [b'"', inner @ .., b'"'] => inner,
                [b'"', ..] | [.., b'"'] => return None,
                v => v,
            };
            found = Some(parse_node(value)?);
        }
    }
    found
}

/// An address, optionally with a port; IPv6 bracketed when a port follows.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    // Longest textual IPv6 with brackets and port is under 64 bytes.
    if node.is_empty() || node.len() > 64 || !node.is_ascii() {
        return None;
    }
    let text = std::str::from_utf8(node).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || valid_port(after.strip_prefix(':')?)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    // `a.b.c.d:port` (an unbracketed IPv6 with a port is ambiguous: refused).
    let (addr, port) = text.rsplit_once(':')?;
    if !valid_port(port) {
        return None;
    }
    addr.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn valid_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes() {
        let ok = [
            ("1.2.3.4", "1.2.3.4"),
            ("1.2.3.4:80", "1.2.3.4"),
            ("2001:db8::1", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("[2001:db8::1]:443", "2001:db8::1"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
        ];
        for (input, want) in ok {
            assert_eq!(parse_node(input.as_bytes()), Some(want.parse().unwrap()), "{input}");
        }
        for bad in [
            "",
            "unknown",
            "_hidden",
            "1.2.3",
            "1.2.3.4:",
            "1.2.3.4:99999",
            "1.2.3.4:8a",
            "[2001:db8::1",
            "[1.2.3.4]",
            "2001:db8::1:80:",
            "fe80::1%eth0",
            "1.2.3.4 5.6.7.8",
            "١.٢.٣.٤",
        ] {
            assert_eq!(parse_node(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn forwarded_elements() {
        let ok = [
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            ("For=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"),
            ("proto=https; for=198.51.100.17", "198.51.100.17"),
        ];
        for (input, want) in ok {
            assert_eq!(
                parse_forwarded_element(input.as_bytes()),
                Some(want.parse().unwrap()),
                "{input}"
            );
        }
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=http",
            "for=\"1.2.3.4",
            "for=1.2.3.4;for=5.6.7.8",
            "for",
            "=1.2.3.4",
        ] {
            assert_eq!(parse_forwarded_element(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn prefixes_are_validated() {
        assert!(ClientIpConfig::default().ipv6_prefix(0).is_err());
        assert!(ClientIpConfig::default().ipv6_prefix(129).is_err());
        assert!(ClientIpConfig::default().ipv4_prefix(33).is_err());
        let e = ClientIpConfig::default().ipv6_prefix(200).unwrap_err();
        assert_eq!(e.to_string(), "IPv6 prefix /200 is out of range: expected 1 to 128");
    }
}
