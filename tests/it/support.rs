//! Shared fixtures: a per-test environment on the shared dev server, a Nexus worker guard, and
//! a minimal activity worker (temporalio-sdk) whose activities record what happened.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::Duration,
};

use durable_mcp::{
    contract::payload,
    nexus::{
        CancelContext, HandlerError, NexusWorker, NexusWorkerOptions, OperationHandler, Service,
        ShutdownHandle, StartContext, StartError, StartOutcome,
    },
    temporal::activity::{ActivityStart, cancel_activity, start_activity},
};
pub use durable_mcp_conformance::harness::workspace_bin;
use durable_mcp_conformance::harness::{self, DevServer};
/// The shared test kit: connector and client wiring, the connector and tool service as
/// processes, the proxy's upstreams.
pub use durable_mcp_conformance::kit::{
    self,
    mcp::*,
    process::{CONNECTOR_LISTENING, HttpConnectorProcess, TEST_SIGNING_KEY, example_tools},
    upstreams::*,
};
use durable_mcp_conformance::proxy_thread::ProxyThread;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use temporalio_client::{Client, ClientOptions, Connection};
use temporalio_macros::activities;
use temporalio_protos::temporal::api::common::v1::{Payload, RetryPolicy};
use temporalio_sdk::{
    Runtime, Worker, WorkerOptions,
    activities::{ActivityContext, ActivityError},
};

/// Logs to the test output (once per process); `RUST_LOG` selects what.
pub fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,durable_mcp=info".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

/// One test's slice of a dev server: its own task queue and Nexus endpoint (the harness's
/// [`harness::Slice`], whose fields it derefs to), plus the workers tests start there.
pub struct TestEnv(harness::Slice);

impl std::ops::Deref for TestEnv {
    type Target = harness::Slice;

    fn deref(&self) -> &harness::Slice {
        &self.0
    }
}

impl TestEnv {
    /// A fresh slice of the process-wide shared server.
    pub async fn shared(test: &str) -> TestEnv {
        init_tracing();
        let server = harness::shared().await.expect("shared Temporal dev server");
        Self::on(server, test).await
    }

    /// A fresh slice of a given server (the harness's [`harness::Slice`]).
    pub async fn on(server: &DevServer, test: &str) -> TestEnv {
        TestEnv(
            harness::Slice::on(server, test)
                .await
                .expect("a task queue and Nexus endpoint on the dev server"),
        )
    }

    /// Starts a Nexus worker on this env's task queue.
    pub async fn nexus_worker(&self, services: Vec<Service>) -> WorkerGuard {
        let mut options = NexusWorkerOptions::new(&self.namespace, &self.task_queue);
        options.graceful_shutdown = Duration::from_secs(2);
        let worker = NexusWorker::new(self.connection.clone(), options, services)
            .await
            .expect("Nexus worker starts");
        let shutdown = worker.shutdown_handle();
        let join = tokio::spawn(worker.run());
        WorkerGuard {
            shutdown,
            join: Some(join),
        }
    }

    /// Starts an activity worker (the `TestActivities`) on this env's task queue.
    pub fn activity_worker(&self) -> ActivityWorkerGuard {
        ActivityWorkerGuard::start(&self.address, &self.namespace, &self.task_queue)
    }
}

pub async fn connect(address: &str) -> Connection {
    durable_mcp::temporal::connect_to(address, "durable-mcp-tests")
        .await
        .expect("connect to the dev server")
}

/// Stops its Nexus worker when dropped or [`WorkerGuard::stop`]ped.
pub struct WorkerGuard {
    shutdown: ShutdownHandle,
    join: Option<tokio::task::JoinHandle<Result<(), durable_mcp::nexus::NexusWorkerError>>>,
}

impl WorkerGuard {
    /// Shuts the worker down and checks that it stopped cleanly.
    pub async fn stop(mut self) {
        self.shutdown.shutdown();
        let join = self.join.take().unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), join)
            .await
            .expect("Nexus worker stops within 30 s")
            .expect("worker task did not panic");
        result.expect("worker ran without error");
    }
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.shutdown.shutdown();
    }
}

// ---- activity worker -------------------------------------------------------------------------

/// What the test activities record, keyed by the `key` in their input.
static EVENTS: LazyLock<Mutex<HashMap<String, Vec<String>>>> = LazyLock::new(Default::default);

pub fn record(key: &str, event: impl Into<String>) {
    EVENTS
        .lock()
        .unwrap()
        .entry(key.to_owned())
        .or_default()
        .push(event.into());
}

pub fn events(key: &str) -> Vec<String> {
    EVENTS.lock().unwrap().get(key).cloned().unwrap_or_default()
}

pub fn count(key: &str, event: &str) -> usize {
    events(key).iter().filter(|e| *e == event).count()
}

/// Polls until `cond` holds or `timeout` passes.
pub async fn eventually(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Input of the `slow-echo` activity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlowEcho {
    pub key: String,
    pub sleep_ms: u64,
    pub value: serde_json::Value,
}

#[allow(dead_code)]
pub struct TestActivities;

#[activities]
impl TestActivities {
    /// Sleeps (heartbeating, so cancellation reaches it), then returns `value`.
    // The macro also generates an associated constant named after the method; nothing reads it.
    #[allow(dead_code)]
    #[activity(name = "slow-echo")]
    async fn slow_echo(
        _ctx: ActivityContext,
        input: SlowEcho,
    ) -> Result<serde_json::Value, ActivityError> {
        record(&input.key, "activity-started");
        let deadline = tokio::time::Instant::now() + Duration::from_millis(input.sleep_ms);
        while tokio::time::Instant::now() < deadline {
            if _ctx.is_cancelled() {
                record(&input.key, "activity-cancelled");
                return Err(ActivityError::cancelled());
            }
            let _ = _ctx.record_heartbeat(()).await;
            tokio::select! {
                _ = _ctx.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        record(&input.key, "activity-completed");
        Ok(input.value)
    }
}

/// Runs the SDK activity worker on a thread of its own: its `run()` future is not `Send`.
///
/// Shutdown is triggered from inside that thread's runtime: core spawns its `ShutdownWorker`
/// RPC on the calling runtime, which must not be a test runtime blocked in `join`.
pub struct ActivityWorkerGuard {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActivityWorkerGuard {
    fn start(address: &str, namespace: &str, task_queue: &str) -> Self {
        Self::start_with(address, namespace, task_queue, |_| {})
    }

    /// Like the plain activity worker, with more registered by `configure` (e.g. Workflows).
    pub fn start_with(
        address: &str,
        namespace: &str,
        task_queue: &str,
        configure: impl FnOnce(&mut WorkerOptions) + Send + 'static,
    ) -> Self {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (address, namespace, task_queue) = (
            address.to_owned(),
            namespace.to_owned(),
            task_queue.to_owned(),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let runtime = Runtime::from_current_tokio(Default::default()).expect("sdk runtime");
                let connection = connect(&address).await;
                let client =
                    Client::new(connection, ClientOptions::new(namespace).build()).unwrap();
                let options = WorkerOptions::new(task_queue)
                    .deployment_options(
                        temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                            "durable-mcp-tests".to_owned(),
                        ),
                    )
                    .register_activities(TestActivities)
                    .build();
                let mut options = options;
                configure(&mut options);
                let mut worker = Worker::new(&runtime, client, options).expect("activity worker");
                let shutdown = worker.shutdown_handle();
                ready_tx.send(()).unwrap();
                let (run, ()) = futures::join!(worker.run(), async move {
                    let _ = stop_rx.await;
                    shutdown();
                });
                run.expect("activity worker ran without error");
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("activity worker started");
        Self {
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Shuts the worker down and waits until it stopped (what dropping it does).
    pub fn stop(self) {}
}

impl Drop for ActivityWorkerGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---- an activity-backed async Nexus operation ------------------------------------------------

/// The operation token: enough to find the activity again on cancel.
#[derive(Serialize, Deserialize)]
struct ActivityToken {
    activity_id: String,
    run_id: String,
    /// The test's event key, so the cancel handler can record under it.
    key: String,
}

/// A Nexus operation backed by the `slow-echo` standalone activity, completed through the
/// activity's completion callback: the shape of the proxy's tool calls.
#[derive(Clone)]
pub struct ActivityBackedOp {
    pub connection: Connection,
    pub namespace: String,
    pub task_queue: String,
    /// When true, the first start attempt starts the activity and then fails with a retryable
    /// handler error, as a handler that crashed after starting would.
    pub fail_first_attempt: bool,
    /// The activity's heartbeat timeout: short so cancels land fast; long where the server
    /// is restarted under the activity (heartbeats cannot be delivered meanwhile).
    pub heartbeat: Duration,
}

impl OperationHandler for ActivityBackedOp {
    fn start(
        &self,
        ctx: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
        let this = self.clone();
        Box::pin(async move {
            let echo: SlowEcho = payload::from_payload(&input)
                .map_err(|e| HandlerError::bad_request(format!("bad input: {e}")))?;
            record(&echo.key, "start-handler");
            let activity_id = format!("op-{}", ctx.request_id);
            let (run_id, started) = start_activity(
                &this.connection,
                &this.namespace,
                ActivityStart {
                    activity_id: activity_id.clone(),
                    request_id: ctx.request_id.clone(),
                    activity_type: "slow-echo".into(),
                    task_queue: this.task_queue.clone(),
                    input: vec![input],
                    start_to_close: Some(Duration::from_secs(60)),
                    heartbeat: Some(this.heartbeat),
                    retry_policy: Some(RetryPolicy {
                        maximum_attempts: 1,
                        ..Default::default()
                    }),
                    use_existing: true,
                    completion_callback: Some((ctx.callback.clone(), ctx.callback_headers.clone())),
                    ..Default::default()
                },
            )
            .await
            .map_err(|s| HandlerError::internal(format!("start activity: {s}")))?;
            record(
                &echo.key,
                if started {
                    "activity-start:new"
                } else {
                    "activity-start:attached"
                },
            );
            if this.fail_first_attempt && count(&echo.key, "start-handler") == 1 {
                return Err(
                    HandlerError::internal("simulated crash after starting the activity").into(),
                );
            }
            let token = serde_json::to_string(&ActivityToken {
                activity_id,
                run_id,
                key: echo.key.clone(),
            })
            .unwrap();
            Ok(StartOutcome::Async { token })
        })
    }

    fn cancel(&self, ctx: CancelContext) -> BoxFuture<'static, Result<(), HandlerError>> {
        let this = self.clone();
        Box::pin(async move {
            let token: ActivityToken = serde_json::from_str(&ctx.token)
                .map_err(|e| HandlerError::bad_request(format!("bad operation token: {e}")))?;
            record(&token.key, "cancel-handler");
            cancel_activity(
                &this.connection,
                &this.namespace,
                &token.activity_id,
                &token.run_id,
                "Nexus cancel",
            )
            .await
            .map_err(|s| HandlerError::internal(format!("cancel activity: {s}")))
        })
    }
}

/// A service with `run` backed by [`ActivityBackedOp`].
pub fn activity_service(env: &TestEnv, name: &str, fail_first_attempt: bool) -> Service {
    activity_service_with(env, name, fail_first_attempt, Duration::from_secs(2))
}

/// Like [`activity_service`], with a heartbeat timeout that outlasts a server restart.
pub fn restart_tolerant_activity_service(env: &TestEnv, name: &str) -> Service {
    activity_service_with(env, name, false, Duration::from_secs(30))
}

fn activity_service_with(
    env: &TestEnv,
    name: &str,
    fail_first_attempt: bool,
    heartbeat: Duration,
) -> Service {
    Service::new(name).operation(
        "run",
        Arc::new(ActivityBackedOp {
            connection: env.connection.clone(),
            namespace: env.namespace.clone(),
            task_queue: env.task_queue.clone(),
            fail_first_attempt,
            heartbeat,
        }),
    )
}

// ---- the outbound proxy ------------------------------------------------------------------

/// Starts the proxy on this env's task queue (on a thread of its own: see
/// `durable_mcp_conformance::proxy_thread`); it stops when the returned value is dropped.
pub fn start_proxy(
    env: &TestEnv,
    upstreams: Vec<durable_mcp::proxy::UpstreamConfig>,
) -> ProxyThread {
    env.start_proxy(upstreams, 50)
}

// ---- operations, files, the connector binary ---------------------------------------------

/// Starts an operation and waits for its outcome; answers the operation too, for describing it.
pub async fn start_and_wait(
    env: &TestEnv,
    start: durable_mcp::nexus::StartOperation,
) -> (
    durable_mcp::nexus::OperationRef,
    durable_mcp::nexus::OperationOutcome,
) {
    let (op, _) = env.client.start(start).await.unwrap();
    let outcome = env
        .client
        .wait(&op, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    (op, outcome)
}

/// Cancels `op` and waits (at most 30 s) for it to end Canceled.
pub async fn cancel_and_expect_canceled(
    env: &TestEnv,
    op: &durable_mcp::nexus::OperationRef,
    why: &str,
) {
    env.client.cancel(op, why).await.unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        env.client
            .wait(op, &tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("the cancel lands within 30 s")
    .unwrap();
    assert!(
        matches!(
            outcome,
            durable_mcp::nexus::OperationOutcome::Canceled { .. }
        ),
        "{outcome:?}"
    );
}

/// The mock upstream saw one `notifications/cancelled` for its `slow` tool (within 10 s), and
/// `slow` never completed.
pub async fn assert_slow_cancelled_upstream(ledger: &durable_mcp_conformance::fixtures::Ledger) {
    use durable_mcp_conformance::fixtures::LedgerEvent;
    assert_eq!(
        ledger
            .wait_for_count("slow", LedgerEvent::Cancelled, 1, Duration::from_secs(10))
            .await,
        1,
        "the upstream saw notifications/cancelled: {:?}",
        ledger.read()
    );
    assert_eq!(ledger.count("slow", LedgerEvent::Completed), 0);
}

/// The mock upstream as `service`, serving `spec` (written to a file of its own).
pub fn mock_stdio_upstream_with_spec(
    service: &str,
    spec: &durable_mcp_conformance::fixtures::UpstreamSpec,
    ledger: &durable_mcp_conformance::fixtures::Ledger,
) -> durable_mcp::proxy::UpstreamConfig {
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(spec).unwrap()).unwrap();
    let args = vec!["--spec".into(), spec_file.to_string_lossy().into_owned()];
    mock_stdio_upstream_with_args(service, args, ledger).unwrap()
}

/// A fresh file path `name` in a directory of its own under the system temp dir.
pub fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("durable-mcp-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// [`kit::process::connector_command`] (one `--route` to `service` on this env's endpoint, the
/// Temporal connection in its environment) as a tokio command.
pub fn connector_command(env: &TestEnv, service: &str) -> tokio::process::Command {
    kit::process::connector_command(env, service)
        .expect("the connector binary")
        .into()
}

/// What a connector with `--companion-tools` lists in front of the example service, in order.
pub const EXAMPLE_TOOLS_WITH_COMPANIONS: [&str; 7] = [
    "word_count",
    "slow_report",
    "delete_files",
    "task_status",
    "task_result",
    "task_cancel",
    "task_input",
];

/// `tools/call` params for `tool` with the JSON object `arguments`.
pub fn tool_call(tool: &str, arguments: serde_json::Value) -> rmcp::model::CallToolRequestParams {
    rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(
        arguments
            .as_object()
            .expect("tool arguments are a JSON object")
            .clone(),
    )
}

/// A `tools/call` of `tool` with `args` under idempotency key `key` (R-CON-7).
pub fn with_key(
    tool: &str,
    args: serde_json::Value,
    key: &str,
) -> rmcp::model::CallToolRequestParams {
    let mut params = tool_call(tool, args);
    params.meta = Some(serde_json::from_value(serde_json::json!({"idempotencyKey": key})).unwrap());
    params
}

// ---- tasks ---------------------------------------------------------------------------------

/// The task ID of a `tools/call` answered with a task (panics on any other answer).
pub fn task_id_of(answer: rmcp::model::CallToolResponse) -> String {
    match answer {
        rmcp::model::CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Polls `tasks/get` until the task is no longer working (at most a minute) and returns the
/// last answer as JSON.
pub async fn poll_task_until_done<C: rmcp::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, C>,
    task_id: &str,
) -> serde_json::Value {
    poll_task_watching(client, task_id, |_| {}).await
}

/// [`poll_task_until_done`], showing `working` every answer (as JSON) while the task works.
pub async fn poll_task_watching<C: rmcp::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, C>,
    task_id: &str,
    working: impl FnMut(&serde_json::Value),
) -> serde_json::Value {
    poll_task_past(client, task_id, rmcp::model::TaskStatus::Working, working).await
}

/// Polls `tasks/get` until the task's status is no longer `status` (at most a minute), showing
/// `during` every answer (as JSON) before that; the first other answer as JSON.
pub async fn poll_task_past<C: rmcp::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, C>,
    task_id: &str,
    status: rmcp::model::TaskStatus,
    mut during: impl FnMut(&serde_json::Value),
) -> serde_json::Value {
    use rmcp::model::GetTaskParams;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = client
            .peer()
            .get_task(GetTaskParams::new(task_id))
            .await
            .unwrap();
        if got.task.status() != status {
            return serde_json::to_value(&got).unwrap();
        }
        during(&serde_json::to_value(&got).unwrap());
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never left {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- a codec server --------------------------------------------------------------------------

/// A codec server speaking Temporal's codec JSON: XORs `data` and stores the original
/// encoding in `encoding` = "binary/xor-remote".
pub async fn serve_xor_codec() -> (
    String,
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use axum::{Json, Router, http::HeaderMap, routing::post};
    use base64::{Engine, engine::general_purpose::STANDARD};
    let namespaces = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = namespaces.clone();
    let xor = |v: &serde_json::Value| -> String {
        let bytes = STANDARD.decode(v.as_str().unwrap_or_default()).unwrap();
        STANDARD.encode(bytes.into_iter().map(|b| b ^ 0x5a).collect::<Vec<_>>())
    };
    let app = Router::new()
        .route(
            "/encode",
            post(move |headers: HeaderMap, Json(body): Json<serde_json::Value>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(headers["x-namespace"].to_str().unwrap().to_owned());
                    let payloads: Vec<_> = body["payloads"].as_array().unwrap().iter().map(|p| serde_json::json!({
                        "metadata": {"encoding": STANDARD.encode("binary/xor-remote"), "inner": p["metadata"]["encoding"]},
                        "data": xor(&p["data"]),
                    })).collect();
                    Json(serde_json::json!({"payloads": payloads}))
                }
            }),
        )
        .route(
            "/decode",
            post(move |Json(body): Json<serde_json::Value>| async move {
                let payloads: Vec<_> = body["payloads"].as_array().unwrap().iter().map(|p| serde_json::json!({
                    "metadata": {"encoding": p["metadata"]["inner"]},
                    "data": xor(&p["data"]),
                })).collect();
                Json(serde_json::json!({"payloads": payloads}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/codec", listener.local_addr().unwrap());
    let app = Router::new().nest("/codec", app);
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, task, namespaces)
}

/// The conformance crate's codec server (AES-GCM, a random key, no authorization) on a free
/// loopback port.
pub async fn codec_server() -> durable_mcp_conformance::fixtures::CodecServer {
    durable_mcp_conformance::fixtures::CodecServer::start(
        "127.0.0.1:0".parse().unwrap(),
        None,
        None,
    )
    .await
    .unwrap()
}

/// The Nexus operation as Temporal stores it, input and outcome included: what tests that
/// check stored payloads (codec, secrets) read back from the server.
pub async fn stored_operation(
    env: &TestEnv,
    operation_id: &str,
    run_id: &str,
) -> temporalio_protos::temporal::api::workflowservice::v1::DescribeNexusOperationExecutionResponse
{
    use temporalio_protos::temporal::api::workflowservice::v1::DescribeNexusOperationExecutionRequest;
    env.connection
        .workflow_service()
        .describe_nexus_operation_execution(tonic::Request::new(
            DescribeNexusOperationExecutionRequest {
                namespace: env.namespace.clone(),
                operation_id: operation_id.to_owned(),
                run_id: run_id.to_owned(),
                include_input: true,
                include_outcome: true,
                ..Default::default()
            },
        ))
        .await
        .expect("describing the operation")
        .into_inner()
}

/// A dev server of the test's own and its Prometheus address, so that the RPCs its counters
/// show were the test's alone.
pub async fn dedicated_server_with_metrics() -> (DevServer, String) {
    let server = DevServer::start(harness::DevServerOptions::default())
        .await
        .expect("dedicated dev server");
    let address = server
        .metrics_address()
        .expect("the process backend serves its metrics");
    (server, address)
}

/// The operation ID a task ID of a connector named `durable-mcp` in `namespace` names, read
/// with its signing key for its owner (the text holds it compactly; R-CON-6).
pub fn task_op_id(
    key: &durable_mcp::connector::task_ref::SigningKey,
    namespace: &str,
    owner: &durable_mcp::connector::task_ref::CallerScope,
    task_id: &str,
) -> String {
    use durable_mcp::connector::task_ref::{Deployment, caller_hash, verify};
    let deployment = Deployment {
        namespace,
        connector_name: "durable-mcp",
    };
    verify(key, task_id, &deployment, &caller_hash(key, owner))
        .unwrap_or_else(|e| panic!("{task_id}: {e}"))
        .op
}
