//! R-CON (first slice): the connector as an MCP server in front of the proxy, driven by a real
//! rmcp client: tools/list through Nexus, tools/call as standalone operations, unknown tools,
//! duplicate tool names across routes, and client cancellation reaching the upstream.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use durable_mcp::{
    inbound::{
        route::Route,
        server::{Connector, ConnectorOptions},
    },
    outbound::{TransportConfig, UpstreamConfig},
};
use durable_mcp_conformance::fixtures::{self, Ledger, LedgerEvent, UpstreamSpec};
use rmcp::{ServiceExt, model::CallToolRequestParams};
use serde_json::json;

use crate::support::*;

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("durable-mcp-connector-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn upstream(service: &str, ledger: &Ledger) -> UpstreamConfig {
    UpstreamConfig {
        service: service.into(),
        transport: TransportConfig::Stdio {
            command: fixtures::mock_upstream_bin()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            args: vec![
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

/// An rmcp client talking to `connector` over an in-memory pipe.
async fn client_for(connector: Connector) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let running = connector
            .serve(tokio::io::split(server_side))
            .await
            .expect("connector serves");
        let _ = running.waiting().await;
    });
    ().serve(tokio::io::split(client_side))
        .await
        .expect("MCP handshake with the connector")
}

#[tokio::test]
async fn mcp_client_lists_and_calls_tools_through_the_connector() {
    let env = TestEnv::shared("connector").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger)]);
    let connector = Connector::new(
        env.client.clone(),
        ConnectorOptions::new(vec![Route {
            service: "mock".into(),
            endpoint: env.endpoint.clone(),
        }]),
    );
    let client = client_for(connector).await;

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
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(json!({"key": "c1", "n": 5}).as_object().unwrap().clone()),
        )
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
    let slow = client.peer().call_tool(
        CallToolRequestParams::new("slow")
            .with_arguments(json!({"key": "s1"}).as_object().unwrap().clone()),
    );
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
async fn two_routes_exposing_one_tool_name_is_an_error_naming_both() {
    let env = TestEnv::shared("connector-dup").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![upstream("first", &ledger), upstream("second", &ledger)],
    );
    let connector = Connector::new(
        env.client.clone(),
        ConnectorOptions::new(vec![
            Route {
                service: "first".into(),
                endpoint: env.endpoint.clone(),
            },
            Route {
                service: "second".into(),
                endpoint: env.endpoint.clone(),
            },
        ]),
    );
    let client = client_for(connector).await;
    let err = client
        .peer()
        .list_all_tools()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("first") && err.contains("second"), "{err}");
    client.cancel().await.unwrap();
}

/// A binary built by this workspace, next to the test executable's target directory.
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap(); // target/<profile>/deps/.. 
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p durable-mcp --bins` (cargo test --workspace builds it)",
        path.display()
    );
    path
}

#[tokio::test]
async fn the_connector_binary_serves_stdio_like_an_mcp_host_would_start_it() {
    let env = TestEnv::shared("connector-bin").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger)]);
    // Exactly what an `mcpServers` entry does: command, --route args, TEMPORAL_* env.
    let mut command = tokio::process::Command::new(workspace_bin("durable-mcp-connector"));
    command
        .arg("--route")
        .arg(format!("{{service: mock, endpoint: {}}}", env.endpoint))
        .env("TEMPORAL_ADDRESS", &env.address)
        .env("TEMPORAL_NAMESPACE", &env.namespace);
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let client = ().serve(transport).await.expect("MCP handshake with durable-mcp-connector");
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    let echo = client
        .peer()
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(json!({"key": "bin"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "bin"})));
    client.cancel().await.unwrap();
}

// ---- tasks ---------------------------------------------------------------------------------

use durable_mcp::inbound::task_ref::{CallerScope, SigningKey};
use rmcp::model::{
    CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, TaskStatus,
};

/// An rmcp client that declares the tasks extension, over an in-memory pipe.
async fn task_client_for(
    connector: Connector,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let running = connector
            .serve(tokio::io::split(server_side))
            .await
            .expect("connector serves");
        let _ = running.waiting().await;
    });
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("durable-mcp-tests", "0"),
    );
    info.serve(tokio::io::split(client_side))
        .await
        .expect("MCP handshake with the connector")
}

fn task_options(env: &TestEnv, key: &SigningKey, scope: &str) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(vec![Route {
        service: "mock".into(),
        endpoint: env.endpoint.clone(),
    }]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    options
}

async fn poll_until_done(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    task_id: &str,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = client
            .peer()
            .get_task(GetTaskParams::new(task_id))
            .await
            .unwrap();
        if got.task.status() != TaskStatus::Working {
            return serde_json::to_value(&got).unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn slow_calls_become_tasks_that_only_their_owner_can_read_from_any_replica() {
    let env = TestEnv::shared("connector-tasks").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger)]);
    let key = SigningKey::generate();
    // Two replicas sharing the key and the caller scope; a third caller with another scope.
    let replica_a = task_client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "alice"),
    ))
    .await;
    let replica_b = task_client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "alice"),
    ))
    .await;
    let stranger = task_client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "mallory"),
    ))
    .await;

    // Fast calls complete inline, even for a task-capable caller.
    let fast = replica_a
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("echo")
                .with_arguments(json!({"key": "f"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert!(matches!(fast, CallToolResponse::Complete(_)), "{fast:?}");

    // A slow call becomes a task after task_after.
    let slow = replica_a
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("slow").with_arguments(
                json!({"key": "t1", "sleep_ms": 1500})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(created) = slow else {
        panic!("expected a task, got {slow:?}")
    };
    let task_id = created.task.task_id.clone();

    // The other replica serves it; a different caller gets the same answer as for garbage.
    let done = poll_until_done(&replica_b, &task_id).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "t1", "sleep_ms": 1500}),
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
        .call_tool_once(
            CallToolRequestParams::new("slow")
                .with_arguments(json!({"key": "t2"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(created) = slow else {
        panic!("expected a task, got {slow:?}")
    };
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Called, 2, Duration::from_secs(20))
            .await,
        2
    );
    replica_b
        .peer()
        .cancel_task(CancelTaskParams::new(&created.task.task_id))
        .await
        .unwrap();
    let done = poll_until_done(&replica_a, &created.task.task_id).await;
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
async fn callers_without_the_tasks_extension_get_the_required_capability_error() {
    let env = TestEnv::shared("connector-notasks").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger)]);
    let client = client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &SigningKey::generate(), "p"),
    ))
    .await;
    // Without the extension a slow call simply waits to completion.
    let result = client
        .peer()
        .call_tool(
            CallToolRequestParams::new("slow").with_arguments(
                json!({"key": "w", "sleep_ms": 800})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
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

fn with_key(tool: &str, args: serde_json::Value, key: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().unwrap().clone());
    params.meta = Some(serde_json::from_value(json!({"idempotencyKey": key})).unwrap());
    params
}

#[tokio::test]
async fn idempotency_keys_reattach_across_restarts_and_conflict_on_other_arguments() {
    let env = TestEnv::shared("connector-idem").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream("mock", &ledger)]);
    let key = SigningKey::generate();
    let idem = format!("order-{}", uuid::Uuid::new_v4());

    // First call with the key: the destructive tool runs once.
    let first_connector = client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "shop"),
    ))
    .await;
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
    let restarted = client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "shop"),
    ))
    .await;
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
    assert!(text.contains("IdempotencyConflict"), "{text}");
    assert_eq!(ledger.count_key("write_once", LedgerEvent::Called, "w"), 1);

    // Another caller scope with the same key is a different execution.
    let other = client_for(Connector::new(
        env.client.clone(),
        task_options(&env, &key, "someone-else"),
    ))
    .await;
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
