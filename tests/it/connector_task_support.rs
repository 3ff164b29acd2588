//! R-CON-39: what the connector offers for a tool decides what a call through it may become.
//! The task is the connector's: any routed tool may become one, whatever its upstream lists,
//! unless its route keeps it synchronous or mirrors the upstream; the upstream's `required`
//! stands. The listing says what the connector offers, to the callers whose protocol version
//! reads a tool's `execution.taskSupport` (2025-11-25).

use std::time::Duration;

use durable_mcp::connector::{
    route::{Route, parse_route},
    server::{Connector, ConnectorOptions},
    task_ref::{CallerScope, SigningKey},
};
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent, UpstreamSpec};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use crate::{route_notices::StatelessPipe, support::*};

/// The standard mock upstream with copies of `slow` marked `forbidden` and `required`.
fn mock_with_task_support(ledger: &Ledger) -> durable_mcp::proxy::UpstreamConfig {
    let mut spec = UpstreamSpec::standard();
    let slow = spec.tool("slow").unwrap().clone();
    for support in ["forbidden", "required"] {
        let mut tool = slow.clone();
        tool.name = format!("slow_{support}");
        tool.execution = Some(json!({"taskSupport": support}));
        spec.tools.push(tool);
    }
    mock_stdio_upstream_with_spec("mock", &spec, ledger)
}

/// Options of a connector on `route` whose calls become tasks after 300 ms.
fn options_on(key: &SigningKey, route: Route) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(vec![route]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process("p".into());
    options
}

/// A connector on `route` whose calls become tasks after 300 ms.
fn connector_on(env: &TestEnv, key: &SigningKey, route: Route) -> Connector {
    Connector::new(env.client.clone(), options_on(key, route))
}

/// A connector whose calls become tasks after 300 ms.
pub(crate) fn connector(env: &TestEnv, key: &SigningKey) -> Connector {
    connector_on(env, key, route("mock", &env.endpoint))
}

/// The mock's route with the extra `--route` keys `keys` (e.g. `task_support: mirror`).
fn route_with(env: &TestEnv, keys: &str) -> Route {
    parse_route(&format!(
        "{{service: mock, endpoint: '{}', {keys}}}",
        env.endpoint
    ))
    .unwrap()
}

/// Each tool's `execution.taskSupport` as a raw 2025-11-25 client reads it from `connector`.
async fn listed_support(connector: Connector) -> impl Fn(&str) -> Value {
    let listed = raw_pipe_client(connector)
        .await
        .unwrap()
        .list_tools()
        .await
        .unwrap();
    move |name: &str| {
        let tool = listed.iter().find(|t| t["name"] == name).unwrap();
        tool["execution"]["taskSupport"].clone()
    }
}

/// A call by a task-capable caller of `connector`: its answer.
async fn call_with_tasks(connector: Connector, tool: &str, arguments: Value) -> CallToolResponse {
    let tasks = task_client_for(connector).await.unwrap();
    let answer = tasks
        .peer()
        .call_tool_once(tool_call(tool, arguments))
        .await
        .unwrap();
    tasks.cancel().await.unwrap();
    answer
}

#[tokio::test]
async fn what_the_connector_offers_decides_what_a_call_through_it_becomes() {
    let env = TestEnv::shared("connector-task-support").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_with_task_support(&ledger)]);
    let key = SigningKey::generate();

    // A 2025-11-25 listing says, per tool, what the connector offers.
    let support = listed_support(connector(&env, &key)).await;
    assert_eq!(support("slow_forbidden"), "optional");
    assert_eq!(support("slow_required"), "required");
    assert_eq!(support("slow"), "optional");

    // A 2026-07-28 listing has no per-tool task support: the server decides per call.
    let mut modern = StatelessPipe::serve(connector(&env, &key));
    modern.send(1, "tools/list", json!({})).await;
    let listed = modern.next().await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    for tool in tools {
        assert!(tool.pointer("/execution/taskSupport").is_none(), "{tool}");
    }
    assert!(tools.iter().any(|t| t["name"] == "slow_forbidden"));

    // The upstream's "forbidden" says it cannot run the tool as its own task; the task is the
    // connector's: the task-capable caller gets one after --task-after.
    let tasks = task_client_for(connector(&env, &key)).await.unwrap();
    let call =
        |tool: &'static str, arguments| tasks.peer().call_tool_once(tool_call(tool, arguments));
    let task = call("slow_forbidden", json!({"key": "f", "sleep_ms": 1500}))
        .await
        .unwrap();
    let done = poll_task_until_done(&tasks, &task_id_of(task)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["key"], "f", "{done}");
    assert_eq!(ledger.count("slow_forbidden", LedgerEvent::Called), 1);

    // A required tool is a task at once, even when it ends sooner than --task-after.
    let task = call("slow_required", json!({"key": "r", "sleep_ms": 100}))
        .await
        .unwrap();
    let done = poll_task_until_done(&tasks, &task_id_of(task)).await;
    assert_eq!(done["status"], "completed", "{done}");

    // ... and a caller without the tasks extension gets -32021, and nothing runs.
    let plain = client_for(connector(&env, &key)).await.unwrap();
    let err = plain
        .peer()
        .call_tool(tool_call("slow_required", json!({"key": "n"})))
        .await
        .unwrap_err();
    let rmcp::service::ServiceError::McpError(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.code.0, -32021, "{e:?}");
    assert!(e.message.contains("slow_required"), "{}", e.message);
    let data = e.data.unwrap();
    assert!(
        data["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{data}"
    );
    assert_eq!(ledger.count("slow_required", LedgerEvent::Called), 1);
    tasks.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test]
async fn an_operator_keeps_tools_synchronous_or_mirrors_the_upstream() {
    let env = TestEnv::shared("connector-task-support-routes").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_with_task_support(&ledger)]);
    let key = SigningKey::generate();
    let slow = |key: &str| json!({"key": key, "sleep_ms": 1500});

    // One tool kept synchronous: it waits past --task-after and lists "forbidden"; the route's
    // other tools may still become tasks; an upstream's "required" stands.
    let kept = route_with(&env, "synchronous: [slow]");
    let support = listed_support(connector_on(&env, &key, kept.clone())).await;
    assert_eq!(support("slow"), "forbidden");
    assert_eq!(support("slow_forbidden"), "optional");
    assert_eq!(support("slow_required"), "required");
    let waited = call_with_tasks(connector_on(&env, &key, kept.clone()), "slow", slow("k")).await;
    assert!(
        matches!(waited, CallToolResponse::Complete(_)),
        "a tool kept synchronous became a task: {waited:?}"
    );
    let other = call_with_tasks(connector_on(&env, &key, kept), "slow_forbidden", slow("ko")).await;
    assert!(matches!(other, CallToolResponse::Task(_)), "{other:?}");

    // A transparent gateway mirrors the upstream: its "forbidden" and its silence (MCP
    // 2025-11-25's default) both wait, and the listing says so.
    let mirror = route_with(&env, "task_support: mirror");
    let support = listed_support(connector_on(&env, &key, mirror.clone())).await;
    assert_eq!(support("slow_forbidden"), "forbidden");
    assert_eq!(support("slow"), "forbidden");
    assert_eq!(support("slow_required"), "required");
    for tool in ["slow_forbidden", "slow"] {
        let waited =
            call_with_tasks(connector_on(&env, &key, mirror.clone()), tool, slow("m")).await;
        assert!(
            matches!(waited, CallToolResponse::Complete(_)),
            "{tool} became a task behind a mirroring route: {waited:?}"
        );
    }

    // Companion tools, likewise: a caller without the extension gets a companion task ID for
    // an upstream's "forbidden" tool, and waits for a tool kept synchronous.
    let mut options = options_on(&key, route_with(&env, "synchronous: [slow]"));
    options.companion_tools = true;
    let plain = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    let call = |tool: &'static str, arguments| plain.peer().call_tool(tool_call(tool, arguments));
    let continued = call("slow_forbidden", slow("c")).await.unwrap();
    let meta = continued
        .meta
        .as_ref()
        .map(|m| m.0.clone())
        .unwrap_or_default();
    assert!(
        meta.get("io.durable-mcp/taskId")
            .is_some_and(Value::is_string),
        "no companion task ID: {continued:?}"
    );
    let waited = call("slow", slow("cw")).await.unwrap();
    assert_eq!(
        waited.structured_content.as_ref().unwrap()["key"],
        "cw",
        "{waited:?}"
    );
    plain.cancel().await.unwrap();
}
