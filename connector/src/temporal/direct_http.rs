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
    use std::{
        net::TcpListener,
        time::{Duration, Instant},
    };

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

    /// Set in the child process this test runs itself in: the loopback endpoint it calls.
    const CHILD_TARGET: &str = "DURABLE_MCP_DIRECT_HTTP_TEST_TARGET";

    /// reqwest reads the proxy variables when a client is built, and a test cannot set them
    /// in its own (threaded) process: the test runs itself again as a child with
    /// `HTTP_PROXY`/`ALL_PROXY` pointing at a listener of its own. The codec client and the
    /// OAuth token client, both given a loopback endpoint, must reach it directly; a request to
    /// an address off the machine goes to the proxy (proof the variables took effect).
    #[test]
    fn loopback_endpoints_ignore_the_environments_proxy() {
        if let Ok(target) = std::env::var(CHILD_TARGET) {
            return child(&target);
        }
        let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "temporal::direct_http::tests::loopback_endpoints_ignore_the_environments_proxy",
                "--exact",
                "--test-threads",
                "1",
            ])
            .env(
                CHILD_TARGET,
                format!("http://{}", target.local_addr().unwrap()),
            )
            .env("HTTP_PROXY", &proxy_url)
            .env("http_proxy", &proxy_url)
            .env("HTTPS_PROXY", &proxy_url)
            .env("ALL_PROXY", &proxy_url)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("REQUEST_METHOD")
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        let accepted = |listener: &TcpListener| {
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut n = 0;
            while Instant::now() < deadline {
                match listener.accept() {
                    Ok(_) => n += 1,
                    Err(_) if n > 0 => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            n
        };
        assert_eq!(
            accepted(&target),
            2,
            "the codec and the token endpoint on loopback were not reached directly"
        );
        assert_eq!(
            accepted(&proxy),
            1,
            "only the request off the machine goes through the proxy"
        );
    }

    /// The child's side: one codec request and one token request to `target` (which accepts
    /// and never answers), and one request off the machine.
    fn child(target: &str) {
        use crate::temporal::{
            codec::{CodecOptions, RemoteCodec},
            payload::PayloadCodec as _,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let short = Duration::from_secs(1);
            let codec = RemoteCodec::with_options(
                target,
                "default",
                CodecOptions {
                    timeout: Some(short),
                    ..Default::default()
                },
            )
            .unwrap();
            let _ = codec.encode(vec![Default::default()]).await;
            let oauth = crate::outbound::auth::ClientCredentialsProvider::new(
                crate::outbound::config::ClientCredentials {
                    token_url: Url::parse(&format!("{target}/token")).unwrap(),
                    client_id: "c".into(),
                    client_secret: "s".into(),
                    scopes: Vec::new(),
                    audience: None,
                },
            );
            let _ = tokio::time::timeout(short, crate::outbound::auth::AuthProvider::token(&oauth))
                .await;
            let away = Url::parse("http://192.0.2.1:9/").unwrap();
            let client = client_builder(&away).timeout(short).build().unwrap();
            let _ = client.get(away).send().await;
        });
    }
}
