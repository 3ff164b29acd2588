//! The client behind a trusted reverse proxy (R-CON-50). Behind a load balancer every request
//! comes from the balancer's address, so the per-address shares of R-CON-19 and R-CON-38 would
//! be one share for every client. The operator names the proxies it trusts
//! (`--trusted-proxy CIDR`) and the header they write (`--trusted-proxy-header`); a request
//! whose peer is one of them counts under the client address that header names, read the way
//! RFC 7239 (section 8.1) and common practice read it: from the right, skipping the trusted
//! proxies' own hops, the first address that is not a trusted proxy is the client. Whatever a
//! client wrote into the header itself stands left of that and is never read. A peer outside
//! those ranges is its own client address, whatever headers it sends.
//!
//! A trusted peer's header that cannot be read up to that hop (not an IP address, `unknown`,
//! an obfuscated node, a `Forwarded` element without `for=`) is answered 400 ([`Malformed`]),
//! never taken as the peer: counting such requests under the proxy's address would merge
//! every such client into one share again, and a trusted proxy that writes no client address
//! is misconfigured. A trusted peer that sends no such header is itself the client (a
//! balancer's own health probe).

use std::net::IpAddr;

use http::HeaderMap;
pub use ipnet::IpNet;

/// The header a trusted proxy writes the client's address into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (what most load balancers append to).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client;proto=https, for=proxy1`.
    Forwarded,
}

impl ForwardedHeader {
    /// The header's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }
}

/// The proxies whose header names the client (`--trusted-proxy`), and which header that is.
/// Empty (the default): no peer is trusted and every request is its peer's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ForwardedHeader,
}

/// A trusted proxy's header that does not name the client's IP address (answered 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub header: ForwardedHeader,
    /// Why, without the header's content.
    pub why: &'static str,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} header this request came with from a trusted proxy (--trusted-proxy) \
             cannot be read: {}. The proxy must append the IP address of its own client to it \
             (or --trusted-proxy-header must name the header it writes)",
            self.header.name(),
            self.why
        )
    }
}

/// Parses one `--trusted-proxy` value: a CIDR range (`10.0.0.0/8`, `fd00::/8`) or one address.
/// A range of every address (`/0`) is refused: it would let any client name its own address.
pub fn parse_trusted_proxy(value: &str) -> Result<IpNet, String> {
    let value = value.trim();
    let net = match value.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => value.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
            format!("{value:?} is not a CIDR range or an IP address (e.g. 10.0.0.0/8, 192.0.2.7, fd00::/8)")
        })?,
    };
    if net.prefix_len() == 0 {
        return Err(format!(
            "{value:?} trusts every address, so any client could name its own; name the load \
             balancer's addresses or subnet"
        ));
    }
    Ok(net.trunc())
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>, header: ForwardedHeader) -> Self {
        Self { nets, header }
    }

    /// Whether any proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` (IPv4-mapped IPv6 read as IPv4) is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client address of a request from `peer` with `headers`: `peer` itself unless it is
    /// trusted; else the right-most address of the header that is not a trusted proxy (the
    /// left-most when all are), or `peer` when the header is absent.
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> Result<IpAddr, Malformed> {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return Ok(peer);
        }
        let malformed = |why| Malformed {
            header: self.header,
            why,
        };
        let mut values = Vec::new();
        for value in headers.get_all(self.header.name()) {
            values.push(
                value
                    .to_str()
                    .map_err(|_| malformed("it is not ASCII text"))?,
            );
        }
        let hops = split_outside_quotes(&values, ',');
        let mut client = peer;
        for hop in hops.iter().rev() {
            let ip = match self.header {
                ForwardedHeader::XForwardedFor => node_address(hop),
                ForwardedHeader::Forwarded => forwarded_for(hop),
            }
            .map_err(malformed)?;
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        Ok(client)
    }
}

/// The non-empty elements of the header `values` (its lines, in order) split at `separator`
/// outside quoted strings.
fn split_outside_quotes<'a>(values: &[&'a str], separator: char) -> Vec<&'a str> {
    let mut parts = Vec::new();
    for value in values {
        let (mut start, mut quoted, mut escaped) = (0, false, false);
        for (i, c) in value.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                c if c == separator && !quoted => {
                    parts.push(value[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(value[start..].trim());
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// The IP address of one node: `192.0.2.1`, `192.0.2.1:443`, `2001:db8::1`, `[2001:db8::1]` or
/// `[2001:db8::1]:443` (X-Forwarded-For's forms, and `Forwarded`'s once unquoted).
fn node_address(node: &str) -> Result<IpAddr, &'static str> {
    let node = node.trim();
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(ip.to_canonical());
    }
    let bare = match node.strip_prefix('[') {
        Some(rest) => rest.split_once(']').and_then(|(ip, port)| {
            (port.is_empty() || is_port(port.strip_prefix(':')?)).then_some(ip)
        }),
        None => node
            .rsplit_once(':')
            .and_then(|(ip, port)| is_port(port).then_some(ip)),
    };
    match bare.and_then(|ip| ip.parse::<IpAddr>().ok()) {
        Some(ip) => Ok(ip.to_canonical()),
        None if node.eq_ignore_ascii_case("unknown") || node.starts_with('_') => {
            Err("a hop is hidden (unknown or an obfuscated name), not an IP address")
        }
        None => Err("a hop is not an IP address"),
    }
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The address in one `Forwarded` element's `for=` parameter (RFC 7239: a token, or a quoted
/// string, which IPv6 addresses and ports need).
fn forwarded_for(element: &str) -> Result<IpAddr, &'static str> {
    let value = split_outside_quotes(&[element], ';')
        .into_iter()
        .find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("for")
                .then_some(value.trim())
        })
        .ok_or("a hop has no for= parameter")?;
    let unquoted = match value.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or("a for= value's quotes do not close")?
            .replace('\\', ""),
        None => value.to_owned(),
    };
    node_address(&unquoted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(nets: &[&str], header: ForwardedHeader) -> TrustedProxies {
        let nets = nets
            .iter()
            .map(|n| parse_trusted_proxy(n).unwrap())
            .collect();
        TrustedProxies::new(nets, header)
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client_and_what_a_client_wrote_is_never_read() {
        let front = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let client = |values: &[&str]| {
            front.client_address(ip("10.0.0.5"), &headers("x-forwarded-for", values))
        };
        assert_eq!(client(&["198.51.100.1"]), Ok(ip("198.51.100.1")));
        // A client that wrote its own header: the front appended the real address after it.
        assert_eq!(
            client(&["203.0.113.9, 198.51.100.1"]),
            Ok(ip("198.51.100.1"))
        );
        assert_eq!(client(&["garbage, 198.51.100.1"]), Ok(ip("198.51.100.1")));
        // Two trusted hops (a CDN, then the balancer), over two header lines.
        assert_eq!(
            client(&["198.51.100.1, 10.1.1.1", "10.2.2.2"]),
            Ok(ip("198.51.100.1"))
        );
        // Every hop trusted: the left-most; no header: the peer itself.
        assert_eq!(client(&["10.9.9.9, 10.1.1.1"]), Ok(ip("10.9.9.9")));
        assert_eq!(client(&[]), Ok(ip("10.0.0.5")));
        // Ports and IPv6 forms.
        assert_eq!(client(&["198.51.100.1:4711"]), Ok(ip("198.51.100.1")));
        assert_eq!(client(&["[2001:db8::1]:443"]), Ok(ip("2001:db8::1")));
        assert_eq!(client(&["2001:db8::1"]), Ok(ip("2001:db8::1")));
        assert_eq!(client(&["::ffff:198.51.100.1"]), Ok(ip("198.51.100.1")));
    }

    #[test]
    fn an_untrusted_peers_headers_are_ignored() {
        let front = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let spoofed = headers("x-forwarded-for", &["198.51.100.1"]);
        assert_eq!(
            front.client_address(ip("192.0.2.7"), &spoofed),
            Ok(ip("192.0.2.7"))
        );
        assert_eq!(
            TrustedProxies::default().client_address(ip("10.0.0.5"), &spoofed),
            Ok(ip("10.0.0.5")),
            "nothing trusted by default"
        );
        // Only the named header counts: a Forwarded header through an X-Forwarded-For front.
        let other = headers("forwarded", &["for=198.51.100.1"]);
        assert_eq!(
            front.client_address(ip("10.0.0.5"), &other),
            Ok(ip("10.0.0.5"))
        );
        // A mapped IPv4 peer is the IPv4 address it maps.
        assert!(front.trusts(ip("::ffff:10.1.2.3")));
    }

    #[test]
    fn a_trusted_peers_unreadable_header_is_refused_not_taken_as_the_peer() {
        let front = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        for values in [
            &["198.51.100.1, not-an-address"][..],
            &["unknown"],
            &["_hidden"],
            &["198.51.100.1:http"],
            &["[2001:db8::1"],
        ] {
            let got = front.client_address(ip("10.0.0.5"), &headers("x-forwarded-for", values));
            let err = got.unwrap_err();
            assert!(
                err.to_string().contains("--trusted-proxy") && !err.to_string().contains("_hidden"),
                "{values:?}: {err}"
            );
        }
    }

    #[test]
    fn forwarded_elements_give_their_for_address() {
        let front = trusted(&["10.0.0.0/8", "fd00::/8"], ForwardedHeader::Forwarded);
        let client =
            |values: &[&str]| front.client_address(ip("fd00::5"), &headers("forwarded", values));
        assert_eq!(
            client(&["for=198.51.100.1;proto=https;by=10.0.0.1"]),
            Ok(ip("198.51.100.1"))
        );
        assert_eq!(
            client(&[r#"for="[2001:db8:cafe::17]:4711", For=10.1.1.1"#]),
            Ok(ip("2001:db8:cafe::17"))
        );
        // A quoted value holding the separators is one element.
        assert_eq!(
            client(&[r#"for=192.0.2.60;host="a,b;c", for=10.1.1.1"#]),
            Ok(ip("192.0.2.60"))
        );
        assert!(client(&["proto=https"]).is_err(), "no for=");
        assert!(client(&["for=unknown"]).is_err());
        assert!(
            client(&[r#"for="[2001:db8::1]"#]).is_err(),
            "unclosed quote"
        );
    }

    #[test]
    fn trusted_proxy_values_are_ranges_or_addresses_never_everything() {
        assert_eq!(
            parse_trusted_proxy("10.1.2.3/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            parse_trusted_proxy("192.0.2.7").unwrap().to_string(),
            "192.0.2.7/32"
        );
        assert_eq!(
            parse_trusted_proxy("fd00::/8").unwrap().to_string(),
            "fd00::/8"
        );
        for bad in ["0.0.0.0/0", "::/0", "10.0.0.0/33", "lb.internal", ""] {
            assert!(parse_trusted_proxy(bad).is_err(), "{bad}");
        }
    }
}
