//! R-PRX-28, R-PRX-29: an upstream's own task (the tasks extension) that asks for input is
//! relayed, not failed. The round ends with the task's requests, which a 2026-07-28 task caller
//! of the connector sees as its task's `input_required`; its `tasks/update` starts the next
//! round, which answers the upstream's task with `tasks/update` and follows it to its result.
//! A cancel while the task waits for input reaches the upstream's task with `tasks/cancel`
//! (R-CON-46). Through connector -> Temporal -> proxy -> the mock upstream (stdio), on the real
//! dev server.

use std::time::Duration;

use durable_mcp_conformance::fixtures::{
    LedgerEvent, ToolSpec, UpstreamSpec, ask_input::CONFIRM_KEY,
};
use rmcp::model::{CancelTaskParams, GetTaskParams, TaskStatus, UpdateTaskParams};
use serde_json::json;

use crate::durable_input::{confirmed, connector, setup_with};
use crate::support::*;

/// A tool the upstream runs only as a task, which asks for a confirmation after its steps.
const TOOL: &str = "publish";

fn spec() -> UpstreamSpec {
    let tool: ToolSpec = serde_json::from_value(json!({
        "name": TOOL,
        "description": "Runs as a task, asks to confirm, then echoes the answer.",
        "annotations": {"destructiveHint": true, "idempotentHint": false},
        "execution": {"taskSupport": "required"},
        "behavior": {"kind": "task", "ms": 400, "ask": "Publish the findings?"}
    }))
    .unwrap();
    UpstreamSpec {
        name: "asking".into(),
        tools: vec![tool],
        instructions: None,
    }
}

#[tokio::test]
async fn an_upstream_task_that_asks_for_input_is_answered_with_tasks_update_and_runs_once() {
    let (env, ledger, _proxy, key) = setup_with("upstream-task-input", &spec()).await;
    let day = Duration::from_secs(86_400);
    let owner = task_client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    let created = owner
        .peer()
        .call_tool_once(tool_call(TOOL, json!({"key": "k"})))
        .await
        .unwrap();
    let task_id = task_id_of(created);

    // The upstream's task asks: the caller's task reads input_required with its request.
    let waiting = poll_task_past(&owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let request = &waiting["inputRequests"][CONFIRM_KEY];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Publish the findings?");
    assert!(
        !waiting.to_string().contains("durable-mcp-upstream-task"),
        "the proxy's requestState stays in Temporal: {waiting}"
    );
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Cancelled, "k"), 0);

    // The answer goes to the same upstream task, which completes echoing it.
    owner
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, confirmed()))
        .await
        .unwrap();
    let done = poll_task_past(&owner, &task_id, TaskStatus::InputRequired, |_| {}).await;
    let done = match done["status"].as_str() {
        Some("working") => poll_task_until_done(&owner, &task_id).await,
        _ => done,
    };
    assert_eq!(done["status"], "completed", "{done}");
    let answered = &done["result"]["structuredContent"];
    assert_eq!(
        answered["inputResponses"][CONFIRM_KEY]["action"], "accept",
        "{done}"
    );
    assert_eq!(answered["arguments"]["key"], "k", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("confirmed: ")),
        "{done}"
    );
    // The tool ran once, across both rounds, and its task was never cancelled.
    assert_eq!(
        ledger.count_key(TOOL, LedgerEvent::Called, "k"),
        1,
        "{:?}",
        ledger.read()
    );
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Completed, "k"), 1);
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Cancelled, "k"), 0);
    owner.cancel().await.unwrap();
}

#[tokio::test]
async fn a_task_cancelled_while_its_upstream_task_waits_for_input_cancels_that_task() {
    let (env, ledger, _proxy, key) = setup_with("upstream-task-input-cancel", &spec()).await;
    let day = Duration::from_secs(86_400);
    let owner = task_client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    let created = owner
        .peer()
        .call_tool_once(tool_call(TOOL, json!({"key": "c"})))
        .await
        .unwrap();
    let task_id = task_id_of(created);
    let waiting = poll_task_past(&owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Cancelled, "c"), 0);

    // The caller cancels while the upstream task asks: the task reads cancelled at once, and
    // the proxy, serving the round the cancel took, sends the upstream task tasks/cancel.
    owner
        .peer()
        .cancel_task(CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    let read = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    let read = serde_json::to_value(&read).unwrap();
    assert_eq!(read["status"], "cancelled", "{read}");
    eventually(
        Duration::from_secs(20),
        "the upstream's asking task got tasks/cancel",
        || ledger.count_key(TOOL, LedgerEvent::Cancelled, "c") == 1,
    )
    .await;
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Called, "c"), 1);
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Completed, "c"), 0);
    // Still cancelled afterwards, whatever the marker operation's end.
    let read = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap()["status"], "cancelled");
    owner.cancel().await.unwrap();
}

/// R-CON-40, R-PRX-29: a request nobody answers within `--input-timeout` ends the call as
/// before (the task reads `completed` with the expiry's tool error), and the upstream's task
/// that waited for the answer gets `tasks/cancel` instead of living on (`ttlMs: null`): the
/// connector that sees the request expired takes the next round with the cancel marker.
#[tokio::test]
async fn an_expired_input_request_cancels_the_upstream_task_that_waited_for_it() {
    let (env, ledger, _proxy, key) = setup_with("upstream-task-input-expired", &spec()).await;
    let timeout = Duration::from_secs(3);
    let owner = task_client_for(connector(&env, &key, "owner", timeout))
        .await
        .unwrap();
    let created = owner
        .peer()
        .call_tool_once(tool_call(TOOL, json!({"key": "x"})))
        .await
        .unwrap();
    let task_id = task_id_of(created);
    let waiting = poll_task_past(&owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    tokio::time::sleep(timeout + Duration::from_millis(500)).await;
    let expired = read(&owner, &task_id).await;
    assert_eq!(expired["status"], "completed", "{expired}");
    assert_eq!(expired["result"]["isError"], true, "{expired}");
    let text = expired["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("--input-timeout"), "{text}");
    eventually(
        Duration::from_secs(20),
        "the upstream's asking task got tasks/cancel",
        || ledger.count_key(TOOL, LedgerEvent::Cancelled, "x") == 1,
    )
    .await;
    // Still the expiry's answer, not `cancelled`; a late answer runs nothing.
    assert_eq!(read(&owner, &task_id).await, expired);
    owner
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, confirmed()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read(&owner, &task_id).await, expired);
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Called, "x"), 1);
    assert_eq!(ledger.count_key(TOOL, LedgerEvent::Completed, "x"), 0);
    owner.cancel().await.unwrap();
}

/// `tasks/get` of `task_id` as `owner`, as JSON.
async fn read(owner: &McpClient<rmcp::model::ClientConfig>, task_id: &str) -> serde_json::Value {
    let got = owner.peer().get_task(GetTaskParams::new(task_id)).await;
    serde_json::to_value(got.unwrap()).unwrap()
}
