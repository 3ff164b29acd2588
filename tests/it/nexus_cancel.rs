//! R-RT-8..9: a caller's cancel reaches the handler and the backing activity; waiting is
//! cancellable without touching the operation.

use std::time::Duration;

use durable_mcp::{
    contract::payload,
    nexus::{OperationClientError, OperationOutcome, OperationStatus, StartOperation},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

#[tokio::test]
async fn cancel_reaches_the_handler_and_the_activity() {
    let env = TestEnv::shared("cancel").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", false)])
        .await;

    let key = format!("cancel-{}", uuid::Uuid::new_v4());
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 60_000,
        value: json!("never"),
    };
    let mut start = StartOperation::new(
        &key,
        &env.endpoint,
        "jobs",
        "run",
        payload::to_payload(&input).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    let (op, _) = env.client.start(start).await.unwrap();
    eventually(Duration::from_secs(20), "the activity starts", || {
        count(&key, "activity-started") == 1
    })
    .await;

    cancel_and_expect_canceled(&env, &op, "test cancels").await;
    assert_eq!(count(&key, "activity-cancelled"), 1, "{:?}", events(&key));
    assert_eq!(count(&key, "activity-completed"), 0);
    assert_eq!(count(&key, "cancel-handler"), 1, "{:?}", events(&key));
    assert_eq!(
        env.client.describe(&op).await.unwrap().status,
        OperationStatus::Canceled
    );
    worker.stop().await;
}

#[tokio::test]
async fn waiting_can_be_cancelled_without_touching_the_operation() {
    let env = TestEnv::shared("waitcancel").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", false)])
        .await;
    let key = format!("waitcancel-{}", uuid::Uuid::new_v4());
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 2_000,
        value: json!("still here"),
    };
    let (op, _) = env
        .client
        .start(StartOperation::new(
            &key,
            &env.endpoint,
            "jobs",
            "run",
            payload::to_payload(&input).unwrap(),
        ))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.cancel();
    });
    let err = env.client.wait(&op, &stop).await.unwrap_err();
    assert!(
        matches!(err, OperationClientError::WaitCancelled { .. }),
        "{err:?}"
    );
    // The operation itself ran on and can be awaited again.
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(payload::to_json(&result).unwrap(), json!("still here"));
    worker.stop().await;
}

#[tokio::test]
async fn terminate_ends_the_operation_but_not_the_backing_activity() {
    let env = TestEnv::shared("terminate").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", false)])
        .await;
    let key = format!("terminate-{}", uuid::Uuid::new_v4());
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 1_500,
        value: json!("ran on"),
    };
    let (op, _) = env
        .client
        .start(StartOperation::new(
            &key,
            &env.endpoint,
            "jobs",
            "run",
            payload::to_payload(&input).unwrap(),
        ))
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the activity starts", || {
        count(&key, "activity-started") == 1
    })
    .await;
    env.client.terminate(&op, "test terminates").await.unwrap();
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(outcome, OperationOutcome::Terminated { .. }),
        "{outcome:?}"
    );
    // Terminate does not reach the handler: the activity runs to completion regardless.
    eventually(Duration::from_secs(20), "the activity completes", || {
        count(&key, "activity-completed") == 1
    })
    .await;
    assert_eq!(count(&key, "cancel-handler"), 0);
    worker.stop().await;
}

#[tokio::test]
async fn wait_survives_the_servers_empty_poll_answers() {
    let env = TestEnv::shared("longpoll").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", false)])
        .await;
    let key = format!("longpoll-{}", uuid::Uuid::new_v4());
    // Longer than the server's ~29 s long-poll window: at least one empty answer comes first.
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 33_000,
        value: json!("patience"),
    };
    let mut start = StartOperation::new(
        &key,
        &env.endpoint,
        "jobs",
        "run",
        payload::to_payload(&input).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    let (op, _) = env.client.start(start).await.unwrap();
    let first = env.client.poll_outcome(&op).await.unwrap();
    assert_eq!(first, None, "the first long poll comes back empty");
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(payload::to_json(&result).unwrap(), json!("patience"));
    worker.stop().await;
}
