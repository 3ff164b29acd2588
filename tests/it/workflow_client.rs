//! R-WFC: Rust Workflow code lists and calls MCP tools through the in-Workflow client
//! (`durable_mcp::workflow_client`), on the real dev server, against the outbound proxy fronting
//! the mock upstream and against the native tools of `durable-mcp-example-tools`: results equal a
//! direct MCP call, `isError` results are results, failures are typed, timeouts and cancels reach
//! the upstream (a native tool's Workflow ends CANCELED), a Workflow worker restarted mid-call
//! resumes without running a destructive tool twice, and recorded histories replay (or are
//! refused when the call sequence changed).

use std::{path::Path, time::Duration};

use durable_mcp::{
    contract::{call::WorkflowCallToken, errors::ToolCallErrorType, listing::TIMEOUT_META_KEY},
    temporal::workflow::{WorkflowExecutionStatus, describe_workflow},
    workflow_client::{
        CallOptions, McpTools, NexusOperationCancellationType, WorkflowCancellationToken,
        sequence::{CallRecord, ListThenCall, PlannedCall, SequenceInput, run_sequence},
    },
};
use durable_mcp_conformance::fixtures::{
    Behavior, Ledger, LedgerEvent, ToolSpec, UpstreamSpec, mock_upstream_bin,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use temporalio_client::{
    Client, ClientOptions, WorkflowCancelOptions, WorkflowFetchHistoryOptions,
    WorkflowGetResultOptions, WorkflowHandle, WorkflowHistory, WorkflowSignalOptions,
    WorkflowStartOptions, errors::WorkflowGetResultError,
};
use temporalio_common::{HasWorkflowDefinition, SignalDefinition};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_protos::temporal::api::{
    enums::v1::EventType, history::v1::history_event::Attributes,
};
use temporalio_sdk::{
    SyncWorkflowContext, WorkflowContext, WorkflowResult,
    workflow_replayer::{
        WorkflowReplayError, WorkflowReplayFailure, WorkflowReplayer, WorkflowReplayerOptions,
    },
};

use crate::support::*;

/// The Nexus service name the proxy serves the upstream under.
const UPSTREAM_SERVICE: &str = "mock";

// ---- Workflows -------------------------------------------------------------------------------

/// One call with options, after a typed listing: what the options tests run.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OneCall {
    endpoint: String,
    service: String,
    tool: String,
    arguments: Value,
    timeout_ms: Option<u64>,
    /// Cancels the call's own token when the `cancel_call` signal arrives.
    cancel_on_signal: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OneCallOutput {
    listed: Vec<String>,
    record: CallRecord,
}

#[workflow]
#[derive(Default)]
struct CallWithOptions {
    cancel_requested: bool,
}

#[workflow_methods]
impl CallWithOptions {
    #[run(name = "durable-mcp-tests.call-with-options")]
    async fn run(ctx: &mut WorkflowContext<Self>, input: OneCall) -> WorkflowResult<OneCallOutput> {
        let tools = McpTools::new(ctx, input.endpoint, input.service);
        let listed = tools
            .list_tools()
            .await
            .map_err(temporalio_sdk::ApplicationFailure::non_retryable)?;
        let mut options = CallOptions::default();
        if let Some(ms) = input.timeout_ms {
            options = options.timeout(Duration::from_millis(ms));
        }
        let token = WorkflowCancellationToken::new();
        if input.cancel_on_signal {
            options = options
                .cancellation(token.clone())
                .cancellation_type(NexusOperationCancellationType::WaitCancellationCompleted);
        }
        let call = tools.call_tool_with(&input.tool, input.arguments, options);
        let canceller = async {
            if input.cancel_on_signal && ctx.wait_condition(|wf| wf.cancel_requested).await.is_ok()
            {
                token.cancel();
            }
        };
        let (result, ()) = temporalio_workflow::join!(call, canceller);
        let result = result.map(|typed| serde_json::to_value(typed).unwrap());
        Ok(OneCallOutput {
            listed: listed.into_iter().map(|t| t.name.into_owned()).collect(),
            record: CallRecord::new(&input.tool, result),
        })
    }

    /// Cancels the running call (through its own token, not the Workflow's).
    #[signal]
    fn cancel_call(&mut self, _ctx: &mut SyncWorkflowContext<Self>, _reason: String) {
        self.cancel_requested = true;
    }
}

/// [`ListThenCall`] changed after the fact: the calls in the opposite order.
#[workflow]
#[derive(Default)]
struct SwappedCalls;

#[workflow_methods]
impl SwappedCalls {
    #[run(name = "durable-mcp.list-then-call")]
    async fn run(
        ctx: &mut WorkflowContext<Self>,
        mut input: SequenceInput,
    ) -> WorkflowResult<durable_mcp::workflow_client::sequence::SequenceOutput> {
        input.calls.reverse();
        run_sequence(ctx, input).await
    }
}

/// [`ListThenCall`] changed after the fact: the last call dropped.
#[workflow]
#[derive(Default)]
struct OneCallFewer;

#[workflow_methods]
impl OneCallFewer {
    #[run(name = "durable-mcp.list-then-call")]
    async fn run(
        ctx: &mut WorkflowContext<Self>,
        mut input: SequenceInput,
    ) -> WorkflowResult<durable_mcp::workflow_client::sequence::SequenceOutput> {
        input.calls.pop();
        run_sequence(ctx, input).await
    }
}

// ---- fixtures --------------------------------------------------------------------------------

/// A Workflow worker (the Workflows above) on `task_queue`.
fn workflow_worker(env: &TestEnv, task_queue: &str) -> ActivityWorkerGuard {
    ActivityWorkerGuard::start_with(&env.address, &env.namespace, task_queue, |options| {
        options
            .register_workflow::<ListThenCall>()
            .expect("ListThenCall registers");
        options
            .register_workflow::<CallWithOptions>()
            .expect("CallWithOptions registers");
    })
}

/// The standard mock tools plus `slow_write`: destructive, not idempotent, 8 s long.
fn spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(ToolSpec {
        name: "slow_write".into(),
        title: None,
        description: Some("A slow non-idempotent write: must run once per call.".into()),
        annotations: Some(json!({"destructiveHint": true, "idempotentHint": false})),
        input_schema: None,
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior: Behavior::Sleep { ms: 8_000 },
    });
    spec
}

/// What a test needs to start Workflows that call one tool service: the env (whose endpoint
/// targets the service's worker), a client, and the task queue of [`workflow_worker`].
struct Caller {
    env: TestEnv,
    client: Client,
    service: &'static str,
    workflow_queue: String,
}

impl Caller {
    fn new(env: TestEnv, service: &'static str) -> Self {
        let client = Client::new(
            env.connection.clone(),
            ClientOptions::new(env.namespace.clone()).build(),
        )
        .unwrap();
        let workflow_queue = format!("{}-workflows", env.task_queue);
        Caller {
            env,
            client,
            service,
            workflow_queue,
        }
    }
}

/// A proxy fronting the mock (stdio, `spec()`), the spec file, and the upstream's ledger.
struct Setup {
    caller: Caller,
    spec_file: std::path::PathBuf,
    ledger: Ledger,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
}

impl std::ops::Deref for Setup {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.caller
    }
}

async fn setup(test: &str) -> Setup {
    let env = TestEnv::shared(test).await;
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec()).unwrap()).unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = mock_stdio_upstream_with_args(
        UPSTREAM_SERVICE,
        vec!["--spec".into(), spec_file.to_string_lossy().into_owned()],
        &ledger,
    )
    .unwrap();
    let proxy = start_proxy(&env, vec![upstream]);
    Setup {
        caller: Caller::new(env, UPSTREAM_SERVICE),
        spec_file,
        ledger,
        _proxy: proxy,
    }
}

impl Caller {
    fn sequence(&self, calls: &[(&str, Value)]) -> SequenceInput {
        SequenceInput {
            endpoint: self.env.endpoint.clone(),
            service: self.service.into(),
            calls: calls
                .iter()
                .map(|(tool, arguments)| PlannedCall {
                    tool: (*tool).into(),
                    arguments: arguments.clone(),
                })
                .collect(),
        }
    }

    fn one_call(&self, tool: &str, arguments: Value) -> OneCall {
        OneCall {
            endpoint: self.env.endpoint.clone(),
            service: self.service.into(),
            tool: tool.into(),
            arguments,
            timeout_ms: None,
            cancel_on_signal: false,
        }
    }

    /// Starts `workflow` on [`workflow_worker`]'s queue, its id `prefix` and a fresh suffix.
    async fn start<W>(
        &self,
        workflow: W,
        input: W::Input,
        prefix: &str,
    ) -> WorkflowHandle<Client, W>
    where
        W: HasWorkflowDefinition,
        W::Input: Send,
    {
        let options = WorkflowStartOptions::new(
            self.workflow_queue.clone(),
            format!("{prefix}-{}", uuid::Uuid::new_v4()),
        )
        .build();
        self.client
            .start_workflow(workflow, input, options)
            .await
            .unwrap()
    }
}

/// The mock upstream called straight over stdio with an rmcp client: the reference results.
async fn direct_calls(spec_file: &Path, calls: &[(&str, Value)]) -> Vec<Value> {
    use rmcp::ServiceExt as _;
    let mut command = tokio::process::Command::new(mock_upstream_bin().unwrap());
    command.arg("--spec").arg(spec_file);
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let client = ().serve(transport).await.expect("MCP handshake with the mock");
    let mut results = Vec::new();
    for (tool, arguments) in calls {
        let result = client
            .peer()
            .call_tool(tool_call(tool, arguments.clone()))
            .await
            .unwrap();
        results.push(serde_json::to_value(result).unwrap());
    }
    let _ = client.cancel().await;
    results
}

/// The (operation, schedule-to-close seconds) of every Nexus operation a history scheduled.
async fn scheduled_operations(json: &[u8]) -> Vec<(String, i64)> {
    WorkflowHistory::from_json(json)
        .unwrap()
        .into_events()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == EventType::NexusOperationScheduled as i32)
        .filter_map(|e| match e.attributes {
            Some(Attributes::NexusOperationScheduledEventAttributes(a)) => Some((
                a.operation,
                a.schedule_to_close_timeout.map_or(0, |d| d.seconds),
            )),
            _ => None,
        })
        .collect()
}

fn replayer_with<W>() -> WorkflowReplayer
where
    W: temporalio_workflow::workflows::WorkflowImplementation,
    <W::Run as temporalio_common::WorkflowDefinition>::Input: Send,
{
    WorkflowReplayer::new(
        WorkflowReplayerOptions::new()
            .register_workflow::<W>()
            .unwrap()
            .build(),
    )
    .unwrap()
}

/// A history of [`ListThenCall`] recorded by the first test below (rewritten when
/// `DURABLE_MCP_UPDATE_HISTORIES` is set), replayed by a test that needs no server.
fn recorded_history_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/histories/list_then_call.json")
}

/// [`ListThenCall`] replays the history `json`; the same Workflow with its last call dropped
/// fails replay with Temporal's own nondeterminism error.
async fn assert_replays_and_one_call_fewer_is_refused(json: &[u8]) {
    replayer_with::<ListThenCall>()
        .replay_workflow(WorkflowHistory::from_json(json).unwrap())
        .await
        .expect("the recorded history replays");
    let fewer = replayer_with::<OneCallFewer>()
        .replay_workflow(WorkflowHistory::from_json(json).unwrap())
        .await;
    assert!(
        matches!(
            fewer,
            Err(WorkflowReplayError::Replay(
                WorkflowReplayFailure::Nondeterminism { .. }
            ))
        ),
        "one call fewer is nondeterminism: {fewer:?}"
    );
}

/// The result of the Workflow of `handle`, which must complete within 60 s.
async fn completed<W>(handle: &WorkflowHandle<Client, W>) -> W::Output
where
    W: HasWorkflowDefinition,
{
    tokio::time::timeout(
        Duration::from_secs(60),
        handle.get_result(WorkflowGetResultOptions::default()),
    )
    .await
    .expect("the Workflow completes within 60 s")
    .unwrap()
}

/// Cancels the call of a [`CallWithOptions`] through its own token; its output once it ended,
/// which must be the call's `canceled` error.
async fn cancel_the_call<W, S>(handle: &WorkflowHandle<Client, W>, cancel_call: S) -> OneCallOutput
where
    W: HasWorkflowDefinition<Output = OneCallOutput>,
    S: SignalDefinition<Workflow = W::Run, Input = String>,
{
    handle
        .signal(
            cancel_call,
            "test".to_owned(),
            WorkflowSignalOptions::default(),
        )
        .await
        .unwrap();
    let out = completed(handle).await;
    let err = out.record.error.as_ref().expect("a cancel is an error");
    assert_eq!(err.kind, "canceled", "{out:?}");
    out
}

/// Cancels the Workflow of `handle` and waits until it ends, which must be CANCELED (at most
/// 30 s).
async fn cancel_and_await_canceled<W>(handle: &WorkflowHandle<Client, W>)
where
    W: HasWorkflowDefinition,
    W::Output: std::fmt::Debug,
{
    handle
        .cancel(WorkflowCancelOptions::builder().reason("test").build())
        .await
        .unwrap();
    let ended = tokio::time::timeout(
        Duration::from_secs(30),
        handle.get_result(WorkflowGetResultOptions::default()),
    )
    .await
    .expect("the Workflow ends within 30 s of the cancel");
    assert!(
        matches!(ended, Err(WorkflowGetResultError::Cancelled { .. })),
        "the Workflow ends CANCELED: {ended:?}"
    );
}

// ---- tests -----------------------------------------------------------------------------------

#[tokio::test]
async fn a_workflow_lists_and_calls_tools_with_results_equal_to_direct_calls_and_replays() {
    let s = setup("wfc-list-call").await;
    let worker = workflow_worker(&s.env, &s.workflow_queue);
    let calls = [
        ("echo", json!({"key": "wf-1", "text": "hi from a Workflow"})),
        ("everything", json!({})),
        ("refuse", json!({"key": "wf-r"})),
    ];
    let mut planned = calls.to_vec();
    planned.push(("no_such_tool", json!({})));
    let handle = s
        .start(ListThenCall::run, s.sequence(&planned), "wfc-seq")
        .await;
    let output = completed(&handle).await;
    worker.stop();

    // Listed: every tool of the upstream.
    for tool in ["echo", "everything", "refuse", "slow", "slow_write"] {
        assert!(
            output.listed.iter().any(|t| t == tool),
            "{tool}: {output:?}"
        );
    }
    // Every result, isError included, equals the upstream's own answer to a direct call.
    let direct = direct_calls(&s.spec_file, &calls).await;
    for ((record, expected), (tool, _)) in output.calls.iter().zip(&direct).zip(&calls) {
        assert_eq!(record.tool, *tool);
        assert_eq!(record.error, None, "{record:?}");
        assert_eq!(
            &record.result, expected,
            "{tool}: through the Workflow vs direct"
        );
    }
    assert_eq!(output.calls[2].result["isError"], json!(true));
    assert_eq!(s.ledger.count_key("refuse", LedgerEvent::Called, "wf-r"), 1);
    // A failure is a typed error: the unknown tool carries its stable type.
    let unknown = output.calls[3].error.as_ref().expect("an error record");
    assert_eq!(
        unknown.error_type.as_deref(),
        Some(ToolCallErrorType::UnknownTool.as_str())
    );
    durable_mcp_conformance::snapshots::assert_snapshot(
        &durable_mcp_conformance::snapshots::default_dir(),
        "workflow_client_list_then_call",
        &serde_json::to_value(&output).expect("the output is JSON"),
    );

    // The history: list_tools once, then the calls in order, each with the tool's advertised
    // timeout as its schedule-to-close.
    let history = handle
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .unwrap();
    if std::env::var_os("DURABLE_MCP_UPDATE_HISTORIES").is_some() {
        let pretty: Value = serde_json::from_slice(&history).unwrap();
        std::fs::write(
            recorded_history_path(),
            serde_json::to_string_pretty(&pretty).unwrap() + "\n",
        )
        .unwrap();
    }
    let scheduled = scheduled_operations(&history).await;
    let names: Vec<&str> = scheduled.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(
        names,
        ["list_tools", "echo", "everything", "refuse", "no_such_tool"]
    );
    let listed = list_tools_directly(&s).await;
    let advertised = |tool: &str| -> i64 {
        let ms = listed.iter().find(|t| t["name"] == tool).unwrap()["_meta"][TIMEOUT_META_KEY]
            .as_i64()
            .unwrap();
        ms / 1000
    };
    assert_eq!(scheduled[1].1, advertised("echo"), "{scheduled:?}");
    assert_eq!(scheduled[3].1, advertised("refuse"), "{scheduled:?}");
    assert_eq!(
        scheduled[4].1,
        durable_mcp::workflow_client::DEFAULT_CALL_TIMEOUT.as_secs() as i64,
        "an unlisted tool gets the default timeout"
    );

    // Replay: the same code replays the recorded history, one call fewer is refused...
    assert_replays_and_one_call_fewer_is_refused(&history).await;
    // ...and so are the same calls in another order (the client's check of the recorded answers).
    let swapped = replayer_with::<SwappedCalls>()
        .replay_workflow(WorkflowHistory::from_json(&history).unwrap())
        .await;
    match &swapped {
        Err(WorkflowReplayError::Replay(WorkflowReplayFailure::WorkflowTaskFailure {
            message,
        })) => assert!(
            message.contains("[durable-mcp] nondeterminism")
                && message.contains("no_such_tool")
                && message.contains("mcp/mock/echo/"),
            "the client names the call and what the history holds: {message}"
        ),
        other => panic!("a swapped call order must not replay: {other:?}"),
    }
}

/// `list_tools` straight through Nexus (the listing the Workflow saw, with advertised timeouts).
async fn list_tools_directly(s: &Setup) -> Vec<Value> {
    let start = durable_mcp::nexus::StartOperation::new(
        format!("list-{}", uuid::Uuid::new_v4()),
        &s.env.endpoint,
        UPSTREAM_SERVICE,
        "list_tools",
        durable_mcp::contract::payload::to_payload(&json!({})).unwrap(),
    );
    let (_, outcome) = start_and_wait(&s.env, start).await;
    let durable_mcp::nexus::OperationOutcome::Succeeded(p) = outcome else {
        panic!("{outcome:?}")
    };
    durable_mcp::contract::payload::to_json(&p)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_calls_timeout_and_its_own_cancel_end_it_and_the_cancel_reaches_the_upstream() {
    let s = setup("wfc-options").await;
    let _worker = workflow_worker(&s.env, &s.workflow_queue);

    // Its own timeout: the call ends TimedOut, a typed error, not a result.
    let mut timed = s.one_call("slow", json!({"key": "t1"}));
    timed.timeout_ms = Some(1_500);
    let out = completed(&s.start(CallWithOptions::run, timed, "wfc-timeout").await).await;
    assert!(
        out.listed.iter().any(|t| t == "slow"),
        "typed listing: {out:?}"
    );
    let err = out.record.error.as_ref().expect("a timeout is an error");
    assert_eq!(err.kind, "timed_out", "{out:?}");
    assert_eq!(out.record.result["isError"], json!(true));

    // Its own cancellation token, cancelled once the upstream runs the call: the call ends
    // Canceled and the upstream saw the cancel.
    let mut cancelled = s.one_call("slow", json!({"key": "c1"}));
    cancelled.cancel_on_signal = true;
    let handle = s.start(CallWithOptions::run, cancelled, "wfc-cancel").await;
    s.ledger
        .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
        .await;
    let out = cancel_the_call(&handle, CallWithOptions::cancel_call).await;
    let err = out.record.error.as_ref().unwrap();
    assert_eq!(
        err.error_type.as_deref(),
        None,
        "a cancel has no failure type"
    );
    assert_eq!(s.ledger.count_key("slow", LedgerEvent::Called, "c1"), 1);
    assert_slow_cancelled_upstream(&s.ledger).await;
}

#[tokio::test]
async fn cancelling_the_workflow_cancels_the_call_upstream() {
    let s = setup("wfc-wf-cancel").await;
    let _worker = workflow_worker(&s.env, &s.workflow_queue);
    let handle = s
        .start(
            ListThenCall::run,
            s.sequence(&[
                ("slow", json!({"key": "w1"})),
                ("echo", json!({"key": "w2"})),
            ]),
            "wfc-wf-cancel",
        )
        .await;
    s.ledger
        .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(30))
        .await;
    cancel_and_await_canceled(&handle).await;
    assert_slow_cancelled_upstream(&s.ledger).await;
    assert_eq!(
        s.ledger.count("echo", LedgerEvent::Called),
        0,
        "nothing is called after the cancel"
    );
}

#[tokio::test]
async fn a_workflow_worker_restarted_mid_call_resumes_and_the_destructive_tool_runs_once() {
    let s = setup("wfc-restart").await;
    let worker = workflow_worker(&s.env, &s.workflow_queue);
    let handle = s
        .start(
            ListThenCall::run,
            s.sequence(&[
                ("slow_write", json!({"key": "once"})),
                ("echo", json!({"key": "after"})),
            ]),
            "wfc-restart",
        )
        .await;
    assert_eq!(
        s.ledger
            .wait_for_count(
                "slow_write",
                LedgerEvent::Called,
                1,
                Duration::from_secs(30)
            )
            .await,
        1
    );
    // The Workflow worker goes away mid-call; a new one (no cached state) replays the history.
    worker.stop();
    assert_eq!(
        s.ledger.count("slow_write", LedgerEvent::Completed),
        0,
        "the worker stopped while the tool ran: {:?}",
        s.ledger.read()
    );
    let _worker = workflow_worker(&s.env, &s.workflow_queue);
    let output = completed(&handle).await;
    assert_eq!(output.calls.len(), 2, "{output:?}");
    assert_eq!(output.calls[0].error, None, "{output:?}");
    assert_eq!(output.calls[0].result["structuredContent"]["key"], "once");
    assert_eq!(output.calls[1].result["structuredContent"]["key"], "after");
    assert_eq!(
        s.ledger
            .count_key("slow_write", LedgerEvent::Called, "once"),
        1,
        "the destructive tool ran once: {:?}",
        s.ledger.read()
    );
    assert_eq!(
        s.ledger.count_key("echo", LedgerEvent::Called, "after"),
        1,
        "{:?}",
        s.ledger.read()
    );
}

// ---- native tools (`durable-mcp-example-tools`) ---------------------------------------------

/// The native tool service of `durable-mcp-example-tools`, as `tests/it/native_tools.rs` runs it.
const NATIVE_SERVICE: &str = "examples";

/// `durable-mcp-example-tools` serving `examples` on the env's task queue (killed when dropped),
/// and a caller of that service.
async fn native_setup(test: &str) -> (Caller, tokio::process::Child) {
    let env = TestEnv::shared(test).await;
    let tools = example_tools(&env).await.unwrap();
    (Caller::new(env, NATIVE_SERVICE), tools)
}

/// The Workflow behind the first Workflow-backed call in the caller's history, once its Nexus
/// operation started (its token names the Workflow). Polls the history, at most 30 s.
async fn started_tool_workflow(history: impl Fn() -> WorkflowHistory) -> WorkflowCallToken {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = history().into_events().await.unwrap();
        let started = events.into_iter().find_map(|e| match e.attributes {
            Some(Attributes::NexusOperationStartedEventAttributes(a)) => {
                Some(WorkflowCallToken::parse(&a.operation_token).expect("a Workflow's token"))
            }
            _ => None,
        });
        if let Some(token) = started {
            return token;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool's operation did not start within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of the tool's Workflow once it closed (at most 30 s after the caller ended).
async fn closed_status(env: &TestEnv, tool: &WorkflowCallToken) -> WorkflowExecutionStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let d = describe_workflow(
            &env.connection,
            &env.namespace,
            &tool.workflow_id,
            &tool.run_id,
        )
        .await
        .unwrap()
        .expect("the tool's Workflow exists");
        if d.status != WorkflowExecutionStatus::Running || tokio::time::Instant::now() > deadline {
            return d.status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_workflow_lists_and_calls_native_tools() {
    let (c, _tools) = native_setup("wfc-native").await;
    let _worker = workflow_worker(&c.env, &c.workflow_queue);
    let handle = c
        .start(
            ListThenCall::run,
            c.sequence(&[("word_count", json!({"text": "a b c"}))]),
            "wfc-native",
        )
        .await;
    let output = completed(&handle).await;
    assert_eq!(
        output.listed,
        ["word_count", "slow_report", "delete_files"],
        "the native listing"
    );
    assert_eq!(output.calls.len(), 1, "{output:?}");
    let record = &output.calls[0];
    assert_eq!(record.tool, "word_count");
    assert_eq!(record.error, None, "{record:?}");
    assert_eq!(record.result["structuredContent"], json!({"words": 3}));
    assert_eq!(record.result["isError"], json!(false));
    assert_eq!(
        record.result["content"],
        json!([{"type": "text", "text": "3 words"}])
    );
    // The call ran with word_count's advertised timeout (10 s) from the listing.
    let history = handle
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .unwrap();
    assert_eq!(
        scheduled_operations(&history).await,
        [
            (
                "list_tools".to_owned(),
                durable_mcp::workflow_client::options::LIST_TIMEOUT.as_secs() as i64
            ),
            ("word_count".to_owned(), 10)
        ]
    );
}

#[tokio::test]
async fn a_calls_own_cancel_cancels_a_native_workflow_backed_tool() {
    let (c, _tools) = native_setup("wfc-native-cancel").await;
    let _worker = workflow_worker(&c.env, &c.workflow_queue);
    let mut call = c.one_call("slow_report", json!({"seconds": 600}));
    call.cancel_on_signal = true;
    let handle = c
        .start(CallWithOptions::run, call, "wfc-native-cancel")
        .await;
    let tool =
        started_tool_workflow(|| handle.fetch_history(WorkflowFetchHistoryOptions::default()))
            .await;
    assert!(
        tool.workflow_id.starts_with("mcp/examples/slow_report/"),
        "{tool:?}"
    );
    let out = cancel_the_call(&handle, CallWithOptions::cancel_call).await;
    assert_eq!(out.record.result["isError"], json!(true));
    assert_eq!(
        closed_status(&c.env, &tool).await,
        WorkflowExecutionStatus::Canceled,
        "the tool's Workflow ends CANCELED"
    );
}

#[tokio::test]
async fn cancelling_the_workflow_cancels_a_native_workflow_backed_tool() {
    let (c, _tools) = native_setup("wfc-native-wf-cancel").await;
    let _worker = workflow_worker(&c.env, &c.workflow_queue);
    let handle = c
        .start(
            ListThenCall::run,
            c.sequence(&[
                ("slow_report", json!({"seconds": 600})),
                ("word_count", json!({"text": "never"})),
            ]),
            "wfc-native-wf-cancel",
        )
        .await;
    let tool =
        started_tool_workflow(|| handle.fetch_history(WorkflowFetchHistoryOptions::default()))
            .await;
    cancel_and_await_canceled(&handle).await;
    assert_eq!(
        closed_status(&c.env, &tool).await,
        WorkflowExecutionStatus::Canceled,
        "the tool's Workflow ends CANCELED"
    );
    let history = handle
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .unwrap();
    let scheduled = scheduled_operations(&history).await;
    let names: Vec<&str> = scheduled.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(
        names,
        ["list_tools", "slow_report"],
        "nothing is called after the cancel"
    );
}

/// The issue's acceptance run: the example agent against the proxy fronting
/// `@modelcontextprotocol/server-everything`, each printed result equal to a direct MCP call.
/// Where Node is missing, prints `skipped: <reason>` and returns.
#[tokio::test]
async fn the_example_agent_prints_one_result_per_call_equal_to_direct_calls() {
    use durable_mcp_conformance::fixtures::everything::{self, DirectClient};
    if let Err(reason) = everything::node_available() {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "skipped: {reason}");
        return;
    }
    let entry = tokio::task::spawn_blocking(everything::install)
        .await
        .unwrap()
        .expect("install @modelcontextprotocol/server-everything");
    let env = TestEnv::shared("wfc-agent").await;
    let upstream = durable_mcp::proxy::UpstreamConfig {
        service: "everything".into(),
        transport: durable_mcp::proxy::TransportConfig::stdio(
            "node",
            vec![entry.to_string_lossy().into_owned(), "stdio".into()],
        ),
        activity_options: Default::default(),
        overrides: Default::default(),
    };
    let _proxy = start_proxy(&env, vec![upstream]);
    let calls = [
        ("echo", json!({"message": "hi"})),
        ("get-sum", json!({"a": 2, "b": 3})),
        ("get-tiny-image", json!({})),
    ];
    let mut command =
        tokio::process::Command::new(workspace_bin("durable-mcp-example-agent").unwrap());
    command
        .args(["--endpoint", &env.endpoint, "--service", "everything"])
        .env("TEMPORAL_ADDRESS", &env.address)
        .env("TEMPORAL_NAMESPACE", &env.namespace)
        .env_remove("TEMPORAL_PROFILE")
        .env_remove("TEMPORAL_CONFIG_FILE")
        .kill_on_drop(true);
    for (tool, arguments) in &calls {
        command.arg("--call").arg(format!("{tool}={arguments}"));
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the agent finishes within 120 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {}: {stderr}", output.status);
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .inspect(|l| assert!(l.starts_with(r#"{"tool":"#), "the tool comes first: {l}"))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        calls.len(),
        "one line per call: {lines:?}\n{stderr}"
    );
    let direct = DirectClient::stdio(&entry).await.unwrap();
    for (line, (tool, arguments)) in lines.iter().zip(&calls) {
        assert_eq!(line["tool"], *tool);
        assert!(line.get("error").is_none(), "{line}");
        let expected = direct.call(tool, arguments.clone()).await.unwrap();
        assert_eq!(
            line["result"], expected,
            "{tool}: the agent vs a direct call"
        );
    }
    direct.close().await;
}

#[tokio::test]
async fn the_example_agent_refuses_an_unknown_endpoint_instead_of_waiting_forever() {
    let env = TestEnv::shared("wfc-agent-no-ep").await;
    let output = tokio::process::Command::new(workspace_bin("durable-mcp-example-agent").unwrap())
        .args([
            "--endpoint",
            "no-such-endpoint",
            "--service",
            "s",
            "--call",
            "t={}",
        ])
        .env("TEMPORAL_ADDRESS", &env.address)
        .env("TEMPORAL_NAMESPACE", &env.namespace)
        .env_remove("TEMPORAL_PROFILE")
        .env_remove("TEMPORAL_CONFIG_FILE")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("the agent exits within 30 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("no Nexus endpoint named \"no-such-endpoint\"")
            && stderr.contains("temporal operator nexus endpoint create"),
        "the error says what to do: {stderr}"
    );
    assert!(output.stdout.is_empty());
}

/// Histories recorded by earlier builds keep replaying: what a deployed Workflow's worker has to
/// do after an upgrade. No server needed.
#[tokio::test]
async fn a_recorded_list_then_call_history_replays_and_a_changed_sequence_is_refused() {
    let json = std::fs::read(recorded_history_path()).expect("the recorded history fixture");
    assert_replays_and_one_call_fewer_is_refused(&json).await;
}

/// Workflow code must be deterministic: the client's sources (unit tests aside) name no network,
/// clock, randomness, thread or async runtime of their own; everything goes through the Workflow
/// context.
#[test]
fn the_client_uses_no_network_clock_randomness_or_runtime_of_its_own() {
    const FORBIDDEN: [&str; 12] = [
        "reqwest",
        "tonic",
        "temporalio_client",
        "std::net",
        "tokio",
        "SystemTime",
        "Instant",
        "thread",
        "rand",
        "uuid",
        "HashMap",
        "OperationClient",
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../connector/workflow-client/src");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let production = text
            .find("#[cfg(test)]\nmod tests")
            .map_or(text.as_str(), |at| &text[..at]);
        for word in FORBIDDEN {
            assert!(
                !production.contains(word),
                "{} names {word}: Workflow code goes through the Workflow context only",
                entry.path().display()
            );
        }
        read += 1;
    }
    assert!(read >= 5, "read {read} files of {}", dir.display());
}
