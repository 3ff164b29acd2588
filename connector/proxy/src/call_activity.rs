//! The tool-call Activity: one upstream `tools/call`, heartbeating while it is in flight.
//!
//! Each heartbeat carries [`CallHeartbeat`]: the upstream's latest progress notification for
//! the call and its latest log messages, numbered, which callers can read from the activity
//! (the connector turns them into MCP notifications for its own caller, R-PRX-9, R-PRX-10).
//!
//! Cancellation (a Nexus cancel, or the attempt's timeout) reaches the activity on its next
//! heartbeat; dropping the in-flight call then sends `notifications/cancelled` upstream, so a
//! timed-out attempt never runs beside its own retry.

// `#[activities]` emits a per-activity constant that only typed (workflow) callers use.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use temporalio_common::data_converters::RawValue;
use temporalio_macros::activities;
use temporalio_sdk::ApplicationFailure;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::{
    errors::{Backoff, on_jsonrpc_error},
    transport_failure::{FailureAction, on_transport_failure},
    upstream::{UpstreamClient, UpstreamError},
};
use durable_mcp_contract::{
    call::{CallHeartbeat, CallNotification, CallNotifications, log_seq},
    errors::ToolCallErrorType,
    payload,
};

/// The activity type name.
pub const CALL_TOOL_ACTIVITY: &str = "durable-mcp.call-tool";
/// How often a running call heartbeats at most: once a second, or a third of the heartbeat
/// timeout when that is shorter (a short attempt timeout clamps the heartbeat timeout).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The heartbeat interval for an attempt with this heartbeat timeout.
pub fn heartbeat_every(heartbeat_timeout: Option<Duration>) -> Duration {
    heartbeat_timeout
        .filter(|t| !t.is_zero())
        .map_or(HEARTBEAT_EVERY, |t| {
            (t / 3).clamp(Duration::from_millis(50), HEARTBEAT_EVERY)
        })
}
/// The largest result a call can return (see [`payload::MAX_PAYLOAD_BYTES`]).
pub const MAX_RESULT_BYTES: usize = payload::MAX_PAYLOAD_BYTES;

/// The activity's recorded input: a retried attempt uses exactly this, whatever discovery says
/// since. Never holds credentials.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCallInput {
    pub service: String,
    pub tool: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// The tool gets one attempt: a failure after which it may have run is final.
    pub one_attempt: bool,
}

/// Progress messages are cut to this many characters: they are copied into every heartbeat
/// and every task status.
pub const MAX_PROGRESS_MESSAGE_CHARS: usize = 1024;

fn truncate_chars(text: &mut String, max: usize) {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
        text.push('…');
    }
}

/// A heartbeat's details: one `json/plain` payload holding the [`CallHeartbeat`].
fn heartbeat_details(heartbeat: &CallHeartbeat) -> RawValue {
    RawValue::new(payload::to_payload(heartbeat).into_iter().collect())
}

/// The proxy's activities, over the worker's upstream connections.
pub struct ProxyActivities {
    pub upstreams: Arc<HashMap<String, Arc<UpstreamClient>>>,
}

fn failure(kind: ToolCallErrorType, retryable: bool, message: String) -> ActivityError {
    let source: Box<dyn std::error::Error + Send + Sync> = message.into();
    ActivityError::application(
        ApplicationFailure::builder(source)
            .type_name(kind.as_str().to_owned())
            .non_retryable(!retryable)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_come_well_within_the_heartbeat_timeout() {
        assert_eq!(heartbeat_every(None), HEARTBEAT_EVERY);
        assert_eq!(
            heartbeat_every(Some(Duration::from_secs(5))),
            HEARTBEAT_EVERY
        );
        assert_eq!(
            heartbeat_every(Some(Duration::from_secs(1))),
            Duration::from_millis(333) + Duration::from_nanos(333_333)
        );
        assert_eq!(
            heartbeat_every(Some(Duration::from_millis(30))),
            Duration::from_millis(50)
        );
    }
}

#[activities]
impl ProxyActivities {
    #[activity(name = "durable-mcp.call-tool")]
    async fn call_tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ToolCallInput,
    ) -> Result<RawValue, ActivityError> {
        let Some(client) = self.upstreams.get(&input.service).cloned() else {
            return Err(failure(
                ToolCallErrorType::UnknownTool,
                false,
                format!("this worker fronts no upstream named {:?}", input.service),
            ));
        };
        let mut backoff = Backoff::within_attempt().start();
        let every = heartbeat_every(ctx.info().heartbeat_timeout);
        // The upstream's progress and log messages, recorded as soon as they arrive (the SDK
        // sends the latest details when its throttle allows) and again on every heartbeat tick.
        let (progress_tx, mut progress_rx) = watch::channel(CallHeartbeat::default());
        let heartbeat = |rx: &watch::Receiver<CallHeartbeat>| heartbeat_details(&rx.borrow());
        // Log messages are numbered across the attempt's tries, and above an earlier attempt's
        // (R-PRX-10), so a caller that read some live is not sent them again.
        let attempt = ctx.info().attempt;
        let logged = Arc::new(AtomicU32::new(0));
        // The attempt's own deadline (start-to-close or schedule-to-close): at it the call is
        // cancelled upstream here, at once, rather than when the next heartbeat learns that the
        // server timed the attempt out, which can come after the retry has started (R-PRX-7).
        let deadline = ctx.info().deadline.map(|at| {
            tokio::time::Instant::now()
                + at.duration_since(std::time::SystemTime::now())
                    .unwrap_or_default()
        });
        loop {
            // Each try reports its own progress (a retry within the attempt starts over). Only a
            // real reset counts as a change: marking an unchanged watch changed would heartbeat
            // at once, one RPC (and one server write) on every call, however short.
            progress_tx.send_if_modified(CallHeartbeat::reset);
            let sink = progress_tx.clone();
            // ... and every notification travels with the result too (R-CON-10).
            let carried = Arc::new(Mutex::new(CallNotifications::default()));
            let carry = carried.clone();
            let logged = logged.clone();
            let call =
                client.call_tool_reporting(&input.tool, input.arguments.clone(), move |note| {
                    match note {
                        CallNotification::Log(mut log) => {
                            log.seq = Some(log_seq(attempt, logged.fetch_add(1, Ordering::SeqCst)));
                            carry
                                .lock()
                                .unwrap()
                                .push(CallNotification::Log(log.clone()));
                            sink.send_modify(|h| h.push_log(log));
                        }
                        CallNotification::Progress(mut p) => {
                            if let Some(m) = &mut p.message {
                                truncate_chars(m, MAX_PROGRESS_MESSAGE_CHARS);
                            }
                            carry
                                .lock()
                                .unwrap()
                                .push(CallNotification::Progress(p.clone()));
                            let next_log = log_seq(attempt, logged.load(Ordering::SeqCst));
                            sink.send_modify(|h| h.set_progress(p, next_log));
                        }
                    }
                });
            let mut call = Box::pin(call);
            let mut past_deadline = false;
            let outcome = loop {
                tokio::select! {
                    result = &mut call => break Some(result),
                    _ = ctx.cancelled() => break None,
                    _ = until(deadline), if !past_deadline => {
                        past_deadline = true;
                        break None;
                    }
                    Ok(()) = progress_rx.changed() => {
                        let _ = ctx.record_heartbeat(heartbeat(&progress_rx)).await;
                    }
                    _ = tokio::time::sleep(every) => {
                        let _ = ctx.record_heartbeat(heartbeat(&progress_rx)).await;
                    }
                }
            };
            let Some(result) = outcome else {
                // Dropping `call` sends notifications/cancelled for the in-flight request.
                debug!(tool = %input.tool, "tool call cancelled; cancelling it upstream");
                drop(call);
                if past_deadline {
                    // The upstream call is cancelled; the attempt's end stays the server's
                    // (its timeout reaches the activity through the next heartbeat).
                    loop {
                        tokio::select! {
                            _ = ctx.cancelled() => break,
                            _ = tokio::time::sleep(every) => {
                                let _ = ctx.record_heartbeat(heartbeat(&progress_rx)).await;
                            }
                        }
                    }
                }
                return Err(ActivityError::cancelled());
            };
            let error = match result {
                Ok(result) => {
                    let mut payload =
                        payload::to_marked_payload(&result, payload::CALL_TOOL_RESULT).map_err(
                            |e| {
                                failure(
                                    ToolCallErrorType::UpstreamProtocolError,
                                    false,
                                    e.to_string(),
                                )
                            },
                        )?;
                    carried.lock().unwrap().attach(&mut payload);
                    if payload.data.len() > MAX_RESULT_BYTES {
                        return Err(failure(
                            ToolCallErrorType::ResultTooLarge,
                            false,
                            format!(
                                "tool {:?} returned {} bytes of JSON, more than the {MAX_RESULT_BYTES} bytes a Temporal payload may hold (its 2 MiB limit, less room for metadata); ask the tool for less (a page, a summary or a reference to the data)",
                                input.tool,
                                payload.data.len()
                            ),
                        ));
                    }
                    // The tool and the size only: results are callers' data (R-CON-33).
                    debug!(tool = %input.tool, result_bytes = payload.data.len(), "tool call answered");
                    return Ok(RawValue::new(vec![payload]));
                }
                Err(e) => e,
            };
            let action = match &error {
                UpstreamError::JsonRpc { code, .. } => {
                    let (kind, retryable) = on_jsonrpc_error(*code);
                    return Err(failure(kind, retryable, error.to_string()));
                }
                UpstreamError::Protocol { .. } => {
                    return Err(failure(
                        ToolCallErrorType::UpstreamProtocolError,
                        false,
                        error.to_string(),
                    ));
                }
                UpstreamError::Connect { .. } | UpstreamError::Transport { .. } => {
                    on_transport_failure(error.phase(), input.one_attempt, false)
                }
            };
            match action {
                FailureAction::RetryWithinAttempt => {
                    let delay = backoff.next_delay();
                    warn!(tool = %input.tool, error = %error, retry_in = ?delay,
                          "the call never reached the tool; retrying within this attempt");
                    let wait_until = tokio::time::Instant::now() + delay;
                    while tokio::time::Instant::now() < wait_until {
                        tokio::select! {
                            _ = ctx.cancelled() => return Err(ActivityError::cancelled()),
                            _ = tokio::time::sleep_until(wait_until.min(tokio::time::Instant::now() + every)) => {
                                let _ = ctx.record_heartbeat(heartbeat(&progress_rx)).await;
                            }
                        }
                    }
                }
                FailureAction::FailRetryable(kind) => {
                    return Err(failure(kind, true, error.to_string()));
                }
                FailureAction::FailNonRetryable(kind) => {
                    return Err(failure(kind, false, error.to_string()));
                }
            }
        }
    }
}
