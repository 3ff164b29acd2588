//! Workflows started, cancelled and described through the raw WorkflowService RPCs.
//!
//! The SDK client's `start_workflow` cannot attach Nexus completion callbacks, and callbacks are
//! how a Workflow's result reaches the Nexus operation that started it: so Workflow-backed tools
//! start their Workflows here, the way the proxy starts its Activities ([`super::activity`]).

use std::{collections::HashMap, time::Duration};

use temporalio_client::Connection;
use temporalio_protos::temporal::api::{
    common::v1::{Payload, WorkflowExecution, WorkflowType},
    enums::v1::{WorkflowIdConflictPolicy, WorkflowIdReusePolicy},
    workflow::v1::OnConflictOptions,
    workflowservice::v1::{
        DescribeWorkflowExecutionRequest, RequestCancelWorkflowExecutionRequest,
        StartWorkflowExecutionRequest,
    },
};

pub use temporalio_protos::temporal::api::enums::v1::WorkflowExecutionStatus;

use durable_mcp_contract::payload;

use super::{StartParts, proto_duration};

/// A request to start (or reattach to) a Workflow.
#[derive(Debug, Clone, Default)]
pub struct WorkflowStart {
    pub workflow_id: String,
    /// Makes a repeated start with the same id and request id return the same run.
    pub request_id: String,
    pub workflow_type: String,
    pub task_queue: String,
    pub input: Vec<Payload>,
    /// Bounds the Workflow, all its runs included.
    pub execution_timeout: Option<Duration>,
    /// A Nexus completion callback (URL, headers): where the Workflow's outcome is delivered.
    /// With it, a start that finds the Workflow running attaches its request id, callback and
    /// links to that run instead of failing, so a retried start waits on the same Workflow.
    pub completion_callback: Option<(String, HashMap<String, String>)>,
    /// A one-line summary for the Temporal UI. Never put secrets here.
    pub summary: Option<String>,
}

/// Starts the Workflow (`UseExisting` for a running one, `RejectDuplicate` for a closed one);
/// answers `(run_id, started)` where `started` is false when the request attached to a run.
pub async fn start_workflow(
    connection: &Connection,
    namespace: &str,
    start: WorkflowStart,
) -> Result<(String, bool), tonic::Status> {
    // The server accepts attach options only when there is something to attach.
    let attach = start.completion_callback.is_some();
    let parts = StartParts::new(
        start.task_queue,
        start.input,
        start.completion_callback,
        start.summary,
    );
    let request = StartWorkflowExecutionRequest {
        namespace: namespace.to_owned(),
        identity: connection.identity().to_owned(),
        request_id: start.request_id,
        workflow_id: start.workflow_id,
        workflow_type: Some(WorkflowType {
            name: start.workflow_type,
        }),
        task_queue: parts.task_queue,
        input: parts.input,
        workflow_execution_timeout: start.execution_timeout.map(proto_duration),
        workflow_id_conflict_policy: WorkflowIdConflictPolicy::UseExisting.into(),
        workflow_id_reuse_policy: WorkflowIdReusePolicy::RejectDuplicate.into(),
        on_conflict_options: attach.then_some(OnConflictOptions {
            attach_request_id: true,
            attach_completion_callbacks: true,
            attach_links: true,
        }),
        completion_callbacks: parts.completion_callbacks,
        user_metadata: parts.user_metadata,
        ..Default::default()
    };
    let resp = connection
        .workflow_service()
        .start_workflow_execution(tonic::Request::new(request))
        .await?
        .into_inner();
    Ok((resp.run_id, resp.started))
}

/// Requests cancellation of a Workflow run (the latest run when `run_id` is empty). The
/// Workflow decides how to end; a Workflow that honours it ends `CANCELED`.
pub async fn cancel_workflow(
    connection: &Connection,
    namespace: &str,
    workflow_id: &str,
    run_id: &str,
    reason: &str,
) -> Result<(), tonic::Status> {
    connection
        .workflow_service()
        .request_cancel_workflow_execution(tonic::Request::new(
            RequestCancelWorkflowExecutionRequest {
                namespace: namespace.to_owned(),
                workflow_execution: Some(WorkflowExecution {
                    workflow_id: workflow_id.to_owned(),
                    run_id: run_id.to_owned(),
                }),
                identity: connection.identity().to_owned(),
                request_id: uuid::Uuid::new_v4().to_string(),
                reason: reason.to_owned(),
                ..Default::default()
            },
        ))
        .await?;
    Ok(())
}

/// What a Workflow run looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowDescription {
    pub run_id: String,
    pub status: WorkflowExecutionStatus,
    /// The memo, each field decoded as JSON (fields that do not decode are left out).
    pub memo: HashMap<String, serde_json::Value>,
}

/// Describes a Workflow run (the latest when `run_id` is empty); `None` when no Workflow has
/// that id.
pub async fn describe_workflow(
    connection: &Connection,
    namespace: &str,
    workflow_id: &str,
    run_id: &str,
) -> Result<Option<WorkflowDescription>, tonic::Status> {
    let request = DescribeWorkflowExecutionRequest {
        namespace: namespace.to_owned(),
        execution: Some(WorkflowExecution {
            workflow_id: workflow_id.to_owned(),
            run_id: run_id.to_owned(),
        }),
    };
    let resp = match connection
        .workflow_service()
        .describe_workflow_execution(tonic::Request::new(request))
        .await
    {
        Ok(resp) => resp.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
        Err(status) => return Err(status),
    };
    let info = resp.workflow_execution_info.unwrap_or_default();
    let memo = info
        .memo
        .as_ref()
        .map(|m| {
            m.fields
                .iter()
                .filter_map(|(k, p)| payload::to_json(p).ok().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(WorkflowDescription {
        run_id: info
            .execution
            .as_ref()
            .map(|e| e.run_id.clone())
            .unwrap_or_default(),
        status: info.status(),
        memo,
    }))
}
