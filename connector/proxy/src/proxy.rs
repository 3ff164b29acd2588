//! `durable-mcp-proxy`'s worker: the upstreams of a config file, as the library's [`Proxy`]
//! (R-PRX-26), on a Nexus worker and an SDK worker of their own, on one task queue.

use temporalio_client::{Client, ClientOptions, Connection};
use temporalio_common::telemetry::TelemetryOptions;
use temporalio_sdk::{
    Runtime, Worker, WorkerOptions,
    runtime::RuntimeOptions,
    runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder},
};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{
    config::UpstreamConfig,
    health::{ProxyHealth, WorkerKind, WorkerState},
    library::{BuildError, Proxy},
};
use durable_mcp_contract::payload::PayloadCodec;
use durable_mcp_runtime::nexus::{NexusWorker, NexusWorkerOptions};
use durable_mcp_runtime::temporal::{
    TemporalConnection,
    codec::{RemoteCodec, data_converter},
};

pub use super::library::PROGRESS_HEARTBEAT;

/// Where the proxy polls and how much it runs at once.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub namespace: String,
    pub task_queue: String,
    /// Tool calls running at once in this process (Activity slots), and Nexus tasks (starts,
    /// cancels, listings) handled at once: each at most this many (R-PRX-16).
    pub max_concurrent_calls: usize,
    /// The remote codec of `[codec]` (R-PRX-20): Nexus inputs and results, Activity inputs,
    /// results and heartbeats all go through it.
    pub codec: Option<RemoteCodec>,
    /// Sign the states of upstream tasks waiting for input (R-PRX-35): the same on every
    /// worker of the task queue (`StateKeys::from_env`).
    pub state_keys: super::state_key::StateKeys,
    /// Resource URIs watched per upstream, a fifth of them per caller (R-PRX-34, R-PRX-36).
    pub max_watched_resources: usize,
}

/// Why the proxy could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Nexus(#[from] durable_mcp_runtime::nexus::NexusWorkerError),
    #[error("the activity worker failed: {0}")]
    Activity(String),
}

/// A tuner whose activity slots (one per running tool call) number `calls`; the other kinds,
/// unused by this worker, keep the SDK's default of 100.
fn calls_tuner(calls: usize) -> TunerHolder {
    let default = || FixedSizeSlotSupplier::new(100);
    TunerHolder::builder()
        .workflow_task_slot_supplier(default())
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(calls.max(1)))
        .local_activity_task_slot_supplier(default())
        .nexus_task_slot_supplier(default())
        .build()
}

/// Runs the proxy until `shutdown` fires. Tool calls in flight finish or are cancelled by the
/// workers' graceful shutdown; their activities are durable and resume on another worker.
///
/// The returned future is not `Send` (the SDK activity worker's is not): run it with
/// `block_on` or on a thread of its own.
pub async fn run_proxy(
    connection: Connection,
    options: ProxyOptions,
    upstreams: Vec<UpstreamConfig>,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    let health = ProxyHealth::new(connection.clone());
    run_proxy_with_health(connection, options, upstreams, shutdown, health).await
}

/// [`run_proxy`], reporting its upstreams' discoveries and its workers' states to `health`
/// (R-RUN-5): the workers poll from when they run until shutdown begins or they end.
// Long: one setup of both workers in order, then running them together; split, the order
// and the handles passed between the parts would be harder to follow.
pub async fn run_proxy_with_health(
    connection: Connection,
    options: ProxyOptions,
    upstreams: Vec<UpstreamConfig>,
    shutdown: CancellationToken,
    health: ProxyHealth,
) -> Result<(), ProxyError> {
    let codec: Option<std::sync::Arc<dyn PayloadCodec>> = options
        .codec
        .clone()
        .map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn PayloadCodec>);
    let temporal = TemporalConnection {
        connection: connection.clone(),
        namespace: options.namespace.clone(),
    };
    let proxy = Proxy::builder(temporal, options.task_queue.clone())
        .upstreams(upstreams)
        .codec(codec.clone())
        .state_keys(options.state_keys.clone())
        .max_watched_resources(options.max_watched_resources)
        .build()?;
    let upstream_count = proxy.service_names().len();
    proxy.report_to(&health);

    let mut nexus_options = NexusWorkerOptions::new(&options.namespace, &options.task_queue);
    nexus_options.max_concurrent_tasks = options.max_concurrent_calls;
    nexus_options.codec = codec.clone();
    nexus_options.sdk_metrics = Some(super::metrics::global().sdk_meter().clone());
    let nexus = NexusWorker::new(connection.clone(), nexus_options, proxy.services()).await?;
    let nexus_shutdown = nexus.shutdown_handle();

    let runtime = Runtime::from_current_tokio(activity_runtime_options()?)
        .map_err(|e| ProxyError::Activity(e.to_string()))?;
    let client_options = match codec {
        Some(codec) => ClientOptions::new(options.namespace.clone())
            .data_converter(data_converter(codec))
            .build(),
        None => ClientOptions::new(options.namespace.clone()).build(),
    };
    let client =
        Client::new(connection, client_options).map_err(|e| ProxyError::Activity(e.to_string()))?;
    let worker_options = WorkerOptions::new(options.task_queue.clone())
        // At most max_concurrent_calls tool calls run at once in this process (R-PRX-16): the
        // Activity worker takes no more tasks than that.
        .tuner(calls_tuner(options.max_concurrent_calls))
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                concat!("durable-mcp-", env!("CARGO_PKG_VERSION")).to_owned(),
            ),
        )
        .worker_plugin(proxy.worker_plugin())
        .build();
    let mut activities = Worker::new(&runtime, client, worker_options)
        .map_err(|e| ProxyError::Activity(e.to_string()))?;
    let activity_shutdown = activities.shutdown_handle();

    info!(task_queue = %options.task_queue, upstreams = upstream_count, "proxy worker running");
    let stop = shutdown.clone();
    let watched = |kind| {
        let health = health.clone();
        move |state| health.set_worker(kind, state)
    };
    let (nexus_state, activity_state, stopping) = (
        watched(WorkerKind::Nexus),
        watched(WorkerKind::Activity),
        health.clone(),
    );
    let (nexus_result, activity_result, (), ()) = tokio::join!(
        async {
            nexus_state(WorkerState::Polling);
            let result = nexus.run().await;
            nexus_state(WorkerState::Stopped);
            result
        },
        async {
            activity_state(WorkerState::Polling);
            let result = activities.run().await;
            activity_state(WorkerState::Stopped);
            result
        },
        proxy.run(shutdown.clone()),
        async move {
            stop.cancelled().await;
            info!("proxy shutting down");
            stopping.set_worker(WorkerKind::Nexus, WorkerState::Stopped);
            stopping.set_worker(WorkerKind::Activity, WorkerState::Stopped);
            nexus_shutdown.shutdown();
            activity_shutdown();
        }
    );
    nexus_result?;
    activity_result.map_err(|e| ProxyError::Activity(e.to_string()))?;
    Ok(())
}

/// The Activity worker's runtime, its SDK metrics going to the proxy's registry (R-RUN-6).
fn activity_runtime_options() -> Result<RuntimeOptions, ProxyError> {
    let meter = super::metrics::global().sdk_meter().core_meter();
    let telemetry = TelemetryOptions::builder().metrics(meter).build();
    RuntimeOptions::builder()
        .telemetry_options(telemetry)
        .build()
        .map_err(ProxyError::Activity)
}
