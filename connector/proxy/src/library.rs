//! The proxy as a library (R-PRX-26): a Rust program adds proxied upstreams to its own worker
//! and task queue, next to its native tools (R-NAT-*) and its own Workflows and Activities.
//!
//! ```no_run
//! # use durable_mcp_proxy::{Proxy, UpstreamConfig};
//! # use durable_mcp_runtime::{nexus::{NexusWorker, NexusWorkerOptions, Service},
//! #     temporal::TemporalConnection};
//! # async fn f(temporal: TemporalConnection, files: UpstreamConfig, my_tools: Service)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! let queue = "my-queue";
//! let proxy = Proxy::builder(temporal.clone(), queue).upstream(files).build()?;
//!
//! // Nexus side: the proxied services beside a native tool service (`my_tools`, what a
//! // `ToolService` builds), on one Nexus worker.
//! let mut services = proxy.services();
//! services.push(my_tools);
//! let nexus = NexusWorker::new(
//!     temporal.connection.clone(),
//!     NexusWorkerOptions::new(&temporal.namespace, queue),
//!     services,
//! ).await?;
//! // SDK side: the tool-call Activity joins the program's own worker through a plugin.
//! let options = temporalio_sdk::WorkerOptions::new(queue)
//!     // .register_workflow::<MyWorkflow>()?
//!     .worker_plugin(proxy.worker_plugin())
//!     .build();
//! // ... then run `nexus.run()`, the SDK worker's `run()` and `proxy.run(shutdown)` together.
//! # Ok(()) }
//! ```
//!
//! ## Why a builder for the services and a plugin for the Activity
//!
//! A proxied upstream has two halves. Its Nexus service answers `list_tools` and starts calls;
//! its tool-call Activity does the calls. The Temporal SDK's worker never polls Nexus, so the
//! SDK's plugin API (`temporalio_sdk::WorkerPlugin`, which configures `WorkerOptions`) cannot
//! reach the first half: Nexus services run on a [`NexusWorker`](durable_mcp_runtime::nexus::NexusWorker),
//! exactly where a native tool service (`ToolService`, R-NAT-1) goes. So the builder gives
//! [`nexus::Service`](durable_mcp_runtime::nexus::Service)s, the value a native tool service builds to, and
//! they compose by being put in one list. The Activity half is what the SDK's plugin API is
//! for: [`Proxy::worker_plugin`] registers the Activity on the program's own `WorkerOptions`,
//! caps the heartbeat throttle at [`PROGRESS_HEARTBEAT`] (progress and cancels ride on
//! heartbeats, R-PRX-9) and refuses a worker on another task queue, and the worker reports the
//! plugin by name to Temporal. `durable-mcp-proxy` is this library plus a config file
//! (`run_proxy`).

use std::{collections::HashMap, sync::Arc};

use temporalio_client::PluginError;
use temporalio_sdk::{WorkerOptions, WorkerPlugin};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    call_activity::ProxyActivities,
    config::UpstreamConfig,
    discovery::Discovery,
    health::ProxyHealth,
    options::HintReading,
    service::{ServiceContext, proxy_service},
    state_key::StateKeys,
    upstream::UpstreamClient,
};
use durable_mcp_runtime::nexus::Service;
use durable_mcp_runtime::temporal::TemporalConnection;

/// The longest a running call's heartbeat (and so its progress) waits before reaching Temporal.
pub const PROGRESS_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(2);

/// The plugin's name, as Temporal lists it among the worker's plugins.
pub const PLUGIN_NAME: &str = "durable-mcp-proxy";

/// Why proxied upstreams cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("two upstreams are named {0:?}; each needs its own Nexus service name")]
    DuplicateService(String),
    #[error("an upstream has an empty service name")]
    EmptyService,
}

/// Collects the upstreams to front on one task queue; see the [module doc](self).
pub struct ProxyBuilder {
    temporal: TemporalConnection,
    task_queue: String,
    upstreams: Vec<UpstreamConfig>,
    codec: Option<Arc<dyn durable_mcp_contract::payload::PayloadCodec>>,
    state_keys: StateKeys,
    max_watched_resources: usize,
}

impl ProxyBuilder {
    /// Watches at most `cap` resource URIs per upstream, a fifth of them per caller
    /// (R-PRX-34, R-PRX-36); [`crate::resource_versions::MAX_WATCHED_URIS`] by default.
    pub fn max_watched_resources(mut self, cap: usize) -> Self {
        self.max_watched_resources = cap;
        self
    }

    /// Signs the states of upstream tasks waiting for input with `keys` (R-PRX-35): give
    /// every worker of the task queue the same ([`StateKeys::from_env`] reads
    /// `MCP_PROXY_STATE_KEY`). Without, this process's own key ([`StateKeys::per_process`]),
    /// and an HTTP upstream's task that asks for input is cancelled, saying to set one.
    pub fn state_keys(mut self, keys: StateKeys) -> Self {
        self.state_keys = keys;
        self
    }

    /// Encodes each call Activity's input with `codec` (R-PRX-20); give the same codec to the
    /// Nexus worker (`NexusWorkerOptions::codec`) and to the SDK worker's data converter
    /// (`temporal::codec::data_converter`).
    pub fn codec(
        mut self,
        codec: Option<Arc<dyn durable_mcp_contract::payload::PayloadCodec>>,
    ) -> Self {
        self.codec = codec;
        self
    }

    /// Fronts `upstream` as the Nexus service `upstream.service`. A config file's tables, or
    /// values built in code: [`TransportConfig::custom`](super::TransportConfig::custom) takes
    /// a client factory (R-PRX-27).
    pub fn upstream(mut self, upstream: UpstreamConfig) -> Self {
        self.upstreams.push(upstream);
        self
    }

    /// Fronts every upstream of `upstreams`.
    pub fn upstreams(mut self, upstreams: impl IntoIterator<Item = UpstreamConfig>) -> Self {
        self.upstreams.extend(upstreams);
        self
    }

    /// Checks the service names and builds the services; connects to nothing yet (the first
    /// discovery is [`Proxy::run`]'s, or the first call's).
    pub fn build(self) -> Result<Proxy, BuildError> {
        let mut clients = HashMap::new();
        let mut services = Vec::new();
        let mut discoveries = Vec::new();
        let mut readings = HashMap::new();
        for upstream in self.upstreams {
            if upstream.service.is_empty() {
                return Err(BuildError::EmptyService);
            }
            let client = Arc::new(
                UpstreamClient::new(upstream.service.clone(), upstream.transport.clone())
                    .watching_at_most(self.max_watched_resources),
            );
            if clients
                .insert(upstream.service.clone(), client.clone())
                .is_some()
            {
                return Err(BuildError::DuplicateService(upstream.service));
            }
            let discovery = Arc::new(Discovery::new(client));
            discoveries.push((upstream.service.clone(), discovery.clone()));
            let reading = HintReading {
                upstream: upstream.activity_options.clone(),
                overrides: upstream.overrides.clone(),
            };
            readings.insert(upstream.service.clone(), reading);
            services.push(proxy_service(ServiceContext {
                service: upstream.service,
                connection: self.temporal.connection.clone(),
                namespace: self.temporal.namespace.clone(),
                task_queue: self.task_queue.clone(),
                activity_options: upstream.activity_options,
                overrides: upstream.overrides,
                discovery,
                codec: self.codec.clone(),
                state_keys: self.state_keys.clone(),
            }));
        }
        Ok(Proxy {
            connection: self.temporal.connection,
            task_queue: self.task_queue,
            clients: Arc::new(clients),
            services,
            discoveries,
            readings,
            stopping: CancellationToken::new(),
            state_keys: self.state_keys,
        })
    }
}

/// Proxied upstreams ready to join a worker: [`Proxy::services`] for its Nexus worker,
/// [`Proxy::worker_plugin`] for its SDK worker, and [`Proxy::run`] beside them.
pub struct Proxy {
    connection: temporalio_client::Connection,
    task_queue: String,
    clients: Arc<HashMap<String, Arc<UpstreamClient>>>,
    services: Vec<Service>,
    discoveries: Vec<(String, Arc<Discovery>)>,
    /// Per service, how its tools' missing hints are read, for the start-up note (R-PRX-38).
    readings: HashMap<String, HintReading>,
    /// Cancelled when [`Proxy::run`]'s shutdown comes: the Activities then tell a worker
    /// shutdown from a cancel of the call (R-PRX-28).
    stopping: CancellationToken,
    state_keys: StateKeys,
}

impl Proxy {
    /// Upstreams whose calls run as Activities on `task_queue`, in `temporal`'s namespace.
    pub fn builder(temporal: TemporalConnection, task_queue: impl Into<String>) -> ProxyBuilder {
        ProxyBuilder {
            temporal,
            task_queue: task_queue.into(),
            upstreams: Vec::new(),
            codec: None,
            state_keys: StateKeys::per_process(),
            max_watched_resources: crate::resource_versions::MAX_WATCHED_URIS,
        }
    }

    /// One Nexus service per upstream, for the Nexus worker on the task queue (beside native
    /// tool services).
    pub fn services(&self) -> Vec<Service> {
        self.services.clone()
    }

    /// The names of the upstreams' services.
    pub fn service_names(&self) -> Vec<String> {
        self.services.iter().map(|s| s.name().to_owned()).collect()
    }

    /// Its readiness as plain data (R-RUN-5), for a program's own HTTP server: Temporal
    /// answers and every upstream is listed; the workers count once the program reports them
    /// ([`ProxyHealth::set_worker`]).
    pub fn health(&self) -> ProxyHealth {
        ProxyHealth::of_upstreams(self.connection.clone(), self.discoveries.clone())
    }

    /// Lets `health` follow these upstreams' discoveries.
    pub(crate) fn report_to(&self, health: &ProxyHealth) {
        health.watch(self.discoveries.clone());
    }

    /// Registers the tool-call Activity on an SDK worker of the same task queue.
    pub fn worker_plugin(&self) -> ProxyWorkerPlugin {
        ProxyWorkerPlugin {
            task_queue: self.task_queue.clone(),
            clients: self.clients.clone(),
            stopping: self.stopping.clone(),
            state_keys: self.state_keys.clone(),
        }
    }

    /// Discovers every upstream's tools at once (a failure is logged; `list_tools` and calls
    /// ask again), follows their `tools/list_changed` notifications until `shutdown`, then
    /// closes the connections (ending stdio children). Run it beside the workers.
    pub async fn run(self, shutdown: CancellationToken) {
        let readings = &self.readings;
        let following = self.discoveries.iter().map(|(service, discovery)| {
            let (service, discovery, shutdown) =
                (service.clone(), discovery.clone(), shutdown.clone());
            async move {
                match discovery.refresh().await {
                    Ok(tools) => {
                        info!(%service, tools = tools.len(), "discovered upstream tools");
                        if let Some(reading) = readings.get(&service) {
                            log_unannotated(&service, reading.notes(&tools));
                        }
                    }
                    Err(e) => {
                        warn!(%service, error = %e, "upstream unavailable at startup; will retry")
                    }
                }
                discovery.follow_changes(shutdown).await;
            }
        });
        let stopping = async {
            shutdown.cancelled().await;
            self.stopping.cancel();
        };
        futures::future::join(futures::future::join_all(following), stopping).await;
        for client in self.clients.values() {
            client.close().await;
        }
    }
}

/// Names an upstream's tools that say nothing of reruns at start-up, and what that means
/// (R-PRX-38): a warning for those retried, a note for those read as MCP's defaults.
fn log_unannotated(service: &str, [retried, once]: [Option<String>; 2]) {
    if let Some(note) = retried {
        warn!(%service, "tools without annotations: {note}");
    }
    if let Some(note) = once {
        info!(%service, "tools without annotations: {note}");
    }
}

/// The SDK worker half of [`Proxy`] (`WorkerOptions::worker_plugin`).
#[derive(Clone)]
pub struct ProxyWorkerPlugin {
    task_queue: String,
    clients: Arc<HashMap<String, Arc<UpstreamClient>>>,
    stopping: CancellationToken,
    state_keys: StateKeys,
}

impl WorkerPlugin for ProxyWorkerPlugin {
    fn name(&self) -> &str {
        PLUGIN_NAME
    }

    fn configure_worker_options(&self, options: &mut WorkerOptions) -> Result<(), PluginError> {
        check_task_queue(&self.task_queue, &options.task_queue).map_err(PluginError::new)?;
        options.register_activities(ProxyActivities {
            upstreams: self.clients.clone(),
            stopping: self.stopping.clone(),
            state_keys: self.state_keys.clone(),
        });
        // Heartbeats carry the upstream's progress (and bring cancellations back): at least
        // every PROGRESS_HEARTBEAT rather than the SDK's 80% of the heartbeat timeout.
        options.max_heartbeat_throttle_interval = options
            .max_heartbeat_throttle_interval
            .min(PROGRESS_HEARTBEAT);
        Ok(())
    }
}

/// The proxy's calls start their Activities on its own task queue: a worker polling another
/// would never see them.
fn check_task_queue(proxy: &str, worker: &str) -> Result<(), String> {
    if proxy == worker {
        Ok(())
    } else {
        Err(format!(
            "the proxied upstreams' calls run on task queue {proxy:?}, but this worker polls \
             {worker:?}: give Proxy::builder and WorkerOptions::new the same task queue"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_refuses_a_worker_on_another_task_queue() {
        assert!(check_task_queue("q", "q").is_ok());
        let e = check_task_queue("q", "other").unwrap_err();
        assert!(e.contains("\"q\"") && e.contains("\"other\""), "{e}");
    }
}
