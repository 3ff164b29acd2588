//! R-CON-19: the HTTP connector closes connections that do not send their request headers or
//! body in time (slowloris) or idle between requests, and serves at most `max_connections` at
//! once.

use std::time::Duration;

use durable_mcp::connector::listener::ConnectionLimits;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::*;

/// Reads until the server closes the connection (or `limit` passes): whether it closed.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// `GET /healthz` on a new connection; the status line.
async fn health(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 256];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn slow_headers_and_idle_connections_are_closed_and_connections_are_capped() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.limits = ConnectionLimits {
        header_read: Duration::from_secs(2),
        max_connections: 2,
        ..ConnectionLimits::default()
    };
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let addr = server.local_addr;

    // Slowloris: headers a byte at a time, never finished. The connection is closed.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let trickle = async {
        for byte in b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
            .iter()
            .cycle()
        {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), trickle)
        .await
        .expect("a connection sending its headers slowly is closed within 60 s");

    // A keep-alive connection idle after a request is closed too.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(health(&mut idle).await.contains("200"));
    assert!(
        closed_within(&mut idle, Duration::from_secs(60)).await,
        "an idle keep-alive connection is closed"
    );

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;

    // A server whose timeout outlasts the test: two served connections hold both slots, and a
    // third waits until one closes. (A silent one would be closed for it: connections that
    // carried no request hold at most half the places, R-CON-19.)
    let mut options = loopback_http_options();
    options.limits = ConnectionLimits {
        header_read: Duration::from_secs(600),
        max_connections: 2,
        ..ConnectionLimits::default()
    };
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let addr = server.local_addr;
    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(health(&mut first).await.contains("200"));
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert!(health(&mut second).await.contains("200"));
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf))
            .await
            .is_err(),
        "a third connection is not served while two are open"
    );
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(60), third.read(&mut buf))
        .await
        .expect("the third connection is served once a slot is free")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200"));
    drop(second);

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// R-CON-19: hyper's timer covers a request's headers only; a POST whose body trickles in and
/// stalls is answered 408 and closed after the same time, and its place under the cap is freed.
#[tokio::test]
async fn a_request_body_that_trickles_in_is_refused_and_frees_its_connection() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.limits = ConnectionLimits {
        header_read: Duration::from_secs(4),
        max_connections: 1,
        ..ConnectionLimits::default()
    };
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let addr = server.local_addr;

    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{",
    )
    .await
    .unwrap();
    // A byte every 200 ms for a second, then nothing: the rest of the body never comes. (The
    // writes stop before the deadline, so the server has read every byte it got and closes
    // cleanly, and the answer can be read.)
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // (On a loaded machine the deadline may pass first: the answer is read below anyway.)
        let _ = slow.write_all(b" ").await;
    }
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut answer))
        .await
        .expect("a connection whose body does not arrive is closed within 60 s");
    assert!(closed.is_ok(), "{closed:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408") && answer.contains("--http-header-timeout"),
        "{answer}"
    );

    // The only place is free again.
    let mut next = TcpStream::connect(addr).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), health(&mut next))
        .await
        .expect("the next connection is served");
    assert!(status.contains("200"), "{status}");

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

#[tokio::test]
async fn startup_refuses_previous_keys_without_a_current_one_and_colliding_paths() {
    // Both are refused before the connector connects to anything: no server is needed.
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command =
            std::process::Command::new(workspace_bin("durable-mcp-connector").unwrap());
        command
            .args(["--route", "{service: s, endpoint: e}"])
            .args(args)
            .env_remove("MCP_TASK_SIGNING_KEY")
            .env_remove("MCP_TASK_SIGNING_KEYS_PREVIOUS")
            .env("TEMPORAL_ADDRESS", "127.0.0.1:1");
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--transport", "http", "--http-path", "/healthz"], &[]);
    assert!(
        err.contains("--http-path") && err.contains("collides"),
        "{err}"
    );
    let err = run(&[], &[("MCP_TASK_SIGNING_KEYS_PREVIOUS", TEST_SIGNING_KEY)]);
    assert!(
        err.contains("MCP_TASK_SIGNING_KEYS_PREVIOUS") && !err.contains(TEST_SIGNING_KEY),
        "{err}"
    );
}

/// R-CON-19: one IP address holds at most `max_per_address` connections; one more is told so
/// (503 naming the flag) and closed without taking a place, and a closed one frees its place.
#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.limits = ConnectionLimits {
        header_read: Duration::from_secs(600),
        max_connections: 10,
        max_per_address: 1,
        ..ConnectionLimits::default()
    };
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let addr = server.local_addr;

    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(health(&mut first).await.contains("200"));
    let mut second = TcpStream::connect(addr).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(60), second.read_to_string(&mut answer))
        .await
        .expect("the refused connection is answered and closed")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(
        answer.contains("--http-max-connections-per-address"),
        "{answer}"
    );

    drop(first);
    let served = async {
        loop {
            let mut again = TcpStream::connect(addr).await.unwrap();
            if health(&mut again).await.contains("200") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), served)
        .await
        .expect("a closed connection frees its address's place");

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// A raw Streamable HTTP client whose connections come from `local` (any 127.x address reaches
/// a loopback connector on Linux), so it counts as an address of its own.
struct RawClient {
    http: reqwest::Client,
    url: String,
}

impl RawClient {
    fn from(local: [u8; 4], url: &str) -> Self {
        let http = reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(local))
            .build()
            .unwrap();
        Self {
            http,
            url: url.to_owned(),
        }
    }

    async fn post(&self, session: Option<&str>, body: serde_json::Value) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send().await.unwrap()
    }

    /// Opens a session (initialize, then initialized): its id.
    async fn open(&self) -> String {
        let opened = self
            .post(
                None,
                serde_json::json!({
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "raw", "version": "0"}},
                }),
            )
            .await;
        assert_eq!(opened.status(), 200);
        let session = opened.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        opened.text().await.unwrap();
        assert_eq!(self.initialized(&session).await, 202);
        session
    }

    /// The status of `notifications/initialized` on `session`: 202 while it is open, 404 once
    /// the MCP server closed it.
    async fn initialized(&self, session: &str) -> u16 {
        let body = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(Some(session), body).await.status().as_u16()
    }

    /// A `DELETE` of `session` that names the 2026-07-28 protocol (which has no sessions to
    /// end): its status.
    async fn delete_as_2026(&self, session: &str) -> reqwest::StatusCode {
        self.http
            .delete(&self.url)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2026-07-28")
            .send()
            .await
            .unwrap()
            .status()
    }

    /// `ping` on `session`: the response's text.
    async fn ping(&self, session: &str, id: u32) -> String {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let response = self.post(Some(session), body).await;
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }
}

/// R-CON-38: without auth, one address holds at most `--max-sessions-per-caller` MCP sessions;
/// opening one more closes that address's longest idle one in the MCP server (rmcp answers it
/// as unknown), while another address's session is untouched.
#[tokio::test]
async fn one_address_opening_sessions_closes_only_its_own_longest_idle() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.sessions_per_address = 2;
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let (alice, bob) = (
        RawClient::from([127, 0, 0, 1], &server.url),
        RawClient::from([127, 0, 0, 2], &server.url),
    );
    let bobs = bob.open().await;
    let first = alice.open().await;
    let second = alice.open().await;
    assert!(
        alice.ping(&first, 2).await.contains("result"),
        "first is used"
    );
    let third = alice.open().await;
    assert_eq!(
        alice.initialized(&second).await,
        404,
        "the longest idle went"
    );
    assert_eq!(alice.initialized(&first).await, 202);
    assert_eq!(alice.initialized(&third).await, 202);
    assert_eq!(
        bob.initialized(&bobs).await,
        202,
        "another address is untouched"
    );

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// R-CON-28, R-CON-38: a `DELETE` rmcp refuses (a 2026-07-28 one has no session to end) leaves
/// the session open in rmcp, so it stays counted: the address's next session still closes its
/// longest idle one, and the refused DELETE does not restart the session's requests-per-minute
/// window. (Forgotten on such answers, one address held sessions past its share.)
#[tokio::test]
async fn a_refused_delete_leaves_the_session_counted() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.sessions_per_address = 2;
    options.requests_per_session_minute = 2;
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let alice = RawClient::from([127, 0, 0, 1], &server.url);
    let first = alice.open().await;
    let second = alice.open().await;
    assert!(alice.ping(&second, 2).await.contains("result"));
    assert!(alice.ping(&second, 3).await.contains("result"));
    for session in [&first, &second] {
        let refused = alice.delete_as_2026(session).await;
        assert!(!refused.is_success(), "rmcp refused it: {refused}");
    }
    let over = alice.ping(&second, 4).await;
    assert!(
        over.contains("--max-requests-per-session-minute 2"),
        "the window still counts: {over}"
    );
    let _third = alice.open().await;
    assert_eq!(
        alice.initialized(&first).await,
        404,
        "the longest idle went: the refused DELETE left it counted"
    );
    assert_eq!(alice.initialized(&second).await, 202);

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// R-CON-38: a session sends at most `--max-requests-per-session-minute` requests a minute (rmcp
/// keeps a cancelled one's events for a minute): one more is answered with a JSON-RPC error naming the
/// flag and never reaches rmcp; notifications still pass, and another session is served.
#[tokio::test]
async fn a_session_over_its_requests_per_minute_is_refused_and_another_is_served() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.requests_per_session_minute = 3;
    let (server, shutdown) = serve_connector_http(connector_for(&env, "none"), options)
        .await
        .unwrap();
    let client = RawClient::from([127, 0, 0, 1], &server.url);
    let (looping, other) = (client.open().await, client.open().await);
    for id in 2..5 {
        let served = client.ping(&looping, id).await;
        assert!(served.contains("result"), "{served}");
    }
    let refused: serde_json::Value = serde_json::from_str(&client.ping(&looping, 5).await).unwrap();
    assert_eq!(refused["id"], 5, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--max-requests-per-session-minute 3"),
        "{message}"
    );
    assert_eq!(refused["error"]["data"]["maxRequestsPerSessionMinute"], 3);
    assert_eq!(
        client.initialized(&looping).await,
        202,
        "notifications pass"
    );
    let served = client.ping(&other, 2).await;
    assert!(served.contains("result"), "another session: {served}");

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// A POST to the MCP path of `app` (the library's router, served without a listener), from
/// `peer` when given (the listener inserts it; a host serving the router itself may not).
fn mcp_post(
    peer: Option<[u8; 4]>,
    session: Option<&str>,
    body: serde_json::Value,
) -> axum::http::Request<axum::body::Body> {
    let mut request = axum::http::Request::post("/mcp")
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let mut request = request
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    if let Some(ip) = peer {
        let addr = std::net::SocketAddr::from((ip, 40000));
        request
            .extensions_mut()
            .insert(durable_mcp::connector::fair::PeerAddr(addr));
    }
    request
}

fn initialize_body() -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    })
}

/// `initialize` through `app`, answered and read: the response.
async fn initialize_via(app: &axum::Router, peer: Option<[u8; 4]>) -> axum::response::Response {
    use tower::ServiceExt as _;
    let response = app
        .clone()
        .oneshot(mcp_post(peer, None, initialize_body()))
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    axum::response::Response::from_parts(parts, axum::body::Body::from(body))
}

/// `initialize` through `app` by a client that goes away before its answer: the request is
/// served until rmcp made the session and waits for the handler, the handler answers, and the
/// request is dropped without being polled again (what hyper does when it reads the client's
/// EOF before coming back to the request).
async fn abandon_initialize(app: &axum::Router, peer: Option<[u8; 4]>) {
    use tower::ServiceExt as _;
    let mut served = Box::pin(app.clone().oneshot(mcp_post(peer, None, initialize_body())));
    assert!(futures::poll!(&mut served).is_pending());
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(served);
}

/// The status of `notifications/initialized` on `session` through `app`.
async fn initialized_via(app: &axum::Router, peer: Option<[u8; 4]>, session: &str) -> u16 {
    use tower::ServiceExt as _;
    let body = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let request = mcp_post(peer, Some(session), body);
    let response = app.clone().oneshot(request).await.unwrap();
    response.status().as_u16()
}

/// R-CON-38, R-CON-28: a session rmcp made for a client that went away before reading its
/// answer counts like any other: it takes its address's place (the address's idle session
/// goes for it), and without an address (a host that inserts none) it counts in the total,
/// so the next one is refused naming the flag.
#[tokio::test]
async fn sessions_of_clients_gone_before_their_answer_are_counted() {
    let env = TestEnv::shared("connector-http-limits").await;
    let mut options = loopback_http_options();
    options.sessions_per_address = 1;
    options.max_sessions = 2;
    let app = durable_mcp::connector::http::router(
        connector_for(&env, "none"),
        &options,
        options.addr,
        tokio_util::sync::CancellationToken::new(),
    );
    let alice = Some([127, 0, 0, 1]);
    let opened = initialize_via(&app, alice).await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap();
    assert_eq!(initialized_via(&app, alice, session).await, 202);

    abandon_initialize(&app, alice).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        initialized_via(&app, alice, session).await,
        404,
        "the abandoned session took the address's only place; its idle session went"
    );

    abandon_initialize(&app, None).await;
    let refused = initialize_via(&app, None).await;
    assert_eq!(refused.status(), 503, "two sessions held, the most in all");
    let body = axum::body::to_bytes(refused.into_body(), 1 << 20)
        .await
        .unwrap();
    let message = String::from_utf8_lossy(&body);
    assert!(
        message.contains("holds 2 sessions") && message.contains("--max-sessions-per-caller"),
        "{message}"
    );
}
