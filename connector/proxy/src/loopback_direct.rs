//! R-PAY-7 across the two clients that share the runtime's direct HTTP client: the codec
//! client (runtime) and the upstream OAuth token client (this crate) reach loopback endpoints
//! directly, never through the environment's HTTP proxy. Here, because only this crate has both.

use std::{
    net::TcpListener,
    time::{Duration, Instant},
};

use durable_mcp_runtime::temporal::direct_http::client_builder;
use url::Url;

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
            "loopback_direct::loopback_endpoints_ignore_the_environments_proxy",
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
    use durable_mcp_contract::payload::PayloadCodec as _;
    use durable_mcp_runtime::temporal::codec::{CodecOptions, RemoteCodec};
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
        let oauth = crate::auth::ClientCredentialsProvider::new(crate::config::ClientCredentials {
            token_url: Some(Url::parse(&format!("{target}/token")).unwrap()),
            client_id: "c".into(),
            client_auth: crate::config::ClientAuth::SecretBasic { secret: "s".into() },
            scopes: Vec::new(),
            audience: None,
            resource: None,
            issuer: None,
            learned_urls: Default::default(),
        });
        let _ = tokio::time::timeout(short, crate::auth::AuthProvider::token(&oauth)).await;
        let away = Url::parse("http://192.0.2.1:9/").unwrap();
        let client = client_builder(&away).timeout(short).build().unwrap();
        let _ = client.get(away).send().await;
    });
}
