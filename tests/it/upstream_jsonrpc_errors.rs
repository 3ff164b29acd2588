//! R-PRX-4, R-CON-4, R-CON-6: an upstream's JSON-RPC error answer to `tools/call` is retried a
//! bounded number of times by its code, then ends the call with the upstream's error object,
//! unchanged: a task caller's task is `failed` with it inlined, a waiting caller gets it as its
//! JSON-RPC error. A tool error (`isError`) stays a `completed` task.

use durable_mcp::connector::task_ref::SigningKey;
use durable_mcp_conformance::fixtures::{Behavior, Ledger, LedgerEvent, UpstreamSpec};
use serde_json::{Value, json};

use crate::{connector_task_support::connector, support::*};

/// The standard mock upstream plus tools that always answer a JSON-RPC error (chosen by the
/// call's arguments): a read-only one a call through the connector makes a task at once, the
/// same for waiting callers, and a destructive, non-idempotent one; plus `refuse` as a task.
fn mock_with_jsonrpc_errors(ledger: &Ledger) -> durable_mcp::proxy::UpstreamConfig {
    let mut spec = UpstreamSpec::standard();
    let base = spec.tool("echo").unwrap().clone();
    let tool = |name: &str, annotations: Value, task: bool, behavior: Behavior| {
        let mut t = base.clone();
        t.name = name.to_owned();
        t.annotations = Some(annotations);
        t.input_schema = None;
        t.execution = task.then(|| json!({"taskSupport": "required"}));
        t.behavior = behavior;
        t
    };
    let error = Behavior::JsonRpcError {
        code: -32603,
        message: "internal".into(),
        data: None,
    };
    let read_only = json!({"readOnlyHint": true});
    let once = json!({"destructiveHint": true, "idempotentHint": false});
    let refuse = spec.tool("refuse").unwrap().behavior.clone();
    spec.tools.extend([
        tool("rpc_error", read_only.clone(), true, error.clone()),
        tool("rpc_error_waited", read_only.clone(), false, error.clone()),
        tool("rpc_error_once", once, true, error),
        tool("refuse_task", read_only, true, refuse),
    ]);
    mock_stdio_upstream_with_spec("mock", &spec, ledger)
}

#[tokio::test]
async fn an_upstream_jsonrpc_error_fails_the_task_with_it_and_is_the_waiting_callers_error() {
    let env = TestEnv::shared("upstream-jsonrpc-errors").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_with_jsonrpc_errors(&ledger)]);
    let key = SigningKey::generate();
    let tasks = task_client_for(connector(&env, &key)).await.unwrap();
    let tasks = &tasks;
    let task_of = |tool: &'static str, arguments: Value| async move {
        let task = tasks
            .peer()
            .call_tool_once(tool_call(tool, arguments))
            .await
            .unwrap();
        // A task suggests a poll interval while it works, none once it ended (R-CON-6).
        let done = poll_task_watching(tasks, &task_id_of(task), |working| {
            assert_eq!(working["pollIntervalMs"], 1000, "{working}");
        })
        .await;
        assert!(done.get("pollIntervalMs").is_none(), "{done}");
        done
    };

    // -32602 is never retried: the task fails at once with the error, data and all.
    let data = json!({"field": "x", "n": 1, "f": 1.5, "list": [null, "a"]});
    let done = task_of(
        "rpc_error",
        json!({"key": "p", "code": -32602, "message": "bad x", "data": data}),
    )
    .await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(
        done["error"],
        json!({"code": -32602, "message": "bad x", "data": data})
    );
    assert!(done.get("result").is_none(), "{done}");
    assert_eq!(ledger.count_key("rpc_error", LedgerEvent::Called, "p"), 1);

    // -32603 is retried three times (four attempts), then the task fails with it.
    let done = task_of("rpc_error", json!({"key": "i"})).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(
        done["error"],
        json!({"code": -32603, "message": "internal"})
    );
    assert_eq!(ledger.count_key("rpc_error", LedgerEvent::Called, "i"), 4);

    // A destructive, non-idempotent tool is never retried, whatever the code.
    let done = task_of("rpc_error_once", json!({"key": "o"})).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -32603, "{done}");
    assert_eq!(
        ledger.count_key("rpc_error_once", LedgerEvent::Called, "o"),
        1
    );

    // A tool error is the tool's answer: completed, isError.
    let done = task_of("refuse_task", json!({"key": "r"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");

    // A waiting caller gets the upstream's JSON-RPC error itself.
    let plain = client_for(connector(&env, &key)).await.unwrap();
    let err = plain
        .peer()
        .call_tool(tool_call(
            "rpc_error_waited",
            json!({"key": "w", "code": -32602, "message": "bad y", "data": data}),
        ))
        .await
        .unwrap_err();
    let rmcp::service::ServiceError::McpError(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.code.0, -32602, "{e:?}");
    assert_eq!(e.message, "bad y");
    assert_eq!(e.data, Some(data));
    assert_eq!(
        ledger.count_key("rpc_error_waited", LedgerEvent::Called, "w"),
        1
    );
    plain.cancel().await.unwrap();
}
