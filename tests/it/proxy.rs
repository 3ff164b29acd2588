//! R-PRX: the outbound proxy in front of real MCP upstreams (the rmcp mock over stdio and
//! HTTP), on the real dev server: discovery, fidelity, retry inference observed through the
//! upstream's invocation ledger, cancellation reaching the upstream, unknown tools.

use std::{collections::BTreeMap, path::Path, time::Duration};

use durable_mcp::{
    contract::listing::TIMEOUT_META_KEY,
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
    proxy::UpstreamConfig,
};
use durable_mcp_conformance::fixtures::{
    self, Behavior, FailKind, Ledger, LedgerEvent, SpecSource, ToolSpec, UpstreamSpec,
    serve_mock_upstream_http,
};
use durable_mcp_conformance::snapshots;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// The standard mock tools plus two flaky ones that differ only in their hints.
fn spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    let flaky = |name: &str, annotations: Value| ToolSpec {
        name: name.into(),
        title: None,
        description: Some("fails once with a retryable JSON-RPC error, then echoes".into()),
        annotations: Some(annotations),
        input_schema: None,
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior: Behavior::FailTimes {
            times: 1,
            error: FailKind::JsonRpc {
                code: -32603,
                message: "transient".into(),
            },
        },
    };
    spec.tools
        .push(flaky("ro_flaky", json!({"readOnlyHint": true})));
    spec.tools.push(flaky(
        "destructive_flaky",
        json!({"destructiveHint": true, "idempotentHint": false}),
    ));
    spec
}

/// A stdio upstream: the mock binary as a child of the proxy, serving `spec` from a file.
fn stdio_upstream(service: &str, spec_file: &Path, ledger: &Ledger) -> UpstreamConfig {
    let spec_arg = vec!["--spec".into(), spec_file.to_string_lossy().into_owned()];
    mock_stdio_upstream_with_args(service, spec_arg, ledger).unwrap()
}

async fn call(env: &TestEnv, service: &str, tool: &str, args: Value) -> OperationOutcome {
    let mut start = StartOperation::new(
        format!("call-{tool}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        service,
        tool,
        payload::to_payload(&args).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (op, _) = env.client.start(start).await.unwrap();
    env.client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap()
}

fn tool_result(outcome: OperationOutcome) -> Value {
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("expected a result, got {outcome:?}")
    };
    assert_eq!(
        payload::mcp_type(&p),
        Some(payload::CALL_TOOL_RESULT),
        "whole CallToolResults are marked"
    );
    payload::to_json(&p).unwrap()
}

#[tokio::test]
async fn proxy_fronts_a_stdio_upstream() {
    let env = TestEnv::shared("proxy-stdio").await;
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec()).unwrap()).unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    // list_tools: every tool, annotations verbatim, the per-call timeout in _meta.
    let listed = call(&env, "mock", "list_tools", json!({})).await;
    let OperationOutcome::Succeeded(p) = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(payload::mcp_type(&p), Some(payload::TOOL_LIST));
    let tools = payload::to_json(&p).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in [
        "echo",
        "flaky",
        "refuse",
        "slow",
        "everything",
        "write_once",
        "ro_flaky",
        "destructive_flaky",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let ro = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ro_flaky")
        .unwrap();
    assert_eq!(ro["annotations"]["readOnlyHint"], json!(true));
    assert!(ro["_meta"][TIMEOUT_META_KEY].as_u64().unwrap() > 0, "{ro}");

    // A call returns the upstream's whole result.
    let result = tool_result(call(&env, "mock", "echo", json!({"key": "k1", "text": "hi"})).await);
    assert_eq!(
        result["structuredContent"],
        json!({"key": "k1", "text": "hi"})
    );
    assert_eq!(result["isError"], json!(false));

    // isError results are results: returned intact, never retried.
    let refused = tool_result(call(&env, "mock", "refuse", json!({"key": "r1"})).await);
    assert_eq!(refused["isError"], json!(true));
    assert_eq!(ledger.count_key("refuse", LedgerEvent::Called, "r1"), 1);

    // Every content type survives the trip (compared with the fixture's own result).
    let everything = tool_result(call(&env, "mock", "everything", json!({})).await);
    assert_eq!(everything, fixtures::all_content_json());

    // Retry inference, observed upstream: the read-only tool is retried, the destructive
    // non-idempotent one runs exactly once.
    let retried = tool_result(call(&env, "mock", "ro_flaky", json!({"key": "ro"})).await);
    assert_eq!(retried["isError"], json!(false));
    assert_eq!(
        ledger.count_key("ro_flaky", LedgerEvent::Called, "ro"),
        2,
        "{:?}",
        ledger.read()
    );
    // Its JSON-RPC error is the call's end (R-PRX-4), as every caller of the contract reads it.
    let once = call(&env, "mock", "destructive_flaky", json!({"key": "once"})).await;
    let once = durable_mcp::contract::outcome::Outcome::from_operation(once);
    assert!(
        matches!(&once, durable_mcp::contract::outcome::Outcome::JsonRpcError(e) if e.code == -32603),
        "{once:?}"
    );
    assert_eq!(
        ledger.count_key("destructive_flaky", LedgerEvent::Called, "once"),
        1,
        "{:?}",
        ledger.read()
    );

    // Unknown tools fail with a stable error type before any activity starts.
    let unknown = call(&env, "mock", "no_such_tool", json!({})).await;
    let OperationOutcome::Failed { error_type, .. } = &unknown else {
        panic!("{unknown:?}")
    };
    assert_eq!(error_type.as_deref(), Some("UnknownTool"));
}

#[tokio::test]
async fn proxy_cancel_reaches_the_upstream() {
    let env = TestEnv::shared("proxy-cancel").await;
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec()).unwrap()).unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    let mut start = StartOperation::new(
        format!("slow-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "mock",
        "slow",
        payload::to_payload(&json!({"key": "c1"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    let (op, _) = env.client.start(start).await.unwrap();
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
            .await,
        1
    );
    cancel_and_expect_canceled(&env, &op, "test").await;
    assert_slow_cancelled_upstream(&ledger).await;
}

#[tokio::test]
async fn proxy_fronts_an_http_upstream_with_identical_results() {
    let env = TestEnv::shared("proxy-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config = http_upstream("web", &upstream.url).unwrap();
    let _proxy = start_proxy(&env, vec![config]);
    let result = tool_result(call(&env, "web", "everything", json!({})).await);
    assert_eq!(result, fixtures::all_content_json());
    let result = tool_result(call(&env, "web", "echo", json!({"key": "h1"})).await);
    assert_eq!(result["structuredContent"], json!({"key": "h1"}));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "h1"), 1);
    drop(_proxy);
    upstream.shutdown().await;
}

/// Writes `spec` where a stdio mock reads it (re-read on every request).
/// The proxy's start handler for `write_once` on this env's task queue, reading `discovery`:
/// driven by hand, it replays a start exactly as the server delivers a retry.
fn write_once_handler(
    env: &TestEnv,
    discovery: std::sync::Arc<durable_mcp::proxy::discovery::Discovery>,
) -> std::sync::Arc<dyn durable_mcp::nexus::OperationHandler> {
    tool_handler(env, discovery, "write_once")
}

/// The proxy's own start handler for `tool` of the `mock` service, driven by hand.
fn tool_handler(
    env: &TestEnv,
    discovery: std::sync::Arc<durable_mcp::proxy::discovery::Discovery>,
    tool: &str,
) -> std::sync::Arc<dyn durable_mcp::nexus::OperationHandler> {
    use durable_mcp::proxy::service::{ServiceContext, proxy_service};
    let service = proxy_service(ServiceContext {
        service: "mock".into(),
        connection: env.connection.clone(),
        namespace: env.namespace.clone(),
        task_queue: env.task_queue.clone(),
        activity_options: Default::default(),
        overrides: BTreeMap::new(),
        discovery,
        codec: None,
        state_keys: durable_mcp::proxy::state_key::StateKeys::per_process(),
    });
    service.handler(tool).unwrap().clone()
}

fn write_spec(path: &Path, spec: &UpstreamSpec) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(spec).unwrap()).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

#[tokio::test]
async fn whole_results_match_the_recorded_snapshot_and_oversized_results_fail_clearly() {
    let env = TestEnv::shared("proxy-fidelity").await;
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec());
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    let everything = tool_result(call(&env, "mock", "everything", json!({})).await);
    snapshots::assert_snapshot(
        &snapshots::default_dir(),
        "mock_everything_result",
        &everything,
    );
    let refused = tool_result(call(&env, "mock", "refuse", json!({})).await);
    snapshots::assert_snapshot(&snapshots::default_dir(), "mock_is_error_result", &refused);

    let large = call(&env, "mock", "large", json!({})).await;
    let OperationOutcome::Failed {
        error_type,
        message,
        ..
    } = &large
    else {
        panic!("{large:?}")
    };
    assert_eq!(error_type.as_deref(), Some("ResultTooLarge"), "{message}");
    assert!(
        message.contains("2 MiB")
            && message.contains("\"large\"")
            && message.contains("bytes of JSON"),
        "the error names the tool, the size and the limit: {message}"
    );
}

#[tokio::test]
async fn crash_mid_call_is_an_unknown_outcome_for_one_attempt_tools_and_the_child_restarts() {
    let env = TestEnv::shared("proxy-crash").await;
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec());
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    // `crash` is destructive and not idempotent: the tool may have run, so never again.
    let crashed = call(&env, "mock", "crash", json!({"key": "boom"})).await;
    let OperationOutcome::Failed { error_type, .. } = &crashed else {
        panic!("{crashed:?}")
    };
    assert_eq!(
        error_type.as_deref(),
        Some("ToolCallOutcomeUnknown"),
        "{crashed:?}"
    );
    assert_eq!(
        ledger.count_key("crash", LedgerEvent::Called, "boom"),
        1,
        "{:?}",
        ledger.read()
    );

    // The dead child is replaced on the next call.
    let result = tool_result(call(&env, "mock", "echo", json!({"key": "after"})).await);
    assert_eq!(result["structuredContent"]["key"], json!("after"));
}

#[tokio::test]
async fn timed_out_attempts_are_cancelled_upstream_before_their_retry() {
    let env = TestEnv::shared("proxy-timeout").await;
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec());
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut upstream = stdio_upstream("mock", &spec_file, &ledger);
    upstream.overrides.insert(
        "slow".into(),
        toml::from_str("start_to_close_timeout = \"2s\"\nheartbeat_timeout = \"1s\"\nretry_policy = { maximum_attempts = 2, initial_interval = \"100ms\" }").unwrap(),
    );
    let _proxy = start_proxy(&env, vec![upstream]);

    let outcome = call(&env, "mock", "slow", json!({"key": "t"})).await;
    assert!(
        matches!(
            outcome,
            OperationOutcome::Failed { .. } | OperationOutcome::TimedOut { .. }
        ),
        "{outcome:?}"
    );
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Called, "t"),
        2,
        "{:?}",
        ledger.read()
    );
    // Each timed-out attempt was cancelled upstream: none kept running beside its retry.
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 2, Duration::from_secs(20))
            .await,
        2,
        "{:?}",
        ledger.read()
    );
    let entries = ledger.read();
    let first_cancel = entries
        .iter()
        .find(|e| e.tool == "slow" && e.event == LedgerEvent::Cancelled)
        .unwrap()
        .at_ms;
    let second_call = entries
        .iter()
        .filter(|e| e.tool == "slow" && e.event == LedgerEvent::Called)
        .nth(1)
        .unwrap()
        .at_ms;
    assert!(
        first_cancel <= second_call,
        "attempt 1 was cancelled before attempt 2 started: {entries:?}"
    );
}

#[tokio::test]
async fn a_retried_start_reattaches_before_reading_discovery() {
    use durable_mcp::{
        nexus::StartContext,
        proxy::{discovery::Discovery, upstream::UpstreamClient},
    };
    let env = TestEnv::shared("proxy-reattach").await;
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec());
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = stdio_upstream("mock", &spec_file, &ledger);
    // The proxy's activity worker runs the calls; the handler is driven directly below, as the
    // server would on a retried start (same request id).
    let _proxy = start_proxy(&env, vec![upstream]);
    // The handler's discovery reads its own copy of the spec, so the test can change what
    // discovery sees without changing what the upstream executes.
    let discovery_spec = temp_path("discovery-spec.json");
    write_spec(&discovery_spec, &spec());
    let client = std::sync::Arc::new(UpstreamClient::new(
        "mock",
        stdio_upstream(
            "mock",
            &discovery_spec,
            &Ledger::new(temp_path("discovery-ledger.jsonl")),
        )
        .transport,
    ));
    let discovery = std::sync::Arc::new(Discovery::new(client.clone()));
    discovery.refresh().await.unwrap();
    let handler = write_once_handler(&env, discovery.clone());
    let request_id = uuid::Uuid::new_v4().to_string();
    let ctx = StartContext::new(&env.endpoint, "mock", "write_once", request_id.clone());
    let input = payload::to_payload(&json!({"key": "w1"})).unwrap();
    let first = handler.start(ctx.clone(), input.clone()).await.unwrap();

    // Between the attempts discovery stops listing the tool.
    let mut changed = spec();
    changed.tools.retain(|t| t.name != "write_once");
    write_spec(&discovery_spec, &changed);
    let tools = discovery.refresh().await.unwrap();
    assert!(!tools.iter().any(|t| t["name"] == "write_once"));

    let second = handler
        .start(ctx, input)
        .await
        .expect("the retried start reattaches, it does not re-read discovery");
    assert_eq!(first, second, "same activity run");
    assert_eq!(
        ledger
            .wait_for_count(
                "write_once",
                LedgerEvent::Completed,
                1,
                Duration::from_secs(20)
            )
            .await,
        1
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "w1"),
        1,
        "the tool ran once: {:?}",
        ledger.read()
    );
    client.close().await;
}

#[tokio::test]
async fn discovery_failure_keeps_the_last_good_list() {
    use durable_mcp::proxy::{discovery::Discovery, upstream::UpstreamClient};
    init_tracing();
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        None,
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let discovery = Discovery::new(std::sync::Arc::new(UpstreamClient::new(
        "web",
        http_upstream("web", &upstream.url).unwrap().transport,
    )));
    let first = discovery.refresh().await.unwrap();
    upstream.shutdown().await;
    let kept = discovery
        .refresh()
        .await
        .expect("the last good list is kept");
    assert_eq!(kept, first);
    assert!(discovery.tool("echo").is_some());

    // An upstream that never answered has no list to keep: a clear error naming it.
    let dead = Discovery::new(std::sync::Arc::new(UpstreamClient::new(
        "nowhere",
        http_upstream("nowhere", "http://127.0.0.1:9/mcp")
            .unwrap()
            .transport,
    )));
    let err = dead.refresh().await.unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[tokio::test]
async fn connection_refused_is_retried_within_the_attempt_even_for_one_attempt_tools() {
    let env = TestEnv::shared("proxy-refused").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let addr = upstream.addr;
    let config = http_upstream("web", &upstream.url).unwrap();
    let _proxy = start_proxy(&env, vec![config]);
    // Discovery succeeded at startup; now the upstream goes away.
    let _ = tool_result(call(&env, "web", "echo", json!({"key": "warm"})).await);
    upstream.shutdown().await;

    let mut start = StartOperation::new(
        format!("refused-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "web",
        "write_once",
        payload::to_payload(&json!({"key": "nd"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(90));
    let (op, _) = env.client.start(start).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The upstream comes back on the same address: the pending call goes through, once.
    let _back = serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        Some(ledger.path().to_owned()),
        addr,
    )
    .await
    .unwrap();
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    let result = tool_result(outcome);
    assert_eq!(result["structuredContent"]["key"], json!("nd"));
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "nd"),
        1,
        "{:?}",
        ledger.read()
    );
}

#[tokio::test]
async fn http_upstream_dying_mid_response_is_an_unknown_outcome_not_a_hang() {
    let env = TestEnv::shared("proxy-http-crash").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config = http_upstream("web", &upstream.url).unwrap();
    let _proxy = start_proxy(&env, vec![config]);
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        call(&env, "web", "crash", json!({"key": "mid"})),
    )
    .await
    .expect("a response cut mid-way ends the call; it must not hang");
    let OperationOutcome::Failed { error_type, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        error_type.as_deref(),
        Some("ToolCallOutcomeUnknown"),
        "{outcome:?}"
    );
    assert_eq!(
        ledger.count_key("crash", LedgerEvent::Called, "mid"),
        1,
        "{:?}",
        ledger.read()
    );
    // The upstream is still up: the next call reconnects and succeeds.
    let result = tool_result(call(&env, "web", "echo", json!({"key": "next"})).await);
    assert_eq!(result["structuredContent"]["key"], json!("next"));
}

/// R-PRX-5/8 at the connection level: each HTTP fault ends in a clear error, none hangs, and
/// failures before the request was sent are classified as never delivered.
#[tokio::test]
async fn http_faults_end_in_clear_errors_with_the_right_phase() {
    use durable_mcp::proxy::{transport_failure::Phase, upstream::UpstreamClient};
    use durable_mcp_conformance::fixtures::faults;
    init_tracing();
    let client_for =
        |url: &str| UpstreamClient::new("faulty", http_upstream("faulty", url).unwrap().transport);
    let within = Duration::from_secs(20);

    let server = faults::http_500().await;
    let err = tokio::time::timeout(
        within,
        client_for(&faults::mcp_url(&server)).list_tools(Duration::from_secs(5)),
    )
    .await
    .expect("HTTP 500 does not hang")
    .unwrap_err();
    assert_eq!(err.phase(), Phase::NotDelivered, "{err}");
    assert!(
        err.to_string().contains("faulty"),
        "the error names the upstream: {err}"
    );

    let reset = faults::reset().await;
    let err = tokio::time::timeout(
        within,
        client_for(&reset.url).list_tools(Duration::from_secs(5)),
    )
    .await
    .expect("a reset does not hang")
    .unwrap_err();
    assert_eq!(err.phase(), Phase::NotDelivered, "{err}");

    let server = faults::unknown_session().await;
    let err = tokio::time::timeout(
        within,
        client_for(&faults::mcp_url(&server)).list_tools(Duration::from_secs(5)),
    )
    .await
    .expect("a lost session does not hang")
    .unwrap_err();
    assert!(!err.to_string().is_empty());

    let server = faults::slow(Duration::from_secs(30)).await;
    let err = tokio::time::timeout(
        within,
        client_for(&faults::mcp_url(&server)).list_tools(Duration::from_secs(2)),
    )
    .await
    .expect("a stalled upstream is timed out")
    .unwrap_err();
    assert_eq!(
        err.phase(),
        Phase::MayHaveRun,
        "a read timeout after sending: {err}"
    );
}

/// The common retry: the tool is still listed, so the handler starts the activity by id with
/// UseExisting; when the first attempt's activity already closed, the start is refused as a
/// duplicate and the handler answers with that closed run instead of running the tool again.
#[tokio::test]
async fn a_retried_start_after_the_call_finished_reattaches_to_the_closed_run() {
    use durable_mcp::nexus::StartContext;
    let env = TestEnv::shared("proxy-reattach-closed").await;
    let driven = DrivenHandler::start(&env, "write_once").await;
    let (handler, ledger) = (&driven.handler, &driven.ledger);
    let ctx = StartContext::new(
        &env.endpoint,
        "mock",
        "write_once",
        uuid::Uuid::new_v4().to_string(),
    );
    let input = payload::to_payload(&json!({"key": "closed-1"})).unwrap();
    let first = handler.start(ctx.clone(), input.clone()).await.unwrap();
    let durable_mcp::nexus::StartOutcome::Async { token } = &first else {
        panic!("{first:?}")
    };
    let described = wait_closed(&env, token).await;
    assert_eq!(
        described.outcome.unwrap().unwrap()["structuredContent"]["key"],
        json!("closed-1")
    );

    let second = handler
        .start(ctx, input)
        .await
        .expect("a retried start of a finished call answers with its run");
    assert_eq!(first, second, "same activity run");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "closed-1"),
        1,
        "the tool ran once: {:?}",
        ledger.read()
    );
    driven.client.close().await;
}

/// An upstream that announces `notifications/tools/list_changed` is re-listed at once: new
/// annotations (and so retry policies) apply without waiting for the next `list_tools`.
#[tokio::test]
async fn discovery_follows_the_upstreams_tool_list_changed_notifications() {
    use durable_mcp::proxy::{discovery::Discovery, upstream::UpstreamClient};
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec());
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = stdio_upstream("mock", &spec_file, &ledger);
    let client = std::sync::Arc::new(UpstreamClient::new("mock", upstream.transport));
    let discovery = std::sync::Arc::new(Discovery::new(client.clone()));
    let shutdown = CancellationToken::new();
    tokio::spawn(discovery.clone().follow_changes(shutdown.clone()));
    discovery.refresh().await.unwrap();
    assert_eq!(
        discovery.tool("echo").unwrap()["annotations"]["destructiveHint"],
        Value::Null
    );

    // The upstream's echo turns destructive; the mock announces it, as a real server would.
    let mut changed = spec();
    for tool in &mut changed.tools {
        if tool.name == "echo" {
            tool.annotations = Some(json!({"destructiveHint": true, "idempotentHint": false}));
        }
    }
    write_spec(&spec_file, &changed);
    eventually(
        Duration::from_secs(20),
        "discovery sees the new annotations",
        || {
            discovery
                .tool("echo")
                .is_some_and(|t| t["annotations"]["destructiveHint"] == json!(true))
        },
    )
    .await;
    shutdown.cancel();
    client.close().await;
}

/// The proxy (in process, over a stdio mock with [`spec`]) and its own start handler for
/// `tool`, driven by hand.
struct DrivenHandler {
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
    client: std::sync::Arc<durable_mcp::proxy::upstream::UpstreamClient>,
    handler: std::sync::Arc<dyn durable_mcp::nexus::OperationHandler>,
    ledger: Ledger,
}

impl DrivenHandler {
    async fn start(env: &TestEnv, tool: &str) -> Self {
        use durable_mcp::proxy::{discovery::Discovery, upstream::UpstreamClient};
        let spec_file = temp_path("spec.json");
        write_spec(&spec_file, &spec());
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let upstream = stdio_upstream("mock", &spec_file, &ledger);
        let proxy = start_proxy(env, vec![upstream.clone()]);
        let client = std::sync::Arc::new(UpstreamClient::new("mock", upstream.transport));
        let discovery = std::sync::Arc::new(Discovery::new(client.clone()));
        discovery.refresh().await.unwrap();
        Self {
            _proxy: proxy,
            handler: tool_handler(env, discovery, tool),
            client,
            ledger,
        }
    }
}

/// Describes the call's activity (the async answer's token names it) until it has closed.
async fn wait_closed(
    env: &TestEnv,
    token: &str,
) -> durable_mcp::temporal::activity::ActivityDescription {
    let token: durable_mcp::contract::call::CallToken = serde_json::from_str(token).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let described = durable_mcp::temporal::activity::describe_activity(
            &env.connection,
            &env.namespace,
            &token.activity_id,
            &token.run_id,
        )
        .await
        .unwrap()
        .unwrap();
        if !described.is_running() {
            return described;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never finished"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A call that ends before its first heartbeat tick records no heartbeat: starting a try must
/// not mark the progress watch changed (that cost one heartbeat RPC and one server write per
/// call, however short the call).
#[tokio::test]
async fn a_fast_call_records_no_heartbeat() {
    use durable_mcp::nexus::StartContext;
    let env = TestEnv::shared("proxy-no-heartbeat").await;
    let driven = DrivenHandler::start(&env, "echo").await;
    for i in 0..3 {
        let key = format!("fast-{i}");
        let ctx = StartContext::new(
            &env.endpoint,
            "mock",
            "echo",
            uuid::Uuid::new_v4().to_string(),
        );
        let input = payload::to_payload(&json!({"key": key})).unwrap();
        let started = driven.handler.start(ctx, input).await.unwrap();
        let durable_mcp::nexus::StartOutcome::Async { token } = &started else {
            panic!("{started:?}")
        };
        let described = wait_closed(&env, token).await;
        assert_eq!(
            described.outcome.clone().unwrap().unwrap()["structuredContent"]["key"],
            json!(key)
        );
        assert_eq!(
            described.heartbeat, None,
            "a call that ends within a second sends no heartbeat: {described:?}"
        );
    }
    driven.client.close().await;
}

/// R-PRX-12, the review's reproduction: a first upstream that never answers `initialize`
/// (`sleep 300`) and a healthy second one. The proxy polls at once, the healthy upstream is
/// served, and the silent one's listing fails clearly within the discovery bound.
#[tokio::test]
async fn a_silent_upstream_does_not_hold_back_the_proxy_or_the_others() {
    let env = TestEnv::shared("proxy-silent").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let silent = UpstreamConfig {
        service: "silent".into(),
        transport: durable_mcp::proxy::TransportConfig::stdio("sleep", vec!["300".into()]),
        activity_options: Default::default(),
        overrides: Default::default(),
    };
    let _proxy = start_proxy(
        &env,
        vec![silent, mock_stdio_upstream("healthy", &ledger).unwrap()],
    );
    let mut listing = StartOperation::new(
        format!("silent-list-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "silent",
        "list_tools",
        payload::to_payload(&json!(null)).unwrap(),
    );
    listing.schedule_to_close = Some(Duration::from_secs(30));
    let (listing, _) = env.client.start(listing).await.unwrap();
    // While the silent upstream's listing waits, the healthy one answers.
    let echoed = tool_result(call(&env, "healthy", "echo", json!({"key": "h1"})).await);
    assert!(echoed.to_string().contains("h1"), "{echoed}");
    let failure = loop {
        let described = env.client.describe(&listing).await.unwrap();
        if let Some(failure) = described.last_attempt_failure {
            break failure;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        failure.contains("\"silent\"") && failure.contains("no MCP connection within"),
        "{failure}"
    );
    env.client
        .terminate(&listing, "the test is done")
        .await
        .unwrap();
}

/// R-PRX-13: a start Temporal refuses for good (an activity id over its length limit, input
/// over its blob limit) fails at once with a non-retryable error that says why, instead of
/// being retried until the tool's deadline.
#[tokio::test]
async fn permanent_start_failures_fail_at_once_and_say_why() {
    let env = TestEnv::shared("proxy-permanent").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let _ = tool_result(call(&env, "mock", "echo", json!({"key": "warm"})).await);
    let long_tool = "t".repeat(990);
    // Just under the limit as the caller's input, over it once the proxy wraps it.
    let big = json!({"key": "big", "pad": "x".repeat(2 * 1024 * 1024 - 64)});
    for (tool, args, why) in [
        (long_tool.as_str(), json!({"key": "long"}), "activity id"),
        ("echo", big, "2 MiB"),
    ] {
        let mut start = StartOperation::new(
            format!("permanent-{}", uuid::Uuid::new_v4()),
            &env.endpoint,
            "mock",
            tool,
            payload::to_payload(&args).unwrap(),
        );
        start.schedule_to_close = Some(Duration::from_secs(60));
        let (_, outcome) = start_and_wait(&env, start).await;
        let OperationOutcome::Failed {
            message,
            handler_error,
            ..
        } = &outcome
        else {
            panic!("{why}: expected a failure, got {outcome:?}")
        };
        assert_eq!(
            *handler_error,
            Some(durable_mcp::nexus::HandlerErrorKind::BadRequest),
            "{why}: {message}"
        );
        assert!(
            message.contains(why) && message.contains("will not succeed"),
            "{why}: {message}"
        );
    }
}

/// R-PRX-14: a gateway that answers 503 after forwarding the call (the tool ran). By default a
/// tool that must run at most once gets `ToolCallOutcomeUnknown` and is not sent again; an
/// upstream configured with `unavailable_means_not_run` (no such gateway in front) has a 503
/// retried within the attempt, and its tool still runs once.
#[tokio::test]
async fn a_503_after_forwarding_is_an_unknown_outcome_unless_the_upstream_says_503_means_not_run() {
    use durable_mcp::proxy::TransportConfig;
    use durable_mcp_conformance::fixtures::faults::{self, HttpFault};
    let env = TestEnv::shared("proxy-503").await;
    let after = Ledger::new(temp_path("ledger.jsonl"));
    let gateway = faults::faulty_upstream(
        &UpstreamSpec::standard(),
        HttpFault::StatusAfterRun {
            code: 503,
            times: 1,
        },
        after.clone(),
    )
    .await;
    let before = Ledger::new(temp_path("ledger.jsonl"));
    let honest = faults::faulty_upstream(
        &UpstreamSpec::standard(),
        HttpFault::Status {
            code: 503,
            times: 1,
        },
        before.clone(),
    )
    .await;
    let mut trusted = http_upstream("trusted", &faults::mcp_url(&honest)).unwrap();
    let TransportConfig::Http {
        unavailable_means_not_run,
        ..
    } = &mut trusted.transport
    else {
        unreachable!()
    };
    *unavailable_means_not_run = true;
    let _proxy = start_proxy(
        &env,
        vec![
            http_upstream("gateway", &faults::mcp_url(&gateway)).unwrap(),
            trusted,
        ],
    );

    let outcome = call(&env, "gateway", "write_once", json!({"key": "g1"})).await;
    let OperationOutcome::Failed { error_type, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        error_type.as_deref(),
        Some("ToolCallOutcomeUnknown"),
        "{outcome:?}"
    );
    assert_eq!(
        after.count_key("write_once", LedgerEvent::Called, "g1"),
        1,
        "a 503 after the tool ran must not run it again: {:?}",
        after.read()
    );

    let result = tool_result(call(&env, "trusted", "write_once", json!({"key": "t1"})).await);
    assert_eq!(result["structuredContent"]["key"], json!("t1"));
    assert_eq!(
        before.count_key("write_once", LedgerEvent::Called, "t1"),
        1,
        "{:?}",
        before.read()
    );
}

/// R-PRX-10: an upstream log line reaches only the call the upstream tied it to. Caller A's
/// tool answers, then writes two late lines (one tied to A's finished request, one tied to
/// none) while caller B's call is alone in flight on the shared connection: B gets neither,
/// live or in its result. A's own tied lines still reach A.
#[tokio::test]
async fn a_late_upstream_log_line_never_reaches_another_call() {
    use durable_mcp::contract::call::CallNotification;
    use durable_mcp::proxy::upstream::UpstreamClient;
    let mut spec = spec();
    spec.tools.push(ToolSpec::read_only(
        "trailing",
        "answers, then logs twice 300 ms later",
        Behavior::LogAfter { late_ms: 300 },
    ));
    spec.tools.push(ToolSpec::read_only(
        "chatty",
        "logs once, tied to its call, then answers",
        Behavior::Log {
            levels: vec!["info".into()],
            ms: 0,
            every_ms: 0,
            untied: false,
        },
    ));
    let spec_file = temp_path("spec.json");
    write_spec(&spec_file, &spec);
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let client = UpstreamClient::new(
        "mock",
        stdio_upstream("mock", &spec_file, &ledger).transport,
    );
    let logs_of = |notes: &[CallNotification]| -> Vec<String> {
        notes
            .iter()
            .filter_map(|n| match n {
                CallNotification::Log(log) => Some(log.data.as_str().unwrap_or_default().into()),
                CallNotification::Progress(_) => None,
            })
            .collect()
    };
    let mut a_notes = Vec::new();
    let args = |key: &str| json!({"key": key}).as_object().unwrap().clone();
    client
        .call_tool_reporting("chatty", args("a1"), |n| a_notes.push(n))
        .await
        .unwrap();
    assert_eq!(
        logs_of(&a_notes),
        ["info from chatty"],
        "a call's own tied line"
    );
    client
        .call_tool_reporting("trailing", args("a2"), |n| a_notes.push(n))
        .await
        .unwrap();
    let mut b_notes = Vec::new();
    let mut b_args = args("b");
    b_args.insert("sleep_ms".into(), json!(1500));
    client
        .call_tool_reporting("slow", b_args, |n| b_notes.push(n))
        .await
        .unwrap();
    assert_eq!(
        logs_of(&b_notes),
        Vec::<String>::new(),
        "caller A's late lines reached B"
    );
    client.close().await;
}

/// R-PRX-38: when the proxy first discovers an upstream's tools it names those whose retry
/// policy rests on hints they do not give: a warning for the ones it retries (saying what to
/// set), an info line for the ones `missing_hints = "mcp_defaults"` gives one attempt. Tools
/// that say what they are are named in neither.
#[tokio::test]
async fn the_proxy_names_the_tools_that_annotate_nothing_when_it_starts() {
    let env = TestEnv::shared("proxy-unannotated-log").await;
    let ledger = Ledger::new(crate::support::temp_path("ledger.jsonl"));
    let mut spec = UpstreamSpec::standard();
    for name in ["plain", "strict"] {
        let mut tool = spec
            .tools
            .iter()
            .find(|t| t.name == "echo")
            .unwrap()
            .clone();
        tool.name = name.into();
        tool.annotations = None;
        spec.tools.push(tool);
    }
    let spec_path = crate::support::temp_path("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let config = format!(
        "{}{}overrides = {{ strict = {{ missing_hints = \"mcp_defaults\" }} }}\n",
        crate::secrets::proxy_toml_head(&env),
        crate::secrets::local_mock_upstream(ledger.path(), &spec_path),
    );
    let (mut proxy, log) = crate::secrets::spawn_proxy(&config, &[]);
    crate::secrets::announced(&log, "tools without annotations: ", &mut proxy).await;
    // Both lines come from one discovery; give the second a moment to be written.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.kill().await.unwrap();
    let text = crate::secrets::without_colours(&std::fs::read_to_string(&log).unwrap());
    let named: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tools without annotations: "))
        .collect();
    assert_eq!(named.len(), 2, "{named:#?}");
    let warned = named
        .iter()
        .find(|l| l.contains("WARN"))
        .expect("a warning");
    assert!(warned.contains("annotations: plain: "), "{warned}");
    assert!(
        warned.contains("missing_hints = \"mcp_defaults\""),
        "{warned}"
    );
    let noted = named
        .iter()
        .find(|l| l.contains("INFO"))
        .expect("an info line");
    assert!(
        noted.contains("annotations: strict: ") && noted.contains("one attempt"),
        "{noted}"
    );
    for line in &named {
        assert!(!line.contains("echo"), "{line}");
        assert!(
            line.contains("service=local") || line.contains("service=\"local\""),
            "{line}"
        );
    }
}
