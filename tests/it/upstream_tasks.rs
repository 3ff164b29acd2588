//! R-PRX-28: an upstream tool listed with `execution.taskSupport: "required"` is called asking
//! for a task, and the proxy's call Activity follows the upstream's task (`tasks/get`) to its
//! result; a cancel becomes `tasks/cancel` upstream. Through connector -> Temporal -> proxy ->
//! the mock upstream's `task` behavior, on the real dev server.

use std::time::Duration;

use durable_mcp::{
    connector::{
        server::{Connector, ConnectorOptions},
        task_ref::{CallerScope, SigningKey},
    },
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
};
use durable_mcp_conformance::fixtures::{
    Behavior, Ledger, LedgerEvent, SpecSource, TaskError, ToolSpec, UpstreamSpec,
    serve_mock_upstream_http,
};
use serde_json::{Value, json};

use crate::support::*;

/// The task tool: the upstream requires a task, which takes `ms`.
const TOOL: &str = "research";

/// A task tool whose task ends `failed` with a JSON-RPC error.
const FAILING: &str = "research_fails";

fn spec(ms: u64) -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    let error = TaskError {
        code: -32602,
        message: "no such topic".into(),
    };
    for (name, error) in [(TOOL, None), (FAILING, Some(error))] {
        spec.tools.push(task_tool(name, ms, error));
    }
    spec
}

fn task_tool(name: &str, ms: u64, error: Option<TaskError>) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        title: None,
        description: Some("answers with a task of its own".into()),
        annotations: Some(json!({"readOnlyHint": true})),
        input_schema: None,
        output_schema: None,
        meta: None,
        execution: Some(json!({"taskSupport": "required"})),
        icons: None,
        behavior: Behavior::Task {
            ms,
            error,
            ask: None,
            counted_ids: false,
        },
    }
}

fn start(env: &TestEnv, service: &str, key: &str) -> StartOperation {
    start_tool(env, service, TOOL, key)
}

fn start_tool(env: &TestEnv, service: &str, tool: &str, key: &str) -> StartOperation {
    let mut start = StartOperation::new(
        format!("{tool}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        service,
        tool,
        payload::to_payload(&json!({"key": key})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    start
}

fn structured(outcome: &OperationOutcome) -> Value {
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("expected a result, got {outcome:?}")
    };
    payload::to_json(p).unwrap()["structuredContent"].clone()
}

fn connector(env: &TestEnv) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = SigningKey::generate();
    options.caller_scope = CallerScope::Process("p".into());
    Connector::new(env.client.clone(), options)
}

#[tokio::test]
async fn an_upstream_task_is_followed_to_its_result_for_direct_and_task_callers() {
    let env = TestEnv::shared("upstream-tasks").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_spec("mock", &spec(1200), &ledger)],
    );

    // A direct (sync) call: the activity follows the upstream's task and answers its result.
    let (_, outcome) = start_and_wait(&env, start(&env, "mock", "direct")).await;
    assert_eq!(structured(&outcome), json!({"key": "direct"}));
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Called, "direct"), 1);
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Completed, "direct"), 1);

    // A task that fails ends the call with its JSON-RPC error, as a call answered with it would
    // (R-PRX-4): -32602 is never retried, and the error reaches the caller unchanged.
    let (_, failed) = start_and_wait(&env, start_tool(&env, "mock", FAILING, "f")).await;
    let failed = durable_mcp::contract::outcome::Outcome::from_operation(failed);
    let durable_mcp::contract::outcome::Outcome::JsonRpcError(error) = &failed else {
        panic!("{failed:?}")
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32602, "no such topic")
    );
    assert_eq!(ledger.count_key(FAILING, LedgerEvent::Called, "f"), 1);

    // A task caller through the connector: a task at once (R-CON-39), whose status shows the
    // upstream task's status messages as progress (R-PRX-9), then completes. Long enough for
    // a heartbeat to carry a message past the SDK's heartbeat throttle.
    let tasks = task_client_for(connector(&env)).await.unwrap();
    let created = tasks
        .peer()
        .call_tool_once(tool_call(TOOL, json!({"key": "task", "sleep_ms": 5000})))
        .await
        .unwrap();
    let mut messages = Vec::new();
    let done = poll_task_watching(&tasks, &task_id_of(created), |working| {
        if let Some(m) = working["statusMessage"].as_str() {
            messages.push(m.to_owned());
        }
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["key"], "task", "{done}");
    assert!(
        messages.iter().any(|m| m.starts_with("step ")),
        "the upstream task's status messages come through: {messages:?}"
    );
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Called, "task"), 1);
    tasks.cancel().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_call_cancels_the_upstreams_task() {
    let env = TestEnv::shared("upstream-tasks-cancel").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_spec(
            "mock",
            &spec(30_000),
            &ledger,
        )],
    );
    let (op, _) = env.client.start(start(&env, "mock", "c")).await.unwrap();
    assert_eq!(
        ledger
            .wait_for_count(TOOL, LedgerEvent::Called, 1, Duration::from_secs(30))
            .await,
        1
    );
    // Let the activity take the task before the cancel.
    tokio::time::sleep(Duration::from_millis(800)).await;
    cancel_and_expect_canceled(&env, &op, "test").await;
    assert_eq!(
        ledger
            .wait_for_count(TOOL, LedgerEvent::Cancelled, 1, Duration::from_secs(10))
            .await,
        1,
        "tasks/cancel stopped the upstream's task: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count(TOOL, LedgerEvent::Completed), 0);
}

#[tokio::test]
async fn a_retried_attempt_reattaches_to_the_upstream_task_instead_of_calling_again() {
    let env = TestEnv::shared("upstream-tasks-reattach").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(spec(4000)),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let mut config = http_upstream("web", &upstream.url).unwrap();
    // The first attempt times out while the upstream's task runs: the retry must follow the
    // same task, not call the tool again.
    config.overrides.insert(
        TOOL.into(),
        durable_mcp::proxy::options::ActivityOptions {
            start_to_close_timeout: Some(Duration::from_secs(2)),
            ..Default::default()
        },
    );
    let _proxy = start_proxy(&env, vec![config]);
    let (_, outcome) = start_and_wait(&env, start(&env, "web", "r")).await;
    assert_eq!(structured(&outcome), json!({"key": "r"}));
    assert_eq!(
        ledger.count_key(TOOL, LedgerEvent::Called, "r"),
        1,
        "the tool body started once: {:?}",
        ledger.read()
    );
    drop(_proxy);
    upstream.shutdown().await;
}
