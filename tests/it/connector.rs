//! R-CON (first slice): the connector as an MCP server in front of the proxy, driven by a real
//! rmcp client: tools/list through Nexus, tools/call as standalone operations, unknown tools,
//! duplicate tool names across routes, and client cancellation reaching the upstream.

use std::time::Duration;

use durable_mcp::{
    connector::server::{Connector, ConnectorOptions},
    contract::errors::ConnectorErrorType,
};
use durable_mcp_conformance::fixtures::{self, Ledger, LedgerEvent, UpstreamSpec};
use rmcp::{ServiceExt, model::CallToolRequestParams};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn mcp_client_lists_and_calls_tools_through_the_connector() {
    let env = TestEnv::shared("connector").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let client = client_for(connector_for(&env, "mock")).await.unwrap();

    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    let standard: Vec<_> = UpstreamSpec::standard()
        .tools
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names.len(), standard.len(), "{names:?}");
    for name in &standard {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }

    let echo = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "c1", "n": 5})))
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "c1", "n": 5})));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "c1"), 1);

    let everything = client
        .peer()
        .call_tool(CallToolRequestParams::new("everything"))
        .await
        .unwrap();
    let everything =
        serde_json::from_str::<serde_json::Value>(&serde_json::to_string(&everything).unwrap())
            .unwrap();
    assert_eq!(
        everything,
        fixtures::all_content_json(),
        "the whole result reaches the MCP client"
    );

    let refused = client
        .peer()
        .call_tool(CallToolRequestParams::new("refuse"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));

    // Unknown tools are refused before anything starts.
    let err = client
        .peer()
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no_such_tool"), "{err}");

    // Dropping the call (the client's cancel) cancels the operation, and the upstream sees it.
    let slow = client
        .peer()
        .call_tool(tool_call("slow", json!({"key": "s1"})));
    let _ = tokio::time::timeout(Duration::from_millis(1500), slow).await;
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(10))
            .await,
        1
    );
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30))
            .await,
        1,
        "the client's cancel reached the upstream: {:?}",
        ledger.read()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn two_routes_exposing_one_tool_name_leave_it_out_and_a_call_names_both() {
    let env = TestEnv::shared("connector-dup").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![
            mock_stdio_upstream("first", &ledger).unwrap(),
            mock_stdio_upstream("second", &ledger).unwrap(),
        ],
    );
    // A third route that nothing serves fails its listing: the ambiguity is still named.
    let connector = Connector::new(
        env.client.clone(),
        ConnectorOptions::new(vec![
            route("first", &env.endpoint),
            route("second", &env.endpoint),
            route("nowhere", &env.endpoint),
        ]),
    );
    let client = client_for(connector).await.unwrap();
    // Both mocks list the same tools: every name is ambiguous, so none is listed, and the
    // listing itself still answers.
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(
        !tools.iter().any(|t| t.name == "echo"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let err = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "dup"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"echo\"") && err.contains("\"first\"") && err.contains("\"second\""),
        "{err}"
    );
    assert!(ledger.read().is_empty(), "nothing ran: {:?}", ledger.read());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_connector_binary_serves_stdio_like_an_mcp_host_would_start_it() {
    let env = TestEnv::shared("connector-bin").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    // Exactly what an `mcpServers` entry does: command, --route args, TEMPORAL_* env.
    let transport =
        rmcp::transport::TokioChildProcess::new(connector_command(&env, "mock")).unwrap();
    let client = ().serve(transport).await.expect("MCP handshake with durable-mcp-connector");
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    let echo = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "bin"})))
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "bin"})));
    client.cancel().await.unwrap();
}

// ---- tasks ---------------------------------------------------------------------------------

use durable_mcp::connector::task_ref::{CallerScope, SigningKey};
use rmcp::model::{CallToolResponse, CancelTaskParams, GetTaskParams};
use temporalio_protos::temporal::api::workflowservice::v1::{
    DeleteNexusOperationExecutionRequest, DescribeNamespaceRequest,
};

/// A connector whose callers are `scope`, signing task IDs with `key` (replicas share both).
fn scoped_connector(env: &TestEnv, key: &SigningKey, scope: &str) -> Connector {
    Connector::new(env.client.clone(), task_options(env, key, scope))
}

fn task_options(env: &TestEnv, key: &SigningKey, scope: &str) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    options
}

#[tokio::test]
async fn slow_calls_become_tasks_that_only_their_owner_can_read_from_any_replica() {
    let env = TestEnv::shared("connector-tasks").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    // Two replicas sharing the key and the caller scope; a third caller with another scope.
    let replica_a = task_client_for(scoped_connector(&env, &key, "alice"))
        .await
        .unwrap();
    let replica_b = task_client_for(scoped_connector(&env, &key, "alice"))
        .await
        .unwrap();
    let stranger = task_client_for(scoped_connector(&env, &key, "mallory"))
        .await
        .unwrap();

    // Fast calls complete inline, even for a task-capable caller (the 1 s threshold leaves a
    // loaded machine room for the first call, which also lists the tools).
    let fast = replica_a
        .peer()
        .call_tool_once(tool_call("echo", json!({"key": "f"})))
        .await
        .unwrap();
    assert!(matches!(fast, CallToolResponse::Complete(_)), "{fast:?}");

    // A slow call becomes a task after task_after.
    let slow = replica_a
        .peer()
        .call_tool_once(tool_call("slow", json!({"key": "t1", "sleep_ms": 2500})))
        .await
        .unwrap();
    let task_id = task_id_of(slow);

    // The other replica serves it; a different caller gets the same answer as for garbage.
    let done = poll_task_until_done(&replica_b, &task_id).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "t1", "sleep_ms": 2500}),
        "{done}"
    );
    let foreign = stranger
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap_err()
        .to_string();
    let garbage = stranger
        .peer()
        .get_task(GetTaskParams::new("not-a-task"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        foreign, garbage,
        "a foreign task is indistinguishable from a forged one"
    );
    assert!(foreign.contains("unknown task"), "{foreign}");
    let mut altered = task_id.clone();
    altered.insert(3, 'x');
    let altered = replica_b
        .peer()
        .get_task(GetTaskParams::new(&altered))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(altered, garbage);
    assert!(
        stranger
            .peer()
            .cancel_task(CancelTaskParams::new(&task_id))
            .await
            .is_err(),
        "strangers cannot cancel"
    );

    // tasks/cancel cancels, truthfully: the status becomes cancelled only when the work stopped.
    let slow = replica_a
        .peer()
        .call_tool_once(tool_call("slow", json!({"key": "t2"})))
        .await
        .unwrap();
    let cancelling = task_id_of(slow);
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 2, Duration::from_secs(20))
            .await,
        2
    );
    replica_b
        .peer()
        .cancel_task(CancelTaskParams::new(&cancelling))
        .await
        .unwrap();
    let done = poll_task_until_done(&replica_a, &cancelling).await;
    assert_eq!(done["status"], json!("cancelled"), "{done}");
    assert!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(20))
            .await
            >= 1,
        "{:?}",
        ledger.read()
    );

    for c in [replica_a, replica_b, stranger] {
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tasks_cancel_acknowledges_running_finished_and_cancelled_tasks_alike() {
    let env = TestEnv::shared("connector-cancel-ack").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    let alice = task_client_for(scoped_connector(&env, &key, "alice"))
        .await
        .unwrap();
    let cancel = |task: String| {
        let peer = alice.peer().clone();
        async move { peer.cancel_task(CancelTaskParams::new(&task)).await }
    };

    // A finished task: the cancel lost, the acknowledgement is the same, the result stays.
    let finished = task_id_of(
        alice
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "done", "sleep_ms": 800})))
            .await
            .unwrap(),
    );
    assert_eq!(
        poll_task_until_done(&alice, &finished).await["status"],
        "completed"
    );
    cancel(finished.clone()).await.unwrap();
    cancel(finished.clone()).await.unwrap();
    let after = poll_task_until_done(&alice, &finished).await;
    assert_eq!(after["status"], "completed", "{after}");
    // Its TTL: the time it ran plus the namespace's retention (never the unlimited null).
    let retention = env
        .connection
        .workflow_service()
        .describe_namespace(tonic::Request::new(DescribeNamespaceRequest {
            namespace: env.namespace.clone(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap()
        .workflow_execution_retention_ttl
        .unwrap();
    let retention_ms = u64::try_from(retention.seconds).unwrap() * 1000;
    let ttl = after["ttlMs"].as_u64().unwrap_or_else(|| panic!("{after}"));
    assert!(
        (retention_ms..retention_ms + 60_000).contains(&ttl),
        "{ttl} vs retention {retention_ms}"
    );

    // A running task cancelled twice, then once more after it ended cancelled.
    let running = task_id_of(
        alice
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "run"})))
            .await
            .unwrap(),
    );
    cancel(running.clone()).await.unwrap();
    cancel(running.clone()).await.unwrap();
    assert_eq!(
        poll_task_until_done(&alice, &running).await["status"],
        "cancelled"
    );
    cancel(running.clone()).await.unwrap();

    // An unknown ID is still the invalid-params error of a forged one.
    let forged = cancel("forged".into()).await.unwrap_err().to_string();
    assert!(forged.contains("unknown task"), "{forged}");

    // A task Temporal no longer keeps (as after its retention, or its operation deleted) is
    // invalid params too, for every task method.
    env.connection
        .workflow_service()
        .delete_nexus_operation_execution(tonic::Request::new(
            DeleteNexusOperationExecutionRequest {
                namespace: env.namespace.clone(),
                operation_id: task_op_id(
                    &key,
                    &env.namespace,
                    &CallerScope::Process("alice".into()),
                    &finished,
                ),
                run_id: String::new(),
            },
        ))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let gone = loop {
        match alice.peer().get_task(GetTaskParams::new(&finished)).await {
            Err(e) => break e,
            Ok(_) => assert!(tokio::time::Instant::now() < deadline, "never deleted"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cancel_gone = cancel(finished.clone()).await.unwrap_err();
    let answer: rmcp::model::InputResponses =
        [("confirm".to_owned(), json!({"action": "accept"}))].into();
    let update_gone = alice
        .peer()
        .update_task(rmcp::model::UpdateTaskParams::new(&finished, answer))
        .await
        .unwrap_err();
    for e in [gone, cancel_gone, update_gone] {
        let rmcp::ServiceError::McpError(e) = e else {
            panic!("{e}")
        };
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{e:?}");
        assert!(e.message.contains("no longer keeps it"), "{e:?}");
    }
    alice.cancel().await.unwrap();
}

#[tokio::test]
async fn callers_without_the_tasks_extension_get_the_required_capability_error() {
    let env = TestEnv::shared("connector-notasks").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let client = client_for(scoped_connector(&env, &SigningKey::generate(), "p"))
        .await
        .unwrap();
    // Without the extension a slow call simply waits to completion.
    let result = client
        .peer()
        .call_tool(tool_call("slow", json!({"key": "w", "sleep_ms": 800})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    let err = client
        .peer()
        .get_task(GetTaskParams::new("anything"))
        .await
        .unwrap_err();
    let rmcp::service::ServiceError::McpError(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.code.0, -32021);
    assert!(
        e.data.unwrap()["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
            .is_object()
    );
    client.cancel().await.unwrap();
}

// ---- idempotency keys --------------------------------------------------------------------

#[tokio::test]
async fn idempotency_keys_reattach_across_restarts_and_conflict_on_other_arguments() {
    let env = TestEnv::shared("connector-idem").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    let idem = format!("order-{}", uuid::Uuid::new_v4());

    // First call with the key: the destructive tool runs once.
    let first_connector = client_for(scoped_connector(&env, &key, "shop"))
        .await
        .unwrap();
    let first = first_connector
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"key": "w", "item": 1}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(false));
    first_connector.cancel().await.unwrap();

    // A restarted connector (same key, same caller) answers the same call from the first
    // execution, without running the tool again.
    let restarted = client_for(scoped_connector(&env, &key, "shop"))
        .await
        .unwrap();
    let again = restarted
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"item": 1, "key": "w"}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(
        again.structured_content, first.structured_content,
        "the same execution's result"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "w"),
        1,
        "{:?}",
        ledger.read()
    );

    // Different arguments under the same key: a tool error, and the first execution untouched.
    let conflict = restarted
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"key": "w", "item": 2}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(conflict.is_error, Some(true));
    let text = serde_json::to_string(&conflict).unwrap();
    assert!(
        text.contains(ConnectorErrorType::IdempotencyConflict.as_str()),
        "{text}"
    );
    assert_eq!(ledger.count_key("write_once", LedgerEvent::Called, "w"), 1);

    // Another caller scope with the same key is a different execution.
    let other = client_for(scoped_connector(&env, &key, "someone-else"))
        .await
        .unwrap();
    let theirs = other
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"key": "w", "item": 2}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(theirs.is_error, Some(false));
    assert_eq!(ledger.count_key("write_once", LedgerEvent::Called, "w"), 2);

    // Keys are 1 to 256 characters.
    let err = other
        .peer()
        .call_tool(with_key("echo", json!({}), &"k".repeat(257)))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("256"), "{err}");
    for c in [restarted, other] {
        c.cancel().await.unwrap();
    }
}

// ---- operation ids and timeouts ----------------------------------------------------------

#[tokio::test]
async fn operation_ids_and_timeouts_follow_the_options_and_the_listing() {
    use durable_mcp::{
        connector::task_ref::{
            CallerScope, Deployment, MAX_COMPACT_TASK_ID_LEN, caller_hash, verify,
        },
        contract::{
            listing::{LIST_TOOLS, TIMEOUT_META_KEY},
            payload,
        },
        nexus::{Service, StartOutcome, start_fn},
    };
    use temporalio_protos::temporal::api::workflowservice::v1::DescribeNexusOperationExecutionRequest;

    let env = TestEnv::shared("connector-opids").await;
    // A tool service of the test's own: one tool lists a timeout, the other does not; both run
    // until cancelled (their operations are async and never completed).
    let listing = json!([
        {"name": "timed", "inputSchema": {"type": "object"}, "_meta": {TIMEOUT_META_KEY: 45_000}},
        {"name": "untimed", "inputSchema": {"type": "object"}},
    ]);
    let forever = || {
        start_fn(|_ctx, _input| async move {
            Ok(StartOutcome::Async {
                token: "never-completed".into(),
            })
        })
    };
    let service = Service::new("tools")
        .operation(
            LIST_TOOLS,
            start_fn(move |_ctx, _input| {
                let listing = listing.clone();
                async move { Ok(StartOutcome::Sync(payload::to_payload(&listing).unwrap())) }
            }),
        )
        .operation("timed", forever())
        .operation("untimed", forever());
    let _worker = env.nexus_worker(vec![service]).await;

    let key = SigningKey::generate();
    let scope = CallerScope::Process("opids".into());
    let mut options = ConnectorOptions::new(vec![route("tools", &env.endpoint)]);
    options.connector_name = "acme".into();
    options.operation_id_prefix = "p7".into();
    options.default_timeout = Duration::from_secs(77);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.caller_scope = scope.clone();
    let client = task_client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();

    for (tool, timeout) in [("timed", 45), ("untimed", 77)] {
        let answer = client
            .peer()
            .call_tool_once(tool_call(tool, json!({})))
            .await
            .unwrap();
        let task_id = task_id_of(answer);
        // Short enough for every host (Claude Code keeps at most 128 characters): 74 characters
        // is the compact form of a call with a 2-byte prefix and a run ID Temporal wrote as a
        // UUID (held in 16 bytes, not as text).
        assert!(task_id.len() <= MAX_COMPACT_TASK_ID_LEN, "{task_id}");
        assert_eq!(task_id.len(), 74, "{task_id}");
        // The task ID names the operation: `<connector-name>-<prefix>-<uuid>`.
        let deployment = Deployment {
            namespace: &env.namespace,
            connector_name: "acme",
        };
        let task = verify(&key, &task_id, &deployment, &caller_hash(&key, &scope)).unwrap();
        assert_eq!(task.ns, env.namespace);
        let uuid = task
            .op
            .strip_prefix("acme-p7-")
            .unwrap_or_else(|| panic!("operation id {:?}", task.op));
        uuid::Uuid::parse_str(uuid).unwrap_or_else(|e| panic!("{:?}: {e}", task.op));

        // Temporal has it on the route's endpoint and service, with the tool's listed timeout
        // (else the default) as schedule-to-close.
        let described = env
            .connection
            .workflow_service()
            .describe_nexus_operation_execution(tonic::Request::new(
                DescribeNexusOperationExecutionRequest {
                    namespace: env.namespace.clone(),
                    operation_id: task.op.clone(),
                    run_id: task.run.clone(),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let info = described.info.unwrap();
        assert_eq!(
            (
                info.endpoint.as_str(),
                info.service.as_str(),
                info.operation.as_str()
            ),
            (env.endpoint.as_str(), "tools", tool)
        );
        assert_eq!(
            info.schedule_to_close_timeout.map(|d| d.seconds),
            Some(timeout),
            "{tool}: {info:?}"
        );
    }
    client.cancel().await.unwrap();
}

// ---- restarts of the connector process ---------------------------------------------------

#[tokio::test]
async fn a_restarted_connector_process_reattaches_idempotency_keys_and_serves_earlier_tasks() {
    let env = TestEnv::shared("connector-bin-restart").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    // The binary over stdio, as an MCP host starts it, with a signing key from the environment
    // (so restarts verify each other's task IDs) and a task threshold that the quick
    // `write_once` stays under even on a loaded machine, and the 3 s `slow` call does not.
    let start = || async {
        let mut command = connector_command(&env, "mock");
        command
            .args(["--task-after", "1500ms"])
            .env("MCP_TASK_SIGNING_KEY", TEST_SIGNING_KEY);
        let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
        tasks_client_config()
            .serve(transport)
            .await
            .expect("MCP handshake with durable-mcp-connector")
    };
    let idem = format!("order-{}", uuid::Uuid::new_v4());

    let first = start().await;
    let written = first
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"key": "rp-w", "item": 1}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(written.is_error, Some(false), "{written:?}");
    let task_id = task_id_of(
        first
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "rp-s", "sleep_ms": 3000})))
            .await
            .unwrap(),
    );
    // The connector process ends with the task still running in Temporal.
    first.cancel().await.unwrap();

    let second = start().await;
    // The same key and arguments: the first execution's result, the tool not run again.
    let again = second
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"item": 1, "key": "rp-w"}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(again.structured_content, written.structured_content);
    assert_eq!(
        again.structured_content,
        Some(json!({"key": "rp-w", "item": 1}))
    );
    // Other arguments under the key: a conflict, and still one execution.
    let conflict = second
        .peer()
        .call_tool(with_key(
            "write_once",
            json!({"key": "rp-w", "item": 2}),
            &idem,
        ))
        .await
        .unwrap();
    assert_eq!(conflict.is_error, Some(true));
    assert!(
        serde_json::to_string(&conflict)
            .unwrap()
            .contains(ConnectorErrorType::IdempotencyConflict.as_str()),
        "{conflict:?}"
    );
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "rp-w"),
        1,
        "{:?}",
        ledger.read()
    );
    // The task issued by the first process is served by the second, with its result.
    let done = poll_task_until_done(&second, &task_id).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "rp-s", "sleep_ms": 3000}),
        "{done}"
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Called, "rp-s"), 1);
    assert_eq!(ledger.count_key("slow", LedgerEvent::Cancelled, "rp-s"), 0);
    second.cancel().await.unwrap();
}

/// R-CON-3: arguments larger than a Temporal payload may be are refused before anything
/// starts, with -32602 naming the size and the limit (not Temporal's refusal of the start).
#[tokio::test]
async fn oversized_arguments_are_refused_before_anything_starts() {
    let env = TestEnv::shared("connector-big-arguments").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let client = client_for(connector_for(&env, "mock")).await.unwrap();
    let big = "x".repeat(3 * 1024 * 1024);
    let err = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "big", "data": big})))
        .await
        .unwrap_err();
    let rmcp::ServiceError::McpError(error) = err else {
        panic!("expected a JSON-RPC error, got {err}")
    };
    assert_eq!(
        error.code,
        rmcp::model::ErrorCode::INVALID_PARAMS,
        "{error:?}"
    );
    let size = error.data.as_ref().unwrap()["size"].as_u64().unwrap();
    let limit = durable_mcp::contract::payload::MAX_PAYLOAD_BYTES;
    assert!(size > 3 * 1024 * 1024, "{error:?}");
    assert!(
        error.message.contains(&size.to_string()) && error.message.contains(&limit.to_string()),
        "the message names the size and the limit: {}",
        error.message
    );
    // Nothing started: the upstream never saw the call, and a normal call still works.
    let echo = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "small"})))
        .await
        .unwrap();
    assert_eq!(echo.is_error, Some(false));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "big"), 0);
}

/// R-CON-15: a route to an endpoint Temporal does not know. The caller learns that listing
/// failed and gets a reference; the gRPC status and the endpoint's name stay in the log.
#[tokio::test]
async fn internal_failures_reach_callers_as_stable_messages_without_details() {
    let env = TestEnv::shared("connector-internal").await;
    let hidden = format!("internal-endpoint-{}", uuid::Uuid::new_v4().simple());
    let routes = vec![durable_mcp::connector::route::Route::new(
        "mock",
        hidden.clone(),
    )];
    let client = client_for(Connector::new(
        env.client.clone(),
        ConnectorOptions::new(routes),
    ))
    .await
    .unwrap();
    let listed = client
        .peer()
        .list_all_tools()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        listed.contains("listing the tools failed") && listed.contains("reference "),
        "{listed}"
    );
    for leaked in [hidden.as_str(), "NotFound", "Nexus", "status"] {
        assert!(
            !listed.contains(leaked),
            "{leaked} reached the caller: {listed}"
        );
    }
    client.cancel().await.unwrap();
}

/// The standard mock upstream as `service`, with a copy of `echo` under each of `names`.
fn mock_with_echoes_named(
    service: &str,
    names: &[&str],
    ledger: &Ledger,
) -> durable_mcp::proxy::UpstreamConfig {
    let mut spec = UpstreamSpec::standard();
    let echo = spec
        .tools
        .iter()
        .find(|t| t.name == "echo")
        .unwrap()
        .clone();
    for name in names {
        let mut tool = echo.clone();
        tool.name = (*name).to_owned();
        spec.tools.push(tool);
    }
    mock_stdio_upstream_with_spec(service, &spec, ledger)
}

/// R-NXC-5: MCP tool names may hold characters a Nexus operation name cannot carry as is (a
/// `/`, as in `files/read`, or a space); the connector, the proxy and the listing agree on a
/// reversible encoding, so such a tool is listed under its own name and callable.
#[tokio::test]
async fn tools_whose_names_hold_slashes_are_listed_and_callable() {
    let env = TestEnv::shared("connector-slash").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let names = ["files/read", "a b~c%2F", "..", "docs.v2/list"];
    let upstream = mock_with_echoes_named("slashes", &names, &ledger);
    let _proxy = start_proxy(&env, vec![upstream]);
    let client = client_for(connector_for(&env, "slashes")).await.unwrap();

    let listed: Vec<_> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    for name in names {
        assert!(listed.iter().any(|n| n == name), "{name} in {listed:?}");
        let result = client
            .peer()
            .call_tool(tool_call(name, json!({"key": name})))
            .await
            .unwrap();
        assert_eq!(
            result.structured_content,
            Some(json!({"key": name})),
            "{name}: {result:?}"
        );
        assert_eq!(ledger.count_key(name, LedgerEvent::Called, name), 1);
    }
    client.cancel().await.unwrap();
}

/// R-CON-2, R-CON-11: a route whose listing fails is left out and the others are listed and
/// callable, on a fresh connector too; an upstream tool named like a companion tool is left out
/// and the companion tool keeps the name.
#[tokio::test]
async fn a_failing_route_and_a_routed_companion_name_leave_the_other_tools_served() {
    let env = TestEnv::shared("connector-failing-route").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = mock_with_echoes_named("clashing", &["task_status"], &ledger);
    let _proxy = start_proxy(&env, vec![upstream]);
    // No worker serves "nowhere": its listing fails (or times out) every time.
    let mut options = ConnectorOptions::new(vec![
        route("nowhere", &env.endpoint),
        route("clashing", &env.endpoint),
    ]);
    options.companion_tools = true;
    options.list_timeout = Duration::from_secs(3);
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    // A fresh connector: the first request is a call, which lists the routes first.
    let echo = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "fresh"})))
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "fresh"})));
    let tools = client.peer().list_all_tools().await.unwrap();
    let named = |name: &str| tools.iter().filter(|t| t.name == name).collect::<Vec<_>>();
    assert_eq!(named("echo").len(), 1, "{tools:?}");
    let status = named("task_status");
    assert_eq!(status.len(), 1, "{tools:?}");
    assert!(
        status[0]
            .description
            .as_deref()
            .unwrap_or_default()
            .contains("long tool call"),
        "the companion tool keeps the name: {:?}",
        status[0]
    );
    client.cancel().await.unwrap();
}

/// R-CON-2, R-CON-17: concurrent listings while a route times out share that route's one
/// listing and its failure: all answer within about one list timeout (not one timeout each, in
/// turn) with the other route's tools, and a listing during the failure's back-off does not wait.
#[tokio::test]
async fn concurrent_listings_share_a_timing_out_routes_one_wait() {
    let env = TestEnv::shared("connector-shared-failure").await;
    // No worker polls this env's task queue: its route's listing times out.
    let silent = TestEnv::shared("connector-shared-failure-silent").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    // The proxy serves the mock once it lists through a connector of its own.
    let warm = client_for(connector_for(&env, "mock")).await.unwrap();
    warm.peer().list_all_tools().await.unwrap();
    warm.cancel().await.unwrap();
    let mut options = ConnectorOptions::new(vec![
        route("nowhere", &silent.endpoint),
        route("mock", &env.endpoint),
    ]);
    // Long enough for the mock's listing on a busy machine, short enough for the test.
    let timeout = Duration::from_secs(5);
    options.list_timeout = timeout;
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let listings = futures::future::join_all((0..6).map(|_| client.peer().list_all_tools())).await;
    let took = started.elapsed();
    for listed in listings {
        let tools = listed.unwrap();
        assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    }
    assert!(
        took < timeout * 2 + Duration::from_secs(1),
        "6 concurrent listings took {took:?}: they waited for the failing route in turn"
    );
    let again = std::time::Instant::now();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    assert!(
        again.elapsed() < timeout,
        "a listing within the failure's back-off waited {:?}",
        again.elapsed()
    );
    client.cancel().await.unwrap();
}

/// R-CON-2: a route whose listing fails keeps its last good listing's names reserved. A name it
/// shares with another route stays ambiguous while it fails, so a call of that name is refused
/// naming both, never handed to the other route alone (which could be hostile).
#[tokio::test]
async fn a_failing_routes_names_stay_reserved_and_a_shared_name_never_goes_to_the_other() {
    let bank_env = TestEnv::shared("connector-reserved-bank").await;
    let other_env = TestEnv::shared("connector-reserved-other").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let bank = start_proxy(
        &bank_env,
        vec![mock_with_echoes_named("bank", &["transfer_funds"], &ledger)],
    );
    let _other = start_proxy(
        &other_env,
        vec![mock_with_echoes_named(
            "other",
            &["transfer_funds"],
            &ledger,
        )],
    );
    let mut options = ConnectorOptions::new(vec![
        route("bank", &bank_env.endpoint),
        route("other", &other_env.endpoint),
    ]);
    // Every listing asks the routes again, as after the cache's time passed.
    options.list_cache = Duration::ZERO;
    options.list_timeout = Duration::from_secs(3);
    let client = client_for(Connector::new(bank_env.client.clone(), options))
        .await
        .unwrap();
    let listed = |tools: &[rmcp::model::Tool]| tools.iter().any(|t| t.name == "transfer_funds");
    assert!(!listed(&client.peer().list_all_tools().await.unwrap()));

    // The bank's worker stops: its listing now times out.
    bank.stop().await;
    assert!(
        !listed(&client.peer().list_all_tools().await.unwrap()),
        "a failed listing freed the name"
    );
    let err = client
        .peer()
        .call_tool(tool_call("transfer_funds", json!({"key": "stolen"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"transfer_funds\"") && err.contains("\"bank\"") && err.contains("\"other\""),
        "{err}"
    );
    assert_eq!(
        ledger.count_key("transfer_funds", LedgerEvent::Called, "stolen"),
        0,
        "the call reached the other route: {:?}",
        ledger.read()
    );
    client.cancel().await.unwrap();
}

/// A principal that may list, describe and start operations (R-CON-7's threat): it finds the
/// closed keyed call on `env`'s endpoint, copies its headers (its fingerprint and seal among
/// them) and starts its ID again on `on`'s endpoint with its own arguments ("forged"), and
/// waits for that run.
async fn start_a_keyed_call_again(env: &TestEnv, on: &TestEnv) {
    use durable_mcp::nexus::StartOperation;
    let op = crate::durable_input::listed_operation_where(env, |id| id.contains("-idem-")).await;
    let copied = env.client.describe_with_input(&op).await.unwrap();
    let mut input = copied.input.clone().expect("the keyed call's input");
    let text = String::from_utf8(input.data.clone()).unwrap();
    assert!(text.contains("mine"), "{text}");
    input.data = text.replace("mine", "forged").into_bytes();
    let mut foreign = StartOperation::new(
        &op.operation_id,
        &on.endpoint,
        &copied.service,
        &copied.operation,
        input,
    );
    foreign.headers = copied.headers.clone();
    foreign.schedule_to_close = Some(Duration::from_secs(60));
    let (run, started) = env.client.start(foreign).await.unwrap();
    assert!(
        started && run.run_id != copied.reference.run_id,
        "a new run"
    );
    env.client
        .wait(&run, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
}

/// A keyed call ("mine") made and finished on `env`'s endpoint, its operation then started
/// again by someone else on `on`'s ([`start_a_keyed_call_again`]): the owner's retry, same key
/// and arguments, is refused with what to do next, never answered by that run, and nothing
/// runs for it. `on`'s ledger is the one the foreign run lands in.
async fn a_keyed_retry_after_a_foreign_start_is_refused(
    env: &TestEnv,
    on: &TestEnv,
    ledger: &Ledger,
    theirs: &Ledger,
) {
    let key = SigningKey::generate();
    let idem = format!("order-{}", uuid::Uuid::new_v4());
    let owner = client_for(scoped_connector(env, &key, "shop"))
        .await
        .unwrap();
    let mine = || with_key("echo", json!({"key": "mine"}), &idem);
    let first = owner.peer().call_tool(mine()).await.unwrap();
    assert_eq!(first.structured_content, Some(json!({"key": "mine"})));
    start_a_keyed_call_again(env, on).await;
    assert_eq!(theirs.count_key("echo", LedgerEvent::Called, "forged"), 1);

    let retry = owner.peer().call_tool(mine()).await;
    let Err(rmcp::ServiceError::McpError(refused)) = retry else {
        panic!("the owner's keyed retry was not refused: {retry:?}");
    };
    assert!(
        !refused.message.contains("forged") && refused.message.contains("new idempotency key"),
        "{refused:?}"
    );
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "mine"), 1);
    owner.cancel().await.unwrap();
}

/// A keyed call's operation ID and its headers are readable by anyone who may list and describe
/// operations, and a closed operation's ID may be started again (the reuse policy is the new
/// start's): a run started again there with copied headers and other arguments never answers
/// the owner's keyed retry (R-CON-7). Before the keyed seal, the retry got its result.
#[tokio::test]
async fn a_keyed_retry_never_reattaches_to_a_run_someone_else_started() {
    let env = TestEnv::shared("idem-copied").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    a_keyed_retry_after_a_foreign_start_is_refused(&env, &env, &ledger, &ledger).await;
}

/// As above, with the run started again on the other principal's own endpoint and worker.
#[tokio::test]
async fn a_keyed_retry_never_reattaches_to_a_run_on_another_endpoint() {
    let env = TestEnv::shared("idem-elsewhere").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let elsewhere = TestEnv::shared("idem-attacker").await;
    assert_eq!(elsewhere.namespace, env.namespace);
    assert_ne!(elsewhere.endpoint, env.endpoint);
    let theirs = Ledger::new(temp_path("ledger.jsonl"));
    let _their_proxy = start_proxy(
        &elsewhere,
        vec![mock_stdio_upstream("mock", &theirs).unwrap()],
    );
    a_keyed_retry_after_a_foreign_start_is_refused(&env, &elsewhere, &ledger, &theirs).await;
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "forged"), 0);
}
