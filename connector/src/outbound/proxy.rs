//! The proxy worker: one Nexus service per upstream plus the tool-call activity, on one task
//! queue, in one process.

use std::{collections::HashMap, sync::Arc};

use temporalio_client::{Client, ClientOptions, Connection};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    call_activity::ProxyActivities,
    config::UpstreamConfig,
    discovery::Discovery,
    service::{ServiceContext, proxy_service},
    upstream::UpstreamClient,
};
use crate::nexus::{NexusWorker, NexusWorkerOptions};

/// Where the proxy polls and how much it runs at once.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub namespace: String,
    pub task_queue: String,
    pub max_concurrent_calls: usize,
}

/// Why the proxy could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("two upstreams are named {0:?}; each needs its own Nexus service name")]
    DuplicateService(String),
    #[error(transparent)]
    Nexus(#[from] crate::nexus::NexusWorkerError),
    #[error("the activity worker failed: {0}")]
    Activity(String),
}

/// The longest a running call's heartbeat (and so its progress) waits before reaching Temporal.
pub const PROGRESS_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(2);

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
    let mut clients = HashMap::new();
    for upstream in &upstreams {
        let client = Arc::new(UpstreamClient::new(
            upstream.service.clone(),
            upstream.transport.clone(),
        ));
        if clients.insert(upstream.service.clone(), client).is_some() {
            return Err(ProxyError::DuplicateService(upstream.service.clone()));
        }
    }
    let clients = Arc::new(clients);

    // Discovery at startup, outside activities; a failure is logged and retried on list_tools.
    let mut services = Vec::new();
    for upstream in upstreams {
        let discovery = Arc::new(Discovery::new(clients[&upstream.service].clone()));
        tokio::spawn(discovery.clone().follow_changes(shutdown.clone()));
        match discovery.refresh().await {
            Ok(tools) => {
                info!(service = %upstream.service, tools = tools.len(), "discovered upstream tools")
            }
            Err(e) => {
                warn!(service = %upstream.service, error = %e, "upstream unavailable at startup; will retry")
            }
        }
        services.push(proxy_service(ServiceContext {
            service: upstream.service,
            connection: connection.clone(),
            namespace: options.namespace.clone(),
            task_queue: options.task_queue.clone(),
            activity_options: upstream.activity_options,
            overrides: upstream.overrides,
            discovery,
        }));
    }

    let mut nexus_options = NexusWorkerOptions::new(&options.namespace, &options.task_queue);
    nexus_options.max_concurrent_tasks = options.max_concurrent_calls;
    let nexus = NexusWorker::new(connection.clone(), nexus_options, services).await?;
    let nexus_shutdown = nexus.shutdown_handle();

    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| ProxyError::Activity(e.to_string()))?;
    let client = Client::new(
        connection,
        ClientOptions::new(options.namespace.clone()).build(),
    )
    .map_err(|e| ProxyError::Activity(e.to_string()))?;
    let worker_options = WorkerOptions::new(options.task_queue.clone())
        // Heartbeats carry the upstream's progress (and bring cancellations back): send them
        // at least every PROGRESS_HEARTBEAT rather than the SDK's 80% of the heartbeat timeout.
        .max_heartbeat_throttle_interval(PROGRESS_HEARTBEAT)
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                concat!("durable-mcp-", env!("CARGO_PKG_VERSION")).to_owned(),
            ),
        )
        .register_activities(ProxyActivities {
            upstreams: clients.clone(),
        })
        .build();
    let mut activities = Worker::new(&runtime, client, worker_options)
        .map_err(|e| ProxyError::Activity(e.to_string()))?;
    let activity_shutdown = activities.shutdown_handle();

    info!(task_queue = %options.task_queue, upstreams = clients.len(), "proxy worker running");
    let (nexus_result, activity_result, ()) =
        tokio::join!(nexus.run(), activities.run(), async move {
            shutdown.cancelled().await;
            info!("proxy shutting down");
            nexus_shutdown.shutdown();
            activity_shutdown();
        });
    for client in clients.values() {
        client.close().await;
    }
    nexus_result?;
    activity_result.map_err(|e| ProxyError::Activity(e.to_string()))?;
    Ok(())
}
