//! R-PRX: the outbound proxy in front of real MCP upstreams (the rmcp mock over stdio and
//! HTTP), on the real dev server: discovery, fidelity, retry inference observed through the
//! upstream's invocation ledger, cancellation reaching the upstream, unknown tools.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use durable_mcp::{
    nexus::{OperationOutcome, StartOperation},
    outbound::{ProxyOptions, TransportConfig, UpstreamConfig, run_proxy, service::TIMEOUT_META_KEY},
    payload,
};
use durable_mcp_conformance::fixtures::{
    self, Behavior, FailKind, Ledger, LedgerEvent, SpecSource, ToolSpec, UpstreamSpec, serve_http,
};
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
        behavior: Behavior::FailTimes { times: 1, error: FailKind::JsonRpc { code: -32603, message: "transient".into() } },
    };
    spec.tools.push(flaky("ro_flaky", json!({"readOnlyHint": true})));
    spec.tools.push(flaky("destructive_flaky", json!({"destructiveHint": true, "idempotentHint": false})));
    spec
}

/// Runs the proxy on a thread of its own (its future is not `Send`); stops it on drop.
struct ProxyGuard {
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProxyGuard {
    fn start(env: &TestEnv, upstreams: Vec<UpstreamConfig>) -> Self {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let (address, options) = (
            env.address.clone(),
            ProxyOptions { namespace: env.namespace.clone(), task_queue: env.task_queue.clone(), max_concurrent_calls: 50 },
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let connection = connect(&address).await;
                run_proxy(connection, options, upstreams, token).await.expect("proxy ran without error");
            });
        });
        Self { shutdown, thread: Some(thread) }
    }
}

impl Drop for ProxyGuard {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("durable-mcp-proxy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A stdio upstream: the mock binary as a child of the proxy, serving `spec` from a file.
fn stdio_upstream(service: &str, spec_file: &PathBuf, ledger: &Ledger) -> UpstreamConfig {
    UpstreamConfig {
        service: service.into(),
        transport: TransportConfig::Stdio {
            command: fixtures::mock_upstream_bin().unwrap().to_string_lossy().into_owned(),
            args: vec![
                "--spec".into(),
                spec_file.to_string_lossy().into_owned(),
                "--ledger".into(),
                ledger.path().to_string_lossy().into_owned(),
            ],
            env: BTreeMap::new(),
            cwd: None,
        },
        activity_options: Default::default(),
        overrides: BTreeMap::new(),
    }
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
    env.client.wait(&op, &CancellationToken::new()).await.unwrap()
}

fn tool_result(outcome: OperationOutcome) -> Value {
    let OperationOutcome::Succeeded(p) = outcome else { panic!("expected a result, got {outcome:?}") };
    assert_eq!(payload::mcp_type(&p), Some(payload::CALL_TOOL_RESULT), "whole CallToolResults are marked");
    payload::to_json(&p).unwrap()
}

#[tokio::test]
async fn proxy_fronts_a_stdio_upstream() {
    let env = TestEnv::shared("proxy-stdio").await;
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec()).unwrap()).unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = ProxyGuard::start(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    // list_tools: every tool, annotations verbatim, the per-call timeout in _meta.
    let listed = call(&env, "mock", "list_tools", json!({})).await;
    let OperationOutcome::Succeeded(p) = listed else { panic!("{listed:?}") };
    assert_eq!(payload::mcp_type(&p), Some(payload::TOOL_LIST));
    let tools = payload::to_json(&p).unwrap();
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in ["echo", "flaky", "refuse", "slow", "everything", "write_once", "ro_flaky", "destructive_flaky"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let ro = tools.as_array().unwrap().iter().find(|t| t["name"] == "ro_flaky").unwrap();
    assert_eq!(ro["annotations"]["readOnlyHint"], json!(true));
    assert!(ro["_meta"][TIMEOUT_META_KEY].as_u64().unwrap() > 0, "{ro}");

    // A call returns the upstream's whole result.
    let result = tool_result(call(&env, "mock", "echo", json!({"key": "k1", "text": "hi"})).await);
    assert_eq!(result["structuredContent"], json!({"key": "k1", "text": "hi"}));
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
    assert_eq!(ledger.count_key("ro_flaky", LedgerEvent::Called, "ro"), 2, "{:?}", ledger.read());
    let once = call(&env, "mock", "destructive_flaky", json!({"key": "once"})).await;
    assert!(matches!(once, OperationOutcome::Failed { .. }), "{once:?}");
    assert_eq!(ledger.count_key("destructive_flaky", LedgerEvent::Called, "once"), 1, "{:?}", ledger.read());

    // Unknown tools fail with a stable error type before any activity starts.
    let unknown = call(&env, "mock", "no_such_tool", json!({})).await;
    let OperationOutcome::Failed { error_type, .. } = &unknown else { panic!("{unknown:?}") };
    assert_eq!(error_type.as_deref(), Some("UnknownTool"));
}

#[tokio::test]
async fn proxy_cancel_reaches_the_upstream() {
    let env = TestEnv::shared("proxy-cancel").await;
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec()).unwrap()).unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = ProxyGuard::start(&env, vec![stdio_upstream("mock", &spec_file, &ledger)]);

    let mut start = StartOperation::new(
        format!("slow-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "mock",
        "slow",
        payload::to_payload(&json!({"key": "c1"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    let (op, _) = env.client.start(start).await.unwrap();
    assert_eq!(ledger.wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30)).await, 1);
    env.client.cancel(&op, "test").await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), env.client.wait(&op, &CancellationToken::new()))
        .await
        .expect("the cancel lands within 30 s")
        .unwrap();
    assert!(matches!(outcome, OperationOutcome::Canceled { .. }), "{outcome:?}");
    assert_eq!(
        ledger.wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(10)).await,
        1,
        "the upstream saw notifications/cancelled: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count("slow", LedgerEvent::Completed), 0);
}

#[tokio::test]
async fn proxy_fronts_an_http_upstream_with_identical_results() {
    let env = TestEnv::shared("proxy-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_http(SpecSource::Inline(spec()), Some(ledger.path().to_owned()), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = UpstreamConfig {
        service: "web".into(),
        transport: TransportConfig::Http { url: upstream.url.parse().unwrap(), headers: BTreeMap::new() },
        activity_options: Default::default(),
        overrides: BTreeMap::new(),
    };
    let _proxy = ProxyGuard::start(&env, vec![config]);
    let result = tool_result(call(&env, "web", "everything", json!({})).await);
    assert_eq!(result, fixtures::all_content_json());
    let result = tool_result(call(&env, "web", "echo", json!({"key": "h1"})).await);
    assert_eq!(result["structuredContent"], json!({"key": "h1"}));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "h1"), 1);
    drop(_proxy);
    upstream.shutdown().await;
}
