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
            command: fixtures::mock_upstream_bin().unwrap().to_string_lossy().into_owned(),
            args: vec!["--ledger".into(), ledger.path().to_string_lossy().into_owned()],
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
        let running = connector.serve(tokio::io::split(server_side)).await.expect("connector serves");
        let _ = running.waiting().await;
    });
    ().serve(tokio::io::split(client_side)).await.expect("MCP handshake with the connector")
}

#[tokio::test]
async fn mcp_client_lists_and_calls_tools_through_the_connector() {
    let env = TestEnv::shared("connector").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = ProxyGuard::start(&env, vec![upstream("mock", &ledger)]);
    let connector = Connector::new(
        env.client.clone(),
        ConnectorOptions::new(vec![Route { service: "mock".into(), endpoint: env.endpoint.clone() }]),
    );
    let client = client_for(connector).await;

    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    let standard: Vec<_> = UpstreamSpec::standard().tools.into_iter().map(|t| t.name).collect();
    assert_eq!(names.len(), standard.len(), "{names:?}");
    for name in &standard {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }

    let echo = client
        .peer()
        .call_tool(CallToolRequestParams::new("echo").with_arguments(json!({"key": "c1", "n": 5}).as_object().unwrap().clone()))
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "c1", "n": 5})));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "c1"), 1);

    let everything = client.peer().call_tool(CallToolRequestParams::new("everything")).await.unwrap();
    let everything = serde_json::from_str::<serde_json::Value>(&serde_json::to_string(&everything).unwrap()).unwrap();
    assert_eq!(everything, fixtures::all_content_json(), "the whole result reaches the MCP client");

    let refused = client.peer().call_tool(CallToolRequestParams::new("refuse")).await.unwrap();
    assert_eq!(refused.is_error, Some(true));

    // Unknown tools are refused before anything starts.
    let err = client.peer().call_tool(CallToolRequestParams::new("no_such_tool")).await.unwrap_err();
    assert!(err.to_string().contains("no_such_tool"), "{err}");

    // Dropping the call (the client's cancel) cancels the operation, and the upstream sees it.
    let slow = client
        .peer()
        .call_tool(CallToolRequestParams::new("slow").with_arguments(json!({"key": "s1"}).as_object().unwrap().clone()));
    let _ = tokio::time::timeout(Duration::from_millis(1500), slow).await;
    assert_eq!(ledger.wait_for_count("slow", LedgerEvent::Called, 1, Duration::from_secs(10)).await, 1);
    assert_eq!(
        ledger.wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30)).await,
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
    let _proxy = ProxyGuard::start(&env, vec![upstream("first", &ledger), upstream("second", &ledger)]);
    let connector = Connector::new(
        env.client.clone(),
        ConnectorOptions::new(vec![
            Route { service: "first".into(), endpoint: env.endpoint.clone() },
            Route { service: "second".into(), endpoint: env.endpoint.clone() },
        ]),
    );
    let client = client_for(connector).await;
    let err = client.peer().list_all_tools().await.unwrap_err().to_string();
    assert!(err.contains("first") && err.contains("second"), "{err}");
    client.cancel().await.unwrap();
}

/// A binary built by this workspace, next to the test executable's target directory.
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap(); // target/<profile>/deps/.. 
    let path = dir.join(name);
    assert!(path.is_file(), "{} is not built: run `cargo build -p durable-mcp --bins` (cargo test --workspace builds it)", path.display());
    path
}

#[tokio::test]
async fn the_connector_binary_serves_stdio_like_an_mcp_host_would_start_it() {
    let env = TestEnv::shared("connector-bin").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = ProxyGuard::start(&env, vec![upstream("mock", &ledger)]);
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
        .call_tool(CallToolRequestParams::new("echo").with_arguments(json!({"key": "bin"}).as_object().unwrap().clone()))
        .await
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"key": "bin"})));
    client.cancel().await.unwrap();
}
