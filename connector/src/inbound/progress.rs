//! Upstream progress for the connector's callers. A proxied tool call runs in an activity
//! whose heartbeats carry the upstream's latest `notifications/progress`
//! ([`CallHeartbeat`]); the Nexus operation's token names that activity ([`CallToken`]). So a
//! caller that sent a `progressToken` gets MCP progress while it waits, and `tasks/get` shows the
//! latest progress message. Operations that are not proxied tool calls simply have none.

use std::time::Duration;

use rmcp::{
    Peer, RoleServer,
    model::{ProgressNotificationParam, ProgressToken},
};

use crate::{
    mcp::call::{CallHeartbeat, CallToken, ToolProgress},
    nexus::{OperationClient, OperationRef},
    temporal::activity::describe_activity,
};

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

async fn lookup(client: &OperationClient, call: &CallToken) -> Lookup {
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
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::PermissionDenied
                    | tonic::Code::InvalidArgument
                    | tonic::Code::NotFound
            ) =>
        {
            Lookup::Unreachable
        }
        Err(_) => Lookup::NotYet,
    }
}

/// The latest progress the upstream reported for a call, if any.
pub async fn call_progress(client: &OperationClient, call: &CallToken) -> Option<ToolProgress> {
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
pub async fn forward_progress(
    client: &OperationClient,
    op: &OperationRef,
    peer: &Peer<RoleServer>,
    token: ProgressToken,
) {
    let mut call: Option<CallToken> = None;
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
            match CallToken::parse(&described.operation_token) {
                Some(found) => call = Some(found),
                None => return, // Not a proxied tool call.
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
        let mut note = ProgressNotificationParam::new(token.clone(), progress.progress);
        note.total = progress.total;
        note.message = progress.message.clone();
        if peer.notify_progress(note).await.is_err() {
            return; // The caller is gone; the wait ends on its own.
        }
        last = Some(progress);
    }
}
