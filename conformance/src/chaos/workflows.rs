//! The chaos run's Workflow side: a worker of the in-Workflow client's ready Workflow
//! ([`ListThenCall`]: list a service's tools, then call some in order, each a Nexus operation in
//! its history) on a thread of the runner, and a driver starting one and reading its calls
//! through server restarts.

use std::time::Duration;

use anyhow::Context as _;
use durable_mcp::workflow_client::sequence::{
    CallRecord, ListThenCall, PlannedCall, SequenceInput,
};
use temporalio_client::{
    Client, ClientOptions, WorkflowGetResultOptions, WorkflowStartOptions,
    errors::WorkflowStartError,
};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use tokio_util::sync::CancellationToken;

/// A Workflow worker on a thread of its own (the SDK's worker future is not `Send`), stopped
/// with [`WorkflowWorker::stop`].
pub struct WorkflowWorker {
    pub task_queue: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl WorkflowWorker {
    /// Starts polling a fresh task queue on the server at `address`.
    pub fn start(address: &str, namespace: &str) -> anyhow::Result<Self> {
        let task_queue = crate::harness::unique_name("chaos-workflows");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (address, namespace, queue) =
            (address.to_owned(), namespace.to_owned(), task_queue.clone());
        let thread = std::thread::Builder::new()
            .name("chaos-workflow-worker".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(work(address, namespace, queue, stopped))
            })?;
        Ok(Self {
            task_queue,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Shuts the worker down and waits for its thread.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join()).await;
            if let Ok(Ok(Err(e))) = joined {
                tracing::warn!("the chaos Workflow worker ended with {e:#}");
            }
        }
    }
}

async fn work(
    address: String,
    namespace: String,
    task_queue: String,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let connection =
        durable_mcp::temporal::connect_to(&address, "durable-mcp-chaos-worker").await?;
    let client = Client::new(connection, ClientOptions::new(namespace).build())?;
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let options = WorkerOptions::new(task_queue)
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
        )
        .register_workflow::<ListThenCall>()?
        .build();
    let mut worker = Worker::new(&runtime, client, options)?;
    let shutdown = worker.shutdown_handle();
    let run = worker.run();
    tokio::pin!(run);
    tokio::select! {
        ran = &mut run => ran.context("the Workflow worker"),
        _ = stopped => {
            shutdown();
            run.await.context("the Workflow worker")
        }
    }
}

/// A client starting Workflows on the worker's task queue.
#[derive(Clone)]
pub struct WorkflowDriver {
    client: Client,
    task_queue: String,
    endpoint: String,
}

impl WorkflowDriver {
    pub async fn connect(
        address: &str,
        namespace: &str,
        task_queue: &str,
        endpoint: &str,
    ) -> anyhow::Result<Self> {
        let connection = durable_mcp::temporal::connect_to(address, "durable-mcp-chaos").await?;
        Ok(Self {
            client: Client::new(connection, ClientOptions::new(namespace).build())?,
            task_queue: task_queue.to_owned(),
            endpoint: endpoint.to_owned(),
        })
    }

    /// Runs one Workflow (id `workflow_id`) calling `calls` on `service`, starting it and
    /// reading its result again through outages until `give_up`; answers its calls' records,
    /// or why it ended without them.
    pub async fn run(
        &self,
        workflow_id: &str,
        service: &str,
        calls: Vec<PlannedCall>,
        give_up: &CancellationToken,
    ) -> Result<Vec<CallRecord>, String> {
        let input = SequenceInput {
            endpoint: self.endpoint.clone(),
            service: service.to_owned(),
            calls,
        };
        let mut last = String::new();
        let mut started = false;
        while !give_up.is_cancelled() {
            if !started {
                let options =
                    WorkflowStartOptions::new(self.task_queue.clone(), workflow_id).build();
                match self
                    .client
                    .start_workflow(ListThenCall::run, input.clone(), options)
                    .await
                {
                    Ok(_) | Err(WorkflowStartError::AlreadyStarted { .. }) => started = true,
                    Err(e) => last = format!("starting it: {e}"),
                }
            }
            if started {
                let handle = self.client.get_workflow_handle::<ListThenCall>(workflow_id);
                let result = tokio::time::timeout(
                    Duration::from_secs(60),
                    handle.get_result(WorkflowGetResultOptions::default()),
                )
                .await;
                match result {
                    Ok(Ok(output)) => return Ok(output.calls),
                    Ok(Err(e)) if is_final(&e) => {
                        return Err(format!("the Workflow ended: {e}"));
                    }
                    Ok(Err(e)) => last = format!("reading its result: {e}"),
                    Err(_) => last = "reading its result: no answer in 60 s".into(),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                () = give_up.cancelled() => {}
            }
        }
        Err(format!("no result before the run gave up ({last})"))
    }
}

/// Whether the Workflow itself ended without a result (as opposed to the read failing).
fn is_final(e: &temporalio_client::errors::WorkflowGetResultError) -> bool {
    use temporalio_client::errors::WorkflowGetResultError as E;
    matches!(
        e,
        E::Failed(_) | E::Cancelled { .. } | E::Terminated { .. } | E::TimedOut | E::ContinuedAsNew
    )
}
