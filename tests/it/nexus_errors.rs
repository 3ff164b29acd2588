//! R-RT-5..7: each handler-error kind and operation error as the caller sees it; a sync handler
//! that overruns its request deadline.

use std::time::Duration;

use durable_mcp::contract::payload;
use durable_mcp::nexus::{
    HandlerError, HandlerErrorKind, OperationError, OperationOutcome, RetryBehavior, Service,
    StartOperation, StartOutcome, start_fn,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// A service whose operation `fail` answers with the error named by its input.
fn failing_service() -> Service {
    Service::new("fail").operation(
        "fail",
        start_fn(|_, input| async move {
            let spec: serde_json::Value = payload::to_json(&input).unwrap();
            let kind = spec["kind"].as_str().unwrap_or_default().to_owned();
            let retry = match spec["retry"].as_str() {
                Some("yes") => RetryBehavior::Retryable,
                Some("no") => RetryBehavior::NonRetryable,
                _ => RetryBehavior::Default,
            };
            match kind.as_str() {
                "operation-failed" => Err(OperationError::Failed {
                    message: "the tool said no".into(),
                    error_type: "ToolRefused".into(),
                    details: None,
                }
                .into()),
                "operation-canceled" => Err(OperationError::Canceled {
                    message: "gave up".into(),
                }
                .into()),
                "panic" => panic!("handler bug"),
                name => Err(HandlerError::new(
                    HandlerErrorKind::parse(name).unwrap(),
                    format!("{name} happened"),
                )
                .with_retry(retry)
                .into()),
            }
        }),
    )
}

async fn run(
    env: &TestEnv,
    service: &str,
    operation: &str,
    input: serde_json::Value,
    timeout: Duration,
) -> OperationOutcome {
    let mut start = StartOperation::new(
        format!("err-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        service,
        operation,
        payload::to_payload(&input).unwrap(),
    );
    start.schedule_to_close = Some(timeout);
    let (op, _) = env.client.start(start).await.unwrap();
    env.client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap()
}

/// Describes the operation until its last failed attempt mentions `needle` (while it is still
/// retrying: once it times out, the last failure becomes the timeout).
async fn await_attempt_failure(
    env: &TestEnv,
    op: &durable_mcp::nexus::OperationRef,
    needle: &str,
) -> durable_mcp::nexus::OperationDescription {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let described = env.client.describe(op).await.unwrap();
        if described.attempt >= 2
            && described
                .last_attempt_failure
                .as_deref()
                .unwrap_or_default()
                .contains(needle)
        {
            return described;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no retried attempt failing with {needle:?}: {described:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn non_retryable_handler_errors_fail_the_operation_with_their_kind() {
    let env = TestEnv::shared("herr").await;
    let worker = env.nexus_worker(vec![failing_service()]).await;
    for kind in HandlerErrorKind::ALL {
        let outcome = run(
            &env,
            "fail",
            "fail",
            json!({"kind": kind.as_str(), "retry": "no"}),
            Duration::from_secs(30),
        )
        .await;
        match outcome {
            OperationOutcome::Failed {
                handler_error,
                ref message,
                ..
            } => {
                assert_eq!(handler_error, Some(kind), "{outcome:?}");
                assert!(message.contains(kind.as_str()), "{outcome:?}");
            }
            other => panic!("{kind:?}: expected Failed, got {other:?}"),
        }
    }
    // BAD_REQUEST is non-retryable without being told.
    let outcome = run(
        &env,
        "fail",
        "fail",
        json!({"kind": "BAD_REQUEST"}),
        Duration::from_secs(30),
    )
    .await;
    assert!(
        matches!(
            outcome,
            OperationOutcome::Failed {
                handler_error: Some(HandlerErrorKind::BadRequest),
                ..
            }
        ),
        "{outcome:?}"
    );
    worker.stop().await;
}

#[tokio::test]
async fn retryable_handler_errors_are_retried_until_the_deadline() {
    let env = TestEnv::shared("hretry").await;
    let worker = env.nexus_worker(vec![failing_service()]).await;
    let mut start = StartOperation::new(
        format!("retry-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "fail",
        "fail",
        payload::to_payload(&json!({"kind": "UNAVAILABLE"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(8));
    let (op, _) = env.client.start(start).await.unwrap();
    await_attempt_failure(&env, &op, "UNAVAILABLE happened").await;
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(outcome, OperationOutcome::TimedOut { .. }),
        "{outcome:?}"
    );
    worker.stop().await;
}

#[tokio::test]
async fn operation_errors_and_unknown_targets() {
    let env = TestEnv::shared("operr").await;
    let worker = env.nexus_worker(vec![failing_service()]).await;
    let t = Duration::from_secs(30);

    let outcome = run(&env, "fail", "fail", json!({"kind": "operation-failed"}), t).await;
    assert_eq!(
        outcome,
        OperationOutcome::Failed {
            message: "the tool said no".into(),
            error_type: Some("ToolRefused".into()),
            handler_error: None
        }
    );
    let outcome = run(
        &env,
        "fail",
        "fail",
        json!({"kind": "operation-canceled"}),
        t,
    )
    .await;
    assert!(
        matches!(outcome, OperationOutcome::Canceled { .. }),
        "{outcome:?}"
    );

    let outcome = run(&env, "no-such-service", "x", json!({}), t).await;
    assert!(
        matches!(
            outcome,
            OperationOutcome::Failed {
                handler_error: Some(HandlerErrorKind::NotFound),
                ..
            }
        ),
        "{outcome:?}"
    );
    let outcome = run(&env, "fail", "no-such-op", json!({}), t).await;
    assert!(
        matches!(
            outcome,
            OperationOutcome::Failed {
                handler_error: Some(HandlerErrorKind::NotFound),
                ..
            }
        ),
        "{outcome:?}"
    );

    // A panicking handler becomes a retryable INTERNAL error: retried, never a crash, and
    // counted (R-CON-51).
    let panics_before = durable_mcp::panics::counted("nexus_start");
    let mut start = StartOperation::new(
        format!("panic-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "fail",
        "fail",
        payload::to_payload(&json!({"kind": "panic"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(8));
    let (op, _) = env.client.start(start).await.unwrap();
    await_attempt_failure(&env, &op, "panicked").await;
    assert!(durable_mcp::panics::counted("nexus_start") > panics_before);
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(outcome, OperationOutcome::TimedOut { .. }),
        "{outcome:?}"
    );
    worker.stop().await;
}

#[tokio::test]
async fn sync_handler_overrunning_its_deadline_is_cancelled_and_retried() {
    let env = TestEnv::shared("overrun").await;
    let key = format!("overrun-{}", uuid::Uuid::new_v4());
    let k = key.clone();
    let service = Service::new("slow").operation(
        "slow",
        start_fn(move |ctx, input| {
            let key = k.clone();
            async move {
                record(&key, "attempt");
                if count(&key, "attempt") == 1 {
                    // Records "dropped" unless the handler runs to its end.
                    let mut alive = DropRecorder(Some(key.clone()));
                    // Far beyond the ~8 s request deadline: the runtime must cancel us.
                    tokio::select! {
                        _ = ctx.cancelled.cancelled() => record(&key, "cancelled-by-runtime"),
                        _ = tokio::time::sleep(Duration::from_secs(60)) => record(&key, "not-cancelled"),
                    }
                    // ... and drop us when we ignore that and go on.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    record(&key, "ran-past-its-cancellation");
                    alive.0 = None;
                    return Ok(StartOutcome::Sync(payload::to_payload(&json!("late")).unwrap()));
                }
                Ok(StartOutcome::Sync(input))
            }
        }),
    );
    let worker = env.nexus_worker(vec![service]).await;
    let mut start = StartOperation::new(
        &key,
        &env.endpoint,
        "slow",
        "slow",
        payload::to_payload(&json!("fresh")).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (_, outcome) = start_and_wait(&env, start).await;
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        payload::to_json(&result).unwrap(),
        json!("fresh"),
        "the late answer was discarded"
    );
    assert_eq!(count(&key, "cancelled-by-runtime"), 1, "{:?}", events(&key));
    assert_eq!(count(&key, "not-cancelled"), 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count(&key, "dropped") == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        count(&key, "dropped"),
        1,
        "the handler ignoring its cancellation was dropped: {:?}",
        events(&key)
    );
    assert_eq!(count(&key, "ran-past-its-cancellation"), 0);
    worker.stop().await;
}

/// Records `dropped` for its key when dropped while still armed.
struct DropRecorder(Option<String>);

impl Drop for DropRecorder {
    fn drop(&mut self) {
        if let Some(key) = self.0.take() {
            record(&key, "dropped");
        }
    }
}

/// R-CON-37: learning how an operation failed costs no describe RPC when the failure itself
/// tells it (counted by a dedicated dev server's own counters): an operation error of a sync
/// handler, a canceled one, and a tool's failure through the proxy's Activity and its callback
/// (a result too large to carry). Each used to cost one `DescribeNexusOperationExecution`.
#[tokio::test]
async fn a_failed_call_costs_no_describe() {
    use durable_mcp_conformance::{fixtures::Ledger, load::metrics};
    init_tracing();
    let (mut server, address) = dedicated_server_with_metrics().await;
    let sync_env = TestEnv::on(&server, "nodescribe-sync").await;
    let worker = sync_env.nexus_worker(vec![failing_service()]).await;
    let proxy_env = TestEnv::on(&server, "nodescribe-proxy").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &proxy_env,
        vec![mock_stdio_upstream("mock", &ledger).unwrap()],
    );
    let t = Duration::from_secs(60);
    // Warm up: the proxy polls and has opened its upstream.
    let warm = run(&proxy_env, "mock", "echo", json!({"key": "warm"}), t).await;
    assert!(matches!(warm, OperationOutcome::Succeeded(_)), "{warm:?}");

    let describes = |c: &metrics::Counters| {
        c.0.get("frontend/DescribeNexusOperationExecution")
            .copied()
            .unwrap_or(0.0)
    };
    // The server publishes its counters about once a second: let the warm-up's land first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = metrics::scrape(&address).await.unwrap();
    let failed = run(
        &sync_env,
        "fail",
        "fail",
        json!({"kind": "operation-failed"}),
        t,
    )
    .await;
    assert!(
        matches!(&failed, OperationOutcome::Failed { error_type: Some(e), handler_error: None, .. } if e == "ToolRefused"),
        "{failed:?}"
    );
    let canceled = run(
        &sync_env,
        "fail",
        "fail",
        json!({"kind": "operation-canceled"}),
        t,
    )
    .await;
    assert!(
        matches!(canceled, OperationOutcome::Canceled { .. }),
        "{canceled:?}"
    );
    let too_large = run(&proxy_env, "mock", "large", json!({"key": "big"}), t).await;
    assert!(
        matches!(&too_large, OperationOutcome::Failed { error_type: Some(e), .. } if e == "ResultTooLarge"),
        "{too_large:?}"
    );
    // The server publishes its counters about once a second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = metrics::scrape(&address).await.unwrap().since(&before);
    assert_eq!(
        describes(&spent),
        0.0,
        "three failed operations were described: {spent:?}"
    );
    worker.stop().await;
    drop(_proxy);
    let _ = server.stop().await;
}
