//! R-RT-1..4: sync and async round trips, catch-all dispatch, idempotent retried starts.

use std::time::Duration;

use durable_mcp::{
    contract::payload,
    nexus::{OperationOutcome, Service, StartOperation, StartOutcome, start_fn},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

fn op_id(test: &str) -> String {
    format!("{test}-{}", uuid::Uuid::new_v4())
}

#[tokio::test]
async fn sync_operation_round_trip() {
    let env = TestEnv::shared("sync").await;
    let service = Service::new("echo").operation(
        "echo",
        start_fn(|ctx, input| async move {
            // The handler sees the request's identity and headers.
            assert!(!ctx.request_id.is_empty());
            assert_eq!(ctx.headers.get("x-test").map(String::as_str), Some("yes"));
            Ok(StartOutcome::Sync(input))
        }),
    );
    let worker = env.nexus_worker(vec![service]).await;

    let input = json!({"text": "hello", "n": [1, 2, 3], "nested": {"ok": true}});
    let mut start = StartOperation::new(
        op_id("sync"),
        &env.endpoint,
        "echo",
        "echo",
        payload::to_payload(&input).unwrap(),
    );
    start.headers.insert("x-test".into(), "yes".into());
    start.schedule_to_close = Some(Duration::from_secs(30));
    let (op, started) = env.client.start(start).await.unwrap();
    assert!(started);
    let outcome = env
        .client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap();
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(payload::to_json(&result).unwrap(), input);

    let described = env.client.describe(&op).await.unwrap();
    assert_eq!(
        described.status,
        durable_mcp::nexus::OperationStatus::Completed
    );
    assert_eq!(described.operation, "echo");
    worker.stop().await;
}

#[tokio::test]
async fn catch_all_receives_unregistered_operation_names() {
    let env = TestEnv::shared("catchall").await;
    let service = Service::new("tools")
        .operation(
            "list_tools",
            start_fn(|_, _| async move {
                Ok(StartOutcome::Sync(
                    payload::to_payload(&json!(["named"])).unwrap(),
                ))
            }),
        )
        .catch_all(start_fn(|ctx, _| async move {
            Ok(StartOutcome::Sync(
                payload::to_payload(&json!({"caught": ctx.operation})).unwrap(),
            ))
        }));
    let worker = env.nexus_worker(vec![service]).await;
    for (operation, expected) in [
        ("list_tools", json!(["named"])),
        ("any-tool.name", json!({"caught": "any-tool.name"})),
    ] {
        let start = StartOperation::new(
            op_id("catchall"),
            &env.endpoint,
            "tools",
            operation,
            payload::to_payload(&json!({})).unwrap(),
        );
        let (op, _) = env.client.start(start).await.unwrap();
        let OperationOutcome::Succeeded(result) = env
            .client
            .wait(&op, &CancellationToken::new())
            .await
            .unwrap()
        else {
            panic!("operation {operation} did not succeed")
        };
        assert_eq!(payload::to_json(&result).unwrap(), expected);
    }
    worker.stop().await;
}

#[tokio::test]
async fn async_operation_completes_through_activity_callback() {
    let env = TestEnv::shared("async").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", false)])
        .await;

    let key = op_id("async");
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 300,
        value: json!({"answer": 42, "text": "done"}),
    };
    let start = StartOperation::new(
        &key,
        &env.endpoint,
        "jobs",
        "run",
        payload::to_payload(&input).unwrap(),
    );
    let (_, outcome) = start_and_wait(&env, start).await;
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(payload::to_json(&result).unwrap(), input.value);
    assert_eq!(count(&key, "activity-started"), 1);
    assert_eq!(count(&key, "activity-completed"), 1);
    worker.stop().await;
}

#[tokio::test]
async fn retried_start_with_same_request_id_reattaches_to_one_activity() {
    let env = TestEnv::shared("reattach").await;
    let _activities = env.activity_worker();
    // The first start attempt starts the activity, then fails retryably; the server re-sends
    // the start with the same request id, which must attach to the same activity.
    let worker = env
        .nexus_worker(vec![activity_service(&env, "jobs", true)])
        .await;

    let key = op_id("reattach");
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 1500,
        value: json!("once"),
    };
    let mut start = StartOperation::new(
        &key,
        &env.endpoint,
        "jobs",
        "run",
        payload::to_payload(&input).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (_, outcome) = start_and_wait(&env, start).await;
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(payload::to_json(&result).unwrap(), json!("once"));

    let events = events(&key);
    assert_eq!(count(&key, "start-handler"), 2, "{events:?}");
    assert_eq!(count(&key, "activity-start:new"), 1, "{events:?}");
    assert_eq!(count(&key, "activity-start:attached"), 1, "{events:?}");
    assert_eq!(
        count(&key, "activity-started"),
        1,
        "the tool ran once: {events:?}"
    );
    worker.stop().await;
}

#[tokio::test]
async fn same_operation_and_request_id_is_idempotent_at_the_caller() {
    let env = TestEnv::shared("idem").await;
    let worker = env
        .nexus_worker(vec![Service::new("echo").operation(
            "echo",
            start_fn(|_, input| async move { Ok(StartOutcome::Sync(input)) }),
        )])
        .await;
    let start = StartOperation::new(
        op_id("idem"),
        &env.endpoint,
        "echo",
        "echo",
        payload::to_payload(&json!(1)).unwrap(),
    );
    let (first, started) = env.client.start(start.clone()).await.unwrap();
    assert!(started);
    env.client
        .wait(&first, &CancellationToken::new())
        .await
        .unwrap();
    // Same id and request id, even after close: the same run, not a new one.
    let (again, started_again) = env.client.start(start.clone()).await.unwrap();
    assert_eq!(again, first);
    assert!(!started_again);
    // A different request id under the default conflict policy: AlreadyExists? No: the first
    // closed, and the default reuse policy allows a new run.
    let mut other = start.clone();
    other.request_id = uuid::Uuid::new_v4().to_string();
    other.reuse_policy = durable_mcp::nexus::ReusePolicy::RejectDuplicate;
    let err = env.client.start(other).await.unwrap_err();
    assert!(
        matches!(
            err,
            durable_mcp::nexus::OperationClientError::AlreadyExists { .. }
        ),
        "{err:?}"
    );
    worker.stop().await;
}

#[tokio::test]
async fn concurrency_is_bounded_by_max_concurrent_tasks() {
    let env = TestEnv::shared("bounded").await;
    let key = op_id("bounded");
    let k = key.clone();
    let service = Service::new("busy").operation(
        "hold",
        start_fn(move |_, input| {
            let key = k.clone();
            async move {
                record(&key, "enter");
                let inside = count(&key, "enter") - count(&key, "leave");
                record(&key, format!("inside:{inside}"));
                tokio::time::sleep(Duration::from_millis(700)).await;
                record(&key, "leave");
                Ok(StartOutcome::Sync(input))
            }
        }),
    );
    let mut options = durable_mcp::nexus::NexusWorkerOptions::new(&env.namespace, &env.task_queue);
    options.max_concurrent_tasks = 1;
    options.pollers = 1;
    let worker = durable_mcp::nexus::NexusWorker::new(env.connection.clone(), options, [service])
        .await
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    let mut ops = Vec::new();
    for i in 0..3 {
        let start = StartOperation::new(
            format!("{key}-{i}"),
            &env.endpoint,
            "busy",
            "hold",
            payload::to_payload(&json!(i)).unwrap(),
        );
        ops.push(env.client.start(start).await.unwrap().0);
    }
    for op in &ops {
        let outcome = env
            .client
            .wait(op, &CancellationToken::new())
            .await
            .unwrap();
        assert!(
            matches!(outcome, OperationOutcome::Succeeded(_)),
            "{outcome:?}"
        );
    }
    let events = events(&key);
    assert_eq!(count(&key, "enter"), 3, "{events:?}");
    assert_eq!(
        count(&key, "inside:1"),
        3,
        "never two handlers at once: {events:?}"
    );
    shutdown.shutdown();
    running.await.unwrap().unwrap();
}

/// A codec that makes payloads unreadable on the wire (XOR + its own encoding).
struct XorCodec;

impl durable_mcp::contract::payload::PayloadCodec for XorCodec {
    fn encode(
        &self,
        payloads: Vec<temporalio_protos::temporal::api::common::v1::Payload>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<temporalio_protos::temporal::api::common::v1::Payload>, payload::PayloadError>,
    > {
        Box::pin(async move {
            Ok(payloads
                .into_iter()
                .map(|p| {
                    let inner = serde_json::to_vec(&(p.metadata, p.data)).unwrap();
                    temporalio_protos::temporal::api::common::v1::Payload {
                        metadata: [("encoding".to_owned(), b"binary/xor".to_vec())].into(),
                        data: inner.into_iter().map(|b| b ^ 0x5a).collect(),
                        ..Default::default()
                    }
                })
                .collect())
        })
    }
    fn decode(
        &self,
        payloads: Vec<temporalio_protos::temporal::api::common::v1::Payload>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<temporalio_protos::temporal::api::common::v1::Payload>, payload::PayloadError>,
    > {
        Box::pin(async move {
            payloads
                .into_iter()
                .map(|p| {
                    let plain: Vec<u8> = p.data.into_iter().map(|b| b ^ 0x5a).collect();
                    let (metadata, data) = serde_json::from_slice(&plain)
                        .map_err(|e| payload::PayloadError::Codec(e.to_string()))?;
                    Ok(temporalio_protos::temporal::api::common::v1::Payload {
                        metadata,
                        data,
                        ..Default::default()
                    })
                })
                .collect()
        })
    }
}

#[tokio::test]
async fn codec_hook_encodes_inputs_and_decodes_results() {
    let env = TestEnv::shared("codec").await;
    let key = op_id("codec");
    let k = key.clone();
    let service = Service::new("echo").operation(
        "echo",
        start_fn(move |_, input| {
            let key = k.clone();
            async move {
                // The handler side sees only the encoded form.
                record(
                    &key,
                    payload::encoding(&input).unwrap_or_default().to_owned(),
                );
                Ok(StartOutcome::Sync(input))
            }
        }),
    );
    let worker = env.nexus_worker(vec![service]).await;
    let client = env.client.clone().with_codec(std::sync::Arc::new(XorCodec));
    let input = json!({"secret": "plans"});
    let start = StartOperation::new(
        &key,
        &env.endpoint,
        "echo",
        "echo",
        payload::to_payload(&input).unwrap(),
    );
    let (op, _) = client.start(start).await.unwrap();
    let OperationOutcome::Succeeded(result) =
        client.wait(&op, &CancellationToken::new()).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(payload::to_json(&result).unwrap(), input);
    assert_eq!(events(&key), vec!["binary/xor".to_owned()]);
    worker.stop().await;
}

#[tokio::test]
async fn remote_codec_server_encodes_inputs_and_decodes_results() {
    let env = TestEnv::shared("rcodec").await;
    let key = op_id("rcodec");
    let k = key.clone();
    let service = Service::new("echo").operation(
        "echo",
        start_fn(move |_, input| {
            let key = k.clone();
            async move {
                record(
                    &key,
                    payload::encoding(&input).unwrap_or_default().to_owned(),
                );
                Ok(StartOutcome::Sync(input))
            }
        }),
    );
    let worker = env.nexus_worker(vec![service]).await;
    let (url, server, namespaces) = serve_xor_codec().await;
    let codec = durable_mcp::temporal::codec::RemoteCodec::new(&url, &env.namespace).unwrap();
    let client = env.client.clone().with_codec(std::sync::Arc::new(codec));
    let input = json!({"secret": "remote plans"});
    let start = StartOperation::new(
        &key,
        &env.endpoint,
        "echo",
        "echo",
        payload::to_payload(&input).unwrap(),
    );
    let (op, _) = client.start(start).await.unwrap();
    let OperationOutcome::Succeeded(result) =
        client.wait(&op, &CancellationToken::new()).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(payload::to_json(&result).unwrap(), input);
    assert_eq!(
        events(&key),
        vec!["binary/xor-remote".to_owned()],
        "the handler saw only the encoded form"
    );
    assert_eq!(
        namespaces.lock().unwrap().first(),
        Some(&env.namespace),
        "X-Namespace is sent"
    );
    worker.stop().await;
    server.abort();
}
