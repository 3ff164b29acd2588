//! R-CON-18: rotating the task signing key does not orphan running tasks. A task started under
//! the old key is followed and cancelled by a connector whose current key is new and which
//! lists the old one as previous; without that listing it is an unknown task.

use std::time::Duration;

use durable_mcp::inbound::{
    server::{Connector, ConnectorOptions},
    task_ref::{CallerScope, SigningKey},
};
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent};
use rmcp::model::{CancelTaskParams, GetTaskParams};
use serde_json::json;

use crate::support::*;

fn options(env: &TestEnv, key: &SigningKey, previous: &[&SigningKey]) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    options.signing_key = key.clone();
    options.previous_signing_keys = previous.iter().map(|k| (*k).clone()).collect();
    options.caller_scope = CallerScope::Process("rotation".into());
    options
}

#[tokio::test]
async fn tasks_started_before_a_key_rotation_stay_reachable() {
    let env = TestEnv::shared("connector-key-rotation").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let (old, new) = (SigningKey::generate(), SigningKey::generate());
    let before = task_client_for(Connector::new(env.client.clone(), options(&env, &old, &[])))
        .await
        .unwrap();
    let finishing = task_id_of(
        before
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "r1", "sleep_ms": 2500})))
            .await
            .unwrap(),
    );
    let cancelling = task_id_of(
        before
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "r2"})))
            .await
            .unwrap(),
    );

    // Rotated without listing the old key: the old task IDs are unknown.
    let forgetful = task_client_for(Connector::new(env.client.clone(), options(&env, &new, &[])))
        .await
        .unwrap();
    let refused = forgetful
        .peer()
        .get_task(GetTaskParams::new(&finishing))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("unknown task"), "{refused}");

    // Rotated with the old key listed as previous: both tasks are still the caller's.
    let after = task_client_for(Connector::new(
        env.client.clone(),
        options(&env, &new, &[&old]),
    ))
    .await
    .unwrap();
    let done = poll_task_until_done(&after, &finishing).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "r1", "sleep_ms": 2500})
    );
    after
        .peer()
        .cancel_task(CancelTaskParams::new(&cancelling))
        .await
        .expect("the rotated connector cancels a task of the old key");
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(30))
            .await,
        1,
        "the cancel reached the tool: {:?}",
        ledger.read()
    );
    for client in [before, forgetful, after] {
        client.cancel().await.unwrap();
    }
}
