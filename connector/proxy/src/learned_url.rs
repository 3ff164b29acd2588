//! Where a URL the proxy learned may lead (R-PRX-37).
//!
//! A URL the operator configured is the operator's word, loopback and all. A URL the proxy
//! learned from a server (OAuth metadata found by discovery, the token endpoint it names) is a
//! server's word: followed blindly it would let an upstream point the proxy, and the client
//! credentials it sends, at the cloud's metadata service or an internal host (SSRF). So such a
//! URL may reach only public addresses, unless this upstream's `allow_private_urls` names the
//! range. The host is resolved once and every address checked; the connection goes to the
//! checked addresses (reqwest asks [`GuardedResolver`]), never through a proxy of the
//! environment (which would resolve the name again), so DNS rebinding gains nothing.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

pub use ipnet::IpNet;
use url::{Host, Url};

/// The ranges a learned URL may not reach that std names no predicate for, with the name an
/// error gives them. The first that holds names the range.
const REFUSED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "an unspecified (\"this network\") address"),
    ("100.64.0.0/10", "a carrier-grade NAT (shared) address"),
    (
        "192.0.0.0/24",
        "an IETF protocol assignment (not a public host)",
    ),
    (
        "198.18.0.0/15",
        "a benchmarking address (not a public host)",
    ),
    ("240.0.0.0/4", "a reserved address"),
    (
        "168.63.129.16/32",
        "Azure's wire server (a cloud metadata service)",
    ),
    (
        "::/96",
        "an IPv4-compatible address (deprecated, never a public host)",
    ),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("fec0::/10", "a site-local address (deprecated, private)"),
    (
        "2001::/32",
        "a Teredo address (a tunnel to an IPv4 host it does not name plainly)",
    ),
];

/// The name of the refused range `ip` is in, if any. An IPv4 address written as IPv6
/// (`::ffff:a.b.c.d`, the NAT64 prefix `64:ff9b::/96`, or 6to4's `2002:a.b.c.d::/48`) is
/// judged as the IPv4 address.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    let ip = as_ipv4(ip);
    let named = match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    };
    named.or_else(|| {
        REFUSED
            .iter()
            .find(|(net, _)| net.parse::<IpNet>().is_ok_and(|n| n.contains(&ip)))
            .map(|(_, name)| *name)
    })
}

/// The IPv4 ranges std names.
fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    [
        (ip.is_loopback(), "a loopback address"),
        (ip.is_private(), "a private address"),
        (
            ip.is_link_local(),
            "a link-local address (cloud metadata services live there)",
        ),
        (ip.is_multicast(), "a multicast address"),
        (ip.is_broadcast(), "the broadcast address"),
    ]
    .into_iter()
    .find_map(|(is, name)| is.then_some(name))
}

/// The IPv6 ranges std names.
fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    [
        (ip.is_unspecified(), "the unspecified address"),
        (ip.is_loopback(), "the loopback address"),
        (ip.is_unique_local(), "a unique local (private) address"),
        (ip.is_unicast_link_local(), "a link-local address"),
        (ip.is_multicast(), "a multicast address"),
    ]
    .into_iter()
    .find_map(|(is, name)| is.then_some(name))
}

fn as_ipv4(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    let [.., a, b, c, d] = v6.octets();
    match (v6.to_ipv4_mapped(), v6.segments()) {
        (Some(v4), _) => IpAddr::V4(v4),
        (None, [0x64, 0xff9b, 0, 0, 0, 0, ..]) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        (None, [0x2002, high, low, ..]) => {
            IpAddr::V4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)))
        }
        (None, _) => IpAddr::V6(v6),
    }
}

/// What a learned URL may reach: public addresses, and the ranges the operator allowed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LearnedUrlPolicy {
    /// This upstream's `allow_private_urls`.
    pub allowed: Vec<IpNet>,
}

impl LearnedUrlPolicy {
    /// Whether a learned URL may reach `ip`; the refusal says what to configure.
    pub fn check_addr(&self, ip: IpAddr) -> Result<(), String> {
        let Some(range) = refused_range(ip) else {
            return Ok(());
        };
        if self.allowed.iter().any(|net| net.contains(&as_ipv4(ip))) {
            return Ok(());
        }
        let single = IpNet::from(as_ipv4(ip));
        Err(format!(
            "{ip} is {range}, which a URL learned from a server may not reach; if that host is \
             yours, add its range to this upstream's allow_private_urls (e.g. \
             allow_private_urls = [\"{single}\"])"
        ))
    }

    /// Whether a learned URL may be fetched before its name is resolved: http(s) only, and a
    /// host written as an address checked here (reqwest resolves only names, through
    /// [`GuardedResolver`]).
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{} URLs are not fetched", url.scheme()));
        }
        match url.host() {
            Some(Host::Ipv4(ip)) => self.check_addr(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => self.check_addr(IpAddr::V6(ip)),
            Some(Host::Domain(_)) => Ok(()),
            None => Err("the URL has no host".into()),
        }
    }

    /// A client for learned URLs: names resolved by [`GuardedResolver`], no proxy from the
    /// environment, no redirects.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver(self.clone())))
    }
}

/// Resolves a learned URL's host and refuses it when any address it resolves to is refused
/// (a name that resolves to a public and a private address could be either at connect time).
pub struct GuardedResolver(pub LearnedUrlPolicy);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                policy
                    .check_addr(addr.ip())
                    .map_err(|e| format!("{host} resolves to more than public addresses: {e}"))?;
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_link_local_private_unspecified_and_cgnat_are_refused() {
        for refused in [
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "100.127.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
        ] {
            assert!(refused_range(ip(refused)).is_some(), "{refused}");
        }
        for public in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(refused_range(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn reserved_multicast_broadcast_and_tunnelled_addresses_are_refused() {
        // (address, the range's name it is refused as; None: public)
        let table: &[(&str, Option<&str>)] = &[
            ("192.0.0.1", Some("an IETF protocol assignment")),
            ("192.0.0.170", Some("an IETF protocol assignment")),
            ("198.18.0.1", Some("a benchmarking address")),
            ("198.19.255.255", Some("a benchmarking address")),
            ("240.0.0.1", Some("a reserved address")),
            ("255.255.255.254", Some("a reserved address")),
            ("255.255.255.255", Some("the broadcast address")),
            ("224.0.0.1", Some("a multicast address")),
            ("239.255.255.250", Some("a multicast address")),
            ("168.63.129.16", Some("Azure's wire server")),
            ("ff02::1", Some("a multicast address")),
            ("ff0e::1", Some("a multicast address")),
            ("::a00:1", Some("an IPv4-compatible address")),
            ("::808:808", Some("an IPv4-compatible address")),
            ("64:ff9b:1::a00:1", Some("a local-use NAT64 address")),
            ("fec0::1", Some("a site-local address")),
            ("feff:ffff::1", Some("a site-local address")),
            ("2002:a00:1::1", Some("a private address")),
            ("2002:a9fe:a9fe::", Some("a link-local address")),
            ("2002:7f00:1::", Some("a loopback address")),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                Some("a Teredo address"),
            ),
            ("2001::1", Some("a Teredo address")),
            ("::ffff:198.18.0.1", Some("a benchmarking address")),
            ("192.0.1.1", None),
            ("198.20.0.1", None),
            ("223.255.255.255", None),
            ("168.63.129.17", None),
            ("2002:808:808::1", None),
            ("64:ff9b:2::1", None),
            ("2001:1::1", None),
            ("2001:4860:4860::8888", None),
        ];
        for (address, expected) in table {
            let got = refused_range(ip(address));
            match expected {
                Some(name) => assert!(got.is_some_and(|g| g.contains(name)), "{address}: {got:?}"),
                None => assert_eq!(got, None, "{address}"),
            }
        }
        // A 6to4 address is allowed as its IPv4 address is.
        let allowed = LearnedUrlPolicy {
            allowed: vec!["10.0.0.0/8".parse().unwrap()],
        };
        assert_eq!(allowed.check_addr(ip("2002:a00:1::1")), Ok(()));
    }

    #[test]
    fn an_allowed_range_passes_and_a_refusal_says_what_to_configure() {
        let none = LearnedUrlPolicy::default();
        let error = none.check_addr(ip("10.0.0.5")).unwrap_err();
        assert!(error.contains("a private address"), "{error}");
        assert!(
            error.contains("allow_private_urls = [\"10.0.0.5/32\"]"),
            "{error}"
        );
        let allowed = LearnedUrlPolicy {
            allowed: vec!["10.0.0.0/8".parse().unwrap()],
        };
        assert_eq!(allowed.check_addr(ip("10.0.0.5")), Ok(()));
        assert_eq!(allowed.check_addr(ip("::ffff:10.0.0.5")), Ok(()));
        assert!(allowed.check_addr(ip("127.0.0.1")).is_err());
        assert_eq!(none.check_addr(ip("8.8.8.8")), Ok(()));
    }

    #[test]
    fn urls_written_as_addresses_are_checked_before_any_request() {
        let policy = LearnedUrlPolicy::default();
        let check = |u: &str| policy.check_url(&Url::parse(u).unwrap());
        assert!(check("http://169.254.169.254/latest/meta-data").is_err());
        assert!(check("https://[::1]:8443/token").is_err());
        assert!(check("http://[::ffff:7f00:1]/").is_err());
        assert!(check("file:///etc/passwd").is_err());
        assert_eq!(check("https://auth.example.com/token"), Ok(()));
        assert_eq!(check("https://93.184.215.14/token"), Ok(()));
    }

    #[tokio::test]
    async fn names_are_resolved_and_every_address_checked() {
        use reqwest::dns::Resolve as _;
        let guard = GuardedResolver(LearnedUrlPolicy::default());
        let error = guard
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .expect("localhost resolves to loopback")
            .to_string();
        assert!(
            error.contains("localhost resolves to more than public addresses: "),
            "{error}"
        );
        assert!(error.contains("allow_private_urls"), "{error}");
        let allowed = GuardedResolver(LearnedUrlPolicy {
            allowed: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        });
        let addrs: Vec<_> = allowed
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty());
    }
}
