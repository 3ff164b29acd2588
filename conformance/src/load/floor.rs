//! The bare floor: a standalone Nexus operation completed by a standalone Activity through its
//! completion callback, with no MCP anywhere. It is the proxy's shape (start an activity from
//! the start handler, answer async, let the callback complete the operation) minus the
//! upstream, discovery and payload marking, so the full path is measured against it.
//!
//! It runs as a child process (`durable-mcp-conformance load-floor-worker`) so that its CPU time
//! is charged to it alone, as the proxy's is.

// `#[activities]` emits a per-activity constant that only typed (workflow) callers use.
#![allow(dead_code)]

use std::time::Duration;

use durable_mcp::{
    nexus::{
        HandlerError, NexusWorker, NexusWorkerOptions, Service, StartOutcome, handler::start_fn,
    },
    temporal::activity::{ActivityStart, start_activity},
};
use temporalio_client::{Client, ClientOptions};
use temporalio_common::data_converters::RawValue;
use temporalio_macros::activities;
use temporalio_sdk::{
    Runtime, Worker, WorkerOptions,
    activities::{ActivityContext, ActivityError},
};

/// The floor's plain Nexus service (not a tool service) and its operation.
pub const FLOOR_SERVICE: &str = "floor";
pub const OPERATION: &str = "echo";
const ACTIVITY: &str = "durable-mcp-load.floor-echo";

/// Answers its input unchanged.
pub struct FloorActivities;

#[activities]
impl FloorActivities {
    #[activity(name = "durable-mcp-load.floor-echo")]
    async fn echo(_ctx: ActivityContext, input: RawValue) -> Result<RawValue, ActivityError> {
        Ok(input)
    }
}

/// Runs the floor's Nexus worker and activity worker on `task_queue` until the process is
/// killed. Prints `READY` on stdout once both are polling.
pub async fn run_worker(address: &str, namespace: &str, task_queue: &str) -> anyhow::Result<()> {
    let connection = durable_mcp::temporal::connect_to(address, "durable-mcp-load-floor").await?;
    let (conn, ns, tq) = (
        connection.clone(),
        namespace.to_owned(),
        task_queue.to_owned(),
    );
    let handler = start_fn(move |ctx, input| {
        let (conn, ns, tq) = (conn.clone(), ns.clone(), tq.clone());
        async move {
            let activity_id = format!("floor-{}", ctx.request_id);
            start_activity(
                &conn,
                &ns,
                ActivityStart {
                    activity_id: activity_id.clone(),
                    request_id: ctx.request_id.clone(),
                    activity_type: ACTIVITY.into(),
                    task_queue: tq,
                    input: vec![input],
                    start_to_close: Some(Duration::from_secs(60)),
                    use_existing: true,
                    completion_callback: Some((ctx.callback.clone(), ctx.callback_headers.clone())),
                    ..Default::default()
                },
            )
            .await
            .map_err(|s| HandlerError::internal(format!("start activity: {s}")))?;
            Ok(StartOutcome::Async { token: activity_id })
        }
    });
    let mut options = NexusWorkerOptions::new(namespace, task_queue);
    options.max_concurrent_tasks = super::WORKER_SLOTS;
    let nexus = NexusWorker::new(
        connection.clone(),
        options,
        vec![Service::new(FLOOR_SERVICE).operation(OPERATION, handler)],
    )
    .await?;
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let client = Client::new(connection, ClientOptions::new(namespace.to_owned()).build())?;
    let worker_options = WorkerOptions::new(task_queue.to_owned())
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                "durable-mcp-load-floor".to_owned(),
            ),
        )
        .register_activities(FloorActivities)
        .build();
    let mut activities = Worker::new(&runtime, client, worker_options)?;
    println!("READY");
    let (nexus_result, activity_result) = tokio::join!(nexus.run(), activities.run());
    nexus_result?;
    activity_result?;
    Ok(())
}
