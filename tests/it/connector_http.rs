//! R-CON HTTP: the connector over Streamable HTTP in front of the proxy, driven by real rmcp
//! clients: a session (pre-2026) client and a stateless 2026-07-28 client on one endpoint, the
//! Host/Origin DNS-rebinding protection with an allowed extra host, `/healthz`, graceful
//! shutdown, and the binary's `--transport http`.

use std::{net::SocketAddr, process::Stdio, time::Duration};

use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

fn echo(key: &str) -> CallToolRequestParams {
    tool_call("echo", json!({"key": key}))
}

/// A raw HTTP/1.1 request (so the test controls `Host` and `Origin`): the status code and body.
async fn raw_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let (status, _, body) = raw_http_with_headers(addr, method, path, headers, body).await;
    (status, body)
}

/// Like [`raw_http`], also returning the response's header block.
async fn raw_http_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // An SSE answer may stay open: read what arrives within a moment.
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_owned(), body.to_owned())
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

async fn post_initialize(addr: SocketAddr, host: &str, origin: Option<&str>) -> (u16, String) {
    let mut headers = vec![
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(origin) = origin {
        headers.push(("Origin", origin));
    }
    raw_http(addr, "POST", "/mcp", &headers, INITIALIZE).await
}

#[tokio::test]
async fn http_clients_old_and_new_list_and_call_tools_and_foreign_hosts_are_refused() {
    let env = TestEnv::shared("connector-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let mut options = loopback_http_options();
    options.allowed_hosts = vec!["mcp.example.test".into()];
    let (server, shutdown) = serve_connector_http(connector_for(&env, "mock"), options)
        .await
        .unwrap();
    let addr = server.local_addr;
    assert_ne!(addr.port(), 0);
    assert_eq!(server.url, format!("http://127.0.0.1:{}/mcp", addr.port()));

    // Health.
    let (status, body) = raw_http(addr, "GET", "/healthz", &[("Host", "127.0.0.1")], "").await;
    assert_eq!((status, body.as_str()), (200, "ok"));

    // An older (session) client: the initialize handshake and an Mcp-Session-Id.
    let session = session_http_client(&server.url, ()).await.unwrap();
    let tools = session.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let result = session
        .peer()
        .call_tool(echo("http-session"))
        .await
        .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"key": "http-session"}))
    );

    // A current (stateless 2026-07-28) client on the same endpoint.
    let modern = stateless_http_client(&server.url, ()).await.unwrap();
    let tools = modern.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let result = modern
        .peer()
        .call_tool(echo("http-stateless"))
        .await
        .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"key": "http-stateless"}))
    );
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Called, "http-session"),
        1
    );
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Called, "http-stateless"),
        1
    );

    // DNS-rebinding protection: foreign Host refused, loopback and the allowed host pass.
    let (status, body) = post_initialize(addr, "evil.example", None).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) =
        post_initialize(addr, &format!("evil.example:{}", addr.port()), None).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = post_initialize(addr, &format!("localhost:{}", addr.port()), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_initialize(addr, "mcp.example.test", None).await;
    assert_eq!(status, 200, "{body}");
    // A browser Origin must name an allowed host too.
    let (status, body) = post_initialize(addr, "127.0.0.1", Some("http://evil.example")).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = post_initialize(addr, "127.0.0.1", Some("https://mcp.example.test")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_initialize(
        addr,
        "127.0.0.1",
        Some(&format!("http://localhost:{}", addr.port())),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Graceful shutdown: nothing in flight, so it ends promptly (sessions closed) and the port
    // stops accepting.
    session.cancel().await.unwrap();
    modern.cancel().await.unwrap();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("shutdown within the grace")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn shutdown_leaves_an_in_flight_operation_running() {
    let env = TestEnv::shared("connector-http-shutdown").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let mut options = loopback_http_options();
    options.shutdown_grace = Duration::from_millis(500);
    let (server, shutdown) = serve_connector_http(connector_for(&env, "mock"), options)
        .await
        .unwrap();
    let client = session_http_client(&server.url, ()).await.unwrap();
    let peer = client.peer().clone();
    let slow = tokio::spawn(async move {
        peer.call_tool(tool_call("slow", json!({"key": "sd1", "sleep_ms": 8000})))
            .await
    });
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(20))
            .await,
        1
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server.wait())
        .await
        .expect("shutdown after the grace")
        .unwrap();
    // The connector cancelled nothing: the upstream call is not cancelled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Cancelled, "sd1"),
        0,
        "{:?}",
        ledger.read()
    );
    slow.abort();
    drop(client);
}

#[tokio::test]
async fn the_connector_binary_serves_http_and_stops_on_sigterm() {
    let env = TestEnv::shared("connector-http-bin").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    // HTTP refuses to start without a task signing key.
    let refused = connector_command(&env, "mock")
        .args(["--transport", "http", "--addr", "127.0.0.1:0"])
        .env_remove("MCP_TASK_SIGNING_KEY")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("MCP_TASK_SIGNING_KEY"),
        "{refused:?}"
    );

    let HttpConnectorProcess {
        mut child,
        url,
        addr,
        startup_log,
        ..
    } = HttpConnectorProcess::start(&env, "mock", &["--allowed-host", "mcp.example.test"])
        .await
        .unwrap();
    assert!(
        startup_log
            .iter()
            .any(|l| l.contains("share one task scope")),
        "the shared-scope warning is logged at startup: {startup_log:?}"
    );

    let (status, body) = raw_http(addr, "GET", "/healthz", &[("Host", "localhost")], "").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(post_initialize(addr, "evil.example", None).await.0, 403);
    assert_eq!(post_initialize(addr, "mcp.example.test", None).await.0, 200);

    let client = session_http_client(&url, ()).await.unwrap();
    let result = client.peer().call_tool(echo("http-bin")).await.unwrap();
    assert_eq!(result.structured_content, Some(json!({"key": "http-bin"})));
    client.cancel().await.unwrap();

    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exits on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

// ---- cancellation over HTTP ----------------------------------------------------------------

/// Opens a connection and sends one POST to `/mcp`, leaving the response unread.
async fn open_post(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &str,
) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", addr.port());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// A stateless (2026-07-28) `tools/call` request: the protocol version and client capabilities
/// travel in the request's `_meta`, the method and tool name in the SEP-2243 headers.
fn stateless_call(id: u64, tool: &str, arguments: serde_json::Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            },
        },
    })
    .to_string()
}

/// The headers of a stateless 2026-07-28 call of `slow`.
const STATELESS_SLOW_CALL: [(&str, &str); 5] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", "2026-07-28"),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "slow"),
];

/// A loopback HTTP connector in front of the mock upstream (through a proxy), with the
/// upstream's ledger.
struct MockOverHttp {
    ledger: Ledger,
    server: durable_mcp::connector::http::HttpServerHandle,
    shutdown: tokio_util::sync::CancellationToken,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
}

impl MockOverHttp {
    /// Shuts the connector down and waits (a while) for it.
    async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server.wait()).await;
    }

    async fn start(test: &str) -> Self {
        let env = TestEnv::shared(test).await;
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
        let (server, shutdown) =
            serve_connector_http(connector_for(&env, "mock"), loopback_http_options())
                .await
                .unwrap();
        Self {
            ledger,
            server,
            shutdown,
            _proxy,
        }
    }
}

#[tokio::test]
async fn a_stateless_caller_gets_log_messages_only_at_the_level_its_request_names() {
    use durable_mcp_conformance::fixtures::{Behavior, ToolSpec, UpstreamSpec};
    let env = TestEnv::shared("connector-http-log-level").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(ToolSpec::read_only(
        "logger",
        "logs info and warning, then answers",
        Behavior::Log {
            levels: vec!["info".into(), "warning".into()],
            every_ms: 50,
            ms: 200,
            untied: false,
        },
    ));
    let _proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_spec("mock", &spec, &ledger)],
    );
    let (server, shutdown) =
        serve_connector_http(connector_for(&env, "mock"), loopback_http_options())
            .await
            .unwrap();
    let host = format!("127.0.0.1:{}", server.local_addr.port());
    let headers = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "logger"),
    ];
    // The levels of the log messages on one stateless call's response stream.
    let levels_of = |level: Option<&str>| {
        let mut body: serde_json::Value =
            serde_json::from_str(&stateless_call(3, "logger", json!({"key": "l"}))).unwrap();
        if let Some(level) = level {
            body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        async move {
            let (status, _, answer) = raw_http_with_headers(
                server.local_addr,
                "POST",
                "/mcp",
                &headers,
                &body.to_string(),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            assert!(answer.contains(r#""isError":false"#), "{answer}");
            let messages: Vec<String> = answer
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
                .filter(|m| m["method"] == "notifications/message")
                .map(|m| m["params"]["level"].as_str().unwrap_or("").to_owned())
                .collect();
            messages
        }
    };
    assert_eq!(
        levels_of(None).await,
        Vec::<String>::new(),
        "none asked, none sent"
    );
    assert_eq!(levels_of(Some("warning")).await, ["warning"]);
    assert_eq!(levels_of(Some("debug")).await, ["info", "warning"]);
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

#[tokio::test]
async fn closing_a_stateless_response_stream_cancels_the_operation_upstream() {
    let mock = MockOverHttp::start("connector-http-close").await;
    let (ledger, server) = (&mock.ledger, &mock.server);
    let addr = server.local_addr;

    // A raw 2026-07-28 call: no session, nothing but this one response stream.
    let stream = open_post(
        addr,
        &STATELESS_SLOW_CALL,
        &stateless_call(7, "slow", json!({"key": "close-1"})),
    )
    .await;
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
            .await,
        1,
        "{:?}",
        ledger.read()
    );
    // The client goes away: the connection closes with the call in flight.
    drop(stream);
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30))
            .await,
        1,
        "closing the stream reached the upstream as a cancel: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count("slow", LedgerEvent::Completed), 0);

    // The same through a real stateless client: dropping its call closes the stream.
    let modern = stateless_http_client(&server.url, ()).await.unwrap();
    let slow = modern
        .peer()
        .call_tool(tool_call("slow", json!({"key": "close-2"})));
    let called = async {
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 2, Duration::from_secs(30))
            .await
    };
    tokio::select! {
        result = slow => panic!("the slow call ended early: {result:?}"),
        n = called => assert_eq!(n, 2, "{:?}", ledger.read()),
    }
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 2, Duration::from_secs(30))
            .await,
        2,
        "the stateless client's dropped call reached the upstream as a cancel: {:?}",
        ledger.read()
    );
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Cancelled, "close-2"),
        1
    );
    modern.cancel().await.unwrap();
    mock.stop().await;
}

#[tokio::test]
async fn a_keyed_call_outlives_its_closed_stateless_stream_and_its_reissue_gets_the_result() {
    let mock = MockOverHttp::start("connector-http-keyed-close").await;
    let (ledger, server) = (&mock.ledger, &mock.server);
    let arguments = json!({"key": "keyed-close", "sleep_ms": 4000});
    let mut keyed: serde_json::Value =
        serde_json::from_str(&stateless_call(7, "slow", arguments.clone())).unwrap();
    keyed["params"]["_meta"]["idempotencyKey"] = json!("keyed-close-1");
    let stream = open_post(server.local_addr, &STATELESS_SLOW_CALL, &keyed.to_string()).await;
    let called = ledger
        .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
        .await;
    assert_eq!(called, 1, "{:?}", ledger.read());
    // The client goes away a second into the call, as a dropped connection would.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(stream);

    // It re-issues the call with the same key: the same execution answers with its result.
    let modern = stateless_http_client(&server.url, ()).await.unwrap();
    let mut again = tool_call("slow", arguments);
    again.meta = Some(serde_json::from_value(json!({"idempotencyKey": "keyed-close-1"})).unwrap());
    let result = modern.peer().call_tool(again).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(
        ledger.count("slow", LedgerEvent::Called),
        1,
        "{:?}",
        ledger.read()
    );
    assert_eq!(ledger.count("slow", LedgerEvent::Completed), 1);
    assert_eq!(ledger.count("slow", LedgerEvent::Cancelled), 0);
    modern.cancel().await.unwrap();
    mock.stop().await;
}

#[tokio::test]
async fn a_session_clients_cancel_notification_cancels_the_operation_upstream() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let mock = MockOverHttp::start("connector-http-session-cancel").await;
    let (ledger, server) = (&mock.ledger, &mock.server);

    // An older client: initialize, an Mcp-Session-Id, then notifications/cancelled on the
    // session while the call's response stream stays open.
    let session = session_http_client(&server.url, ()).await.unwrap();
    let handle = session
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(tool_call(
                "slow",
                json!({"key": "sc-1"}),
            ))),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
            .await,
        1,
        "{:?}",
        ledger.read()
    );
    handle
        .cancel(Some("the user changed their mind".into()))
        .await
        .unwrap();
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30))
            .await,
        1,
        "notifications/cancelled reached the upstream: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count("slow", LedgerEvent::Completed), 0);
    // The session is still usable.
    let result = session
        .peer()
        .call_tool(echo("after-cancel"))
        .await
        .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"key": "after-cancel"}))
    );
    session.cancel().await.unwrap();

    // The same on the wire, so nothing but the notification can be what cancels: the call's
    // response stream stays open on its own connection while notifications/cancelled arrives
    // on another.
    let addr = server.local_addr;
    let host = format!("127.0.0.1:{}", addr.port());
    let base = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, head, body) = raw_http_with_headers(addr, "POST", "/mcp", &base, INITIALIZE).await;
    assert_eq!(status, 200, "{head}\n{body}");
    let session_id = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no Mcp-Session-Id in {head}"));
    let with_session = [
        base[0],
        base[1],
        base[2],
        ("Mcp-Session-Id", session_id.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let (status, body) = raw_http(
        addr,
        "POST",
        "/mcp",
        &with_session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let mut call = open_post(
        addr,
        &with_session[1..],
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"key": "sc-2"}}})
        .to_string(),
    )
    .await;
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 2, Duration::from_secs(30))
            .await,
        2,
        "{:?}",
        ledger.read()
    );
    let (status, body) = raw_http(
        addr,
        "POST",
        "/mcp",
        &with_session,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9,"reason":"raw"}}"#,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 2, Duration::from_secs(30))
            .await,
        2,
        "notifications/cancelled alone reached the upstream: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Cancelled, "sc-2"), 1);
    // The client is never told a result: its stream carries no response to request 9.
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), call.read_to_end(&mut seen)).await;
    let seen = String::from_utf8_lossy(&seen);
    assert!(!seen.contains("\"result\""), "{seen}");

    // A keyed call, which a dropped stream leaves running, is cancelled by the notification.
    let session = session_http_client(&server.url, ()).await.unwrap();
    let mut keyed = tool_call("slow", json!({"key": "sc-3"}));
    keyed.meta = Some(serde_json::from_value(json!({"idempotencyKey": "sc-3"})).unwrap());
    let handle = session
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(keyed)),
            Default::default(),
        )
        .await
        .unwrap();
    let called = ledger
        .wait_for_count("slow", LedgerEvent::Called, 3, Duration::from_secs(30))
        .await;
    assert_eq!(called, 3, "{:?}", ledger.read());
    handle.cancel(Some("explicit".into())).await.unwrap();
    let cancelled = ledger
        .wait_for_count("slow", LedgerEvent::Cancelled, 3, Duration::from_secs(30))
        .await;
    assert_eq!(cancelled, 3, "the keyed call's cancel: {:?}", ledger.read());
    assert_eq!(ledger.count_key("slow", LedgerEvent::Cancelled, "sc-3"), 1);
    session.cancel().await.unwrap();
    mock.stop().await;
}

#[tokio::test]
async fn a_stateless_task_outlives_its_response_stream_and_only_tasks_cancel_stops_it() {
    use durable_mcp::connector::server::{Connector, ConnectorOptions};
    use rmcp::model::CancelTaskParams;
    let env = TestEnv::shared("connector-http-task-close").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let mut options = ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    let connector = Connector::new(env.client.clone(), options);
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();

    // A task-capable stateless client gets a task; its response stream has ended, and then the
    // client goes away entirely. Neither cancels the work.
    let first = stateless_http_client(&server.url, tasks_client_config())
        .await
        .unwrap();
    let created = first
        .peer()
        .call_tool_once(tool_call("slow", json!({"key": "tc-1", "sleep_ms": 2500})))
        .await
        .unwrap();
    let finishing = task_id_of(created);
    let created = first
        .peer()
        .call_tool_once(tool_call("slow", json!({"key": "tc-2"})))
        .await
        .unwrap();
    let cancelling = task_id_of(created);
    first.cancel().await.unwrap();

    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Completed, 1, Duration::from_secs(30))
            .await,
        1,
        "{:?}",
        ledger.read()
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Completed, "tc-1"), 1);
    assert_eq!(
        ledger.count("slow", LedgerEvent::Cancelled),
        0,
        "a returned task is not cancelled by its stream closing: {:?}",
        ledger.read()
    );

    // Another client (same scope: this connector has no authentication) reads the result and
    // cancels the other task; only then does the cancel reach the upstream.
    let second = stateless_http_client(&server.url, tasks_client_config())
        .await
        .unwrap();
    let done = poll_task_until_done(&second, &finishing).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "tc-1", "sleep_ms": 2500}),
        "{done}"
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Cancelled, "tc-2"), 0);
    second
        .peer()
        .cancel_task(CancelTaskParams::new(&cancelling))
        .await
        .unwrap();
    let done = poll_task_until_done(&second, &cancelling).await;
    assert_eq!(done["status"], json!("cancelled"), "{done}");
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30))
            .await,
        1,
        "{:?}",
        ledger.read()
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Cancelled, "tc-2"), 1);
    second.cancel().await.unwrap();
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
}

/// R-CON-14, the review's reproduction: without `--auth-config`, `--addr 0.0.0.0:...` used to
/// only warn; the Host check does not stop a client that is not a browser. Now it is refused
/// before anything starts, unless the operator says `--allow-unauthenticated`.
#[tokio::test]
async fn unauthenticated_http_on_a_public_address_is_refused_unless_allowed() {
    let env = TestEnv::shared("connector-public-addr").await;
    let refused = connector_command(&env, "mock")
        .args(["--transport", "http", "--addr", "0.0.0.0:0"])
        .env("MCP_TASK_SIGNING_KEY", TEST_SIGNING_KEY)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("0.0.0.0:0")
            && stderr.contains("--auth-config")
            && stderr.contains("--allow-unauthenticated"),
        "{stderr}"
    );
    let allowed =
        HttpConnectorProcess::start_at(&env, "mock", "0.0.0.0:0", &["--allow-unauthenticated"])
            .await
            .unwrap();
    // It serves, and still says that its callers share one scope.
    let log = allowed.startup_log.join("\n");
    assert!(log.contains("has no authentication"), "{log}");
}

/// R-CON-30: a JSON POST body rmcp cannot read gets HTTP 400 with a JSON-RPC error (-32700 for
/// a body that is not JSON, -32600 for JSON that is not one JSON-RPC 2.0 message), not rmcp's
/// 415; a wrong `Content-Type` keeps its 415, and a readable body is served as before.
#[tokio::test]
async fn unreadable_bodies_get_json_rpc_errors_and_a_wrong_content_type_keeps_415() {
    let env = TestEnv::shared("connector-http-unreadable").await;
    let (server, shutdown) =
        serve_connector_http(connector_for(&env, "mock"), loopback_http_options())
            .await
            .unwrap();
    let _stop = shutdown.drop_guard();
    let http = reqwest::Client::new();
    let post = |content_type: &'static str, body: &'static str| {
        let request = http
            .post(&server.url)
            .header("content-type", content_type)
            .header("accept", "application/json, text/event-stream")
            .body(body);
        async move {
            let response = request.send().await.expect("POST to the connector");
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    for (body, code) in [
        ("{\"jsonrpc\": \"2.0\", \"id\": 1,", -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            -32600,
        ),
        ("{\"id\": 3, \"hello\": true}", -32600),
    ] {
        let (status, answer) = post("application/json", body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{body}: a JSON-RPC error, not {answer:?}: {e}"));
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    let (status, _) = post("text/plain", INITIALIZE).await;
    assert_eq!(status, 415, "a wrong Content-Type is rmcp's 415");
    let (status, answer) = post("application/json", INITIALIZE).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("protocolVersion"), "{answer}");
}
