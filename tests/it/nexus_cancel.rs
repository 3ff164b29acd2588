//! R-RT-8..9: a caller's cancel reaches the handler and the backing activity; waiting is
//! cancellable without touching the operation.

use std::time::Duration;

use durable_mcp::{
    nexus::{OperationClientError, OperationOutcome, OperationStatus, StartOperation},
    payload,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

#[tokio::test]
async fn cancel_reaches_the_handler_and_the_activity() {
    let env = TestEnv::shared("cancel").await;
    let _activities = env.activity_worker();
    let worker = env.nexus_worker(vec![activity_service(&env, "jobs", false)]).await;

    let key = format!("cancel-{}", uuid::Uuid::new_v4());
    let input = SlowEcho { key: key.clone(), sleep_ms: 60_000, value: json!("never") };
    let mut start = StartOperation::new(&key, &env.endpoint, "jobs", "run", payload::to_payload(&input).unwrap());
    start.schedule_to_close = Some(Duration::from_secs(120));
    let (op, _) = env.client.start(start).await.unwrap();
    eventually(Duration::from_secs(20), "the activity starts", || count(&key, "activity-started") == 1).await;

    env.client.cancel(&op, "test cancels").await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), env.client.wait(&op, &CancellationToken::new()))
        .await
        .expect("the cancel lands within 30 s")
        .unwrap();
    assert!(matches!(outcome, OperationOutcome::Canceled { .. }), "{outcome:?}");
    assert_eq!(count(&key, "activity-cancelled"), 1, "{:?}", events(&key));
    assert_eq!(count(&key, "activity-completed"), 0);
    assert_eq!(count(&key, "cancel-handler"), 1, "{:?}", events(&key));
    assert_eq!(env.client.describe(&op).await.unwrap().status, OperationStatus::Canceled);
    worker.stop().await;
}

#[tokio::test]
async fn waiting_can_be_cancelled_without_touching_the_operation() {
    let env = TestEnv::shared("waitcancel").await;
    let _activities = env.activity_worker();
    let worker = env.nexus_worker(vec![activity_service(&env, "jobs", false)]).await;
    let key = format!("waitcancel-{}", uuid::Uuid::new_v4());
    let input = SlowEcho { key: key.clone(), sleep_ms: 2_000, value: json!("still here") };
    let (op, _) = env
        .client
        .start(StartOperation::new(&key, &env.endpoint, "jobs", "run", payload::to_payload(&input).unwrap()))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.cancel();
    });
    let err = env.client.wait(&op, &stop).await.unwrap_err();
    assert!(matches!(err, OperationClientError::WaitCancelled { .. }), "{err:?}");
    // The operation itself ran on and can be awaited again.
    let outcome = env.client.wait(&op, &CancellationToken::new()).await.unwrap();
    let OperationOutcome::Succeeded(result) = outcome else { panic!("{outcome:?}") };
    assert_eq!(payload::to_json(&result).unwrap(), json!("still here"));
    worker.stop().await;
}
