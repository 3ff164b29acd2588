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
        let hops = match self.header {
            // X-Forwarded-For has no quoting: every comma separates hops, so a quote a client
            // wrote can never join its text to the hop its proxy appended.
            ForwardedHeader::XForwardedFor => values
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|hop| !hop.is_empty())
                .collect(),
            ForwardedHeader::Forwarded => split_outside_quotes(&values, ',').map_err(malformed)?,
        };
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
/// outside quoted strings. A line that ends inside a quoted string or an escape is refused:
/// read leniently, a client's unclosed quote would swallow the element its proxy appended to
/// the same line and leave the client's own `for=` as the last hop.
fn split_outside_quotes<'a>(
    values: &[&'a str],
    separator: char,
) -> Result<Vec<&'a str>, &'static str> {
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
        if quoted || escaped {
            return Err("a quoted string does not close");
        }
        parts.push(value[start..].trim());
    }
    parts.retain(|p| !p.is_empty());
    Ok(parts)
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

/// The address in one `Forwarded` element's `for=` parameter. The element is read strictly
/// (RFC 7239 section 4): `;`-separated `token=value` pairs, each value a token or one whole
/// quoted string (which IPv6 addresses and ports need); anything else is refused.
fn forwarded_for(element: &str) -> Result<IpAddr, &'static str> {
    let mut found = None;
    for pair in split_outside_quotes(&[element], ';')? {
        let (key, value) = pair.split_once('=').ok_or("a parameter is not key=value")?;
        let value = pair_value(key.trim(), value.trim())?;
        if key.trim().eq_ignore_ascii_case("for") && found.replace(value).is_some() {
            return Err("a hop has two for= parameters");
        }
    }
    node_address(&found.ok_or("a hop has no for= parameter")?)
}

/// One `Forwarded` parameter's value, unquoted: `key` and a bare value must be tokens, and a
/// quoted value must be one quoted string from its first character to its last.
fn pair_value(key: &str, value: &str) -> Result<String, &'static str> {
    if !is_token(key) {
        return Err("a parameter's name is not a token");
    }
    let Some(inner) = value.strip_prefix('"') else {
        return is_token(value)
            .then(|| value.to_owned())
            .ok_or("a parameter's value is neither a token nor a quoted string");
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next().ok_or("a quoted string does not close")?),
            '"' if chars.as_str().is_empty() => return Ok(out),
            '"' => return Err("text follows a quoted string"),
            c => out.push(c),
        }
    }
    Err("a quoted string does not close")
}

/// RFC 7230's `token`: one or more visible characters other than separators.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
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
    fn a_clients_unclosed_quote_cannot_swallow_the_hop_its_proxy_appended() {
        let front = trusted(&["127.0.0.1"], ForwardedHeader::Forwarded);
        let client =
            |values: &[&str]| front.client_address(ip("127.0.0.1"), &headers("forwarded", values));
        // The client wrote `for=192.0.2.50;x="`, its proxy appended `, for=203.0.113.9`.
        for spoof in [
            r#"for=192.0.2.50;x=", for=203.0.113.9"#,
            r#"for=192.0.2.50;x="\, for=203.0.113.9"#,
            r#"for=5.6.7.8;x=""#,
            r#"for=192.0.2.50;x=a"b, for=203.0.113.9"#,
            r#"for=192.0.2.50;for=1.2.3.4"#,
            r#"x y=1;for=192.0.2.50"#,
        ] {
            let got = client(&[spoof]);
            assert!(got.is_err(), "{spoof}: {got:?}");
        }
        // Balanced quotes in what a client wrote leave the proxy's hop where it is, and the
        // client's own element is never read.
        assert_eq!(
            client(&[r#"for=192.0.2.50;x="a"b, for=203.0.113.9"#]),
            Ok(ip("203.0.113.9"))
        );
        assert_eq!(
            client(&[r#"for=192.0.2.50;x="a, b", for=203.0.113.9"#]),
            Ok(ip("203.0.113.9"))
        );
    }

    #[test]
    fn a_quote_in_x_forwarded_for_is_text_of_its_hop_never_a_joiner() {
        let front = trusted(&["127.0.0.1"], ForwardedHeader::XForwardedFor);
        let got = front.client_address(
            ip("127.0.0.1"),
            &headers("x-forwarded-for", &[r#"192.0.2.50", 203.0.113.9"#]),
        );
        assert_eq!(got, Ok(ip("203.0.113.9")));
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

/// Property tests of the forwarding headers and `--trusted-proxy` values (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::header_value;
    use proptest::prelude::*;

    fn trusted(header: ForwardedHeader) -> TrustedProxies {
        let nets = ["10.0.0.0/8", "fd00::/8"].map(|n| parse_trusted_proxy(n).unwrap());
        TrustedProxies::new(nets.to_vec(), header)
    }

    fn header() -> impl Strategy<Value = ForwardedHeader> {
        prop_oneof![
            Just(ForwardedHeader::XForwardedFor),
            Just(ForwardedHeader::Forwarded)
        ]
    }

    /// An address, often one of the trusted proxies'.
    fn hop() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<IpAddr>(),
            any::<[u8; 3]>().prop_map(|[a, b, c]| IpAddr::from([10, a, b, c])),
            any::<u128>()
                .prop_map(|n| IpAddr::from(std::net::Ipv6Addr::from((0xfd << 120) | (n >> 8)))),
        ]
    }

    /// How a proxy writes `ip` as one hop of `header`, ports and quoting as the RFCs allow.
    fn written(header: ForwardedHeader, ip: IpAddr, port: Option<u16>) -> String {
        let node = match (ip, port) {
            (IpAddr::V4(v4), None) => v4.to_string(),
            (IpAddr::V4(v4), Some(p)) => format!("{v4}:{p}"),
            (IpAddr::V6(v6), None) if header == ForwardedHeader::XForwardedFor => v6.to_string(),
            (IpAddr::V6(v6), None) => format!("[{v6}]"),
            (IpAddr::V6(v6), Some(p)) => format!("[{v6}]:{p}"),
        };
        match header {
            ForwardedHeader::XForwardedFor => node,
            ForwardedHeader::Forwarded => format!("for=\"{node}\";proto=https"),
        }
    }

    proptest! {
        /// Any header lines from a trusted peer: an address or an error saying which header,
        /// never a panic; from an untrusted peer, the peer, whatever it wrote.
        #[test]
        fn forwarding_headers_of_any_bytes_give_an_address_or_an_error(
            h in header(),
            lines in prop::collection::vec(header_value(), 0..4),
            peer in hop(),
        ) {
            let proxies = trusted(h);
            let mut map = HeaderMap::new();
            for line in lines {
                map.append(h.name(), line);
            }
            match proxies.client_address(peer, &map) {
                Ok(_) => {}
                Err(e) => prop_assert!(e.to_string().contains(h.name())),
            }
            if !proxies.trusts(peer) {
                prop_assert_eq!(proxies.client_address(peer, &map), Ok(peer.to_canonical()));
            }
        }

        /// A chain the proxies wrote reads back as its right-most untrusted hop (the left-most
        /// when every hop is trusted), one line or one line a hop.
        #[test]
        fn a_written_chain_reads_back_as_its_right_most_untrusted_hop(
            h in header(),
            hops in prop::collection::vec((hop(), prop::option::of(any::<u16>())), 1..6),
            one_line in any::<bool>(),
        ) {
            let proxies = trusted(h);
            let texts: Vec<String> = hops.iter().map(|&(ip, port)| written(h, ip, port)).collect();
            let mut map = HeaderMap::new();
            let lines = if one_line { vec![texts.join(", ")] } else { texts };
            for line in lines {
                map.append(h.name(), line.parse().unwrap());
            }
            let canonical: Vec<IpAddr> = hops.iter().map(|(ip, _)| ip.to_canonical()).collect();
            let expected = canonical
                .iter()
                .rev()
                .find(|ip| !proxies.trusts(**ip))
                .or(canonical.first())
                .copied();
            let peer: IpAddr = "10.1.2.3".parse().unwrap();
            prop_assert_eq!(proxies.client_address(peer, &map).ok(), expected);
        }

        #[test]
        fn trusted_proxy_values_of_any_text_parse_or_say_why(value in "\\PC{0,50}") {
            if let Err(e) = parse_trusted_proxy(&value) {
                prop_assert!(!e.is_empty());
            }
        }

        /// Every range but one of all addresses reads back as written.
        #[test]
        fn a_written_range_reads_back(ip in any::<IpAddr>(), len in 1u8..=128) {
            let len = len.min(if ip.is_ipv4() { 32 } else { 128 });
            let net = IpNet::new(ip, len).unwrap().trunc();
            prop_assert_eq!(parse_trusted_proxy(&net.to_string()), Ok(net));
        }
    }
}
