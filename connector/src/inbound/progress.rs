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
    nexus::{OperationClient, OperationRef},
    outbound::{call_activity::CallHeartbeat, service::CallToken, upstream::ToolProgress},
    temporal::activity::describe_activity,
};

/// How often a waiting caller's progress is looked up.
pub const PROGRESS_POLL: Duration = Duration::from_secs(1);

/// The latest upstream progress of an operation's call, if it is a proxied tool call that
/// reported any.
pub async fn latest_progress(client: &OperationClient, op: &OperationRef) -> Option<ToolProgress> {
    let token = client.describe(op).await.ok()?.operation_token;
    let call: CallToken = serde_json::from_str(&token).ok()?;
    let activity = describe_activity(
        client.connection(),
        client.namespace(),
        &call.activity_id,
        &call.run_id,
    )
    .await
    .ok()??;
    let heartbeat: CallHeartbeat = serde_json::from_value(activity.heartbeat?).ok()?;
    heartbeat.progress
}

/// Sends the caller `notifications/progress` under its own token whenever the call's progress
/// changes. Runs until dropped (the caller's wait ends).
pub async fn forward_progress(
    client: &OperationClient,
    op: &OperationRef,
    peer: &Peer<RoleServer>,
    token: ProgressToken,
) {
    let mut last: Option<ToolProgress> = None;
    loop {
        tokio::time::sleep(PROGRESS_POLL).await;
        let Some(progress) = latest_progress(client, op).await else {
            continue;
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
