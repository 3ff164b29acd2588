//! R-CON-18: rotating the task signing key does not orphan running tasks. A task started under
//! the old key is followed and cancelled by a connector whose current key is new and which
//! lists the old one as previous; without that listing it is an unknown task. A keyed call
//! retried across the rotation reattaches to its first run.
//!
//! R-CON-6: task IDs the previous build issued (its JSON form) are still followed after an
//! upgrade, with and without a rotation.
//!
//! R-CON-7: the arguments' fingerprint is RFC 8785 (JCS), so a retry whose client writes its
//! numbers another way reattaches, and a key taken by an earlier build (the first fingerprint
//! form) still reattaches.

use std::time::Duration;

use durable_mcp::connector::{
    idempotency::{self, FingerprintKey, IdempotencyKey},
    server::{Connector, ConnectorOptions},
    task_ref::{
        CallerScope, Deployment, MAX_COMPACT_TASK_ID_LEN, SigningKey, caller_hash, legacy, verify,
    },
};
use durable_mcp::contract::{operation_name::operation_for_tool, payload};
use durable_mcp::nexus::{ConflictPolicy, ReusePolicy, StartOperation};
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

#[tokio::test]
async fn task_ids_of_the_previous_build_are_followed_after_an_upgrade() {
    let env = TestEnv::shared("connector-task-id-upgrade").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    let connector = task_client_for(Connector::new(env.client.clone(), options(&env, &key, &[])))
        .await
        .unwrap();
    let compact = task_id_of(
        connector
            .peer()
            .call_tool_once(tool_call("slow", json!({"key": "up", "sleep_ms": 2500})))
            .await
            .unwrap(),
    );
    assert!(compact.len() <= MAX_COMPACT_TASK_ID_LEN, "{compact}");

    // The IDs the previous build gave for the same operation: JSON, with and without a kid.
    let scope = CallerScope::Process("rotation".into());
    let deployment = Deployment {
        namespace: &env.namespace,
        connector_name: "durable-mcp",
    };
    let task = verify(&key, &compact, &deployment, &caller_hash(&key, &scope)).unwrap();
    let with_kid = legacy::sign(&key, &task, true);
    let without_kid = legacy::sign(&key, &task, false);
    assert!(with_kid.len() > MAX_COMPACT_TASK_ID_LEN, "{with_kid}");

    // This build follows them, and so does one rotated to a new key with the old one listed.
    let rotated = task_client_for(Connector::new(
        env.client.clone(),
        options(&env, &SigningKey::generate(), &[&key]),
    ))
    .await
    .unwrap();
    for (client, id) in [
        (&connector, &with_kid),
        (&connector, &without_kid),
        (&rotated, &with_kid),
        (&connector, &compact),
    ] {
        let done = poll_task_until_done(client, id).await;
        assert_eq!(done["status"], json!("completed"), "{done}");
        assert_eq!(done["taskId"], json!(id), "answered under the ID asked");
        assert_eq!(
            done["result"]["structuredContent"],
            json!({"key": "up", "sleep_ms": 2500})
        );
    }
    // Another caller's connector refuses them as unknown.
    let mut foreign = options(&env, &key, &[]);
    foreign.caller_scope = CallerScope::Process("someone-else".into());
    let stranger = task_client_for(Connector::new(env.client.clone(), foreign))
        .await
        .unwrap();
    let refused = stranger
        .peer()
        .get_task(GetTaskParams::new(&with_kid))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("unknown task"), "{refused}");
    for client in [connector, rotated, stranger] {
        client.cancel().await.unwrap();
    }
}

/// Calls `write_once` with `args` under idempotency key `idem` through a connector with `key`
/// (and `previous` keys), and answers its result.
async fn keyed_write(
    env: &TestEnv,
    key: &SigningKey,
    previous: &[&SigningKey],
    args: serde_json::Value,
    idem: &str,
) -> rmcp::model::CallToolResult {
    let client = client_for(Connector::new(
        env.client.clone(),
        options(env, key, previous),
    ))
    .await
    .unwrap();
    let result = client
        .peer()
        .call_tool(with_key("write_once", args, idem))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    result
}

#[tokio::test]
async fn a_keyed_call_retried_across_a_key_rotation_runs_once() {
    let env = TestEnv::shared("connector-key-rotation-idem").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let (old, new) = (SigningKey::generate(), SigningKey::generate());
    let idem = format!("rotate-{}", uuid::Uuid::new_v4());
    let args = json!({"key": "rot", "item": 1});
    let first = keyed_write(&env, &old, &[], args.clone(), &idem).await;
    assert_eq!(first.is_error, Some(false), "{first:?}");

    // Rotated, the old key listed: the retry reattaches to the first run.
    let again = keyed_write(&env, &new, &[&old], args.clone(), &idem).await;
    assert_eq!(again.structured_content, first.structured_content);
    // Other arguments under the key are still a conflict, and run nothing.
    let conflict = keyed_write(&env, &new, &[&old], json!({"key": "rot", "item": 2}), &idem).await;
    assert_eq!(conflict.is_error, Some(true), "{conflict:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "rot"),
        1,
        "{:?}",
        ledger.read()
    );
}

#[tokio::test]
async fn a_key_reattaches_when_its_numbers_are_written_another_way() {
    let env = TestEnv::shared("connector-idem-jcs").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    let idem = format!("jcs-{}", uuid::Uuid::new_v4());
    let first = keyed_write(&env, &key, &[], json!({"key": "jcs", "seconds": 1}), &idem).await;
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let again = keyed_write(
        &env,
        &key,
        &[],
        json!({"seconds": 1.0, "key": "jcs"}),
        &idem,
    )
    .await;
    assert_eq!(again.is_error, Some(false), "not a conflict: {again:?}");
    assert_eq!(again.structured_content, first.structured_content);
    let other = keyed_write(
        &env,
        &key,
        &[],
        json!({"key": "jcs", "seconds": 1.5}),
        &idem,
    )
    .await;
    assert_eq!(other.is_error, Some(true), "{other:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "jcs"),
        1
    );
}

/// A keyed call as a build before the JCS fingerprint started it: its operation carries the
/// first fingerprint form in its header and request id.
fn legacy_keyed_start(
    env: &TestEnv,
    key: &SigningKey,
    idem: &str,
    args: &serde_json::Value,
) -> StartOperation {
    let fingerprint_key = FingerprintKey::derive(key);
    let owner = caller_hash(key, &CallerScope::Process("rotation".into()));
    let id = idempotency::operation_id(
        &fingerprint_key,
        "durable-mcp",
        &owner,
        "write_once",
        &IdempotencyKey::new(idem).unwrap(),
    );
    let fingerprint = idempotency::legacy_arguments_fingerprint(&fingerprint_key, args);
    let mut start = StartOperation::new(
        id.clone(),
        &env.endpoint,
        "mock",
        operation_for_tool("write_once"),
        payload::to_payload(args).unwrap(),
    );
    start.request_id = format!("{id}-{fingerprint}");
    start.conflict_policy = ConflictPolicy::UseExisting;
    start.reuse_policy = ReusePolicy::RejectDuplicate;
    // The connector's fingerprint header (R-CON-7).
    start
        .headers
        .insert("x-durable-mcp-arguments".into(), fingerprint);
    start
}

/// A keyed call started by a build before keyed calls were sealed (R-CON-7) carries no keyed
/// seal, as a run someone else started under its ID would not: a retry of it is refused with
/// what to do next, and the call does not run again.
#[tokio::test]
async fn keys_taken_by_a_build_before_the_keyed_seal_are_refused_not_run_again() {
    let env = TestEnv::shared("connector-idem-legacy").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = SigningKey::generate();
    let idem = format!("legacy-{}", uuid::Uuid::new_v4());
    let args = json!({"key": "old", "item": 1.0});
    let (_, outcome) = start_and_wait(&env, legacy_keyed_start(&env, &key, &idem, &args)).await;
    assert_eq!(outcome.kind(), "succeeded", "{outcome:?}");

    let client = client_for(Connector::new(env.client.clone(), options(&env, &key, &[])))
        .await
        .unwrap();
    let again = client
        .peer()
        .call_tool(with_key("write_once", args, &idem))
        .await;
    client.cancel().await.unwrap();
    let Err(rmcp::ServiceError::McpError(refused)) = again else {
        panic!("a retry of an unsealed keyed run was not refused: {again:?}");
    };
    assert!(
        refused.message.contains("new idempotency key"),
        "{refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, "old"),
        1
    );
}
