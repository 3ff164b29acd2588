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

use durable_mcp_runtime::trace::WithTraceContext as _;

use super::{
    errors::{Backoff, OnJsonRpcError, on_jsonrpc_error},
    transport_failure::{FailureAction, on_transport_failure},
    upstream::{CallAnswer, CallRound, UpstreamClient, UpstreamError},
};

mod upstream_task;
use durable_mcp_contract::{
    call::{CallHeartbeat, CallNotification, CallNotifications, log_seq},
    errors::ToolCallErrorType,
    jsonrpc_error::JsonRpcError,
    payload,
};
use temporalio_protos::temporal::api::common::v1::Payload;

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
    /// The upstream lists the tool with `execution.taskSupport: "required"`: the call asks
    /// the upstream for a task and follows it (R-PRX-28).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upstream_task: bool,
    /// In a round after the first, the answers to the previous round's input requests
    /// (R-PRX-29).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<super::input::RoundAnswers>,
    /// The round this call is, as its start's Nexus link named it: a state the proxy makes
    /// for a task waiting for input is bound to it, and a state brought back is honoured only
    /// in the round right after the one that made it (R-PRX-35).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<super::task_input::Round>,
    /// The caller the call is for, as the connector named it (an opaque hash, R-PRX-10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
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
    /// Cancelled when the worker shuts down: a cancel then is the worker's, not the call's,
    /// and an upstream task is left running for the next attempt (R-PRX-28).
    pub stopping: tokio_util::sync::CancellationToken,
    /// Signs and verifies the states of upstream tasks waiting for input (R-PRX-35).
    pub state_keys: crate::state_key::StateKeys,
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
    /// One call: tries the upstream until it answers, fails, or the attempt is cancelled.
    /// A try that provably never reached the tool is followed by another within the attempt
    /// (R-PRX-5); each try heartbeats while it is in flight (R-PRX-9).
    #[activity(name = "durable-mcp.call-tool")]
    async fn call_tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ToolCallInput,
    ) -> Result<RawValue, ActivityError> {
        let (service, tool, started) = (
            input.service.clone(),
            input.tool.clone(),
            std::time::Instant::now(),
        );
        let traced = crate::trace::attempt_span(&ctx, &service, &tool);
        let configured = self.upstreams.contains_key(&service);
        let attempt = self.attempt(ctx, input).with_context(traced.clone());
        // A panic ends the call, without its message and without a retry that would panic
        // again; the upstream may have run the tool by then (R-CON-51).
        let ended = durable_mcp_runtime::panics::catching("tools/call", attempt)
            .await
            .unwrap_or_else(|panicked| {
                let why = format!("{}; the tool may have run", panicked.caller_message());
                Err(failure(
                    ToolCallErrorType::ToolCallOutcomeUnknown,
                    false,
                    why,
                ))
            });
        let outcome = crate::metrics::outcome_of(&ended);
        durable_mcp_runtime::trace::end(&traced, outcome, ended.is_err());
        let label = crate::metrics::service_label(&service, configured);
        crate::metrics::global().call_ended(label, &tool, &ended, started.elapsed());
        ended
    }
}

impl ProxyActivities {
    /// One attempt of a call (counted by the Activity, R-RUN-6).
    // Long: the attempt's one decision (answer a waiting upstream task, re-attach to an
    // earlier attempt's, or call and retry within the attempt) reads best in one place.
    async fn attempt(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ToolCallInput,
    ) -> Result<RawValue, ActivityError> {
        let client = upstream_named(&self.upstreams, &input.service)?;
        let deadline = attempt_deadline(&ctx);
        let mut heartbeats = Heartbeats::new(&ctx);
        let follow = |id, poll_interval, origin| upstream_task::Followed {
            ctx: &ctx,
            client: &client,
            input: &input,
            deadline,
            stopping: &self.stopping,
            keys: &self.state_keys,
            id,
            poll_interval,
            origin,
        };
        if let Some(waiting) = upstream_task::waiting_task(&input, &self.state_keys) {
            // A later round of a task that asked for input answers it (R-PRX-29).
            let waiting = waiting
                .map_err(|why| failure(ToolCallErrorType::UpstreamProtocolError, false, why))?;
            let responses = input.answers.as_ref().map(|a| a.input_responses.clone());
            let followed = follow(waiting.task_id, None, waiting.origin);
            return followed
                .answer_task(&mut heartbeats, &responses.unwrap_or_default())
                .await;
        }
        if let Some(earlier) = upstream_task::earlier_task(&ctx) {
            let carried = heartbeats.start_try();
            let here = client.origin().await.ok();
            let followed = follow(earlier.id.clone(), None, here.clone().unwrap_or_default());
            if earlier.made_by(here.as_deref()) {
                return followed.follow(&mut heartbeats, carried).await;
            }
            followed.made_elsewhere(&mut heartbeats).await?;
        }
        let mut backoff = Backoff::within_attempt().start();
        loop {
            let carried = heartbeats.start_try();
            let note = heartbeats.pass_on(carried.clone());
            let call = call_once(&client, &input, note);
            let in_flight =
                call_with_heartbeats(&ctx, &input.tool, &mut heartbeats, deadline, call).await;
            let error = match in_flight {
                InFlight::Ended(Ok(CallAnswer::Result(result))) => {
                    return answer(&input, &result, &carried);
                }
                InFlight::Ended(Ok(CallAnswer::Task {
                    id,
                    poll_interval,
                    origin,
                })) => {
                    return follow(id, poll_interval, origin)
                        .follow(&mut heartbeats, carried)
                        .await;
                }
                InFlight::Ended(Err(UpstreamError::JsonRpc {
                    code,
                    message,
                    data,
                    ..
                })) => {
                    let error = JsonRpcError {
                        code,
                        message,
                        data,
                    };
                    return jsonrpc_end(&ctx, &input, error, &carried);
                }
                InFlight::Ended(Err(error)) => error,
                InFlight::Cancelled => return Err(ActivityError::cancelled()),
                InFlight::PastDeadline => return Err(heartbeats.until_cancelled(&ctx).await),
            };
            match action_for(&error, input.one_attempt) {
                FailureAction::RetryWithinAttempt => {
                    let delay = backoff.next_delay();
                    warn!(tool = %input.tool, error = %error, retry_in = ?delay,
                          "the call never reached the tool; retrying within this attempt");
                    heartbeats.wait(&ctx, delay).await?;
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

/// The worker's connection to the upstream the call names.
fn upstream_named(
    upstreams: &HashMap<String, Arc<UpstreamClient>>,
    service: &str,
) -> Result<Arc<UpstreamClient>, ActivityError> {
    upstreams.get(service).cloned().ok_or_else(|| {
        failure(
            ToolCallErrorType::UnknownTool,
            false,
            format!("this worker fronts no upstream named {service:?}"),
        )
    })
}

/// The attempt's own deadline (start-to-close or schedule-to-close): at it the call is
/// cancelled upstream here, at once, rather than when the next heartbeat learns that the
/// server timed the attempt out, which can come after the retry has started (R-PRX-7).
fn attempt_deadline(ctx: &ActivityContext) -> Option<tokio::time::Instant> {
    ctx.info().deadline.map(|at| {
        tokio::time::Instant::now()
            + at.duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
    })
}

/// One attempt's heartbeats: the upstream's progress and log messages, recorded as soon as
/// they arrive (the SDK sends the latest details when its throttle allows) and again on every
/// tick.
struct Heartbeats {
    every: Duration,
    details: watch::Sender<CallHeartbeat>,
    changed: watch::Receiver<CallHeartbeat>,
    /// Log messages are numbered across the attempt's tries, and above an earlier attempt's
    /// (R-PRX-10), so a caller that read some live is not sent them again.
    attempt: u32,
    logged: Arc<AtomicU32>,
}

impl Heartbeats {
    fn new(ctx: &ActivityContext) -> Self {
        let (details, changed) = watch::channel(CallHeartbeat::default());
        Self {
            every: heartbeat_every(ctx.info().heartbeat_timeout),
            details,
            changed,
            attempt: ctx.info().attempt,
            logged: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Starts a try, which reports its own progress (a retry within the attempt starts over),
    /// and returns where its notifications gather to travel with its result (R-CON-10). Only
    /// a real reset counts as a change: marking an unchanged watch changed would heartbeat at
    /// once, one RPC (and one server write) on every call, however short.
    fn start_try(&self) -> Arc<Mutex<CallNotifications>> {
        self.details.send_if_modified(CallHeartbeat::reset);
        Arc::new(Mutex::new(CallNotifications::default()))
    }

    /// What the upstream's notifications for this try do: each goes into the heartbeat
    /// details at once, and into `carried`. Log messages are numbered; progress messages cut
    /// to [`MAX_PROGRESS_MESSAGE_CHARS`].
    fn pass_on(
        &self,
        carried: Arc<Mutex<CallNotifications>>,
    ) -> impl FnMut(CallNotification) + Send + 'static {
        let details = self.details.clone();
        let (attempt, logged) = (self.attempt, self.logged.clone());
        move |note| match note {
            CallNotification::Log(mut log) => {
                log.seq = Some(log_seq(attempt, logged.fetch_add(1, Ordering::SeqCst)));
                carried
                    .lock()
                    .unwrap()
                    .push(CallNotification::Log(log.clone()));
                details.send_modify(|h| h.push_log(log));
            }
            CallNotification::Progress(mut p) => {
                if let Some(m) = &mut p.message {
                    truncate_chars(m, MAX_PROGRESS_MESSAGE_CHARS);
                }
                carried
                    .lock()
                    .unwrap()
                    .push(CallNotification::Progress(p.clone()));
                let next_log = log_seq(attempt, logged.load(Ordering::SeqCst));
                details.send_modify(|h| h.set_progress(p, next_log));
            }
        }
    }

    /// Keeps the upstream task the call follows (or none) in the heartbeat details (R-PRX-28).
    fn follow_task(&self, task: Option<(String, String)>) {
        let (id, origin) = task.unzip();
        self.details.send_modify(|h| {
            h.upstream_task = id;
            h.upstream_task_origin = origin;
        });
    }

    /// Records the latest details as a heartbeat.
    async fn record(&self, ctx: &ActivityContext) {
        let details = heartbeat_details(&self.changed.borrow());
        let _ = ctx.record_heartbeat(details).await;
    }

    /// Heartbeats until the server's cancellation arrives. After the attempt's deadline the
    /// upstream call is cancelled; the attempt's end stays the server's (its timeout reaches
    /// the activity through the next heartbeat).
    async fn until_cancelled(&self, ctx: &ActivityContext) -> ActivityError {
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return ActivityError::cancelled(),
                _ = tokio::time::sleep(self.every) => self.record(ctx).await,
            }
        }
    }

    /// Waits `delay` before the next try, heartbeating; a cancellation ends the wait and the
    /// attempt.
    async fn wait(&self, ctx: &ActivityContext, delay: Duration) -> Result<(), ActivityError> {
        let wait_until = tokio::time::Instant::now() + delay;
        while tokio::time::Instant::now() < wait_until {
            let tick = wait_until.min(tokio::time::Instant::now() + self.every);
            tokio::select! {
                _ = ctx.cancelled() => return Err(ActivityError::cancelled()),
                _ = tokio::time::sleep_until(tick) => self.record(ctx).await,
            }
        }
        Ok(())
    }
}

/// How a try in flight ended.
enum InFlight<T> {
    /// The upstream answered, or the call failed.
    Ended(T),
    /// The activity was cancelled (a Nexus cancel, or the server timed the attempt out).
    Cancelled,
    /// The attempt's deadline passed.
    PastDeadline,
}

/// Runs one try, heartbeating on every change of the details and every tick, until it ends,
/// the activity is cancelled or the attempt's deadline passes. A try cut short is dropped
/// here, which sends `notifications/cancelled` for the in-flight request (R-PRX-7).
async fn call_with_heartbeats<T>(
    ctx: &ActivityContext,
    tool: &str,
    heartbeats: &mut Heartbeats,
    deadline: Option<tokio::time::Instant>,
    call: impl Future<Output = T>,
) -> InFlight<T> {
    tokio::pin!(call);
    let cut = loop {
        tokio::select! {
            result = &mut call => return InFlight::Ended(result),
            _ = ctx.cancelled() => break InFlight::Cancelled,
            _ = until(deadline) => break InFlight::PastDeadline,
            Ok(()) = heartbeats.changed.changed() => heartbeats.record(ctx).await,
            _ = tokio::time::sleep(heartbeats.every) => heartbeats.record(ctx).await,
        }
    };
    debug!(tool = %tool, "tool call cancelled; cancelling it upstream");
    cut
}

/// One `tools/call` of the upstream: asking for a task when the tool requires one (R-PRX-28),
/// with the previous round's answers in a later round (R-PRX-29).
async fn call_once(
    client: &UpstreamClient,
    input: &ToolCallInput,
    note: impl FnMut(CallNotification),
) -> Result<CallAnswer, UpstreamError> {
    let (tool, arguments) = (&input.tool, input.arguments.clone());
    let round = CallRound {
        answers: input.answers.as_ref(),
        caller: input.caller.as_deref(),
    };
    let traced = crate::trace::upstream_span(tool);
    let answer = async {
        if input.upstream_task {
            client.call_tool_as_task(tool, arguments, round, note).await
        } else {
            let result = client.call_tool_round(tool, arguments, round, note).await;
            result.map(CallAnswer::Result)
        }
    }
    .with_context(traced.clone())
    .await;
    crate::trace::upstream_ended(&traced, &answer);
    answer
}

/// The Activity's answer: the result as written, marked as a `CallToolResult`, with the
/// call's notifications in its metadata (R-CON-10). A result larger than a payload may be
/// fails with `ResultTooLarge` (R-PRX-6).
fn answer(
    input: &ToolCallInput,
    result: &serde_json::Value,
    carried: &Mutex<CallNotifications>,
) -> Result<RawValue, ActivityError> {
    // A round that asks for input ends here, with the requests (R-PRX-29).
    let payload = super::input::answer_payload(result, &input.arguments);
    finish(&input.tool, payload, carried)
}

/// A JSON-RPC error answer: another attempt while its code has retries left and the retry
/// policy allows one, else the call's end is the upstream's error object, unchanged (R-PRX-4).
fn jsonrpc_end(
    ctx: &ActivityContext,
    input: &ToolCallInput,
    error: JsonRpcError,
    carried: &Mutex<CallNotifications>,
) -> Result<RawValue, ActivityError> {
    let info = ctx.info();
    let (code, attempt) = (error.code, info.attempt);
    let policy = info.retry_policy.as_ref().map(|p| p.raw());
    match on_jsonrpc_error(code, attempt, input.one_attempt, policy) {
        OnJsonRpcError::Retry(kind) => {
            warn!(tool = %input.tool, code, attempt,
                  "the upstream answered a JSON-RPC error; the call is retried");
            let text = format!(
                "upstream {:?} answered JSON-RPC error {code}: {}",
                input.service, error.message
            );
            Err(failure(kind, true, text))
        }
        OnJsonRpcError::Answer => {
            debug!(tool = %input.tool, code, attempt,
                   "the call ends with the upstream's JSON-RPC error");
            finish(&input.tool, error.to_payload(), carried)
        }
    }
}

/// A finished call's payload, with the call's notifications in its metadata (R-CON-10); one
/// larger than a payload may be fails with `ResultTooLarge` (R-PRX-6).
fn finish(
    tool: &str,
    payload: Result<Payload, payload::PayloadError>,
    carried: &Mutex<CallNotifications>,
) -> Result<RawValue, ActivityError> {
    let payload = finished_payload(tool, payload, carried)
        .map_err(|(kind, message)| failure(kind, false, message))?;
    Ok(RawValue::new(vec![payload]))
}

/// [`finish`]'s payload, or the non-retryable failure's type and message: shared with the
/// inline path (R-PRX-30).
pub(crate) fn finished_payload(
    tool: &str,
    payload: Result<Payload, payload::PayloadError>,
    carried: &Mutex<CallNotifications>,
) -> Result<Payload, (ToolCallErrorType, String)> {
    let mut payload =
        payload.map_err(|e| (ToolCallErrorType::UpstreamProtocolError, e.to_string()))?;
    carried.lock().unwrap().attach(&mut payload);
    if payload.data.len() > MAX_RESULT_BYTES {
        return Err((
            ToolCallErrorType::ResultTooLarge,
            format!(
                "tool {:?} returned {} bytes of JSON, more than the {MAX_RESULT_BYTES} bytes a Temporal payload may hold (its 2 MiB limit, less room for metadata); ask the tool for less (a page, a summary or a reference to the data)",
                tool,
                payload.data.len()
            ),
        ));
    }
    // The tool and the size only: results are callers' data (R-CON-33).
    debug!(tool = %tool, result_bytes = payload.data.len(), "tool call answered");
    Ok(payload)
}

/// What a failed try leads to: a broken protocol fails at once (JSON-RPC errors are
/// [`jsonrpc_end`]'s), transport failures by whether the request can have reached the tool (R-PRX-5).
pub(crate) fn action_for(error: &UpstreamError, one_attempt: bool) -> FailureAction {
    match error {
        UpstreamError::JsonRpc { .. } | UpstreamError::Protocol { .. } => {
            FailureAction::FailNonRetryable(ToolCallErrorType::UpstreamProtocolError)
        }
        UpstreamError::Connect { .. } | UpstreamError::Transport { .. } => {
            on_transport_failure(error.phase(), one_attempt, false)
        }
    }
}
