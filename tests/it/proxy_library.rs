//! R-PRX-26, R-PRX-27: the proxy as a library. One worker of the program's own (the examples'
//! `serve`) serves native tools, a proxied stdio upstream and an upstream reached through a
//! client factory (an in-process rmcp server over `tokio::io::duplex`, no subprocess), all on one
//! task queue; a connector lists the three services and calls one tool of each.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use durable_mcp::{
    proxy::{TransportConfig, UpstreamConfig, UpstreamTransport},
    temporal::TemporalConnection,
};
use durable_mcp_conformance::fixtures::{
    Ledger, LedgerEvent,
    server::{CrashMode, MockUpstream},
    spec::{SpecSource, UpstreamSpec},
};
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// The in-process upstream: one read-only echo tool whose name no other service uses.
fn in_process_spec() -> UpstreamSpec {
    serde_json::from_value(json!({
        "name": "in-process",
        "tools": [{
            "name": "inproc_echo",
            "annotations": {"readOnlyHint": true},
            "behavior": {"kind": "echo"}
        }]
    }))
    .unwrap()
}

/// A client factory: every connection is a fresh duplex pipe with the mock served on its far
/// end, in this process. Counts the connections it opened.
fn in_process_upstream(opened: Arc<AtomicUsize>) -> UpstreamConfig {
    let factory = move || {
        let opened = opened.clone();
        async move {
            opened.fetch_add(1, Ordering::SeqCst);
            let (ours, theirs) = tokio::io::duplex(1 << 20);
            let server = MockUpstream::new(
                SpecSource::Inline(in_process_spec()),
                None,
                CrashMode::AbortHttpResponse,
            )?;
            tokio::spawn(async move {
                if let Ok(running) = server.serve(tokio::io::split(theirs)).await {
                    let _ = running.waiting().await;
                }
            });
            let (read, write) = tokio::io::split(ours);
            anyhow::Ok(UpstreamTransport::io(read, write))
        }
    };
    UpstreamConfig {
        service: "inproc".into(),
        transport: TransportConfig::custom(factory),
        activity_options: Default::default(),
        overrides: Default::default(),
    }
}

/// The examples' worker with `upstreams`, on a thread of its own (the SDK worker's future is
/// not `Send`); stopped and checked by [`WorkerThread::stop`].
struct WorkerThread {
    shutdown: CancellationToken,
    join: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl WorkerThread {
    async fn start(env: &TestEnv, upstreams: Vec<UpstreamConfig>) -> Self {
        let temporal = TemporalConnection {
            connection: env.connection.clone(),
            namespace: env.namespace.clone(),
        };
        let task_queue = env.task_queue.clone();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let join = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(durable_mcp_examples::serve(
                temporal,
                &task_queue,
                upstreams,
                stop,
                move || {
                    let _ = ready_tx.send(());
                },
            ))
        });
        let mut worker = Self {
            shutdown,
            join: Some(join),
        };
        if ready_rx.await.is_err() {
            let error = worker.join.take().unwrap().join().unwrap().unwrap_err();
            panic!("the worker did not start: {error:#}");
        }
        worker
    }

    /// Joins the thread off this runtime: the connection's background tasks live here, and
    /// the worker's shutdown RPCs need them.
    async fn stop(mut self) {
        self.shutdown.cancel();
        let join = self.join.take().unwrap();
        let result = tokio::task::spawn_blocking(move || join.join())
            .await
            .unwrap()
            .expect("no panic");
        result.expect("the worker stops cleanly");
    }
}

impl Drop for WorkerThread {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[tokio::test]
async fn one_worker_serves_native_tools_and_proxied_upstreams_on_one_task_queue() {
    let env = TestEnv::shared("proxy-library").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let opened = Arc::new(AtomicUsize::new(0));
    let worker = WorkerThread::start(
        &env,
        vec![
            mock_stdio_upstream("mock", &ledger).unwrap(),
            in_process_upstream(opened.clone()),
        ],
    )
    .await;

    let mut options = durable_mcp::connector::server::ConnectorOptions::new(vec![
        route("examples", &env.endpoint),
        route("mock", &env.endpoint),
        route("inproc", &env.endpoint),
    ]);
    options.task_after = std::time::Duration::from_secs(30);
    let client = client_for(durable_mcp::connector::server::Connector::new(
        env.client.clone(),
        options,
    ))
    .await
    .unwrap();

    // One listing through the connector holds the three services' tools.
    let listed: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    for expected in [
        "word_count",
        "slow_report",
        "echo",
        "write_once",
        "inproc_echo",
    ] {
        assert!(
            listed.iter().any(|n| n == expected),
            "{expected} missing from {listed:?}"
        );
    }
    assert!(
        !listed.iter().any(|n| n == "server_info"),
        "the hidden operation stays hidden"
    );

    // A native tool.
    let native = client
        .peer()
        .call_tool(tool_call("word_count", json!({"text": "a b c"})))
        .await
        .unwrap();
    let native = serde_json::to_value(native).unwrap();
    assert_eq!(native["structuredContent"], json!({"words": 3}), "{native}");

    // A proxied stdio upstream: its call ran as the proxy's Activity, on this worker.
    let proxied = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "library"})))
        .await
        .unwrap();
    let proxied = serde_json::to_value(proxied).unwrap();
    assert_eq!(proxied["isError"], false, "{proxied}");
    assert_eq!(proxied["structuredContent"], json!({"key": "library"}));
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Called, "library"),
        1,
        "the upstream ran the call once"
    );

    // The factory's upstream, answered by the in-process server.
    let custom = client
        .peer()
        .call_tool(tool_call("inproc_echo", json!({"n": 7, "s": "x"})))
        .await
        .unwrap();
    let custom: Value = serde_json::to_value(custom).unwrap();
    assert_eq!(custom["isError"], false, "{custom}");
    assert_eq!(custom["structuredContent"], json!({"n": 7, "s": "x"}));
    assert!(
        opened.load(Ordering::SeqCst) >= 1,
        "the proxy reached the upstream through the factory"
    );

    let _ = client.cancel().await;
    worker.stop().await;
}
