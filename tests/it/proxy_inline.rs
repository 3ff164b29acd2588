//! R-PRX-30: the inline path. Short, re-runnable calls answered by the proxy's Nexus handler
//! itself, on the real dev server: no Activity runs, the result is the Activity path's, errors
//! keep their types, a destructive tool stays an Activity unless its own override says inline,
//! and an inline call past its attempt timeout is cancelled upstream and retried a bounded
//! number of times.

use std::time::Duration;

use durable_mcp::{
    contract::{call::call_activity_id, jsonrpc_error::JSONRPC_ERROR, payload},
    nexus::{OperationDescription, OperationOutcome, StartOperation},
    proxy::UpstreamConfig,
};
use durable_mcp_conformance::fixtures::{
    Behavior, FailKind, Ledger, LedgerEvent, ToolSpec, UpstreamSpec,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// The standard mock tools plus `ro_flaky` (read-only, one retryable JSON-RPC error, then an
/// echo) and `ro_refused` (read-only, always JSON-RPC error -32602).
fn spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    let failing = |name: &str, times: u32, code: i32| {
        let error = FailKind::JsonRpc {
            code,
            message: "refused".into(),
        };
        let behavior = Behavior::FailTimes { times, error };
        ToolSpec::read_only(name, "fails with a JSON-RPC error, then echoes", behavior)
    };
    let mut write_slow =
        ToolSpec::read_only("write_slow", "sleeps", Behavior::Sleep { ms: 60_000 });
    write_slow.annotations = Some(json!({"destructiveHint": true}));
    spec.tools.push(write_slow);
    let message = "Look it up?".to_owned();
    spec.tools.push(ToolSpec::read_only(
        "ro_ask",
        "asks",
        Behavior::AskInput { message },
    ));
    spec.tools.push(failing("ro_flaky", 1, -32603));
    spec.tools.push(failing("ro_refused", 1000, -32602));
    spec
}

/// The mock as `service`, with call options `options` (TOML of an `[upstream]` table's
/// `activity_options`) and per-tool `overrides` (TOML tables by tool name).
fn upstream(service: &str, ledger: &Ledger, options: &str, overrides: &str) -> UpstreamConfig {
    let mut config = mock_stdio_upstream_with_spec(service, &spec(), ledger);
    config.activity_options = toml::from_str(options).unwrap();
    config.overrides = toml::from_str(overrides).unwrap();
    config
}

/// Starts `tool` of `service` and waits for its end; answers the start (to repeat it) too.
async fn call(
    env: &TestEnv,
    service: &str,
    tool: &str,
    args: Value,
) -> (StartOperation, OperationOutcome) {
    let mut start = StartOperation::new(
        format!("inline-{tool}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        service,
        tool,
        payload::to_payload(&args).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let outcome = start_and_wait(env, &start).await;
    (start, outcome)
}

async fn start_and_wait(env: &TestEnv, start: &StartOperation) -> OperationOutcome {
    let (op, _) = env.client.start(start.clone()).await.unwrap();
    env.client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap()
}

/// The finished operation as the server describes it.
async fn described(env: &TestEnv, start: &StartOperation) -> OperationDescription {
    let (op, started) = env.client.start(start.clone()).await.unwrap();
    assert!(!started, "the operation exists");
    env.client.describe(&op).await.unwrap()
}

/// Whether the call's Activity (R-PRX-3's id, from the request id the handler was given)
/// exists.
async fn ran_an_activity(env: &TestEnv, service: &str, tool: &str, start: &StartOperation) -> bool {
    let request_id = described(env, start).await.handler_request_id;
    assert!(!request_id.is_empty());
    let id = call_activity_id(service, tool, &request_id);
    durable_mcp::temporal::activity::find_activity(&env.connection, &env.namespace, &id)
        .await
        .unwrap()
        .is_some()
}

fn succeeded(outcome: OperationOutcome) -> temporalio_protos::temporal::api::common::v1::Payload {
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("expected an answer, got {outcome:?}")
    };
    p
}

/// The call failed with this stable type.
fn assert_failed_with(outcome: &OperationOutcome, error_type: &str) {
    let OperationOutcome::Failed { error_type: t, .. } = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(t.as_deref(), Some(error_type), "{outcome:?}");
}

const AUTO: &str = "execution = \"auto\"\nstart_to_close_timeout = \"3s\"";

#[tokio::test]
async fn a_short_read_only_call_runs_inline_with_the_activity_paths_result() {
    let env = TestEnv::shared("proxy-inline").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstreams = vec![
        upstream("inl", &ledger, AUTO, ""),
        upstream("act", &ledger, "start_to_close_timeout = \"3s\"", ""),
    ];
    let _proxy = start_proxy(&env, upstreams);
    for (tool, args) in [("echo", json!({"key": "i1"})), ("everything", json!({}))] {
        let (inline_start, inline) = call(&env, "inl", tool, args.clone()).await;
        let (activity_start, activity) = call(&env, "act", tool, args).await;
        assert!(!ran_an_activity(&env, "inl", tool, &inline_start).await);
        assert!(ran_an_activity(&env, "act", tool, &activity_start).await);
        let (inline, activity) = (succeeded(inline), succeeded(activity));
        assert_eq!(payload::mcp_type(&inline), Some(payload::CALL_TOOL_RESULT));
        assert_eq!(
            inline, activity,
            "{tool}: the same payload, metadata and bytes"
        );

        // A repeated start of the finished operation is answered with its recorded result.
        let again = succeeded(start_and_wait(&env, &inline_start).await);
        assert_eq!(again, inline);
    }
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Called, "i1"),
        2,
        "once per upstream: {:?}",
        ledger.read()
    );
}

#[tokio::test]
async fn a_destructive_tool_stays_an_activity_unless_its_own_override_says_inline() {
    let env = TestEnv::shared("proxy-inline-destructive").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let inline_all = "execution = \"inline\"\nstart_to_close_timeout = \"3s\"";
    let upstreams = vec![
        upstream("every", &ledger, inline_all, ""),
        upstream(
            "one",
            &ledger,
            AUTO,
            "write_once = { execution = \"inline\" }",
        ),
    ];
    let _proxy = start_proxy(&env, upstreams);
    let (start, outcome) = call(&env, "every", "write_once", json!({"key": "d1"})).await;
    succeeded(outcome);
    assert!(ran_an_activity(&env, "every", "write_once", &start).await);
    let (start, outcome) = call(&env, "one", "write_once", json!({"key": "d2"})).await;
    succeeded(outcome);
    assert!(!ran_an_activity(&env, "one", "write_once", &start).await);
    let (start, outcome) = call(&env, "every", "echo", json!({"key": "d3"})).await;
    succeeded(outcome);
    assert!(!ran_an_activity(&env, "every", "echo", &start).await);
}

#[tokio::test]
async fn inline_errors_keep_their_types_and_retryable_ones_are_retried_by_the_server() {
    let env = TestEnv::shared("proxy-inline-errors").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger, AUTO, "")]);

    // -32603 is retried (R-PRX-4): the handler fails the start retryably, the server re-sends
    // it, and the second try answers.
    let (start, outcome) = call(&env, "mock", "ro_flaky", json!({"key": "f1"})).await;
    succeeded(outcome);
    assert!(!ran_an_activity(&env, "mock", "ro_flaky", &start).await);
    assert_eq!(ledger.count_key("ro_flaky", LedgerEvent::Called, "f1"), 2);

    // -32602 is not: the call's end is the upstream's error object, as the Activity's.
    let (_, outcome) = call(&env, "mock", "ro_refused", json!({"key": "f2"})).await;
    let p = succeeded(outcome);
    assert_eq!(payload::mcp_type(&p), Some(JSONRPC_ERROR));
    assert_eq!(payload::to_json(&p).unwrap()["code"], json!(-32602));
}

#[tokio::test]
async fn an_inline_call_past_its_attempt_timeout_is_cancelled_upstream_and_retried_a_bounded_number_of_times()
 {
    let env = TestEnv::shared("proxy-inline-overrun").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let slow = "slow = { execution = \"inline\", start_to_close_timeout = \"1s\", \
                retry_policy = { maximum_attempts = 2 } }";
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger, "", slow)]);
    let began = std::time::Instant::now();
    let (start, outcome) = call(&env, "mock", "slow", json!({"key": "s1"})).await;
    assert_failed_with(&outcome, "UpstreamTimeout");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    assert!(!ran_an_activity(&env, "mock", "slow", &start).await);
    assert_eq!(
        described(&env, &start).await.attempt,
        2,
        "the server started it twice"
    );
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Called, "s1"),
        2,
        "{:?}",
        ledger.read()
    );
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 2, Duration::from_secs(10))
            .await,
        2,
        "each attempt was cancelled upstream: {:?}",
        ledger.read()
    );
}

#[tokio::test]
async fn an_inline_call_that_would_outlive_the_request_deadline_is_cut_before_it() {
    let env = TestEnv::shared("proxy-inline-deadline").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let overrides = "slow = { execution = \"inline\", retry_policy = { maximum_attempts = 2 } }\n\
                     write_slow = { execution = \"inline\", start_to_close_timeout = \"1s\" }";
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger, "", overrides)]);

    // The one-minute attempt timeout does not fit: each start is cut 2 s before its deadline,
    // and the second is the last.
    let (start, outcome) = call(&env, "mock", "slow", json!({"key": "l1"})).await;
    assert_failed_with(&outcome, "UpstreamTimeout");
    assert_eq!(described(&env, &start).await.attempt, 2);
    assert_eq!(ledger.count_key("slow", LedgerEvent::Called, "l1"), 2);

    // A tool that must not run twice, forced inline, may have run: its outcome is unknown.
    let (start, outcome) = call(&env, "mock", "write_slow", json!({"key": "l2"})).await;
    assert_failed_with(&outcome, "ToolCallOutcomeUnknown");
    assert_eq!(described(&env, &start).await.attempt, 1);
    assert_eq!(ledger.count_key("write_slow", LedgerEvent::Called, "l2"), 1);
    assert_eq!(
        ledger
            .wait_for_count(
                "write_slow",
                LedgerEvent::Cancelled,
                1,
                Duration::from_secs(10)
            )
            .await,
        1,
        "{:?}",
        ledger.read()
    );
}

#[tokio::test]
async fn an_inline_call_that_asks_for_input_ends_its_round_and_the_next_round_runs_inline_too() {
    use durable_mcp::contract::input::{INPUT_REQUIRED, INPUT_ROUND, InputRequired, next_round_id};
    let env = TestEnv::shared("proxy-inline-input").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger, AUTO, "")]);
    let (first, outcome) = call(&env, "mock", "ro_ask", json!({"key": "a1"})).await;
    let asked = succeeded(outcome);
    assert_eq!(payload::mcp_type(&asked), Some(INPUT_REQUIRED));
    assert!(!ran_an_activity(&env, "mock", "ro_ask", &first).await);

    let asked: InputRequired = serde_json::from_value(payload::to_json(&asked).unwrap()).unwrap();
    let answers = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let round = asked.answered(answers.as_object().unwrap().clone());
    let mut next = StartOperation::new(
        next_round_id(&first.operation_id).unwrap(),
        &env.endpoint,
        "mock",
        "ro_ask",
        payload::to_marked_payload(&round, INPUT_ROUND).unwrap(),
    );
    next.schedule_to_close = Some(Duration::from_secs(60));
    let answered = succeeded(start_and_wait(&env, &next).await);
    assert_eq!(
        payload::mcp_type(&answered),
        Some(payload::CALL_TOOL_RESULT)
    );
    let answered = payload::to_json(&answered).unwrap();
    assert_eq!(answered["structuredContent"]["inputResponses"], answers);
    assert!(!ran_an_activity(&env, "mock", "ro_ask", &next).await);
}

/// R-PRX-30, R-CON-26: a tool whose calls go inline is listed `io.durable-mcp/inline`, and the
/// connector passes the mark on to its own callers; a call of it that carries a progress token
/// and runs past the first look-up (2 s) costs no `DescribeNexusOperationExecution`, where the
/// connector used to describe the operation at 2 s and find no token (a sync operation has
/// none). The server's own counters say so.
#[tokio::test]
async fn a_call_of_a_tool_listed_inline_costs_no_progress_look_up() {
    use durable_mcp::contract::listing::INLINE_META_KEY;
    use durable_mcp_conformance::load::metrics;
    use rmcp::model::{CallToolRequest, ClientRequest, ServerResult};
    use rmcp::service::PeerRequestOptions;
    init_tracing();
    let (mut server, address) = dedicated_server_with_metrics().await;
    let env = TestEnv::on(&server, "inline-lookups").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let overrides = "slow = { execution = \"inline\" }";
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger, "", overrides)]);
    let client = serve_in_memory(connector_for(&env, "mock"), ())
        .await
        .unwrap();

    // The connector's own listing carries the proxy's mark, on the inline tool only.
    let tools = client.peer().list_all_tools().await.unwrap();
    let meta = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(tool).unwrap()["_meta"][INLINE_META_KEY].clone()
    };
    assert_eq!(meta("slow"), json!(true), "{tools:?}");
    assert_eq!(meta("echo"), Value::Null);

    // Warm up (the proxy's first call opens its upstream), then a 3.5 s inline call with a
    // progress token.
    let warm = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "warm"})));
    assert_ne!(warm.await.unwrap().is_error, Some(true));
    let before = metrics::scrape(&address).await.unwrap();
    let started = std::time::Instant::now();
    let args = json!({"key": "inline-slow", "sleep_ms": 3500});
    let handle = client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(tool_call("slow", args))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
        panic!("not a CallToolResult")
    };
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed > durable_mcp::connector::progress::FIRST_LOOKUP,
        "{elapsed:?}"
    );
    let spent = metrics::scrape(&address).await.unwrap().since(&before);
    let describes = |name: &str| spent.0.get(name).copied().unwrap_or(0.0);
    assert_eq!(
        describes("frontend/DescribeNexusOperationExecution")
            + describes("frontend/DescribeActivityExecution"),
        0.0,
        "a {elapsed:?} inline call looked its progress up: {spent:?}"
    );
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Called, "inline-slow"),
        1
    );
    client.cancel().await.unwrap();
    drop(_proxy);
    let _ = server.stop().await;
}
