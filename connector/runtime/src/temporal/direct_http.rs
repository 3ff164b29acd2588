//! HTTP clients whose loopback traffic stays on this machine (R-PAY-7).
//!
//! Plain `http` is accepted only to a loopback address (a codec server, which sees payloads in
//! clear, R-PAY-5; an OAuth token endpoint, which gets the client secret, R-PRX-15; an upstream
//! or identity provider with credentials or keys): there nothing leaves the machine. But reqwest
//! sends every request through the proxy that `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY` name
//! unless `NO_PROXY` lists the host, so in an environment with a proxy set those payloads,
//! secrets and keys went to the proxy in clear (and a proxy on another host cannot reach this
//! machine's loopback anyway). A client for a loopback endpoint therefore ignores the
//! environment's proxies; other endpoints keep them.

use url::{Host, Url};

/// Whether `url`'s host is `localhost` or a loopback address.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A client builder for requests to `endpoint`: without the environment's proxies when it is
/// on loopback.
pub fn client_builder(endpoint: &Url) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    if is_loopback(endpoint) {
        builder.no_proxy()
    } else {
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_only() {
        for url in [
            "http://localhost:1",
            "http://LOCALHOST/x",
            "http://127.0.0.1:1",
            "http://127.3.2.1",
            "http://[::1]:1",
        ] {
            assert!(is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "http://localhost.example.com",
            "http://10.0.0.1",
            "http://0.0.0.0",
            "https://codec.example.com",
            "file:///tmp/x",
        ] {
            assert!(!is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
    }
}
