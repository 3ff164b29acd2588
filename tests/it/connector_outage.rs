//! R-CON-16: a Temporal outage while callers wait does not break their calls. The dev server
//! restarts on its db file (R-HAR-4) while tool calls wait in the connector: a plain caller
//! gets the tool's real result, a task-capable caller its task and then the result, and a
//! cancel sent while the server is down still reaches the tool. Every tool ran once.

use std::time::Duration;

use durable_mcp::proxy::options::ActivityOptions;
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent};
use durable_mcp_conformance::harness::{DevServer, DevServerOptions};
use rmcp::model::CallToolResponse;
use serde_json::json;

use crate::support::*;

/// A server on a db file, so that it can restart with its state.
async fn restartable_server() -> DevServer {
    init_tracing();
    DevServer::start(DevServerOptions {
        db_file: Some(temp_path("temporal.db")),
        ..Default::default()
    })
    .await
    .expect("dedicated dev server with a db file")
}

/// The mock upstream behind the proxy, with a heartbeat timeout that outlasts a restart (the
/// tool must not be retried because its heartbeats could not reach a stopped server).
fn upstream(ledger: &Ledger) -> durable_mcp::proxy::UpstreamConfig {
    let mut config = mock_stdio_upstream("mock", ledger).unwrap();
    config.activity_options = ActivityOptions {
        heartbeat_timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    config
}

/// Restarts `server` on a task of its own; answers once its gRPC port refuses connections (the
/// old server is gone) with the task, which hands the server back when it is up again.
async fn restart_in_background(mut server: DevServer) -> tokio::task::JoinHandle<DevServer> {
    let address = server.address();
    let restart = tokio::spawn(async move {
        server
            .restart()
            .await
            .expect("server restarts on its db file");
        server
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(&address).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server did not stop within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    restart
}

/// Polls until the mock's `slow` has one `event` for `key` (or `secs` pass); the count.
async fn wait_for(ledger: &Ledger, event: LedgerEvent, key: &str, secs: u64) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let count = ledger.count_key("slow", event, key);
        if count >= 1 || tokio::time::Instant::now() >= deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn waiting_calls_ride_out_a_temporal_restart() {
    let server = restartable_server().await;
    let env = TestEnv::on(&server, "outage").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream(&ledger)]);
    let plain = client_for(connector_for(&env, "mock")).await.unwrap();
    let tasks = task_client_for(connector_for(&env, "mock")).await.unwrap();
    // Listing first, so the calls below start at once.
    plain.peer().list_all_tools().await.unwrap();
    tasks.peer().list_all_tools().await.unwrap();

    let plain_call = tokio::spawn({
        let peer = plain.peer().clone();
        async move {
            peer.call_tool(tool_call("slow", json!({"key": "plain", "sleep_ms": 8000})))
                .await
        }
    });
    let task_call = tokio::spawn({
        let peer = tasks.peer().clone();
        async move {
            peer.call_tool_once(tool_call("slow", json!({"key": "task", "sleep_ms": 8000})))
                .await
        }
    });
    for key in ["plain", "task"] {
        assert_eq!(
            wait_for(&ledger, LedgerEvent::Called, key, 30).await,
            1,
            "the upstream got call {key}: {:?}",
            ledger.read()
        );
    }

    let restart = restart_in_background(server).await;
    let server = restart.await.unwrap();

    let result = tokio::time::timeout(Duration::from_secs(120), plain_call)
        .await
        .expect("the plain call ends within 120 s")
        .unwrap()
        .expect("the plain caller gets the tool's result, not an error");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result.structured_content,
        Some(json!({"key": "plain", "sleep_ms": 8000}))
    );

    let answer = tokio::time::timeout(Duration::from_secs(120), task_call)
        .await
        .expect("the task call answers within 120 s")
        .unwrap()
        .expect("the task-capable caller gets its task or result, not an error");
    let result = match answer {
        CallToolResponse::Task(_) => poll_task_until_done(&tasks, &task_id_of(answer)).await,
        CallToolResponse::Complete(result) => serde_json::to_value(result).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        result.to_string().contains("\"task\""),
        "the task's result is the tool's: {result}"
    );

    for key in ["plain", "task"] {
        assert_eq!(
            ledger.count_key("slow", LedgerEvent::Called, key),
            1,
            "{key} ran once: {:?}",
            ledger.read()
        );
        assert_eq!(ledger.count_key("slow", LedgerEvent::Completed, key), 1);
    }
    plain.cancel().await.unwrap();
    tasks.cancel().await.unwrap();
    drop(_proxy);
    let mut server = server;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_cancel_sent_while_temporal_is_down_reaches_the_tool() {
    let server = restartable_server().await;
    let env = TestEnv::on(&server, "outage-cancel").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![upstream(&ledger)]);
    let client = client_for(connector_for(&env, "mock")).await.unwrap();
    client.peer().list_all_tools().await.unwrap();

    let call = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(tool_call("slow", json!({"key": "c"}))).await }
    });
    assert_eq!(wait_for(&ledger, LedgerEvent::Called, "c", 30).await, 1);
    let restart = restart_in_background(server).await;
    // The server is down: the caller gives up (rmcp sends notifications/cancelled when the
    // request's future is dropped).
    call.abort();
    let server = restart.await.unwrap();

    assert_eq!(
        wait_for(&ledger, LedgerEvent::Cancelled, "c", 90).await,
        1,
        "the cancel sent during the outage reached the tool: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count_key("slow", LedgerEvent::Completed, "c"), 0);
    client.cancel().await.unwrap();
    drop(_proxy);
    let mut server = server;
    server.stop().await.unwrap();
}

/// R-CON-34: when Temporal stays away past a call's outage budget (its timeout plus 30 s while
/// waiting, its timeout while starting), the caller is not told to "try again later": the call
/// may have run, and the answer says so and how a retry reaches the same call.
#[tokio::test]
async fn a_call_cut_off_by_a_lasting_outage_says_it_may_have_run() {
    let mut server = restartable_server().await;
    let env = TestEnv::on(&server, "outage-lasting").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut config = mock_stdio_upstream("mock", &ledger).unwrap();
    // Every tool advertises an 8 s timeout: the wait gives up 38 s after the start. (At 3 s a
    // loaded machine's slow server stop let the Activity time out first, an outcome the
    // connector could read.)
    config.activity_options = ActivityOptions {
        schedule_to_close_timeout: Some(Duration::from_secs(8)),
        ..Default::default()
    };
    let proxy = start_proxy(&env, vec![config]);
    let client = client_for(connector_for(&env, "mock")).await.unwrap();
    client.peer().list_all_tools().await.unwrap();

    let call = tokio::spawn({
        let peer = client.peer().clone();
        async move {
            peer.call_tool(tool_call("slow", json!({"key": "w", "sleep_ms": 60000})))
                .await
        }
    });
    assert_eq!(wait_for(&ledger, LedgerEvent::Called, "w", 30).await, 1);
    server.stop().await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(120), call)
        .await
        .expect("the wait gives up within 120 s")
        .unwrap()
        .expect_err("no outcome could be read");
    // A start while the server is down (the tool is known from the listing above).
    let started = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "s"})))
        .await
        .expect_err("nothing could be started");
    for (what, error) in [
        ("waiting for the tool call", waited),
        ("starting the tool call", started),
    ] {
        let text = error.to_string();
        assert!(
            text.contains(&format!("{what} failed"))
                && text.contains("may have run")
                && text.contains("idempotencyKey")
                && !text.contains("Try again"),
            "{text}"
        );
    }
    client.cancel().await.unwrap();
    drop(proxy);
}
