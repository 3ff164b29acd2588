//! R-CON-39: the upstream tool's own `execution.taskSupport` decides what a call through the
//! connector may become, and the connector's listing says so per tool.

use std::time::Duration;

use durable_mcp::inbound::{
    server::{Connector, ConnectorOptions},
    task_ref::{CallerScope, SigningKey},
};
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent, UpstreamSpec};
use rmcp::model::CallToolResponse;
use serde_json::json;

use crate::support::*;

/// The standard mock upstream with copies of `slow` marked `forbidden` and `required`.
fn mock_with_task_support(ledger: &Ledger) -> durable_mcp::outbound::UpstreamConfig {
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

/// A connector whose calls become tasks after 300 ms.
pub(crate) fn connector(env: &TestEnv, key: &SigningKey) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process("p".into());
    Connector::new(env.client.clone(), options)
}

#[tokio::test]
async fn the_upstream_tools_task_support_decides_what_a_call_through_the_connector_becomes() {
    let env = TestEnv::shared("connector-task-support").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_with_task_support(&ledger)]);
    let key = SigningKey::generate();

    // The listing says, per tool, how the connector calls it.
    let mut raw = raw_pipe_client(connector(&env, &key)).await.unwrap();
    let listed = raw.list_tools().await.unwrap();
    let support = |name: &str| {
        let tool = listed.iter().find(|t| t["name"] == name).unwrap();
        tool["execution"]["taskSupport"].clone()
    };
    assert_eq!(support("slow_forbidden"), "forbidden");
    assert_eq!(support("slow_required"), "required");
    assert_eq!(support("slow"), "optional");

    // A forbidden tool is never a task: the task-capable caller waits past --task-after.
    let tasks = task_client_for(connector(&env, &key)).await.unwrap();
    let call =
        |tool: &'static str, arguments| tasks.peer().call_tool_once(tool_call(tool, arguments));
    let waited = call("slow_forbidden", json!({"key": "f", "sleep_ms": 1500}))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = waited else {
        panic!("a forbidden tool became a task: {waited:?}")
    };
    assert_eq!(result.structured_content.unwrap()["key"], "f");

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
