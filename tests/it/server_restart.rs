//! R-HAR-4: an async operation in flight survives a restart of the Temporal server on its
//! database file and completes afterwards.

use std::time::Duration;

use durable_mcp::{
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
};
use durable_mcp_conformance::harness::{DevServer, DevServerOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

#[tokio::test]
async fn async_operation_in_flight_completes_after_server_restart() {
    init_tracing();
    let dir = tempfile_dir();
    let mut server = DevServer::start(DevServerOptions {
        db_file: Some(dir.join("temporal.db")),
        ..Default::default()
    })
    .await
    .expect("dedicated dev server with a db file");
    let env = TestEnv::on(&server, "restart").await;
    let _activities = env.activity_worker();
    let worker = env
        .nexus_worker(vec![restart_tolerant_activity_service(&env, "jobs")])
        .await;

    let key = format!("restart-{}", uuid::Uuid::new_v4());
    let input = SlowEcho {
        key: key.clone(),
        sleep_ms: 6_000,
        value: json!({"survived": true}),
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

    server
        .restart()
        .await
        .expect("server restarts on its db file");

    let outcome = tokio::time::timeout(Duration::from_secs(90), async {
        // The old connection reconnects by itself; a fresh client proves the state is on disk.
        let client = durable_mcp::nexus::OperationClient::new(
            connect(&server.address()).await,
            server.namespace(),
        );
        loop {
            match client.wait(&op, &CancellationToken::new()).await {
                Ok(outcome) => break outcome,
                Err(e) => {
                    tracing::warn!("waiting after restart: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    })
    .await
    .expect("completes within 90 s of the restart");
    let OperationOutcome::Succeeded(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        payload::to_json(&result).unwrap(),
        json!({"survived": true})
    );
    worker.stop().await;
    drop(_activities);
    server.stop().await.unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("durable-mcp-restart-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
