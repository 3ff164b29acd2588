//! Standalone Activities started through the raw `StartActivityExecution` RPC.
//!
//! The SDK's `start_activity` cannot attach completion callbacks, and callbacks are how an
//! activity's result reaches a Nexus operation: so the proxy (and tests) start activities here.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use temporalio_client::Connection;
use temporalio_protos::temporal::api::{
    common::v1::{
        ActivityType, Header, OnConflictOptions, Payload, Priority, RetryPolicy, SearchAttributes,
    },
    enums::v1::{ActivityIdConflictPolicy, ActivityIdReusePolicy},
    workflowservice::v1::{RequestCancelActivityExecutionRequest, StartActivityExecutionRequest},
};

pub use temporalio_protos::temporal::api::enums::v1::ActivityExecutionStatus;

use durable_mcp_contract::payload;

use super::{StartParts, proto_duration};

/// A request to start (or reattach to) a standalone Activity.
#[derive(Debug, Clone, Default)]
pub struct ActivityStart {
    pub activity_id: String,
    /// Makes a repeated start with the same id a no-op that returns the same run.
    pub request_id: String,
    pub activity_type: String,
    pub task_queue: String,
    pub input: Vec<Payload>,
    pub schedule_to_close: Option<Duration>,
    /// How long the Activity may wait for a worker to pick it up.
    pub schedule_to_start: Option<Duration>,
    pub start_to_close: Option<Duration>,
    pub heartbeat: Option<Duration>,
    pub retry_policy: Option<RetryPolicy>,
    /// Search attributes by name, each value as JSON (plain: Temporal indexes them).
    pub search_attributes: Option<BTreeMap<String, serde_json::Value>>,
    /// Attach to a running activity with the same id instead of failing; with it, this
    /// request's id and callbacks are attached too, so several callers can await one run.
    pub use_existing: bool,
    pub reuse_policy: Option<ActivityIdReusePolicy>,
    /// A Nexus completion callback: where the activity's outcome is delivered.
    pub completion_callback: Option<(String, HashMap<String, String>)>,
    pub priority: Option<Priority>,
    /// A one-line summary for the Temporal UI. Never put secrets here.
    pub summary: Option<String>,
    /// Temporal headers for the Activity (the trace context, R-RUN-9).
    pub header: Option<Header>,
}

/// Search attributes as Temporal takes them: each value a `json/plain` payload, whose type the
/// server reads from the attribute's registration.
fn search_attributes(
    values: Option<&BTreeMap<String, serde_json::Value>>,
) -> Option<SearchAttributes> {
    let values = values.filter(|v| !v.is_empty())?;
    Some(SearchAttributes {
        indexed_fields: values
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), payload::to_payload(value).ok()?)))
            .collect(),
    })
}

/// Starts the activity; answers `(run_id, started)` where `started` is false when the request
/// attached to an existing run.
pub async fn start_activity(
    connection: &Connection,
    namespace: &str,
    start: ActivityStart,
) -> Result<(String, bool), tonic::Status> {
    // The server accepts attach options only when there is something to attach.
    let attach = start.use_existing && start.completion_callback.is_some();
    let parts = StartParts::new(
        start.task_queue,
        start.input,
        start.completion_callback,
        start.summary,
    );
    let request = StartActivityExecutionRequest {
        namespace: namespace.to_owned(),
        identity: connection.identity().to_owned(),
        request_id: start.request_id,
        activity_id: start.activity_id,
        activity_type: Some(ActivityType {
            name: start.activity_type,
        }),
        task_queue: parts.task_queue,
        schedule_to_close_timeout: start.schedule_to_close.map(proto_duration),
        schedule_to_start_timeout: start.schedule_to_start.map(proto_duration),
        start_to_close_timeout: start.start_to_close.map(proto_duration),
        search_attributes: search_attributes(start.search_attributes.as_ref()),
        heartbeat_timeout: start.heartbeat.map(proto_duration),
        retry_policy: start.retry_policy,
        input: parts.input,
        id_conflict_policy: if start.use_existing {
            ActivityIdConflictPolicy::UseExisting
        } else {
            ActivityIdConflictPolicy::Fail
        }
        .into(),
        id_reuse_policy: start
            .reuse_policy
            .unwrap_or(ActivityIdReusePolicy::Unspecified)
            .into(),
        on_conflict_options: attach.then_some(OnConflictOptions {
            attach_request_id: true,
            attach_completion_callbacks: true,
            attach_links: true,
        }),
        completion_callbacks: parts.completion_callbacks,
        priority: start.priority,
        header: start.header,
        user_metadata: parts.user_metadata,
        ..Default::default()
    };
    let resp = connection
        .workflow_service()
        .start_activity_execution(tonic::Request::new(request))
        .await?
        .into_inner();
    Ok((resp.run_id, resp.started))
}

/// Requests cancellation of a standalone activity. The activity learns it on its next
/// heartbeat, so only heartbeating activities can be cancelled while running.
pub async fn cancel_activity(
    connection: &Connection,
    namespace: &str,
    activity_id: &str,
    run_id: &str,
    reason: &str,
) -> Result<(), tonic::Status> {
    connection
        .workflow_service()
        .request_cancel_activity_execution(tonic::Request::new(
            RequestCancelActivityExecutionRequest {
                namespace: namespace.to_owned(),
                activity_id: activity_id.to_owned(),
                run_id: run_id.to_owned(),
                identity: connection.identity().to_owned(),
                request_id: uuid::Uuid::new_v4().to_string(),
                reason: reason.to_owned(),
            },
        ))
        .await?;
    Ok(())
}

/// The run id of the latest run of an activity, or `None` when no activity has that id.
pub async fn find_activity(
    connection: &Connection,
    namespace: &str,
    activity_id: &str,
) -> Result<Option<String>, tonic::Status> {
    use temporalio_protos::temporal::api::workflowservice::v1::DescribeActivityExecutionRequest;
    let request = DescribeActivityExecutionRequest {
        namespace: namespace.to_owned(),
        activity_id: activity_id.to_owned(),
        ..Default::default()
    };
    match connection
        .workflow_service()
        .describe_activity_execution(tonic::Request::new(request))
        .await
    {
        Ok(resp) => Ok(Some(resp.into_inner().run_id)),
        Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// What a standalone activity looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityDescription {
    pub run_id: String,
    pub status: ActivityExecutionStatus,
    /// The current (or last) attempt, from 1.
    pub attempt: i32,
    /// A worker has picked the current attempt up (it is not just scheduled).
    pub started: bool,
    /// Once closed: the result's JSON, or the failure's message.
    pub outcome: Option<Result<serde_json::Value, String>>,
    /// The last heartbeat's first detail, as JSON (for a tool call: its `CallHeartbeat`).
    pub heartbeat: Option<serde_json::Value>,
    /// That detail as stored, when it is not plain JSON (a codec encoded it): decode it with
    /// the codec, then read it as JSON.
    pub encoded_heartbeat: Option<Payload>,
}

impl ActivityDescription {
    pub fn is_running(&self) -> bool {
        matches!(
            self.status,
            ActivityExecutionStatus::Running | ActivityExecutionStatus::Unspecified
        )
    }
}

/// Describes an activity run (the latest when `run_id` is empty), with its outcome once closed;
/// `None` when no activity has that id.
pub async fn describe_activity(
    connection: &Connection,
    namespace: &str,
    activity_id: &str,
    run_id: &str,
) -> Result<Option<ActivityDescription>, tonic::Status> {
    use temporalio_protos::temporal::api::{
        activity::v1::activity_execution_outcome::Value as Outcome,
        workflowservice::v1::DescribeActivityExecutionRequest,
    };
    let request = DescribeActivityExecutionRequest {
        namespace: namespace.to_owned(),
        activity_id: activity_id.to_owned(),
        run_id: run_id.to_owned(),
        include_outcome: true,
        include_heartbeat_details: true,
        ..Default::default()
    };
    let resp = match connection
        .workflow_service()
        .describe_activity_execution(tonic::Request::new(request))
        .await
    {
        Ok(resp) => resp.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
        Err(status) => return Err(status),
    };
    let info = resp.info.unwrap_or_default();
    let first = info
        .heartbeat_details
        .as_ref()
        .and_then(|d| d.payloads.first());
    let heartbeat = first.and_then(|p| payload::to_json(p).ok());
    let encoded_heartbeat = first.filter(|_| heartbeat.is_none()).cloned();
    let outcome = resp.outcome.and_then(|o| o.value).map(|v| match v {
        Outcome::Result(payloads) => payloads
            .payloads
            .first()
            .map(|p| payload::to_json(p).map_err(|e| e.to_string()))
            .unwrap_or(Ok(serde_json::Value::Null)),
        Outcome::Failure(f) => Err(super::failure::innermost_message(&f)),
    });
    Ok(Some(ActivityDescription {
        run_id: resp.run_id,
        status: info.status(),
        attempt: info.attempt,
        started: info.last_started_time.is_some(),
        outcome,
        heartbeat,
        encoded_heartbeat,
    }))
}
