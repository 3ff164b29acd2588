//! R-OPS: the Temporal operations toolset against the real dev server. A small SDK worker runs
//! `ops-workflow` (waits for `finish`, records `add` signals, answers the `state` query,
//! continues as new on `continue_as_new`, and ends cancelled when cancelled); every tool is
//! driven through `TemporalToolset::call` and its structured answer is checked against the
//! tool's output schema.

use std::time::Duration;

use durable_mcp::temporal_tools::{NamespacePolicy, TemporalToolset};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ContinueAsNewOptions, SyncWorkflowContext, WorkflowContext, WorkflowContextView, WorkflowResult,
};

use crate::support::*;

#[workflow]
#[derive(Default)]
struct OpsWorkflow {
    signals: Vec<String>,
    finish: bool,
    next: Option<Value>,
}

#[workflow_methods]
impl OpsWorkflow {
    #[run(name = "ops-workflow")]
    async fn run(ctx: &mut WorkflowContext<Self>, input: Value) -> WorkflowResult<Value> {
        ctx.wait_condition(|s| s.finish || s.next.is_some()).await?;
        if let Some(next) = ctx.state(|s| s.next.clone()) {
            ctx.continue_as_new(next, ContinueAsNewOptions::default())?;
        }
        Ok(json!({"input": input, "signals": ctx.state(|s| s.signals.clone())}))
    }

    #[signal(name = "add")]
    fn add(&mut self, _ctx: &mut SyncWorkflowContext<Self>, value: String) {
        self.signals.push(value);
    }

    #[signal(name = "finish")]
    fn finish(&mut self, _ctx: &mut SyncWorkflowContext<Self>) {
        self.finish = true;
    }

    #[signal(name = "continue_as_new")]
    fn next_run(&mut self, _ctx: &mut SyncWorkflowContext<Self>, input: Value) {
        self.next = Some(input);
    }

    #[query(name = "state")]
    fn state(&self, _ctx: &WorkflowContextView) -> Vec<String> {
        self.signals.clone()
    }
}

/// A worker running `ops-workflow` on the env's task queue.
fn workflow_worker(env: &TestEnv) -> ActivityWorkerGuard {
    ActivityWorkerGuard::start_with(&env.address, &env.namespace, &env.task_queue, |options| {
        options
            .register_workflow::<OpsWorkflow>()
            .expect("ops-workflow registers");
    })
}

fn toolset(env: &TestEnv, policy: NamespacePolicy) -> TemporalToolset {
    TemporalToolset::new(env.connection.clone(), &env.namespace, policy, None)
}

fn default_toolset(env: &TestEnv) -> TemporalToolset {
    toolset(env, NamespacePolicy::default_only(&env.namespace))
}

/// Checks a success against the tool's output schema (every field present, with its type)
/// and returns the structured content.
fn structured(tools: &TemporalToolset, name: &str, result: CallToolResult) -> Value {
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert_ne!(result.is_error, Some(true), "{name} failed: {text}");
    let data = result.structured_content.expect("structured content");
    let tool = tools.tools().into_iter().find(|t| t.name == name).unwrap();
    let schema = tool.output_schema.unwrap();
    for (field, field_schema) in schema["properties"].as_object().unwrap() {
        let value = data
            .get(field)
            .unwrap_or_else(|| panic!("{name}: `{field}` missing from {data}"));
        let types: Vec<&str> = match &field_schema["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        let actual = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        assert!(
            types.contains(&actual),
            "{name}: `{field}` is {actual}, schema says {types:?}"
        );
    }
    assert!(!text.is_empty(), "{name} has a text rendering");
    data
}

async fn ok(tools: &TemporalToolset, name: &str, args: Value) -> Value {
    let result = tools.call(name, args.as_object().unwrap()).await;
    structured(tools, name, result)
}

/// A tool error: (errorType, text).
async fn fails(tools: &TemporalToolset, name: &str, args: Value) -> (String, String) {
    let result = tools.call(name, args.as_object().unwrap()).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{name} should fail: {result:?}"
    );
    let json = serde_json::to_value(&result).unwrap();
    (
        json["_meta"]["io.durable-mcp/errorType"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        json["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// Polls `list_workflows` until `query` matches `n` Workflows (visibility lags a little).
async fn listed(tools: &TemporalToolset, query: &str, n: usize) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let list = ok(
            tools,
            "list_workflows",
            json!({"query": query, "limit": 100}),
        )
        .await;
        if list["count"] == n {
            return list;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{query} never listed {n}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn start_args(env: &TestEnv, id: &str, input: Value) -> Value {
    json!({"workflow_type": "ops-workflow", "task_queue": env.task_queue, "workflow_id": id, "args": [input]})
}

/// `get_workflow_event` of event `n` of Workflow `id`.
async fn event_of(tools: &TemporalToolset, id: &str, n: i64) -> Value {
    let args = json!({"workflow_id": id, "event_id": n});
    ok(tools, "get_workflow_event", args).await
}

/// Asserts that no Workflow `id` exists: a refused call started nothing.
async fn assert_never_started(env: &TestEnv, id: &str) {
    let args = json!({"workflow_id": id});
    let (kind, text) = fails(&default_toolset(env), "describe_workflow", args).await;
    assert_eq!(kind, "NotFound", "nothing was started: {text}");
}

/// Terminates the Workflow `id` a test left running.
async fn clean_up(tools: &TemporalToolset, id: &str) {
    let reason = json!({"workflow_id": id, "reason": "test cleanup"});
    ok(tools, "terminate_workflow", reason).await;
}

#[tokio::test]
async fn workflow_tools_start_find_read_signal_query_continue_and_cancel_a_workflow() {
    let env = TestEnv::shared("ops-wf").await;
    let _worker = workflow_worker(&env);
    let tools = default_toolset(&env);
    let id = durable_mcp_conformance::harness::unique_name("ops-wf");

    let started = ok(
        &tools,
        "start_workflow",
        start_args(&env, &id, json!({"order": 7})),
    )
    .await;
    assert_eq!(started["started"], true);
    let first_run = started["run_id"].as_str().unwrap().to_owned();

    let list = listed(&tools, &format!("WorkflowId = '{id}'"), 1).await;
    assert_eq!(list["workflows"][0]["workflow_type"], "ops-workflow");
    assert_eq!(list["has_more"], false);

    let described = ok(&tools, "describe_workflow", json!({"workflow_id": id})).await;
    assert_eq!(described["status"], "RUNNING");
    assert_eq!(described["task_queue"], env.task_queue.as_str());

    ok(
        &tools,
        "signal_workflow",
        json!({"workflow_id": id, "signal_name": "add", "args": ["a"]}),
    )
    .await;
    let queried = ok(
        &tools,
        "query_workflow",
        json!({"workflow_id": id, "query_type": "state"}),
    )
    .await;
    assert_eq!(queried["result"], json!(["a"]));

    let waiting = ok(
        &tools,
        "get_workflow_result",
        json!({"workflow_id": id, "wait_seconds": 0}),
    )
    .await;
    assert_eq!(
        (waiting["status"].as_str(), waiting["closed"].as_bool()),
        (Some("RUNNING"), Some(false))
    );

    let history = ok(&tools, "get_workflow_history", json!({"workflow_id": id})).await;
    let types: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert_eq!(
        types.first(),
        Some(&"WorkflowExecutionStarted"),
        "{types:?}"
    );
    assert!(types.contains(&"WorkflowExecutionSignaled"), "{types:?}");
    assert_eq!(history["truncated"], false);
    let short = ok(
        &tools,
        "get_workflow_history",
        json!({"workflow_id": id, "max_events": 1}),
    )
    .await;
    assert_eq!(
        (short["count"].as_u64(), short["truncated"].as_bool()),
        (Some(1), Some(true))
    );

    let event = event_of(&tools, &id, 1).await;
    assert_eq!(event["event"]["event_type"], "WorkflowExecutionStarted");
    assert_eq!(
        event["event"]["attributes"]["input"]["payloads"],
        json!([{"order": 7}]),
        "{event}"
    );
    let (kind, _) = fails(
        &tools,
        "get_workflow_event",
        json!({"workflow_id": id, "event_id": 9999}),
    )
    .await;
    assert_eq!(kind, "NotFound");

    let continued = ok(
        &tools,
        "continue_as_new",
        json!({"workflow_id": id, "args": [{"order": 8}]}),
    )
    .await;
    assert_eq!(continued["continued"], true, "{continued}");
    assert_eq!(continued["previous_run_id"], first_run.as_str());
    let second_run = continued["new_run_id"].as_str().unwrap().to_owned();
    assert_ne!(second_run, first_run);
    let old = ok(
        &tools,
        "get_workflow_result",
        json!({"workflow_id": id, "run_id": first_run}),
    )
    .await;
    assert_eq!(old["status"], "CONTINUED_AS_NEW");

    let cancelled = ok(
        &tools,
        "cancel_workflow",
        json!({"workflow_id": id, "wait_seconds": 10}),
    )
    .await;
    assert_eq!(cancelled["cancel_requested"], true);
    assert_eq!(
        (
            cancelled["status"].as_str(),
            cancelled["cancelled"].as_bool()
        ),
        (Some("CANCELED"), Some(true)),
        "{cancelled}"
    );
    assert_eq!(cancelled["run_id"], second_run.as_str());
    let result = ok(&tools, "get_workflow_result", json!({"workflow_id": id})).await;
    assert_eq!(result["status"], "CANCELED");
    assert_eq!(
        result["run_id"],
        second_run.as_str(),
        "the result follows continue-as-new"
    );
}

#[tokio::test]
async fn results_terminations_and_errors_say_what_happened() {
    let env = TestEnv::shared("ops-res").await;
    let _worker = workflow_worker(&env);
    let tools = default_toolset(&env);
    let done = durable_mcp_conformance::harness::unique_name("ops-done");
    ok(
        &tools,
        "start_workflow",
        start_args(&env, &done, json!("in")),
    )
    .await;
    ok(
        &tools,
        "signal_workflow",
        json!({"workflow_id": done, "signal_name": "add", "args": ["x"]}),
    )
    .await;
    ok(
        &tools,
        "signal_workflow",
        json!({"workflow_id": done, "signal_name": "finish"}),
    )
    .await;
    let result = ok(
        &tools,
        "get_workflow_result",
        json!({"workflow_id": done, "wait_seconds": 30}),
    )
    .await;
    assert_eq!(result["status"], "COMPLETED");
    assert_eq!(result["result"], json!({"input": "in", "signals": ["x"]}));

    // A closed Workflow cannot be cancelled: the tool says so instead of "requested".
    let (kind, text) = fails(&tools, "cancel_workflow", json!({"workflow_id": done})).await;
    assert_eq!(kind, "FailedPrecondition", "{text}");
    assert!(text.contains("already closed as COMPLETED"), "{text}");

    let doomed = durable_mcp_conformance::harness::unique_name("ops-term");
    ok(
        &tools,
        "start_workflow",
        start_args(&env, &doomed, json!(1)),
    )
    .await;
    let (kind, _) = fails(
        &tools,
        "start_workflow",
        start_args(&env, &doomed, json!(1)),
    )
    .await;
    assert_eq!(kind, "AlreadyExists");
    // Its first Workflow task has run once a query answers (a query waits for it); only then
    // does a closed run still answer queries.
    let before = ok(
        &tools,
        "query_workflow",
        json!({"workflow_id": doomed, "query_type": "state"}),
    )
    .await;
    assert_eq!(before["result"], json!([]));
    let (kind, text) = fails(&tools, "terminate_workflow", json!({"workflow_id": doomed})).await;
    assert_eq!(kind, "InvalidArguments");
    assert!(text.contains("`reason` is required"), "{text}");
    let terminated = ok(
        &tools,
        "terminate_workflow",
        json!({"workflow_id": doomed, "reason": "test"}),
    )
    .await;
    assert_eq!(terminated["status"], "TERMINATED");
    let result = ok(
        &tools,
        "get_workflow_result",
        json!({"workflow_id": doomed}),
    )
    .await;
    assert_eq!(result["status"], "TERMINATED");
    // A closed Workflow still answers queries (its worker replays it); an unknown query fails.
    let last = ok(
        &tools,
        "query_workflow",
        json!({"workflow_id": doomed, "query_type": "state"}),
    )
    .await;
    assert_eq!(last["result"], json!([]));
    let (kind, text) = fails(
        &tools,
        "query_workflow",
        json!({"workflow_id": doomed, "query_type": "nope"}),
    )
    .await;
    assert!(!kind.is_empty() && text.contains("nope"), "{kind}: {text}");

    let (kind, text) = fails(
        &tools,
        "describe_workflow",
        json!({"workflow_id": "no-such-workflow"}),
    )
    .await;
    assert_eq!(kind, "NotFound");
    assert!(text.contains("Next: "), "{text}");
    let (kind, text) = fails(
        &tools,
        "list_workflows",
        json!({"query": "NoSuchAttribute = 'x'"}),
    )
    .await;
    assert_eq!(kind, "BadRequest", "{text}");
}

#[tokio::test]
async fn batch_tools_operate_on_the_running_workflows_a_query_matches() {
    let env = TestEnv::shared("ops-batch").await;
    let _worker = workflow_worker(&env);
    let tools = default_toolset(&env);
    let ids: Vec<String> = (0..3)
        .map(|i| durable_mcp_conformance::harness::unique_name(&format!("ops-batch-{i}")))
        .collect();
    for id in &ids {
        ok(&tools, "start_workflow", start_args(&env, id, json!(null))).await;
    }
    let query = format!("TaskQueue = '{}'", env.task_queue);
    listed(&tools, &query, 3).await;

    let signalled = ok(
        &tools,
        "batch_signal",
        json!({"query": query, "signal_name": "add", "args": ["b"], "batch_size": 2}),
    )
    .await;
    assert_eq!(
        (
            signalled["matched"].as_u64(),
            signalled["succeeded"].as_u64(),
            signalled["failed"].as_u64()
        ),
        (Some(3), Some(3), Some(0)),
        "{signalled}"
    );
    for id in &ids {
        let state = ok(
            &tools,
            "query_workflow",
            json!({"workflow_id": id, "query_type": "state"}),
        )
        .await;
        assert_eq!(state["result"], json!(["b"]), "{id}");
    }

    let capped = ok(
        &tools,
        "batch_cancel",
        json!({"query": format!("{query} AND WorkflowId = '{}'", ids[0]), "max_workflows": 1}),
    )
    .await;
    assert_eq!(
        (capped["matched"].as_u64(), capped["truncated"].as_bool()),
        (Some(1), Some(false)),
        "{capped}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let d = ok(&tools, "describe_workflow", json!({"workflow_id": ids[0]})).await;
        if d["status"] == "CANCELED" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never cancelled: {d}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Visibility catches up, then only the two still running are terminated.
    listed(
        &tools,
        &format!("{query} AND ExecutionStatus = 'Running'"),
        2,
    )
    .await;
    let terminated = ok(
        &tools,
        "batch_terminate",
        json!({"query": query, "reason": "batch test", "batch_size": 1}),
    )
    .await;
    assert_eq!(
        (
            terminated["matched"].as_u64(),
            terminated["succeeded"].as_u64()
        ),
        (Some(2), Some(2)),
        "{terminated}"
    );
    for id in &ids[1..] {
        let d = ok(&tools, "describe_workflow", json!({"workflow_id": id})).await;
        assert_eq!(d["status"], "TERMINATED");
    }
}

#[tokio::test]
async fn schedule_tools_create_list_pause_trigger_and_delete_a_schedule() {
    let env = TestEnv::shared("ops-sched").await;
    let _worker = workflow_worker(&env);
    let tools = default_toolset(&env);
    let id = durable_mcp_conformance::harness::unique_name("ops-sched");
    let created = ok(
        &tools,
        "create_schedule",
        json!({
            "schedule_id": id, "cron": "0 0 1 1 *", "workflow_type": "ops-workflow",
            "task_queue": env.task_queue, "args": [{"from": "schedule"}], "note": "made by a test",
        }),
    )
    .await;
    assert_eq!(
        (created["created"].as_bool(), created["paused"].as_bool()),
        (Some(true), Some(false))
    );
    let (kind, _) = fails(&tools, "create_schedule", json!({
        "schedule_id": id, "cron": "0 0 1 1 *", "workflow_type": "ops-workflow", "task_queue": env.task_queue,
    })).await;
    assert_eq!(kind, "AlreadyExists");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let list = ok(&tools, "list_schedules", json!({"limit": 100})).await;
        if list["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["schedule_id"] == id.as_str())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never listed: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let described = ok(&tools, "describe_schedule", json!({"schedule_id": id})).await;
    assert_eq!(described["paused"], false);
    assert_eq!(described["notes"], "made by a test");
    assert_eq!(
        described["action"]["start_workflow"]["workflow_type"],
        "ops-workflow"
    );
    assert_eq!(
        described["action"]["start_workflow"]["args"],
        json!([{"from": "schedule"}])
    );
    assert!(
        !described["next_action_times"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{described}"
    );

    ok(
        &tools,
        "pause_schedule",
        json!({"schedule_id": id, "note": "paused by a test"}),
    )
    .await;
    let paused = ok(&tools, "describe_schedule", json!({"schedule_id": id})).await;
    assert_eq!(
        (paused["paused"].as_bool(), paused["notes"].as_str()),
        (Some(true), Some("paused by a test"))
    );
    ok(&tools, "unpause_schedule", json!({"schedule_id": id})).await;
    assert_eq!(
        ok(&tools, "describe_schedule", json!({"schedule_id": id})).await["paused"],
        false
    );

    ok(&tools, "trigger_schedule", json!({"schedule_id": id})).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let started = loop {
        let d = ok(&tools, "describe_schedule", json!({"schedule_id": id})).await;
        if let Some(action) = d["recent_actions"].as_array().unwrap().first() {
            break action["workflow_id"].as_str().unwrap().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the trigger never started a Workflow: {d}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let state = ok(&tools, "describe_workflow", json!({"workflow_id": started})).await;
    assert_eq!(state["workflow_type"], "ops-workflow");

    let deleted = ok(&tools, "delete_schedule", json!({"schedule_id": id})).await;
    assert_eq!(deleted["deleted"], true);
    let (kind, _) = fails(&tools, "describe_schedule", json!({"schedule_id": id})).await;
    assert_eq!(kind, "NotFound");
    clean_up(&tools, &started).await;
}

#[tokio::test]
async fn a_namespace_outside_the_allow_list_is_refused_before_any_request() {
    let env = TestEnv::shared("ops-ns").await;
    let strict = default_toolset(&env);
    for (name, args) in [
        (
            "describe_workflow",
            json!({"workflow_id": "w", "namespace": "elsewhere"}),
        ),
        (
            "terminate_workflow",
            json!({"workflow_id": "w", "reason": "r", "namespace": "elsewhere"}),
        ),
        ("list_schedules", json!({"namespace": "elsewhere"})),
    ] {
        let (kind, text) = fails(&strict, name, args).await;
        assert_eq!(kind, "NamespaceDenied", "{name}: {text}");
        assert!(
            text.contains("no request was sent") && text.contains("--allowed-namespaces"),
            "{text}"
        );
    }
    // The same call under `*` reaches Temporal, which does not know the namespace: the
    // denial above was ours, made before any request.
    let open = toolset(&env, NamespacePolicy::Any);
    let (kind, text) = fails(
        &open,
        "describe_workflow",
        json!({"workflow_id": "w", "namespace": "elsewhere"}),
    )
    .await;
    assert_eq!(kind, "NotFound", "{text}");
    // The configured namespace is always allowed, named or not.
    let listed = ok(
        &strict,
        "list_workflows",
        json!({"namespace": env.namespace, "limit": 1}),
    )
    .await;
    assert_eq!(listed["namespace"], env.namespace.as_str());
}

#[tokio::test]
async fn a_remote_codec_encodes_what_is_sent_and_decodes_what_is_shown() {
    let env = TestEnv::shared("ops-codec").await;
    let (url, server, namespaces) = serve_xor_codec().await;
    let codec = durable_mcp::temporal::codec::RemoteCodec::new(&url, "unused").unwrap();
    let with_codec = TemporalToolset::new(
        env.connection.clone(),
        &env.namespace,
        NamespacePolicy::default_only(&env.namespace),
        Some(codec),
    )
    .with_decoding();
    let plain = default_toolset(&env);
    let id = durable_mcp_conformance::harness::unique_name("ops-codec");
    // No worker: nothing here could decode the encoded input anyway.
    ok(
        &with_codec,
        "start_workflow",
        start_args(&env, &id, json!({"secret": "plans"})),
    )
    .await;
    ok(
        &with_codec,
        "signal_workflow",
        json!({"workflow_id": id, "signal_name": "add", "args": ["hush"]}),
    )
    .await;

    let decoded = event_of(&with_codec, &id, 1).await;
    assert_eq!(
        decoded["event"]["attributes"]["input"]["payloads"],
        json!([{"secret": "plans"}])
    );
    let stored = event_of(&plain, &id, 1).await;
    let shown = &stored["event"]["attributes"]["input"]["payloads"][0];
    assert_eq!(
        shown["encoding"], "binary/xor-remote",
        "Temporal holds the encoded form: {stored}"
    );
    assert!(!stored.to_string().contains("plans"));

    let history = ok(
        &with_codec,
        "get_workflow_history",
        json!({"workflow_id": id}),
    )
    .await;
    let signal = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "WorkflowExecutionSignaled")
        .unwrap()
        .clone();
    let signal_id = signal["event_id"].as_i64().unwrap();
    assert_eq!(
        signal["attributes"]["input"]["payloads"][0]["encoding"], "binary/xor-remote",
        "history keeps inputs encoded"
    );
    let event = event_of(&with_codec, &id, signal_id).await;
    assert_eq!(
        event["event"]["attributes"]["input"]["payloads"],
        json!(["hush"])
    );

    assert!(!namespaces.lock().unwrap().is_empty());
    assert!(
        namespaces
            .lock()
            .unwrap()
            .iter()
            .all(|ns| ns == &env.namespace),
        "X-Namespace is the call's namespace"
    );
    clean_up(&plain, &id).await;
    server.abort();
}

/// R-OPS-7: a Temporal user without codec access copies another Workflow's ciphertext into a
/// Workflow of their own; a connector that holds the codec shows it to them still encrypted,
/// unless its operator opted in to decoding (then every caller reads the namespace's values).
#[tokio::test]
async fn ciphertext_copied_into_another_workflow_is_not_decrypted_without_the_opt_in() {
    use temporalio_protos::temporal::api::{
        common::v1::{WorkflowExecution, WorkflowType},
        history::v1::history_event::Attributes,
        taskqueue::v1::TaskQueue,
        workflowservice::v1::{GetWorkflowExecutionHistoryRequest, StartWorkflowExecutionRequest},
    };
    let env = TestEnv::shared("ops-planted").await;
    let server = codec_server().await;
    let with_codec = || {
        TemporalToolset::new(
            env.connection.clone(),
            &env.namespace,
            NamespacePolicy::default_only(&env.namespace),
            Some(durable_mcp::temporal::codec::RemoteCodec::new(&server.url, "unused").unwrap()),
        )
    };
    let (encoding_only, decoding) = (with_codec(), with_codec().with_decoding());
    let victim = durable_mcp_conformance::harness::unique_name("ops-victim");
    ok(
        &encoding_only,
        "start_workflow",
        start_args(&env, &victim, json!({"card": "4111-1111"})),
    )
    .await;
    // The planter reads the stored ciphertext with its own Temporal access and starts a
    // Workflow of its own with it.
    let history = env
        .connection
        .workflow_service()
        .get_workflow_execution_history(tonic::Request::new(GetWorkflowExecutionHistoryRequest {
            namespace: env.namespace.clone(),
            execution: Some(WorkflowExecution {
                workflow_id: victim.clone(),
                run_id: String::new(),
            }),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let started = history.history.unwrap().events[0].attributes.clone();
    let Some(Attributes::WorkflowExecutionStartedEventAttributes(started)) = started else {
        panic!("event 1 is the start: {started:?}")
    };
    let planted = durable_mcp_conformance::harness::unique_name("ops-planted");
    env.connection
        .workflow_service()
        .start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace: env.namespace.clone(),
            workflow_id: planted.clone(),
            workflow_type: Some(WorkflowType {
                name: "ops-workflow".into(),
            }),
            task_queue: Some(TaskQueue {
                name: env.task_queue.clone(),
                ..Default::default()
            }),
            input: started.input,
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        }))
        .await
        .unwrap();
    // Any read caller of a connector that did not opt in sees ciphertext, not the card.
    let shown = event_of(&encoding_only, &planted, 1).await;
    assert!(!shown.to_string().contains("4111"), "{shown}");
    assert_eq!(
        shown["event"]["attributes"]["input"]["payloads"][0]["encoding"],
        durable_mcp_conformance::fixtures::codec::ENCRYPTED_ENCODING
    );
    // The operator's opt-in decodes what a Workflow holds, whoever put it there (R-OPS-7 says
    // who may then call the decoding tools).
    let opted_in = event_of(&decoding, &planted, 1).await;
    assert_eq!(
        opted_in["event"]["attributes"]["input"]["payloads"],
        json!([{"card": "4111-1111"}])
    );
    for id in [&victim, &planted] {
        clean_up(&encoding_only, id).await;
    }
}

/// R-OPS-8: a history larger than the answer limit is cut at the limit with a headline saying
/// how to read the rest; an answer that cannot be cut is refused naming both sizes.
#[tokio::test]
async fn history_answers_stop_at_the_byte_limit_and_say_how_to_read_the_rest() {
    let env = TestEnv::shared("ops-budget").await;
    let limit = 64 * 1024;
    let tools = default_toolset(&env).with_answer_bytes(limit);
    let id = durable_mcp_conformance::harness::unique_name("ops-budget");
    ok(
        &tools,
        "start_workflow",
        start_args(&env, &id, json!("small")),
    )
    .await;
    let blob = "x".repeat(20 * 1024);
    for _ in 0..6 {
        ok(
            &tools,
            "signal_workflow",
            json!({"workflow_id": id, "signal_name": "add", "args": [blob]}),
        )
        .await;
    }
    let result = tools
        .call(
            "get_workflow_history",
            json!({"workflow_id": id}).as_object().unwrap(),
        )
        .await;
    let text = result.content[0].as_text().unwrap().text.clone();
    let history = structured(&tools, "get_workflow_history", result);
    assert_eq!(history["truncated"], true, "{history}");
    let count = history["count"].as_u64().unwrap();
    assert!(
        (1..7).contains(&count),
        "{count} of 7 events fit in {limit} bytes"
    );
    assert!(
        serde_json::to_vec(&history).unwrap().len() <= limit,
        "the answer stays within the limit"
    );
    assert!(
        text.contains("answer limit of 65536 bytes") && text.contains("get_workflow_event"),
        "{text}"
    );
    // One event is whole or refused: a value the limit cannot hold is an AnswerTooLarge error.
    let small = default_toolset(&env).with_answer_bytes(4 * 1024);
    let (kind, text) = fails(
        &small,
        "get_workflow_event",
        json!({"workflow_id": id, "event_id": count + 1}),
    )
    .await;
    assert_eq!(kind, "AnswerTooLarge", "{text}");
    assert!(text.contains("limit of 4096 bytes"), "{text}");
    clean_up(&tools, &id).await;
}

/// R-OPS-9: a read-only toolset (HTTP without auth) lists no tool that changes state and
/// refuses a call of one naming the flags, before any request.
#[tokio::test]
async fn a_read_only_toolset_neither_lists_nor_runs_the_tools_that_change_state() {
    let env = TestEnv::shared("ops-read-only").await;
    let tools = default_toolset(&env).read_only();
    let names: Vec<_> = tools
        .tools()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"list_workflows".to_owned()), "{names:?}");
    for change in [
        "start_workflow",
        "terminate_workflow",
        "batch_terminate",
        "delete_schedule",
    ] {
        assert!(!names.contains(&change.to_owned()), "{change} in {names:?}");
    }
    let id = durable_mcp_conformance::harness::unique_name("ops-read-only");
    let (kind, text) = fails(&tools, "start_workflow", start_args(&env, &id, json!(1))).await;
    assert_eq!(kind, "PermissionDenied", "{text}");
    assert!(
        text.contains("--auth-config") && text.contains("--temporal-tools-unauthenticated-writes"),
        "{text}"
    );
    assert_never_started(&env, &id).await;
}

/// R-OPS-1: a Temporal tool called with an idempotency key is refused, nothing runs: it is
/// answered directly and could not find an earlier call again.
#[tokio::test]
async fn a_keyed_call_of_a_temporal_tool_is_refused_and_runs_nothing() {
    use durable_mcp::connector::server::{Connector, ConnectorOptions};
    let env = TestEnv::shared("ops-keyed").await;
    let connector = Connector::with_local_tools(
        env.client.clone(),
        ConnectorOptions::new(vec![]),
        Some(std::sync::Arc::new(default_toolset(&env))),
    );
    let client = client_for(connector).await.unwrap();
    let id = durable_mcp_conformance::harness::unique_name("ops-keyed");
    let mut call = tool_call("start_workflow", start_args(&env, &id, json!(1)));
    call.meta = Some(serde_json::from_value(json!({"idempotencyKey": "once"})).unwrap());
    let err = client.peer().call_tool(call).await.unwrap_err().to_string();
    assert!(
        err.contains("cannot honour an idempotency key") && err.contains("Nothing ran"),
        "{err}"
    );
    assert_never_started(&env, &id).await;
    // Without the key it runs.
    let unkeyed = client
        .peer()
        .call_tool(tool_call("list_workflows", json!({})))
        .await
        .unwrap();
    assert_ne!(unkeyed.is_error, Some(true), "{unkeyed:?}");
    client.cancel().await.unwrap();
}

/// `durable-mcp-connector --temporal-tools` (no route) as an MCP host starts it.
fn toolset_connector(env: &TestEnv) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(workspace_bin("durable-mcp-connector").unwrap());
    command
        .arg("--temporal-tools")
        .env("TEMPORAL_ADDRESS", &env.address)
        .env("TEMPORAL_NAMESPACE", &env.namespace);
    command
}

#[tokio::test]
async fn an_mcp_client_operates_temporal_through_the_connector_binary() {
    use rmcp::ServiceExt as _;
    let env = TestEnv::shared("ops-mcp").await;
    let _worker = workflow_worker(&env);
    let transport = rmcp::transport::TokioChildProcess::new(toolset_connector(&env)).unwrap();
    let client = ().serve(transport).await.expect("MCP handshake with --temporal-tools");
    let call = |name: &str, args: Value| {
        let peer = client.peer().clone();
        let request = tool_call(name, args);
        async move { peer.call_tool(request).await.expect("tools/call answers") }
    };

    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(
        tools.len(),
        21,
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let by_name = |n: &str| tools.iter().find(|t| t.name == n).unwrap().clone();
    let read = by_name("list_workflows").annotations.unwrap();
    assert_eq!(read.read_only_hint, Some(true));
    let terminate = by_name("terminate_workflow").annotations.unwrap();
    assert_eq!(
        (terminate.read_only_hint, terminate.destructive_hint),
        (Some(false), Some(true))
    );
    assert!(by_name("start_workflow").output_schema.is_some());

    let id = durable_mcp_conformance::harness::unique_name("ops-mcp");
    let started = call(
        "start_workflow",
        start_args(&env, &id, json!({"via": "mcp"})),
    )
    .await;
    assert_ne!(started.is_error, Some(true), "{started:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let list = call(
            "list_workflows",
            json!({"query": format!("WorkflowId = '{id}'")}),
        )
        .await;
        if list.structured_content.as_ref().unwrap()["count"] == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never listed: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let history = call("get_workflow_history", json!({"workflow_id": id})).await;
    let text = history.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("WorkflowExecutionStarted"), "{text}");
    let signalled = call(
        "signal_workflow",
        json!({"workflow_id": id, "signal_name": "add", "args": ["m"]}),
    )
    .await;
    assert_ne!(signalled.is_error, Some(true), "{signalled:?}");
    let cancelled = call(
        "cancel_workflow",
        json!({"workflow_id": id, "wait_seconds": 10}),
    )
    .await;
    assert_eq!(cancelled.structured_content.unwrap()["status"], "CANCELED");

    let schedule = durable_mcp_conformance::harness::unique_name("ops-mcp-sched");
    let created = call("create_schedule", json!({
        "schedule_id": schedule, "cron": "0 0 1 1 *", "workflow_type": "ops-workflow", "task_queue": env.task_queue,
    })).await;
    assert_ne!(created.is_error, Some(true), "{created:?}");
    let triggered = call("trigger_schedule", json!({"schedule_id": schedule})).await;
    assert_ne!(triggered.is_error, Some(true), "{triggered:?}");
    let deleted = call("delete_schedule", json!({"schedule_id": schedule})).await;
    assert_eq!(deleted.structured_content.unwrap()["deleted"], true);

    let denied = call("list_workflows", json!({"namespace": "elsewhere"})).await;
    assert_eq!(denied.is_error, Some(true));
    assert!(
        denied.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("no request was sent")
    );

    // Clean up what the schedule started.
    let started_by_schedule = call(
        "batch_terminate",
        json!({
            "query": format!("TaskQueue = '{}'", env.task_queue), "reason": "test cleanup",
        }),
    )
    .await;
    assert_ne!(started_by_schedule.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bad_allowed_namespaces_list_stops_the_connector_with_the_reason() {
    let env = TestEnv::shared("ops-badns").await;
    let output = toolset_connector(&env)
        .args(["--allowed-namespaces", "payments"])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("does not include the connector's namespace"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_routed_tool_named_like_a_temporal_tool_is_left_out_naming_both() {
    use durable_mcp::{
        connector::server::{Connector, ConnectorOptions},
        contract::{listing::LIST_TOOLS, payload},
        nexus::{Service, StartOutcome, start_fn},
    };
    let env = TestEnv::shared("ops-clash").await;
    let service = Service::new("clashing").operation(
        LIST_TOOLS,
        start_fn(|_, _| async {
            let tools = json!([
                {"name": "start_workflow", "inputSchema": {"type": "object"}},
                {"name": "harmless", "inputSchema": {"type": "object"}}
            ]);
            Ok(StartOutcome::Sync(payload::to_payload(&tools).unwrap()))
        }),
    );
    let worker = env.nexus_worker(vec![service]).await;
    let connector = Connector::with_local_tools(
        env.client.clone(),
        ConnectorOptions::new(vec![route("clashing", &env.endpoint)]),
        Some(std::sync::Arc::new(default_toolset(&env))),
    );
    let collisions = connector.check_tool_names().await.unwrap();
    assert_eq!(collisions.len(), 1, "{collisions:?}");
    assert!(
        collisions[0].contains("\"start_workflow\"")
            && collisions[0].contains("--temporal-tools")
            && collisions[0].contains("\"clashing\""),
        "{collisions:?}"
    );
    // The listing still works: the routed tool of that name is left out, the Temporal tool and
    // the route's other tools stay.
    let client = client_for(connector).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    let named: Vec<_> = tools
        .iter()
        .filter(|t| t.name == "start_workflow")
        .collect();
    assert_eq!(named.len(), 1);
    assert!(
        named[0]
            .description
            .as_deref()
            .unwrap_or_default()
            .contains("Workflow"),
        "the Temporal tool keeps the name: {:?}",
        named[0]
    );
    assert!(tools.iter().any(|t| t.name == "harmless"));
    client.cancel().await.unwrap();
    worker.stop().await;
}
