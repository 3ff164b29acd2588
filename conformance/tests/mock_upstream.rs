//! The mock upstream MCP server, driven by rmcp's own client over stdio (the built binary) and
//! Streamable HTTP (in-process `serve_mock_upstream_http`, and the binary's http mode), plus the
//! HTTP faults.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durable_mcp_conformance::fixtures::{
    CRASH_EXIT_CODE, Ledger, LedgerEvent, SpecSource, UpstreamSpec, all_content_json, faults,
    serve_mock_upstream_http,
};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock, ErrorCode, JsonObject,
        ProgressNotificationParam, ProtocolVersion, Request, ResourceContents,
    },
    service::{NotificationContext, PeerRequestOptions, RunningService},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        common::client_side_sse::ExponentialBackoff,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-mock-upstream");

/// A client handler that records progress notifications.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

type Client = RunningService<RoleClient, Recorder>;

struct Fixture {
    dir: tempfile::TempDir,
    ledger: Ledger,
}

impl Fixture {
    fn new() -> Self {
        // RUST_LOG=rmcp=debug,durable_mcp_conformance=debug shows both sides of in-process tests.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
        Self { dir, ledger }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ledger_path(&self) -> PathBuf {
        self.ledger.path().to_path_buf()
    }

    /// Spawns the binary over stdio (standard spec unless `spec` is given).
    async fn stdio_client(&self, spec: Option<&Path>) -> Client {
        let mut command = tokio::process::Command::new(BIN);
        command.arg("--ledger").arg(self.ledger.path());
        if let Some(spec) = spec {
            command.arg("--spec").arg(spec);
        }
        command.env("RUST_LOG", "warn");
        let transport = TokioChildProcess::new(command).unwrap();
        Recorder::default().serve(transport).await.unwrap()
    }
}

async fn http_client(url: &str) -> Client {
    Recorder::default()
        .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

fn args(value: Value) -> JsonObject {
    value.as_object().cloned().unwrap()
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments))
}

fn text_of(result: &CallToolResult) -> &str {
    &result.content[0].as_text().expect("text content").text
}

fn mcp_code(error: &ServiceError) -> i32 {
    match error {
        ServiceError::McpError(data) => data.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Checks shared by both transports
// ---------------------------------------------------------------------------------------------

async fn check_list_tools(client: &Client) {
    let spec = UpstreamSpec::standard();
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    let expected: Vec<_> = spec.tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, expected);
    for (tool, tool_spec) in tools.iter().zip(&spec.tools) {
        // The whole Tool JSON, annotations and _meta included, is what the spec says.
        assert_eq!(
            serde_json::to_value(tool).unwrap(),
            tool_spec.to_mcp_json().unwrap(),
            "tool {}",
            tool.name
        );
    }
    let by_name = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    let echo = by_name("echo").annotations.clone().unwrap();
    assert_eq!(echo.read_only_hint, Some(true));
    let write_once = by_name("write_once").annotations.clone().unwrap();
    assert_eq!(write_once.destructive_hint, Some(true));
    assert_eq!(write_once.idempotent_hint, Some(false));
    assert_eq!(write_once.read_only_hint, None);
    assert_eq!(
        by_name("flaky")
            .annotations
            .clone()
            .unwrap()
            .idempotent_hint,
        Some(true)
    );
    assert!(by_name("everything").output_schema.is_some());
    assert!(by_name("everything").meta.is_some());
}

async fn check_echo(client: &Client, ledger: &Ledger) {
    let arguments = json!({"key": "echo-1", "n": 7, "nested": {"a": [1, 2]}});
    let result = client
        .call_tool(call("echo", arguments.clone()))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(result.structured_content, Some(arguments.clone()));
    let echoed: Value = serde_json::from_str(text_of(&result)).unwrap();
    assert_eq!(echoed, arguments);
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "echo-1"), 1);
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Completed, "echo-1"),
        1
    );
    // Only the key reaches the ledger, never other arguments.
    let raw = std::fs::read_to_string(ledger.path()).unwrap();
    assert!(!raw.contains("nested"), "{raw}");
}

async fn check_flaky(client: &Client, ledger: &Ledger, key: &str) {
    for attempt in 1..=2 {
        let error = client
            .call_tool(call("flaky", json!({"key": key})))
            .await
            .unwrap_err();
        assert_eq!(mcp_code(&error), -32603, "attempt {attempt}: {error}");
    }
    let result = client
        .call_tool(call("flaky", json!({"key": key})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(ledger.count_key("flaky", LedgerEvent::Called, key), 3);
    assert_eq!(ledger.count_key("flaky", LedgerEvent::Failed, key), 2);
    assert_eq!(ledger.count_key("flaky", LedgerEvent::Completed, key), 1);
    // Another key has its own count.
    let other = format!("{key}-other");
    assert!(
        client
            .call_tool(call("flaky", json!({"key": other})))
            .await
            .is_err()
    );
}

async fn check_refuse(client: &Client, ledger: &Ledger) {
    let result = client.call_tool(call("refuse", json!({}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(text_of(&result), "refused: this tool always fails");
    assert_eq!(ledger.count("refuse", LedgerEvent::Failed), 1);
}

async fn check_everything(client: &Client) {
    let result = client
        .call_tool(call("everything", json!({})))
        .await
        .unwrap();
    let kinds: Vec<&str> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(_) => "image",
            ContentBlock::Audio(_) => "audio",
            ContentBlock::ResourceLink(_) => "resource_link",
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { .. } => "resource_text",
                ResourceContents::BlobResourceContents { .. } => "resource_blob",
                _ => "resource_other",
            },
            _ => "other",
        })
        .collect();
    for kind in [
        "text",
        "image",
        "audio",
        "resource_link",
        "resource_text",
        "resource_blob",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let ContentBlock::Text(text) = &result.content[0] else {
        panic!("first block is text")
    };
    let annotations = text.annotations.as_ref().expect("content annotations");
    assert_eq!(annotations.priority, Some(0.5));
    assert_eq!(annotations.audience.as_ref().map(Vec::len), Some(2));
    assert!(text.meta.is_some());
    assert!(result.structured_content.is_some());
    assert!(result.meta.is_some());
    assert_eq!(result.is_error, Some(false));
    // Byte for byte what the fixture promises (resultType aside: protocol-version dependent).
    let mut wire = serde_json::to_value(&result).unwrap();
    wire.as_object_mut().unwrap().remove("resultType");
    assert_eq!(
        serde_json::to_string(&wire).unwrap(),
        serde_json::to_string(&all_content_json()).unwrap()
    );
}

async fn check_unknown_tool(client: &Client) {
    let error = client
        .call_tool(call("no_such_tool", json!({})))
        .await
        .unwrap_err();
    assert_eq!(mcp_code(&error), ErrorCode::INVALID_PARAMS.0);
    assert!(error.to_string().contains("no_such_tool"), "{error}");
}

async fn check_progress(client: &Client) {
    client.service().progress.lock().unwrap().clear();
    let result = client
        .call_tool(call("progress", json!({"x": 1})))
        .await
        .unwrap();
    assert_eq!(result.structured_content, Some(json!({"x": 1})));
    // Notifications may be handled just after the response; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.service().progress.lock().unwrap().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let progress = client.service().progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 3, "{progress:?}");
    assert_eq!(progress[2].progress, 3.0);
    assert_eq!(progress[2].total, Some(3.0));
}

async fn check_large(client: &Client) {
    let result = client.call_tool(call("large", json!({}))).await.unwrap();
    assert_eq!(text_of(&result).len(), 3 * 1024 * 1024);
    let result = client
        .call_tool(call("large", json!({"bytes": 10})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "abcdefghij");
}

/// Cancels an in-flight `slow` call through `RequestHandle::cancel`.
async fn check_cancel_with_handle(client: &Client, ledger: &Ledger, key: &str) {
    let request = ClientRequest::CallToolRequest(Request::new(call(
        "slow",
        json!({"key": key, "sleep_ms": 30_000}),
    )));
    let handle = client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    wait_key(ledger, "slow", LedgerEvent::Called, key, 1).await;
    let started = Instant::now();
    handle.cancel(Some("test cancels".into())).await.unwrap();
    wait_key(ledger, "slow", LedgerEvent::Cancelled, key, 1).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(ledger.count_key("slow", LedgerEvent::Completed, key), 0);
}

/// Cancels an in-flight `slow` call by dropping the `call_tool` future (client-side timeout).
async fn check_cancel_by_drop(client: &Client, ledger: &Ledger, key: &str) {
    let call_future = client.call_tool(call("slow", json!({"key": key, "sleep_ms": 30_000})));
    let outcome = tokio::time::timeout(Duration::from_millis(500), call_future).await;
    assert!(outcome.is_err(), "slow answered early: {outcome:?}");
    wait_key(ledger, "slow", LedgerEvent::Cancelled, key, 1).await;
    assert_eq!(ledger.count_key("slow", LedgerEvent::Called, key), 1);
}

async fn wait_key(ledger: &Ledger, tool: &str, event: LedgerEvent, key: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let count = ledger.count_key(tool, event, key);
        if count >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{tool}/{key}: {count} {event} after 5 s; ledger: {:?}",
            ledger.read()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// stdio
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_standard_tools() {
    let fx = Fixture::new();
    let client = fx.stdio_client(None).await;
    let info = client.peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().unwrap().name,
        "durable-mcp-mock-upstream"
    );
    check_list_tools(&client).await;
    check_echo(&client, &fx.ledger).await;
    check_flaky(&client, &fx.ledger, "stdio").await;
    check_refuse(&client, &fx.ledger).await;
    check_everything(&client).await;
    check_unknown_tool(&client).await;
    check_progress(&client).await;
    check_large(&client).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_cancel_reaches_the_tool() {
    let fx = Fixture::new();
    let client = fx.stdio_client(None).await;
    check_cancel_with_handle(&client, &fx.ledger, "handle").await;
    check_cancel_by_drop(&client, &fx.ledger, "drop").await;
    // The server is still usable afterwards.
    check_echo(&client, &fx.ledger).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_crash_kills_the_process() {
    let fx = Fixture::new();
    let client = fx.stdio_client(None).await;
    let error = tokio::time::timeout(
        Duration::from_secs(10),
        client.call_tool(call("crash", json!({"key": "c1"}))),
    )
    .await
    .expect("the client notices the dead child")
    .unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ),
        "{error:?}"
    );
    assert_eq!(fx.ledger.count_key("crash", LedgerEvent::Called, "c1"), 1);
    assert_eq!(fx.ledger.count_key("crash", LedgerEvent::Crashed, "c1"), 1);
    // Later requests fail too: the process is gone.
    assert!(client.list_tools(None).await.is_err());
}

/// Raw JSON-RPC lines over the binary's stdin: `crash` exits with status 17.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_crash_exit_status() {
    let fx = Fixture::new();
    let mut child = tokio::process::Command::new(BIN)
        .arg("--ledger")
        .arg(fx.ledger.path())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let send = |v: Value| format!("{v}\n");
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let init: Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "durable-mcp-mock-upstream"
    );
    for message in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "crash", "arguments": {}}}),
    ] {
        stdin.write_all(send(message).as_bytes()).await.unwrap();
    }
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(CRASH_EXIT_CODE));
    assert_eq!(
        stdout.next_line().await.unwrap(),
        None,
        "no response after a crash"
    );
    assert_eq!(fx.ledger.count("crash", LedgerEvent::Crashed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_spec_file_reload() {
    let fx = Fixture::new();
    let spec_path = fx.path("spec.json");
    let mut spec = UpstreamSpec::standard();
    spec.write_json(&spec_path).unwrap();
    let client = fx.stdio_client(Some(&spec_path)).await;
    check_reload(&client, &mut spec, &spec_path).await;
    client.cancel().await.unwrap();
}

async fn check_reload(client: &Client, spec: &mut UpstreamSpec, spec_path: &Path) {
    let annotations = |tools: &[rmcp::model::Tool], name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(tool.annotations.as_ref().unwrap()).unwrap()
    };
    let before = client.list_all_tools().await.unwrap();
    assert_eq!(
        annotations(&before, "echo"),
        json!({"title": "Echo", "readOnlyHint": true})
    );

    let changed = json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false});
    spec.tool_mut("echo").unwrap().annotations = Some(changed.clone());
    spec.tools.retain(|t| t.name != "refuse");
    spec.write_json(spec_path).unwrap();

    let after = client.list_all_tools().await.unwrap();
    assert_eq!(annotations(&after, "echo"), changed);
    assert!(after.iter().all(|t| t.name != "refuse"));
    // tools/call sees the new spec too.
    let error = client
        .call_tool(call("refuse", json!({})))
        .await
        .unwrap_err();
    assert_eq!(mcp_code(&error), ErrorCode::INVALID_PARAMS.0);

    // A torn write keeps the last good spec.
    std::fs::write(spec_path, "{\"name\": ").unwrap();
    let still = client.list_all_tools().await.unwrap();
    assert_eq!(annotations(&still, "echo"), changed);
}

// ---------------------------------------------------------------------------------------------
// Streamable HTTP (in-process)
// ---------------------------------------------------------------------------------------------

async fn standard_http(fx: &Fixture) -> durable_mcp_conformance::fixtures::HttpUpstream {
    serve_mock_upstream_http(
        SpecSource::Inline(UpstreamSpec::standard()),
        Some(fx.ledger_path()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_standard_tools() {
    let fx = Fixture::new();
    let server = standard_http(&fx).await;
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    assert!(server.url.ends_with("/mcp"));
    let client = http_client(&server.url).await;
    assert_eq!(
        client
            .peer_info()
            .unwrap()
            .server_info
            .as_ref()
            .unwrap()
            .name,
        "durable-mcp-mock-upstream"
    );
    check_list_tools(&client).await;
    check_echo(&client, &fx.ledger).await;
    check_flaky(&client, &fx.ledger, "http").await;
    check_refuse(&client, &fx.ledger).await;
    check_everything(&client).await;
    check_unknown_tool(&client).await;
    check_progress(&client).await;
    check_large(&client).await;
    client.cancel().await.unwrap();

    // Failure counts are per server, not per session: a new session continues the count.
    let second = http_client(&server.url).await;
    assert!(
        second
            .call_tool(call("flaky", json!({"key": "http"})))
            .await
            .is_ok()
    );
    second.cancel().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_cancel_reaches_the_tool() {
    let fx = Fixture::new();
    let server = standard_http(&fx).await;
    let client = http_client(&server.url).await;
    check_cancel_with_handle(&client, &fx.ledger, "handle").await;
    check_cancel_by_drop(&client, &fx.ledger, "drop").await;
    check_echo(&client, &fx.ledger).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_crash_aborts_the_response() {
    let fx = Fixture::new();
    let server = standard_http(&fx).await;
    // rmcp trap: the POST's SSE stream had a priming event id, so after the abort the client
    // resumes with GET + Last-Event-ID, and its default retry policy (ExponentialBackoff,
    // max_times None) retries forever, 404 included: the call would hang until the caller's own
    // timeout. Bound the retries to see the failure.
    let mut backoff = ExponentialBackoff::default();
    backoff.max_times = Some(1);
    backoff.base_duration = Duration::from_millis(100);
    backoff.max_delay = Some(Duration::from_millis(500));
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.clone());
    config.retry_config = Arc::new(backoff);
    let client = Recorder::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool(call("crash", json!({"key": "h1"}))),
    )
    .await
    .expect("the client notices the aborted response");
    let error = outcome.unwrap_err();
    assert!(
        !matches!(error, ServiceError::McpError(_)),
        "a crash is a transport failure, not a JSON-RPC error: {error:?}"
    );
    assert_eq!(fx.ledger.count_key("crash", LedgerEvent::Crashed, "h1"), 1);
    assert_eq!(
        fx.ledger.count_key("crash", LedgerEvent::Completed, "h1"),
        0
    );
    drop(client);
    // The server itself lives on: a new session works.
    let fresh = http_client(&server.url).await;
    check_echo(&fresh, &fx.ledger).await;
    fresh.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_spec_file_reload_toml() {
    let fx = Fixture::new();
    // Start from a TOML file, then switch to the JSON rendering of the standard spec with a
    // changed annotation (the extension decides the parser, so keep .toml and write TOML).
    let spec_path = fx.path("spec.toml");
    let mut spec = UpstreamSpec::standard();
    std::fs::write(&spec_path, toml_of(&spec)).unwrap();
    let server = serve_mock_upstream_http(
        SpecSource::File(spec_path.clone()),
        Some(fx.ledger_path()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let client = http_client(&server.url).await;
    check_list_tools(&client).await;
    let changed = json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true});
    spec.tool_mut("write_once").unwrap().annotations = Some(changed.clone());
    std::fs::write(&spec_path, toml_of(&spec)).unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let write_once = tools.iter().find(|t| t.name == "write_once").unwrap();
    assert_eq!(
        serde_json::to_value(write_once.annotations.as_ref().unwrap()).unwrap(),
        changed
    );
    client.cancel().await.unwrap();
}

fn toml_of(spec: &UpstreamSpec) -> String {
    // serde_json::Value → toml via serde; JSON null has no TOML form and the spec has none.
    toml::to_string(spec).unwrap()
}

/// A 2026-07-28 client (`server/discover`, no session) is served statelessly by the same mock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_modern_client() {
    let fx = Fixture::new();
    let server = standard_http(&fx).await;
    let client = Recorder::default()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url.clone()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    check_list_tools(&client).await;
    check_echo(&client, &fx.ledger).await;
    check_everything(&client).await;
    check_unknown_tool(&client).await;
    let error = client
        .call_tool(call("flaky", json!({"key": "modern"})))
        .await
        .unwrap_err();
    assert_eq!(mcp_code(&error), -32603);
    check_cancel_by_drop(&client, &fx.ledger, "modern-drop").await;
    // crash over a stateless request: the response is cut, the client gets a transport error.
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool(call("crash", json!({"key": "modern-crash"}))),
    )
    .await
    .expect("the client notices the aborted response");
    let error = outcome.unwrap_err();
    assert!(!matches!(error, ServiceError::McpError(_)), "{error:?}");
    assert_eq!(
        fx.ledger
            .count_key("crash", LedgerEvent::Crashed, "modern-crash"),
        1
    );
    client.cancel().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The binary in http mode
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_http_mode_prints_its_url() {
    let fx = Fixture::new();
    let mut child = tokio::process::Command::new(BIN)
        .args(["--transport", "http", "--addr", "127.0.0.1:0", "--ledger"])
        .arg(fx.ledger.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("LISTENING ").expect(&line).to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let client = http_client(&url).await;
    check_echo(&client, &fx.ledger).await;
    let entry = &fx.ledger.read()[0];
    assert_eq!(Some(entry.pid), child.id());
    client.cancel().await.unwrap();
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// HTTP faults
// ---------------------------------------------------------------------------------------------

async fn connect(url: &str) -> Result<Client, String> {
    match tokio::time::timeout(
        Duration::from_secs(20),
        Recorder::default().serve(StreamableHttpClientTransport::from_uri(url.to_owned())),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_http_500_fails_to_connect() {
    let server = faults::http_500().await;
    let error = connect(&faults::mcp_url(&server)).await.err().unwrap();
    assert_ne!(error, "timed out");
    assert!(!server.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_unknown_session_is_rejected() {
    let server = faults::unknown_session().await;
    // initialize succeeds; everything in the session then gets 404 (rmcp re-initializes once,
    // gets the same lost session, and gives up), during the handshake or on the first request.
    let outcome = match connect(&faults::mcp_url(&server)).await {
        Err(error) => Err(error),
        Ok(client) => tokio::time::timeout(Duration::from_secs(20), client.list_tools(None))
            .await
            .map_err(|_| "timed out".to_owned())
            .and_then(|r| r.map(|_| ()).map_err(|e| e.to_string())),
    };
    let error = outcome.unwrap_err();
    assert_ne!(error, "timed out");
    let requests = server.received_requests().await.unwrap();
    assert!(
        requests.iter().any(|r| r
            .headers
            .get("mcp-session-id")
            .is_some_and(|v| v == faults::LOST_SESSION_ID)),
        "no request carried the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_slow_times_out_after_sending() {
    let server = faults::slow(Duration::from_secs(3)).await;
    let client = connect(&faults::mcp_url(&server)).await.unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_millis(300),
        client.call_tool(call("x", json!({}))),
    )
    .await;
    assert!(outcome.is_err(), "answered early: {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The request did reach the server.
    let requests = server.received_requests().await.unwrap();
    assert!(requests.iter().any(|r| {
        serde_json::from_slice::<Value>(&r.body).is_ok_and(|v| v["method"] == "tools/call")
    }));
    // Patient callers get the answer.
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        client.call_tool(call("x", json!({}))),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(text_of(&result), "slow answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_reset_fails_to_connect() {
    let server = faults::reset().await;
    let error = connect(&server.url).await.err().unwrap();
    assert_ne!(error, "timed out");
    assert!(server.connections() >= 1);
}

#[test]
fn help_describes_the_mock_upstream_not_the_conformance_crate() {
    let output = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{help}");
    assert!(
        help.starts_with("A mock upstream MCP server"),
        "the first line says what this binary is: {help}"
    );
}

/// A `stamp` tool's answer names its execution, and so does its `completed` ledger entry: two
/// calls with one key are two executions with two ids (the chaos run's check that a keyed
/// re-issue got the first execution's result reads these).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamp_tool_names_its_execution_in_its_answer_and_the_ledger() {
    use durable_mcp_conformance::fixtures::{Behavior, ToolSpec};
    let fx = Fixture::new();
    let mut spec = UpstreamSpec::standard();
    let mut stamp: ToolSpec = spec.tool("write_once").unwrap().clone();
    stamp.name = "stamp".into();
    stamp.behavior = Behavior::Stamp;
    spec.tools.push(stamp);
    let server = serve_mock_upstream_http(
        SpecSource::Inline(spec),
        Some(fx.ledger_path()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let client = http_client(&server.url).await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let result = client
            .call_tool(call("stamp", json!({"key": "s1"})))
            .await
            .unwrap();
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["key"], "s1");
        runs.push(structured["run"].as_str().unwrap().to_owned());
    }
    assert_ne!(runs[0], runs[1], "each execution has its own id");
    assert!(runs[0].starts_with(&format!("{}-", std::process::id())));
    let ledger: Vec<Option<String>> = fx
        .ledger
        .read()
        .into_iter()
        .filter(|e| e.event == LedgerEvent::Completed)
        .map(|e| e.run)
        .collect();
    assert_eq!(ledger, runs.into_iter().map(Some).collect::<Vec<_>>());
    client.cancel().await.unwrap();
    server.shutdown().await;
}
