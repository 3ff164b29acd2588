//! Upstream progress for the connector's callers. A proxied tool call runs in an activity
//! whose heartbeats carry the upstream's latest `notifications/progress`
//! ([`CallHeartbeat`]); the Nexus operation's token names that activity ([`CallToken`]). So a
//! caller that sent a `progressToken` gets MCP progress while it waits, and `tasks/get` shows the
//! latest progress message. A Workflow-backed native tool's token names its Workflow
//! ([`WorkflowCallToken`]), whose memo holds the latest progress ([`PROGRESS_MEMO_KEY`]). A call
//! that ends before its progress could be read this way carries it with its result, and the
//! caller gets it replayed before the result. Other operations simply have none.

use std::{sync::Mutex, time::Duration};

use rmcp::{
    Peer, RoleServer,
    model::{ProgressNotificationParam, ProgressToken},
};

use crate::{
    mcp::call::{
        CallHeartbeat, CallNotification, CallNotifications, CallToken, PROGRESS_MEMO_KEY, ToolLog,
        ToolProgress, WorkflowCallToken,
    },
    nexus::{OperationClient, OperationRef},
    temporal::{activity::describe_activity, workflow::describe_workflow},
};

/// Where a call's progress is kept: the proxy's call Activity or a native tool's Workflow.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressSource {
    Activity(CallToken),
    Workflow(WorkflowCallToken),
}

impl ProgressSource {
    /// The source an operation token names, if it names one.
    pub fn parse(operation_token: &str) -> Option<Self> {
        CallToken::parse(operation_token)
            .map(Self::Activity)
            .or_else(|| WorkflowCallToken::parse(operation_token).map(Self::Workflow))
    }
}

/// How often a waiting caller's progress is looked up.
pub const PROGRESS_POLL: Duration = Duration::from_secs(1);

/// What looking up a call's progress found.
enum Lookup {
    Progress(ToolProgress),
    /// Nothing reported yet, or a passing failure: ask again later.
    NotYet,
    /// The activity cannot be seen from here (another namespace, no permission): stop asking.
    Unreachable,
}

fn unreachable_or_not_yet(status: &tonic::Status) -> Lookup {
    match status.code() {
        tonic::Code::PermissionDenied | tonic::Code::InvalidArgument | tonic::Code::NotFound => {
            Lookup::Unreachable
        }
        _ => Lookup::NotYet,
    }
}

async fn lookup(client: &OperationClient, source: &ProgressSource) -> Lookup {
    let call = match source {
        ProgressSource::Activity(call) => call,
        ProgressSource::Workflow(wf) => {
            return match describe_workflow(
                client.connection(),
                client.namespace(),
                &wf.workflow_id,
                &wf.run_id,
            )
            .await
            {
                Ok(Some(found)) => found
                    .memo
                    .get(PROGRESS_MEMO_KEY)
                    .and_then(|p| serde_json::from_value::<ToolProgress>(p.clone()).ok())
                    .map_or(Lookup::NotYet, Lookup::Progress),
                Ok(None) => Lookup::Unreachable,
                Err(status) => unreachable_or_not_yet(&status),
            };
        }
    };
    match describe_activity(
        client.connection(),
        client.namespace(),
        &call.activity_id,
        &call.run_id,
    )
    .await
    {
        Ok(Some(activity)) => activity
            .heartbeat
            .and_then(|h| serde_json::from_value::<CallHeartbeat>(h).ok())
            .and_then(|h| h.progress)
            .map_or(Lookup::NotYet, Lookup::Progress),
        Ok(None) => Lookup::Unreachable,
        Err(status) => unreachable_or_not_yet(&status),
    }
}

/// The latest progress the upstream reported for a call, if any.
pub async fn call_progress(
    client: &OperationClient,
    call: &ProgressSource,
) -> Option<ToolProgress> {
    match lookup(client, call).await {
        Lookup::Progress(p) => Some(p),
        Lookup::NotYet | Lookup::Unreachable => None,
    }
}

/// Sends the caller `notifications/progress` under its own token whenever the call's progress
/// changes. Runs until dropped (the caller's wait ends), or until it is clear that there is no
/// progress to read: an operation that is not a proxied tool call, or an activity this
/// connector cannot see (the proxy's activities live in the endpoint's target namespace, which
/// must be the connector's for progress to flow). One RPC per poll once the call is known.
/// `seen` is updated with the last progress value the caller got.
pub async fn forward_progress(
    client: &OperationClient,
    op: &OperationRef,
    peer: &Peer<RoleServer>,
    token: ProgressToken,
    seen: &Mutex<Option<f64>>,
) {
    let mut call: Option<ProgressSource> = None;
    let mut last: Option<ToolProgress> = None;
    loop {
        tokio::time::sleep(PROGRESS_POLL).await;
        if call.is_none() {
            let Ok(described) = client.describe(op).await else {
                continue;
            };
            if described.operation_token.is_empty() {
                continue; // Not started yet (or a sync operation, which ends with its answer).
            }
            match ProgressSource::parse(&described.operation_token) {
                Some(found) => call = Some(found),
                None => return, // Neither a proxied call nor a Workflow-backed tool.
            }
        }
        let Some(found) = &call else { continue };
        let progress = match lookup(client, found).await {
            Lookup::Progress(p) => p,
            Lookup::NotYet => continue,
            Lookup::Unreachable => return,
        };
        if last.as_ref() == Some(&progress) {
            continue;
        }
        if notify(peer, &token, &progress).await.is_err() {
            return; // The caller is gone; the wait ends on its own.
        }
        *seen.lock().unwrap() = Some(progress.progress);
        last = Some(progress);
    }
}

/// Sends the caller, in order, what its call's result carried that it has not had: progress
/// later than `seen` (the last progress value it got live) under its progress token, when it
/// sent one, and log messages at or above `min_level` (R-CON-10, R-CON-13).
pub async fn replay_notifications(
    peer: &Peer<RoleServer>,
    token: Option<&ProgressToken>,
    carried: &CallNotifications,
    seen: Option<f64>,
    min_level: Option<usize>,
) {
    let seen = if token.is_some() {
        seen
    } else {
        Some(f64::INFINITY)
    };
    for item in carried.replay(seen, min_level) {
        let sent = match (item, token) {
            (CallNotification::Progress(progress), Some(token)) => {
                notify(peer, token, progress).await
            }
            (CallNotification::Progress(_), None) => Ok(()),
            (CallNotification::Log(log), _) => notify_log(peer, log).await,
        };
        if sent.is_err() {
            return;
        }
    }
}

#[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; callers still use it)
async fn notify_log(
    peer: &Peer<RoleServer>,
    log: &ToolLog,
) -> Result<(), rmcp::service::ServiceError> {
    let level = serde_json::from_value(serde_json::Value::from(log.level.as_str()))
        .unwrap_or(rmcp::model::LoggingLevel::Info);
    let mut note = rmcp::model::LoggingMessageNotificationParam::new(level, log.data.clone());
    note.logger = log.logger.clone();
    peer.notify_logging_message(note).await
}

async fn notify(
    peer: &Peer<RoleServer>,
    token: &ProgressToken,
    progress: &ToolProgress,
) -> Result<(), rmcp::service::ServiceError> {
    let mut note = ProgressNotificationParam::new(token.clone(), progress.progress);
    note.total = progress.total;
    note.message = progress.message.clone();
    peer.notify_progress(note).await
}
