//! R-NAT: native tools. `durable-mcp-example-tools` (a real process, as users run it) serves the
//! `examples` service on the dev server; a connector in front of it lists and calls the tools
//! with an rmcp client; Workflows are checked in Temporal itself.

use std::time::Duration;

use durable_mcp::{
    connector::{
        server::{Connector, ConnectorOptions},
        task_ref::{CallerScope, SigningKey},
    },
    contract::{
        call::WorkflowCallToken,
        listing::{TIMEOUT_META_KEY, advertised_timeout},
        payload,
    },
    nexus::{CancelContext, OperationOutcome, StartContext, StartOperation, StartOutcome},
    temporal::{
        TemporalConnection,
        workflow::{WorkflowExecutionStatus, cancel_workflow, describe_workflow},
    },
};
use rmcp::model::CancelTaskParams;
use serde_json::{Value, json};
use temporalio_protos::temporal::api::{
    common::v1::WorkflowExecution,
    enums::v1::EventType,
    workflowservice::v1::{GetWorkflowExecutionHistoryRequest, ListWorkflowExecutionsRequest},
};

use crate::support::*;

/// A connector routing to `examples` that answers with a task after 300 ms.
fn examples_connector(env: &TestEnv) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("examples", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    Connector::new(env.client.clone(), options)
}

/// Calls `slow_report` for `seconds` from a tasks-capable client; answers the task ID.
async fn slow_report_task(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    seconds: u32,
) -> String {
    let answer = client
        .peer()
        .call_tool_once(tool_call("slow_report", json!({"seconds": seconds})))
        .await
        .unwrap();
    task_id_of(answer)
}

/// The Workflows run on the env's task queue (visibility is eventually consistent: waits until
/// `done` holds for the list, at most 60 s: visibility lags on a loaded machine).
async fn workflows_on(
    env: &TestEnv,
    done: impl Fn(&[(String, WorkflowExecutionStatus)]) -> bool,
) -> Vec<(String, WorkflowExecutionStatus)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = env
            .connection
            .workflow_service()
            .list_workflow_executions(tonic::Request::new(ListWorkflowExecutionsRequest {
                namespace: env.namespace.clone(),
                page_size: 100,
                query: format!("TaskQueue = '{}'", env.task_queue),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        let found: Vec<_> = listed
            .executions
            .iter()
            .map(|e| {
                (
                    e.execution.as_ref().unwrap().workflow_id.clone(),
                    e.status(),
                )
            })
            .collect();
        if done(&found) || tokio::time::Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn native_tools_are_listed_with_titles_annotations_schemas_and_timeouts() {
    let env = TestEnv::shared("native-list").await;
    let _tools = example_tools(&env).await.unwrap();
    let client = client_for(examples_connector(&env)).await.unwrap();
    let listed: Vec<Value> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let names: Vec<_> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["word_count", "slow_report", "delete_files"],
        "server_info is not a tool"
    );

    let word_count = &listed[0];
    assert_eq!(word_count["title"], "Count words");
    assert_eq!(
        word_count["description"],
        "Counts the words of a text (split on whitespace)."
    );
    assert_eq!(
        word_count["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(word_count["inputSchema"]["type"], "object");
    assert_eq!(
        word_count["inputSchema"]["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(word_count["inputSchema"]["required"], json!(["text"]));
    assert_eq!(
        word_count["outputSchema"]["properties"]["words"]["type"],
        "integer"
    );
    assert_eq!(word_count["_meta"][TIMEOUT_META_KEY], 10_000);

    let slow_report = &listed[1];
    assert_eq!(slow_report["title"], "Write a slow report");
    assert!(
        slow_report["description"]
            .as_str()
            .unwrap()
            .contains("Cancellable"),
        "{slow_report}"
    );
    assert_eq!(
        slow_report["inputSchema"]["properties"]["seconds"]["type"],
        "integer"
    );
    assert_eq!(
        slow_report["outputSchema"]["properties"]["report"]["type"],
        "string"
    );
    assert_eq!(
        advertised_timeout(slow_report),
        Some(Duration::from_secs(7200))
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_sync_native_tool_answers_through_the_connector() {
    let env = TestEnv::shared("native-sync").await;
    let _tools = example_tools(&env).await.unwrap();
    let client = client_for(examples_connector(&env)).await.unwrap();

    let counted = client
        .peer()
        .call_tool(tool_call("word_count", json!({"text": "a b c"})))
        .await
        .unwrap();
    assert_eq!(counted.structured_content, Some(json!({"words": 3})));
    assert_eq!(counted.is_error, Some(false));
    let text = serde_json::to_value(&counted.content).unwrap();
    assert_eq!(text, json!([{"type": "text", "text": "3 words"}]));

    // Arguments that do not fit the input type fail the call with the stable type.
    let refused = client
        .peer()
        .call_tool(tool_call("word_count", json!({"text": 5})))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        serde_json::to_value(&refused).unwrap()["_meta"]["io.durable-mcp/errorType"],
        "InvalidArguments"
    );

    // The operation that is not a tool is still a Nexus operation for callers who know it.
    let start = StartOperation::new(
        uuid::Uuid::new_v4().to_string(),
        &env.endpoint,
        "examples",
        "server_info",
        payload::to_payload(&json!({})).unwrap(),
    );
    let (_, outcome) = start_and_wait(&env, start).await;
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("{outcome:?}")
    };
    let info = payload::to_json(&p).unwrap();
    assert!(
        info["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("durable-mcp-example-tools "),
        "{info}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_workflow_backed_tool_answers_through_the_connector_with_progress() {
    let env = TestEnv::shared("native-workflow").await;
    let _tools = example_tools(&env).await.unwrap();
    let client = task_client_for(examples_connector(&env)).await.unwrap();

    let task_id = slow_report_task(&client, 3).await;
    let mut messages: Vec<String> = Vec::new();
    let done = poll_task_watching(&client, &task_id, |working| {
        if let Some(m) = working["statusMessage"].as_str()
            && !messages.iter().any(|seen| seen == m)
        {
            messages.push(m.to_owned());
        }
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"seconds": 3, "report": "The report took 3 seconds."}),
        "the Workflow's result is the CallToolResult: {done}"
    );
    assert_eq!(done["result"]["isError"], false);
    assert!(
        messages.iter().any(|m| m.ends_with("of 3 seconds")),
        "the Workflow's progress reached tasks/get: {messages:?}"
    );

    let workflows = workflows_on(&env, |w| !w.is_empty()).await;
    assert_eq!(workflows.len(), 1, "{workflows:?}");
    assert!(workflows[0].0.starts_with("mcp/examples/slow_report/"));
    assert_eq!(workflows[0].1, WorkflowExecutionStatus::Completed);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_mcp_cancel_leaves_the_workflow_canceled() {
    let env = TestEnv::shared("native-cancel").await;
    let _tools = example_tools(&env).await.unwrap();

    // Route 1: tasks/cancel.
    let client = task_client_for(examples_connector(&env)).await.unwrap();
    let task_id = slow_report_task(&client, 600).await;
    client
        .peer()
        .cancel_task(CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    let done = poll_task_until_done(&client, &task_id).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    let workflows = workflows_on(&env, |w| {
        w.iter()
            .any(|(_, s)| *s == WorkflowExecutionStatus::Canceled)
    })
    .await;
    assert_eq!(
        workflows.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        [WorkflowExecutionStatus::Canceled],
        "{workflows:?}"
    );
    client.cancel().await.unwrap();

    // Route 2: the client drops the call (rmcp sends notifications/cancelled).
    let client = client_for(examples_connector(&env)).await.unwrap();
    let call = client
        .peer()
        .call_tool(tool_call("slow_report", json!({"seconds": 600})));
    let _ = tokio::time::timeout(Duration::from_millis(1500), call).await;
    let workflows = workflows_on(&env, |w| {
        w.len() == 2
            && w.iter()
                .all(|(_, s)| *s == WorkflowExecutionStatus::Canceled)
    })
    .await;
    assert_eq!(workflows.len(), 2, "{workflows:?}");
    assert!(
        workflows
            .iter()
            .all(|(_, s)| *s == WorkflowExecutionStatus::Canceled),
        "{workflows:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_retried_workflow_backed_start_runs_one_workflow_and_a_late_cancel_is_no_error() {
    let env = TestEnv::shared("native-retry").await;
    let _tools = example_tools(&env).await.unwrap();
    // The same service in this process, to deliver one start twice as the server does when it
    // retries a start (same request id).
    let temporal = TemporalConnection {
        connection: env.connection.clone(),
        namespace: env.namespace.clone(),
    };
    let service = durable_mcp_examples::tool_service(temporal, &env.task_queue).unwrap();
    let handler = service.handler("slow_report").unwrap().clone();
    let request_id = uuid::Uuid::new_v4().to_string();
    let start = || {
        handler.start(
            StartContext::new(&env.endpoint, "examples", "slow_report", &request_id),
            payload::to_payload(&json!({"seconds": 1})).unwrap(),
        )
    };
    let token = |outcome| match outcome {
        Ok(StartOutcome::Async { token }) => WorkflowCallToken::parse(&token).unwrap(),
        other => panic!("expected an async start, got {other:?}"),
    };
    let first = token(start().await);
    let retried = token(start().await);
    assert_eq!(first, retried, "the retried start attached to the same run");
    assert_eq!(
        first.workflow_id,
        format!("mcp/examples/slow_report/{request_id}")
    );

    // Once the Workflow closed, a late retry still answers with that run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let d = describe_workflow(&env.connection, &env.namespace, &first.workflow_id, "")
            .await
            .unwrap()
            .unwrap();
        if d.status == WorkflowExecutionStatus::Completed {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{d:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(token(start().await), first);
    // A cancel that arrives after the Workflow closed is no error: its outcome is on its way.
    let late_cancel = handler
        .cancel(CancelContext {
            endpoint: env.endpoint.clone(),
            service: "examples".into(),
            operation: "slow_report".into(),
            token: serde_json::to_string(&first).unwrap(),
            headers: Default::default(),
            deadline: None,
            cancelled: Default::default(),
        })
        .await;
    assert_eq!(late_cancel, Ok(()));

    let workflows = workflows_on(&env, |w| !w.is_empty()).await;
    assert_eq!(
        workflows,
        [(
            first.workflow_id.clone(),
            WorkflowExecutionStatus::Completed
        )],
        "one Workflow ran"
    );
}

/// The event types of a Workflow's history, in order.
async fn history_of(env: &TestEnv, workflow_id: &str) -> Vec<EventType> {
    let history = env
        .connection
        .workflow_service()
        .get_workflow_execution_history(tonic::Request::new(GetWorkflowExecutionHistoryRequest {
            namespace: env.namespace.clone(),
            execution: Some(WorkflowExecution {
                workflow_id: workflow_id.to_owned(),
                run_id: String::new(),
            }),
            maximum_page_size: 1000,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    history
        .history
        .map(|h| h.events.iter().map(|e| e.event_type()).collect())
        .unwrap_or_default()
}

/// Waits (at most 30 s) until the Workflow's history holds an event of type `event`.
async fn wait_for_event(env: &TestEnv, workflow_id: &str, event: EventType) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !history_of(env, workflow_id).await.contains(&event) {
        assert!(tokio::time::Instant::now() < deadline, "no {event:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancel_arriving_with_the_timers_firing_still_cancels_the_workflow() {
    // The Workflow's cancel and its pending timer's firing reach the worker in one activation:
    // the worker is stopped between the two and started again. SlowReport waits with
    // sleep_unless_cancelled; a timer that inherits the Workflow's cancellation makes
    // temporalio-workflow panic here, and the Workflow runs on with every task failing.
    let env = TestEnv::shared("native-cancel-with-timer").await;
    let client = task_client_for(examples_connector(&env)).await.unwrap();
    let mut seen = Vec::new();
    // The cancel must land within the timer's 1 s: a loaded machine gets three tries.
    let workflow_id = loop {
        assert!(seen.len() < 3, "the cancel never beat the timer: {seen:?}");
        let tools = example_tools(&env).await.unwrap();
        let _task = slow_report_task(&client, 600).await;
        let listed = workflows_on(&env, |w| w.len() > seen.len()).await;
        let (workflow_id, _) = listed.iter().find(|(id, _)| !seen.contains(id)).unwrap();
        wait_for_event(&env, workflow_id, EventType::TimerStarted).await;
        drop(tools);
        cancel_workflow(&env.connection, &env.namespace, workflow_id, "", "test")
            .await
            .unwrap();
        wait_for_event(&env, workflow_id, EventType::TimerFired).await;
        let history = history_of(&env, workflow_id).await;
        let at = |t| history.iter().position(|e| *e == t).unwrap();
        seen.push(workflow_id.clone());
        if at(EventType::WorkflowExecutionCancelRequested) < at(EventType::TimerFired) {
            break workflow_id.clone();
        }
    };
    let _tools = example_tools(&env).await.unwrap();
    let workflows = workflows_on(&env, |w| {
        w.iter()
            .all(|(_, s)| *s == WorkflowExecutionStatus::Canceled)
    })
    .await;
    assert!(
        workflows.contains(&(workflow_id.clone(), WorkflowExecutionStatus::Canceled)),
        "{workflows:?}: {:?}",
        history_of(&env, &workflow_id).await
    );
    client.cancel().await.unwrap();
}

/// A connector with companion tools for callers in `scope`, signing with `key`.
fn companion_connector(env: &TestEnv, key: &SigningKey, scope: &str) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("examples", &env.endpoint)]);
    // Long enough that word_count answers inline even on a loaded machine.
    options.task_after = Duration::from_secs(1);
    options.companion_tools = true;
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    Connector::new(env.client.clone(), options)
}

/// Calls a tool with a plain (tasks-less) client and answers the result as JSON.
async fn call_json(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> Value {
    let result = client
        .peer()
        .call_tool(tool_call(tool, arguments))
        .await
        .unwrap();
    serde_json::to_value(result).unwrap()
}

/// The task ID a call that continues as a companion task answered with.
fn companion_task_id(answer: &Value) -> String {
    answer["_meta"]["io.durable-mcp/taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task ID in {answer}"))
        .to_owned()
}

#[tokio::test]
async fn companion_tools_follow_a_long_call_for_clients_without_the_tasks_extension() {
    let env = TestEnv::shared("native-companion").await;
    let _tools = example_tools(&env).await.unwrap();
    let key = SigningKey::generate();
    let alice = client_for(companion_connector(&env, &key, "alice"))
        .await
        .unwrap();
    let mallory = client_for(companion_connector(&env, &key, "mallory"))
        .await
        .unwrap();

    let names: Vec<String> = alice
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, EXAMPLE_TOOLS_WITH_COMPANIONS);

    // Quick calls still answer inline.
    let counted = call_json(&alice, "word_count", json!({"text": "a b c"})).await;
    assert_eq!(counted["structuredContent"], json!({"words": 3}));

    // A call outlasting task_after answers with its task ID and how to follow it (a tool
    // error, since slow_report's output schema admits no task note).
    let started = call_json(&alice, "slow_report", json!({"seconds": 3})).await;
    assert_eq!(started["isError"], true, "{started}");
    assert!(started.get("structuredContent").is_none(), "{started}");
    let task_id = companion_task_id(&started);
    assert!(
        started["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("task_result"),
        "{started}"
    );
    let status = call_json(&alice, "task_status", json!({"task_id": task_id})).await;
    assert_eq!(status["structuredContent"]["taskId"], task_id.as_str());
    assert!(
        ["working", "completed"].contains(&status["structuredContent"]["status"].as_str().unwrap()),
        "{status}"
    );
    let result = call_json(&alice, "task_result", json!({"task_id": task_id})).await;
    assert_eq!(
        result["structuredContent"],
        json!({"seconds": 3, "report": "The report took 3 seconds."}),
        "{result}"
    );

    // Another caller gets exactly what a forged ID gets.
    let foreign = call_json(&mallory, "task_status", json!({"task_id": task_id})).await;
    let forged = call_json(&mallory, "task_status", json!({"task_id": "forged"})).await;
    assert_eq!(foreign, forged);
    assert_eq!(foreign["isError"], true);
    assert_eq!(foreign["content"][0]["text"], "unknown task");
    let foreign_cancel = call_json(&mallory, "task_cancel", json!({"task_id": task_id})).await;
    assert_eq!(foreign_cancel["content"][0]["text"], "unknown task");

    // task_cancel stops the Workflow; task_status then says cancelled.
    let started = call_json(&alice, "slow_report", json!({"seconds": 600})).await;
    let task_id = companion_task_id(&started);
    let cancelled = call_json(&alice, "task_cancel", json!({"task_id": task_id})).await;
    assert_eq!(cancelled["isError"], false, "{cancelled}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = call_json(&alice, "task_status", json!({"task_id": task_id})).await;
        if status["structuredContent"]["status"] == "cancelled" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let workflows = workflows_on(&env, |w| {
        w.iter()
            .any(|(_, s)| *s == WorkflowExecutionStatus::Canceled)
    })
    .await;
    assert!(
        workflows
            .iter()
            .any(|(_, s)| *s == WorkflowExecutionStatus::Canceled),
        "{workflows:?}"
    );
    for c in [alice, mallory] {
        c.cancel().await.unwrap();
    }
}

/// The Temporal tools' answer to `name` as JSON (`isError`, `_meta`, `structuredContent`).
async fn ops(
    tools: &durable_mcp::temporal_tools::TemporalToolset,
    name: &str,
    args: Value,
) -> Value {
    serde_json::to_value(tools.call(name, args.as_object().unwrap()).await).unwrap()
}

#[tokio::test]
async fn temporal_tools_neither_show_nor_touch_a_callers_tool_workflow() {
    use durable_mcp::temporal_tools::{NamespacePolicy, TemporalToolset};
    let env = TestEnv::shared("native-ops-isolation").await;
    let _tools = example_tools(&env).await.unwrap();
    // Alice's long call runs as a Workflow `mcp/examples/slow_report/...` on the env's queue.
    let alice = task_client_for(examples_connector(&env)).await.unwrap();
    let task_id = slow_report_task(&alice, 600).await;
    let running = workflows_on(&env, |w| w.len() == 1).await;
    assert_eq!(running.len(), 1, "{running:?}");
    let workflow_id = running[0].0.clone();
    assert!(
        workflow_id.starts_with("mcp/examples/slow_report/"),
        "{workflow_id}"
    );

    // Bob holds the Temporal tools (every family): he sees none of it and can touch none of it.
    let bob = TemporalToolset::new(
        env.connection.clone(),
        &env.namespace,
        NamespacePolicy::default_only(&env.namespace),
        None,
    );
    let queue = format!("TaskQueue = '{}'", env.task_queue);
    for query in [queue.clone(), String::new()] {
        let listed = ops(
            &bob,
            "list_workflows",
            json!({"query": query, "limit": 100}),
        )
        .await;
        assert_eq!(listed["isError"], json!(false), "{listed}");
        assert!(
            !listed.to_string().contains("mcp/"),
            "{query:?} listed {listed}"
        );
    }
    let by_id = json!({"workflow_id": workflow_id, "reason": "r", "signal_name": "s",
        "query_type": "q", "event_id": 1});
    for tool in [
        "describe_workflow",
        "get_workflow_history",
        "get_workflow_event",
        "get_workflow_result",
        "query_workflow",
        "signal_workflow",
        "cancel_workflow",
        "terminate_workflow",
        "continue_as_new",
    ] {
        let refused = ops(&bob, tool, by_id.clone()).await;
        assert_eq!(refused["isError"], json!(true), "{tool}: {refused}");
        assert_eq!(
            refused["_meta"]["io.durable-mcp/errorType"],
            json!("PermissionDenied"),
            "{tool}: {refused}"
        );
    }
    let batch = ops(&bob, "batch_cancel", json!({"query": queue})).await;
    assert_eq!(batch["structuredContent"]["matched"], json!(0), "{batch}");
    let reused = ops(
        &bob,
        "start_workflow",
        json!({"workflow_type": "slow_report", "task_queue": env.task_queue,
            "workflow_id": "mcp/examples/slow_report/bobs"}),
    )
    .await;
    assert_eq!(reused["isError"], json!(true), "{reused}");

    // Alice's task is untouched: still working, and she can still cancel it herself.
    let got = alice
        .peer()
        .get_task(rmcp::model::GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(
        got.task.status(),
        rmcp::model::TaskStatus::Working,
        "{got:?}"
    );
    alice
        .peer()
        .cancel_task(CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    let done = poll_task_until_done(&alice, &task_id).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    alice.cancel().await.unwrap();
}

/// R-PAY-4 on a native tool service: its Nexus worker has the codec, so it reads the encoded
/// arguments a codec-using caller sends and encodes its answer; Temporal stores both sealed.
#[tokio::test]
async fn a_native_tool_service_with_a_codec_reads_and_answers_encoded_payloads() {
    use durable_mcp::{
        nexus::{NexusWorker, NexusWorkerOptions},
        contract::payload::PayloadCodec,
        temporal::codec::RemoteCodec,
    };
    use temporalio_protos::temporal::api::workflowservice::v1::describe_nexus_operation_execution_response::Outcome;
    let env = TestEnv::shared("native-codec").await;
    let server = codec_server().await;
    let codec: std::sync::Arc<dyn PayloadCodec> =
        std::sync::Arc::new(RemoteCodec::new(&server.url, &env.namespace).unwrap());
    let service = durable_mcp_examples::tool_service(
        TemporalConnection {
            connection: env.connection.clone(),
            namespace: env.namespace.clone(),
        },
        &env.task_queue,
    )
    .unwrap();
    let mut options = NexusWorkerOptions::new(&env.namespace, &env.task_queue);
    options.graceful_shutdown = Duration::from_secs(2);
    options.codec = Some(codec.clone());
    let worker = NexusWorker::new(env.connection.clone(), options, [service])
        .await
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let join = tokio::spawn(worker.run());

    let canary = format!("canary{}", uuid::Uuid::new_v4().simple());
    let client = env.client.clone().with_codec(codec);
    let (op, _) = client
        .start(StartOperation::new(
            uuid::Uuid::new_v4().to_string(),
            &env.endpoint,
            "examples",
            "word_count",
            payload::to_payload(&json!({"text": format!("{canary} b c")})).unwrap(),
        ))
        .await
        .unwrap();
    let outcome = client
        .wait(&op, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        payload::to_json(&p).unwrap()["structuredContent"],
        json!({"words": 3})
    );

    let stored = stored_operation(&env, &op.operation_id, &op.run_id).await;
    let Some(Outcome::Result(result)) = &stored.outcome else {
        panic!("no result stored: {stored:?}")
    };
    for (what, p) in [
        ("input", stored.input.as_ref().unwrap()),
        ("result", result),
    ] {
        assert_eq!(
            payload::encoding(p),
            Some(durable_mcp_conformance::fixtures::codec::ENCRYPTED_ENCODING),
            "the {what} is stored unencrypted"
        );
        assert!(
            !p.data.windows(canary.len()).any(|w| w == canary.as_bytes()),
            "the {what} holds the argument in clear"
        );
    }
    shutdown.shutdown();
    join.await.unwrap().unwrap();
}
