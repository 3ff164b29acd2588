//! Following the upstream's own task inside the call Activity (R-PRX-28).
//!
//! The task's ID goes into the heartbeat details as soon as the upstream answers with it
//! ([`CallHeartbeat::upstream_task`]), so an attempt that follows a lost one (a killed worker,
//! a timed-out attempt) reads it from the last heartbeat and re-attaches to the same task
//! instead of calling the tool again. `tasks/get` is polled on a back-off that honours the
//! upstream's `pollIntervalMs`; a changed `statusMessage` is passed on as progress (R-PRX-9);
//! a cancel of the call becomes `tasks/cancel` upstream (R-PRX-7). A task of the tasks
//! extension that asks for input ends the round with its requests, and is left waiting; the
//! next round answers it with `tasks/update` and follows it on (R-PRX-29, [`crate::task_input`]).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use temporalio_common::data_converters::RawValue;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::{debug, info, warn};

use super::{
    Heartbeats, InFlight, ToolCallInput, action_for, answer, call_with_heartbeats, failure,
    jsonrpc_end,
};
use crate::{
    state_key::{STATE_KEY_ENV, StateKeys},
    task_input::{RoundCall, WaitingTask},
    transport_failure::FailureAction,
    upstream::{TaskState, UpstreamClient, UpstreamError, next_poll_delay},
};
use durable_mcp_contract::{
    call::{CallHeartbeat, CallNotification, CallNotifications, ToolProgress},
    errors::ToolCallErrorType,
    jsonrpc_error::JsonRpcError,
    payload,
};

/// How long a `tasks/cancel` sent for a cancelled call may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The upstream task an earlier attempt of this call was following, and which upstream
/// connection made it.
pub(super) struct EarlierTask {
    pub id: String,
    origin: Option<String>,
}

impl EarlierTask {
    /// Whether the connection serving calls now (`here`) made the task: only then is its ID
    /// this call's task (R-PRX-28). A heartbeat of a proxy before origins were kept names
    /// none: followed on an HTTP upstream only, whose connections all reach one server.
    pub fn made_by(&self, here: Option<&str>) -> bool {
        match self.origin.as_deref() {
            Some(origin) => Some(origin) == here,
            None => here.is_some_and(|here| here.starts_with("http:")),
        }
    }
}

/// The upstream task an earlier attempt of this call was following, from its last heartbeat.
pub(super) fn earlier_task(ctx: &ActivityContext) -> Option<EarlierTask> {
    let raw = ctx.heartbeat_details().deserialize::<RawValue>().ok()??;
    let first = raw.payloads.first()?;
    let heartbeat = payload::from_payload::<CallHeartbeat>(first).ok()?;
    Some(EarlierTask {
        id: heartbeat.upstream_task?,
        origin: heartbeat.upstream_task_origin,
    })
}

/// The upstream task the previous round ended waiting on, when this round's `requestState` is
/// one the proxy made (R-PRX-29): an error for one of ours that is broken or not this call's.
pub(super) fn waiting_task(
    input: &ToolCallInput,
    keys: &StateKeys,
) -> Option<Result<WaitingTask, String>> {
    let state = input.answers.as_ref()?.request_state.as_deref()?;
    let call = RoundCall {
        service: &input.service,
        tool: &input.tool,
        arguments: &input.arguments,
        round: input.round.as_ref(),
    };
    crate::task_input::waiting_task(state, &call, keys)
}

/// Why following a task stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The call was cancelled (a Nexus cancel).
    Cancelled,
    /// The worker is shutting down: its Activities are cancelled, not the call.
    WorkerShutdown,
    /// The attempt's deadline passed.
    PastDeadline,
}

/// Whether a stop sends `tasks/cancel` upstream: a cancel of the call does; a worker shutting
/// down and a timed-out attempt leave the task to the next attempt, unless there is none.
fn cancels_upstream(stop: Stop, one_attempt: bool) -> bool {
    match stop {
        Stop::Cancelled => true,
        Stop::WorkerShutdown => false,
        Stop::PastDeadline => one_attempt,
    }
}

/// One followed task: where its progress goes, how often it is polled.
pub(super) struct Followed<'a> {
    pub ctx: &'a ActivityContext,
    pub client: &'a UpstreamClient,
    pub input: &'a ToolCallInput,
    pub deadline: Option<tokio::time::Instant>,
    /// The worker is shutting down (see `ProxyActivities::stopping`).
    pub stopping: &'a tokio_util::sync::CancellationToken,
    /// Signs the state of a task that asks for input (R-PRX-35).
    pub keys: &'a StateKeys,
    pub id: String,
    pub poll_interval: Option<Duration>,
    /// The upstream connection that made the task: the only one asked about it (R-PRX-28).
    pub origin: String,
}

impl Followed<'_> {
    /// Follows the task to its end: the call's result, or its failure.
    pub(super) async fn follow(
        mut self,
        heartbeats: &mut Heartbeats,
        carried: Arc<Mutex<CallNotifications>>,
    ) -> Result<RawValue, ActivityError> {
        let tool = self.input.tool.clone();
        // The task's ID names the upstream's work; it is kept out of info lines (R-PRX-35).
        info!(tool = %tool, "following the upstream's task");
        debug!(tool = %tool, upstream_task = %self.id, "the upstream's task");
        // In flight while followed: its lines are nobody else's (R-PRX-10).
        let caller = self.input.caller.as_deref();
        let _flight = self.client.task_flight(&self.id, &self.origin, caller);
        self.remember(heartbeats).await;
        let mut note = heartbeats.pass_on(carried.clone());
        let (mut polls, mut messages, mut last_message) = (0u32, 0u32, None::<String>);
        loop {
            let delay = next_poll_delay(self.poll_interval, polls);
            self.run(heartbeats, tokio::time::sleep(delay)).await?;
            polls = polls.saturating_add(1);
            let state = self.poll(heartbeats).await?;
            let error = match state {
                Ok(TaskState::Working {
                    message,
                    poll_interval,
                }) => {
                    self.poll_interval = poll_interval.or(self.poll_interval);
                    if message.is_some() && message != last_message {
                        messages = messages.saturating_add(1);
                        note(CallNotification::Progress(ToolProgress {
                            progress: f64::from(messages),
                            total: None,
                            message: message.clone(),
                        }));
                        last_message = message;
                    }
                    continue;
                }
                Ok(TaskState::Completed(Some(result))) => {
                    return answer(self.input, &result, &carried);
                }
                Ok(TaskState::Completed(None) | TaskState::Failed(None)) => {
                    return self.ended_result(heartbeats, &carried).await;
                }
                Ok(TaskState::Failed(Some(error))) => {
                    return self.ended_with(heartbeats, error, &carried).await;
                }
                Ok(TaskState::Cancelled) => {
                    let why = format!(
                        "upstream {:?} cancelled its task for tool {tool:?} before it ended",
                        self.input.service
                    );
                    return Err(self.end(heartbeats, ToolCallErrorType::Canceled, why).await);
                }
                Ok(TaskState::InputRequired {
                    requests: Some(requests),
                    ..
                }) => {
                    return self.asks(heartbeats, &requests, &carried).await;
                }
                Ok(TaskState::InputRequired {
                    message,
                    requests: None,
                }) => {
                    return Err(self.asks_unrelayed(heartbeats, message).await);
                }
                Err(UpstreamError::Connect { .. } | UpstreamError::Transport { .. }) => {
                    // Reading a task's state is safe to repeat: poll on.
                    continue;
                }
                Err(UpstreamError::JsonRpc { code, message, .. }) => {
                    return Err(self.lost(heartbeats, code, &message).await);
                }
                Err(error @ UpstreamError::Protocol { .. }) => error,
            };
            return self.failed(heartbeats, error, &carried).await;
        }
    }

    /// The task asks for input the 2025-11-25 way, with no `inputRequests` the proxy could
    /// relay: the upstream's task is cancelled and the call fails saying why.
    async fn asks_unrelayed(
        &self,
        heartbeats: &mut Heartbeats,
        message: Option<String>,
    ) -> ActivityError {
        self.cancel_upstream().await;
        let why = format!(
            "upstream {:?} asks for input for tool {:?} ({}) in a task without the tasks extension's inputRequests (2025-11-25), which the proxy does not relay; its task was cancelled",
            self.input.service,
            self.input.tool,
            message.as_deref().unwrap_or("input_required")
        );
        self.end(heartbeats, ToolCallErrorType::UpstreamProtocolError, why)
            .await
    }

    /// The task asks for input (`requests`): the round ends as for an `InputRequiredResult`,
    /// with the task's requests and a signed `requestState` naming the task, its connection and
    /// this round, and the task is left waiting for the next round's `tasks/update` (R-PRX-29,
    /// R-PRX-35). An HTTP upstream's task outlives this process, so its answer may reach
    /// another worker or a restarted one: without a state key they share, the task is cancelled
    /// and the round fails saying to set one, rather than wait for an answer nobody can give.
    async fn asks(
        &self,
        heartbeats: &mut Heartbeats,
        requests: &serde_json::Map<String, serde_json::Value>,
        carried: &Mutex<CallNotifications>,
    ) -> Result<RawValue, ActivityError> {
        if !relays_input(&self.origin, self.keys) {
            self.cancel_upstream().await;
            let why = format!(
                "upstream {:?} asks for input for tool {:?} in a task, which outlives this proxy process; its answer can be verified only by workers sharing a state key, and {STATE_KEY_ENV} is not set: set it to the same random key on every proxy worker (`openssl rand -base64 32`); the task was cancelled",
                self.input.service, self.input.tool
            );
            return Err(self
                .end(heartbeats, ToolCallErrorType::UpstreamProtocolError, why)
                .await);
        }
        let waiting = WaitingTask {
            service: self.input.service.clone(),
            tool: self.input.tool.clone(),
            arguments: crate::task_input::arguments_fingerprint(&self.input.arguments),
            task_id: self.id.clone(),
            origin: self.origin.clone(),
            round: self.input.round.clone(),
        };
        info!(tool = %self.input.tool,
              "the upstream's task asks for input; the round ends with its requests");
        // The task stays in the heartbeat: an attempt lost before this one completes
        // re-attaches to it and, the task still asking, ends the round the same way.
        answer(
            self.input,
            &waiting.input_required(requests, self.keys),
            carried,
        )
    }

    /// A later round of a task that asked for input: `tasks/update` with the caller's
    /// `responses` to the connection that made it, then the task is followed on. Sending the
    /// answers again (a retried attempt) is harmless: a task ignores answers to requests it no
    /// longer asks, and one the update did not reach asks again, ending this round the same way.
    pub(super) async fn answer_task(
        self,
        heartbeats: &mut Heartbeats,
        responses: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<RawValue, ActivityError> {
        let carried = heartbeats.start_try();
        if self
            .client
            .origin()
            .await
            .is_ok_and(|here| here != self.origin)
        {
            return Err(self.ended_while_waiting(
                "its connection is gone (its child restarted, or it is another replica's)",
            ));
        }
        info!(tool = %self.input.tool, "answering the upstream's task with tasks/update");
        self.remember(heartbeats).await;
        let update = self.client.update_task(&self.id, &self.origin, responses);
        match self.run(heartbeats, update).await? {
            Ok(()) => {}
            Err(error @ (UpstreamError::Connect { .. } | UpstreamError::Transport { .. })) => {
                warn!(tool = %self.input.tool, %error,
                      "tasks/update may not have reached the upstream; following its task");
            }
            Err(UpstreamError::JsonRpc { code, message, .. }) => {
                self.forget(heartbeats).await;
                let why =
                    format!("tasks/update was answered with JSON-RPC error {code}: {message}");
                return Err(self.ended_while_waiting(&why));
            }
            Err(error @ UpstreamError::Protocol { .. }) => {
                return self.failed(heartbeats, error, &carried).await;
            }
        }
        self.follow(heartbeats, carried).await
    }

    /// The waiting task cannot be answered (`why`: its connection is gone, or the upstream
    /// no longer knows it), and another attempt would find the same: the round ends for good.
    /// A one-attempt tool's outcome is unknown; another ends unavailable, to be called anew.
    fn ended_while_waiting(&self, why: &str) -> ActivityError {
        let why = format!(
            "the task of tool {:?} on upstream {:?} that waited for this input cannot be answered: {why}; the tool may have run: call it again without inputResponses and requestState",
            self.input.tool, self.input.service
        );
        let kind = if self.input.one_attempt {
            ToolCallErrorType::ToolCallOutcomeUnknown
        } else {
            ToolCallErrorType::UpstreamUnavailable
        };
        failure(kind, false, why)
    }

    /// The ended task's result or error, from `tasks/result` (2025-11-25: `tasks/get` does not
    /// inline it). Out of reach (its connection gone or failing), the tool ran all the same.
    async fn ended_result(
        &self,
        heartbeats: &mut Heartbeats,
        carried: &Mutex<CallNotifications>,
    ) -> Result<RawValue, ActivityError> {
        let read = self.client.task_result(&self.id, &self.origin);
        match self.run(heartbeats, read).await? {
            Ok(result) => answer(self.input, &result, carried),
            Err(UpstreamError::Connect { .. } | UpstreamError::Transport { .. }) => {
                Err(self.gone(heartbeats).await)
            }
            Err(error) => self.failed(heartbeats, error, carried).await,
        }
    }

    /// One `tasks/get`, on the connection that made the task only: once that connection is
    /// gone (its child restarted) the task is too, and the same ID there may be another
    /// call's (R-PRX-28).
    async fn poll(
        &self,
        heartbeats: &mut Heartbeats,
    ) -> Result<Result<TaskState, UpstreamError>, ActivityError> {
        if self
            .client
            .origin()
            .await
            .is_ok_and(|here| here != self.origin)
        {
            return Err(self.gone(heartbeats).await);
        }
        let state = self.client.task_state(&self.id, &self.origin);
        self.run(heartbeats, state).await
    }

    /// The connection that made the task is gone mid-attempt: the tool may have run. A
    /// one-attempt tool's outcome is unknown; another is called anew by the next attempt.
    async fn gone(&self, heartbeats: &mut Heartbeats) -> ActivityError {
        let why = format!(
            "the connection to upstream {:?} that made the task of tool {:?} is gone (its child restarted); the tool may have run",
            self.input.service, self.input.tool
        );
        self.may_have_run(heartbeats, why).await
    }

    /// Runs `work`, heartbeating. A cancel of the call stops it and cancels the task upstream;
    /// a worker shutting down, or the attempt's deadline passing, leaves the task running for
    /// the next attempt to re-attach to (unless the tool has no next attempt), and the attempt
    /// ends as the server or the worker ends it.
    async fn run<T>(
        &self,
        heartbeats: &mut Heartbeats,
        work: impl Future<Output = T>,
    ) -> Result<T, ActivityError> {
        let tool = &self.input.tool;
        let stop = match call_with_heartbeats(self.ctx, tool, heartbeats, self.deadline, work).await
        {
            InFlight::Ended(done) => return Ok(done),
            InFlight::Cancelled if self.stopping.is_cancelled() => Stop::WorkerShutdown,
            InFlight::Cancelled => Stop::Cancelled,
            InFlight::PastDeadline => Stop::PastDeadline,
        };
        if cancels_upstream(stop, self.input.one_attempt) {
            self.cancel_upstream().await;
        } else {
            info!(tool = %tool, ?stop, "the upstream's task runs on for the next attempt");
        }
        match stop {
            Stop::PastDeadline => Err(heartbeats.until_cancelled(self.ctx).await),
            Stop::Cancelled | Stop::WorkerShutdown => Err(ActivityError::cancelled()),
        }
    }

    /// `tasks/cancel` upstream, waiting a bounded time for its acknowledgement.
    async fn cancel_upstream(&self) {
        let cancel = self.client.cancel_task(&self.id, &self.origin);
        match tokio::time::timeout(CANCEL_WAIT, cancel).await {
            Ok(Ok(())) => info!(tool = %self.input.tool, "cancelled the upstream's task"),
            Ok(Err(error)) => {
                warn!(tool = %self.input.tool, %error, "the upstream refused tasks/cancel");
            }
            Err(_) => warn!(tool = %self.input.tool, "no answer to tasks/cancel in time"),
        }
    }

    /// The task ended in `error` (a broken answer): the call fails as a call answered with it
    /// would (R-PRX-5), and a retry calls the tool anew. (Its JSON-RPC error ends the call as
    /// that error answered to the call would, R-PRX-4.)
    async fn failed(
        &self,
        heartbeats: &mut Heartbeats,
        error: UpstreamError,
        carried: &Mutex<CallNotifications>,
    ) -> Result<RawValue, ActivityError> {
        if let UpstreamError::JsonRpc {
            code,
            message,
            data,
            ..
        } = error
        {
            // `tasks/result` answered the task's error.
            let error = JsonRpcError {
                code,
                message,
                data,
            };
            return self.ended_with(heartbeats, error, carried).await;
        }
        let (kind, retryable) = match action_for(&error, self.input.one_attempt) {
            FailureAction::FailRetryable(kind) => (kind, true),
            FailureAction::FailNonRetryable(kind) => (kind, false),
            FailureAction::RetryWithinAttempt => (ToolCallErrorType::UpstreamUnavailable, true),
        };
        self.forget(heartbeats).await;
        Err(failure(kind, retryable, error.to_string()))
    }

    /// The task ended with its JSON-RPC error: the call ends as that error answered to the call
    /// would (R-PRX-4); a retry calls the tool anew.
    async fn ended_with(
        &self,
        heartbeats: &mut Heartbeats,
        error: JsonRpcError,
        carried: &Mutex<CallNotifications>,
    ) -> Result<RawValue, ActivityError> {
        self.forget(heartbeats).await;
        jsonrpc_end(self.ctx, self.input, error, carried)
    }

    /// The upstream no longer answers for the task (a restarted upstream, a task past its
    /// TTL): the tool may have run. A one-attempt tool's outcome is unknown; another is
    /// called anew by the next attempt.
    async fn lost(&self, heartbeats: &mut Heartbeats, code: i32, message: &str) -> ActivityError {
        let why = format!(
            "upstream {:?} answered tasks/get for the task of tool {:?} with JSON-RPC error {code}: {message}; the tool may have run",
            self.input.service, self.input.tool
        );
        self.may_have_run(heartbeats, why).await
    }

    /// The earlier attempt's task was made by another upstream connection (another replica's
    /// stdio child, or one since restarted): its ID may name another call's task there, so it
    /// is not followed. A one-attempt tool's outcome is unknown (its task may still run
    /// there); another is called anew (`Ok`).
    pub(super) async fn made_elsewhere(
        &self,
        heartbeats: &mut Heartbeats,
    ) -> Result<(), ActivityError> {
        self.forget(heartbeats).await;
        if !self.input.one_attempt {
            info!(tool = %self.input.tool, "an earlier attempt's upstream task was made by another upstream connection; calling the tool anew");
            return Ok(());
        }
        let why = format!(
            "the earlier attempt of tool {:?} followed a task of another connection to upstream {:?} (another proxy replica's child, or one since restarted); the tool may have run there",
            self.input.tool, self.input.service
        );
        Err(failure(
            ToolCallErrorType::ToolCallOutcomeUnknown,
            false,
            why,
        ))
    }

    /// The task is lost and the tool may have run (`why`): a one-attempt tool's outcome is
    /// unknown; another is called anew by the next attempt (the task is forgotten).
    async fn may_have_run(&self, heartbeats: &mut Heartbeats, why: String) -> ActivityError {
        self.forget(heartbeats).await;
        if self.input.one_attempt {
            failure(ToolCallErrorType::ToolCallOutcomeUnknown, false, why)
        } else {
            failure(ToolCallErrorType::UpstreamUnavailable, true, why)
        }
    }

    /// Ends the call with a non-retryable failure of `kind`.
    async fn end(
        &self,
        heartbeats: &mut Heartbeats,
        kind: ToolCallErrorType,
        why: String,
    ) -> ActivityError {
        self.forget(heartbeats).await;
        failure(kind, false, why)
    }

    /// Puts the task, and the connection that made it, in the heartbeat details, for a later
    /// attempt to re-attach to.
    async fn remember(&self, heartbeats: &mut Heartbeats) {
        heartbeats.follow_task(Some((self.id.clone(), self.origin.clone())));
        heartbeats.record(self.ctx).await;
    }

    /// Drops the task from the heartbeat details, so a later attempt does not re-attach to it.
    async fn forget(&self, heartbeats: &mut Heartbeats) {
        heartbeats.follow_task(None);
        heartbeats.record(self.ctx).await;
    }
}

/// Whether a task of the connection `origin` may end its round asking for input under `keys`:
/// a stdio child's or a factory connection's task dies with its connection, so this process's
/// own key loses nothing; an HTTP upstream's task outlives the process, so its state must verify
/// on every worker (R-PRX-35).
fn relays_input(origin: &str, keys: &StateKeys) -> bool {
    keys.is_shared() || !origin.starts_with("http:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_upstreams_task_asks_for_input_only_with_a_shared_state_key() {
        let own = StateKeys::per_process();
        let key = crate::state_key::StateKey::from_base64(&"A".repeat(44)).unwrap();
        let shared = StateKeys::shared(key, vec![]);
        assert!(relays_input("stdio:ab12", &own) && relays_input("custom:cd", &own));
        assert!(!relays_input("http:search", &own));
        assert!(relays_input("http:search", &shared) && relays_input("stdio:ab12", &shared));
    }

    #[test]
    fn an_earlier_task_is_followed_only_on_the_connection_that_made_it() {
        let task = |origin: Option<&str>| EarlierTask {
            id: "7".into(),
            origin: origin.map(str::to_owned),
        };
        assert!(task(Some("stdio:a")).made_by(Some("stdio:a")));
        assert!(task(Some("http:search")).made_by(Some("http:search")));
        // Another replica's child, or this one's since restarted: task 7 there is another's.
        assert!(!task(Some("stdio:a")).made_by(Some("stdio:b")));
        assert!(!task(Some("stdio:a")).made_by(None));
        // A heartbeat written before origins were kept: followed on an HTTP upstream only.
        assert!(task(None).made_by(Some("http:search")));
        assert!(!task(None).made_by(Some("stdio:b")));
        assert!(!task(Some("custom:a")).made_by(Some("custom:b")));
    }

    #[test]
    fn only_a_cancel_of_the_call_or_a_last_attempts_deadline_cancels_the_upstream_task() {
        for one_attempt in [false, true] {
            assert!(cancels_upstream(Stop::Cancelled, one_attempt));
            assert!(!cancels_upstream(Stop::WorkerShutdown, one_attempt));
        }
        assert!(!cancels_upstream(Stop::PastDeadline, false));
        assert!(cancels_upstream(Stop::PastDeadline, true));
    }
}
