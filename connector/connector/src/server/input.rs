//! Durable input (R-CON-40; SEP-2322, SEP-2663): a call whose upstream asked for input ended its
//! round with the requests (R-PRX-29); the caller's answers start the next round, a new
//! standalone operation whose ID follows from the round's own ([`next_round_id`]), so however
//! often, and on whichever replica, the answer arrives, the round starts once. Nothing waits in
//! a process meanwhile and there is no table: the rounds are the state.
//!
//! - A task (the tasks extension) reads `input_required` with the requests while its last round
//!   asks; `tasks/update` with `inputResponses` (only its owner: the signed task ID) starts the
//!   next round, and `tasks/get` follows the rounds to the last one.
//! - A 2026-07-28 caller without a task gets an `InputRequiredResult` whose `requestState` is
//!   the round's signed, caller-scoped reference ([`INPUT_STATE_PREFIX`] + a task ID), never the
//!   upstream's state, and resumes by calling the tool again with `inputResponses` and it.
//! - A request nobody answered within `--input-timeout` of its round's end ends the call with a
//!   tool error; the first connector to see it expired takes the next round with the cancel
//!   marker, so a proxy whose upstream task waits for the answer cancels it (R-CON-46), and the
//!   rounds still read as expired (the marker started after the expiry, [`expiry_marker`]).

use std::time::{Duration, SystemTime};

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, InputRequests, InputRequiredResult,
        InputResponses, ProtocolVersion, TaskPayload,
    },
    service::RequestContext,
};
use serde_json::{Map, Value, json};
use tracing::info;

use super::{
    Answer, Connector, Typed,
    caller_key::CallCaller,
    complete,
    internal::internal,
    limits::{InFlightSlot, NOTHING_STARTED},
};
use crate::fair::Share;
use crate::route::Route;
use crate::task_ref::{
    CallerScope, ROUND_SEAL_HEADER, SealedRound, SigningKey, round_seal, round_sealed,
};
use durable_mcp_contract::{
    input::{
        Answering, INPUT_REQUIRED, INPUT_REQUIRED_ERROR_TYPE, INPUT_ROUND, InputRequired,
        MAX_ROUNDS, PARTIAL_ROUND, asks_for_input, next_round_id, round_of,
    },
    listing::advertised_timeout,
    operation_name::tool_for_operation,
    outcome::{ERROR_TYPE_META, Outcome},
    payload,
};
use durable_mcp_runtime::nexus::{
    ConflictPolicy, OperationClientError, OperationDescription, OperationOutcome, OperationRef,
    OperationTimes, ReusePolicy, StartOperation,
};

/// How a connector's `requestState` begins: the rest is the round's task ID.
pub const INPUT_STATE_PREFIX: &str = "durable-mcp-input.";

/// How long an input request waits for its answer by default (`--input-timeout`).
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How long starting the next round rides out a Temporal outage.
const ROUND_START_BUDGET: Duration = Duration::from_secs(60);

/// How long past a round's timeout a caller waiting for it keeps waiting through an outage.
const ROUND_GRACE: Duration = Duration::from_secs(30);

/// How long an answer waits for a partial round another answer started to close, to answer
/// what it still asks (its tool service answers at once when it is there).
const PARTIAL_ROUND_WAIT: Duration = Duration::from_secs(10);

/// The requests a closed round asked, if it ended asking for input.
pub(super) fn asked_of(described: &OperationDescription) -> Option<InputRequired> {
    asked_by(described.outcome.as_ref()?)
}

fn asked_by(outcome: &OperationOutcome) -> Option<InputRequired> {
    match Outcome::from_operation(outcome.clone()) {
        Outcome::InputRequired(asked) => Some(*asked),
        _ => None,
    }
}

/// Whether a request asked at `closed` went unanswered past `timeout` by `now`.
fn input_expired(times: &OperationTimes, timeout: Duration, now: SystemTime) -> bool {
    times
        .last_changed
        .and_then(|closed| now.duration_since(closed).ok())
        .is_some_and(|waited| waited > timeout)
}

/// The responses to requests the round asks (SEP-2663: others are ignored, and so is a second
/// answer to a request a partial round already keeps the answer to).
fn outstanding(asked: &InputRequired, responses: InputResponses) -> Map<String, Value> {
    asked.asked_of(responses.into_iter().collect())
}

/// The tool a round is of: its operation's, or the one a partial round names (R-CON-40).
pub(super) fn round_tool(described: &OperationDescription) -> String {
    let operation = match asked_of(described) {
        Some(asked) => asked.tool_operation(&described.operation).to_owned(),
        None => described.operation.clone(),
    };
    tool_for_operation(&operation).unwrap_or(operation)
}

/// The tool error of a call whose input request expired.
fn expired_result(timeout: Duration) -> Map<String, Value> {
    let text = format!(
        "The tool asked for input that nobody gave within {} (the connector's --input-timeout), so the call ended there. Call the tool again.",
        humantime::format_duration(timeout)
    );
    let result = json!({
        "content": [{"type": "text", "text": text}],
        "isError": true,
        "_meta": {ERROR_TYPE_META: INPUT_REQUIRED_ERROR_TYPE},
    });
    result.as_object().cloned().unwrap_or_default()
}

/// The refusal of a model's answer to a round that asks the user or the host (R-CON-11).
fn not_the_models(methods: &[String]) -> McpError {
    McpError::invalid_params(
        format!(
            "the task asks the user or the host for input ({}), which only they may answer, so \
             nothing ran; task_input answers only requests for a model's message \
             (sampling/createMessage), and only for a host that does not take them itself \
             (one that declared sampling answers them with its user's consent). Call \
             task_result, which passes the request to the host if the host supports it",
            methods.join(", ")
        ),
        None,
    )
}

/// A requestState that does not name a round of this caller that asks for input.
fn unknown_state() -> McpError {
    McpError::invalid_params(
        "requestState is not one this connector gave this caller for this tool (or it was changed); echo it unchanged, or call the tool again without inputResponses and requestState",
        None,
    )
}

/// Whether `next`, the round after the waiting round `asking`, is the marker an expiry took
/// (not a caller's cancel, which takes it only while the request waits): started after the
/// request expired, by Temporal's clock both.
fn expiry_marker(asking: &OperationTimes, next: &OperationDescription, timeout: Duration) -> bool {
    super::cancelled_round::cancelled_round(next)
        && next
            .times
            .scheduled
            .is_some_and(|started| input_expired(asking, timeout, started))
}

impl Connector {
    /// The last round of the call `op` started (R-CON-40): `op` itself, or the latest round
    /// that followed it, short of a marker an expiry took (the call reads expired). Its
    /// `scheduled` time is the call's.
    pub(super) async fn last_round(
        &self,
        op: &OperationRef,
    ) -> Result<OperationDescription, OperationClientError> {
        let mut described = self.inner.client.describe(op).await?;
        let created = described.times.scheduled;
        while described.outcome.as_ref().is_some_and(asks_for_input) {
            let Some(next) = next_round_id(&described.reference.operation_id) else {
                break;
            };
            let next = OperationRef {
                operation_id: next,
                run_id: String::new(),
            };
            let timeout = self.inner.options.input_timeout;
            match self.inner.client.describe_with_input(&next).await {
                Ok(d) if !self.sealed_round(&d) => {
                    tracing::warn!(operation_id = %d.reference.operation_id, "an operation under a later round's ID lacks this connector's seal; it is not followed");
                    break;
                }
                Ok(d) if expiry_marker(&described.times, &d, timeout) => break,
                Ok(d) => described = d,
                Err(OperationClientError::NotFound { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        described.times.scheduled = created.or(described.times.scheduled);
        Ok(described)
    }

    /// Seals a later round's start with the signing key (R-CON-40), so that connectors follow
    /// it as one of theirs.
    pub(super) fn seal_round(&self, start: &mut StartOperation) {
        let round = SealedRound {
            operation_id: &start.operation_id,
            endpoint: &start.endpoint,
            service: &start.service,
            operation: &start.operation,
            input: &start.input,
        };
        let seal = round_seal(&self.inner.options.signing_key, round);
        start.headers.insert(ROUND_SEAL_HEADER.into(), seal);
    }

    /// Whether `round` (a round after the first, described with its input) carries the seal of
    /// one of the connector's keys over that input: nobody else starts rounds of its calls, nor
    /// starts a round's ID again with input of its own (R-CON-40). A description without the
    /// input is never sealed.
    pub(super) fn sealed_round(&self, round: &OperationDescription) -> bool {
        self.sealed_as(round, ROUND_SEAL_HEADER, |keys, seal, sealed| {
            round_sealed(keys, seal, sealed)
        })
    }

    /// Whether `described` (with its input) carries in `header` a seal that `verify` accepts
    /// under one of the connector's keys, over its ID, endpoint, service, operation and input
    /// (R-CON-40 for rounds, R-CON-7 for keyed calls). Never without the input.
    pub(super) fn sealed_as(
        &self,
        described: &OperationDescription,
        header: &str,
        verify: impl Fn(Vec<&SigningKey>, &str, SealedRound<'_>) -> bool,
    ) -> bool {
        let o = &self.inner.options;
        let seal = described.headers.get(header).map_or("", String::as_str);
        let Some(input) = &described.input else {
            return false;
        };
        let sealed = SealedRound {
            operation_id: &described.reference.operation_id,
            endpoint: &described.endpoint,
            service: &described.service,
            operation: &described.operation,
            input,
        };
        let keys = std::iter::once(&o.signing_key)
            .chain(&o.previous_signing_keys)
            .collect();
        verify(keys, seal, sealed)
    }

    /// The round `op` an answer found started, its run named so that nothing started under its
    /// ID later is followed instead ([`found_next_round`]); read through an outage until
    /// `deadline`, since an answer that attached to its own earlier start must not be lost to
    /// one failed read.
    pub(super) async fn sealed_next(
        &self,
        op: &OperationRef,
        deadline: tokio::time::Instant,
    ) -> Result<OperationRef, McpError> {
        let client = &self.inner.client;
        let described = client.describe_with_input_until(op, deadline).await;
        found_next_round(described, |d| self.sealed_round(d))
    }

    /// Whether the call's last round `last` asks for input nobody gave yet, in time.
    pub(super) fn waits_for_input(&self, last: &OperationDescription) -> bool {
        asked_of(last).is_some()
            && !input_expired(
                &last.times,
                self.inner.options.input_timeout,
                SystemTime::now(),
            )
    }

    /// After `--input-timeout` nobody answers the waiting round `last` any more: its next round
    /// is taken with the cancel marker (R-CON-46), in the background and once per connector
    /// (a bounded number at a time, [`super::cancelled_round::ExpiryTakes`]), so that
    /// an upstream task waiting for the answer is cancelled rather than left to its TTL
    /// (R-PRX-29). Nothing when `last` does not wait for input or has not expired.
    pub(super) fn end_expired_round(&self, last: &OperationDescription) {
        let expired = input_expired(
            &last.times,
            self.inner.options.input_timeout,
            SystemTime::now(),
        );
        if !expired || asked_of(last).is_none() {
            return;
        }
        let Some(take) = self.inner.expiry_takes.begin(&last.reference.operation_id) else {
            return;
        };
        let (this, last) = (self.clone(), last.clone());
        tokio::spawn(async move {
            let taken = this.take_next_round(&last).await;
            let id = &last.reference.operation_id;
            let settled = match &taken {
                Ok(_) => true,
                // Someone else's operation holds the round's ID: taking it again finds the
                // same, so the round is remembered as taken (nothing of ours waits there).
                Err(e) if super::cancelled_round::foreign_round(e) => {
                    tracing::warn!(operation_id = %id, "the round after an expired input request was started by someone other than this connector; it is not taken");
                    true
                }
                Err(e) => {
                    tracing::warn!(operation_id = %id, error = %e.message, "could not end the expired input request's round; an upstream task waiting for it lives to its TTL");
                    false
                }
            };
            this.inner.expiry_takes.end(take, settled);
        });
    }

    /// A task's payload while its last round asks for input: the requests, or the tool error
    /// once nobody answered in time.
    pub(super) fn waiting_payload(
        &self,
        times: &OperationTimes,
        outcome: &OperationOutcome,
    ) -> TaskPayload {
        let timeout = self.inner.options.input_timeout;
        if input_expired(times, timeout, SystemTime::now()) {
            return TaskPayload::Completed {
                result: expired_result(timeout),
            };
        }
        let requests = asked_by(outcome).map(|a| a.input_requests());
        match requests.and_then(|r| serde_json::from_value::<InputRequests>(r).ok()) {
            Some(input_requests) => TaskPayload::InputRequired { input_requests },
            None => TaskPayload::Completed {
                result: expired_result(timeout),
            },
        }
    }

    /// `tasks/update` (SEP-2663) and `task_input` (R-CON-11): the caller's answers start the
    /// task's next round when its last round asks for them (true); otherwise they are ignored
    /// (false). Acknowledged either way; an unknown or foreign task is -32602 (R-CON-6). A
    /// model's answers (`task_input`) are refused, and run nothing, when the round asks
    /// anything but a model's message, or that and its host takes sampling itself: the
    /// user's and the host's answers are theirs ([`super::companion::Answerer`]).
    pub async fn update_task_op(
        &self,
        task_id: &str,
        scope: &CallerScope,
        responses: InputResponses,
        share: Option<&Share>,
        answerer: super::companion::Answerer,
    ) -> Result<bool, McpError> {
        let op = self.task_op(task_id, scope)?;
        let last = self
            .last_round(&op)
            .await
            .map_err(|e| super::tasks::task_error("updating the task", e))?;
        let Some(asked) = asked_of(&last) else {
            return Ok(false);
        };
        if let super::companion::Answerer::Model { host_samples } = answerer {
            let withheld =
                super::companion::not_for_the_model(&asked.input_requests(), host_samples);
            if !withheld.is_empty() {
                return Err(not_the_models(&withheld));
            }
        }
        if input_expired(
            &last.times,
            self.inner.options.input_timeout,
            SystemTime::now(),
        ) {
            self.end_expired_round(&last);
            return Ok(false);
        }
        if outstanding(&asked, responses.clone()).is_empty() {
            return Ok(false);
        }
        let responses = responses.into_iter().collect();
        let round = self.start_round(&last, responses, (scope, share)).await;
        round.map(|(_, taken)| taken)
    }

    /// Starts what the caller's `responses` to the waiting round `last` start (see
    /// [`Self::answer_round`]): the round they went into, and whether they were taken.
    pub(super) async fn start_round(
        &self,
        last: &OperationDescription,
        responses: Map<String, Value>,
        (scope, share): (&CallerScope, Option<&Share>),
    ) -> Result<(OperationRef, bool), McpError> {
        let tool = round_tool(last);
        let found = self.lookup(&tool).await?;
        // Each round calls the tool anew: it is a call start (R-CON-38).
        let what = format!("calling tool {tool:?}");
        self.inner.call_starts.try_start(&what, share)?;
        let caller = self.caller_of(scope, share);
        self.answer_round(last.clone(), &responses, (found, &caller))
            .await
    }

    /// Starts what `responses` to the waiting round `last` start (R-CON-40): the tool's next
    /// round with every answer, or, while some request is left unanswered, a partial round
    /// that keeps the answers and asks the rest. The round is started once, whoever answers:
    /// when an earlier answer (on any replica) took it and it is a partial round, the
    /// responses answer what that round still asks, and so on, so that no answer given at the
    /// same moment is lost. The round the responses went into (or the one that took them
    /// first), and whether they were taken. `responses` that answer nothing still asked start
    /// only the tool's round after one that keeps no answers (the tool judges them, as before
    /// partial answers); a round that keeps answers is left asking the rest.
    async fn answer_round(
        &self,
        mut last: OperationDescription,
        responses: &Map<String, Value>,
        (found, caller): ((Route, Value), &CallCaller),
    ) -> Result<(OperationRef, bool), McpError> {
        for attempt in 0..MAX_ROUNDS {
            let Some(asked) = asked_of(&last) else {
                return Ok((last.reference, false));
            };
            let given = asked.asked_of(responses.clone());
            // Nothing new for a round that keeps answers: it still asks the rest.
            if given.is_empty() && (attempt > 0 || !asked.answered.is_empty()) {
                return Ok((last.reference, false));
            }
            let answering = asked.answer(given, &last.operation);
            let partial = matches!(answering, Answering::Partial(_));
            let (next, started) = self
                .start_next(&last, &asked, answering, (found.clone(), caller))
                .await?;
            if started {
                // Acknowledged once the rest is asked (a tasks/get right after shows it), or
                // after the wait.
                if partial {
                    self.closed_partial_round(&next).await?;
                }
                return Ok((next, true));
            }
            match self.closed_partial_round(&next).await? {
                Some(partial) => last = partial,
                None => return Ok((next, false)),
            }
        }
        Err(too_many_rounds())
    }

    /// The round `op` an earlier answer started, once it closed, when it is a partial round
    /// (its tool service answers it at once); `None` for a round of the tool, or one still open
    /// after [`PARTIAL_ROUND_WAIT`] (its tool service is away: it asks the rest when it is back).
    async fn closed_partial_round(
        &self,
        op: &OperationRef,
    ) -> Result<Option<OperationDescription>, McpError> {
        let deadline = tokio::time::Instant::now() + PARTIAL_ROUND_WAIT;
        let mut pause = Duration::from_millis(50);
        loop {
            let described = self
                .inner
                .client
                .describe(op)
                .await
                .map_err(|e| internal("reading the next round", e))?;
            if described.operation != PARTIAL_ROUND {
                return Ok(None);
            }
            if described.outcome.is_some() {
                return Ok(Some(described));
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Starts the round after `last` (admitted by its `caller`, R-PRX-10) on the tool's `found`
    /// route for `answering`, or finds it when an earlier answer started it: the round, and
    /// whether this call started it.
    async fn start_next(
        &self,
        last: &OperationDescription,
        asked: &InputRequired,
        answering: Answering,
        ((route, definition), caller): ((Route, Value), &CallCaller),
    ) -> Result<(OperationRef, bool), McpError> {
        let Some(next) = next_round_id(&last.reference.operation_id) else {
            return Err(too_many_rounds());
        };
        still_served_by(last, &route)?;
        let tool_operation = asked.tool_operation(&last.operation).to_owned();
        let tool = tool_for_operation(&tool_operation).unwrap_or_else(|| tool_operation.clone());
        // A partial round runs nothing, and is bounded like a round of its tool.
        let (operation, input) = match answering {
            Answering::Complete(round) => (
                tool_operation,
                payload::to_marked_payload(&round, INPUT_ROUND),
            ),
            Answering::Partial(rest) => (
                PARTIAL_ROUND.to_owned(),
                payload::to_marked_payload(&rest, INPUT_REQUIRED),
            ),
        };
        let input = input.map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let mut start = StartOperation::new(
            next.clone(),
            &route.endpoint,
            &route.service,
            operation,
            input,
        );
        start.request_id = next.clone();
        start.schedule_to_close =
            Some(advertised_timeout(&definition).unwrap_or(self.inner.options.default_timeout));
        start.conflict_policy = ConflictPolicy::UseExisting;
        start.reuse_policy = ReusePolicy::RejectDuplicate;
        caller.name_in(&mut start.headers);
        self.seal_round(&mut start);
        let deadline = tokio::time::Instant::now() + ROUND_START_BUDGET;
        let started = self.inner.client.start_until(start, deadline).await;
        let by_id = OperationRef {
            operation_id: next.clone(),
            run_id: String::new(),
        };
        let found = match &started {
            Ok((op, false)) => Some(self.sealed_next(op, deadline).await?),
            Err(OperationClientError::AlreadyExists { .. }) => {
                Some(self.sealed_next(&by_id, deadline).await?)
            }
            Ok((_, true)) | Err(_) => None,
        };
        match started {
            Ok((op, started)) => {
                info!(operation_id = %op.operation_id, round = round_of(&next), started, tool, "input answered: next round");
                Ok((found.unwrap_or(op), started))
            }
            Err(OperationClientError::AlreadyExists { .. }) => Ok((found.unwrap_or(by_id), false)),
            Err(e) => Err(internal("starting the next round", e)),
        }
    }
}

/// The round an answer found already started, as `described` tells it: followed only when
/// `sealed` (R-CON-40), by its run, so that nothing started under its ID later is followed
/// instead. A round that cannot be read (Temporal away, or an input the codec refuses, which a
/// foreign run can choose) is not followed either: the check fails closed.
fn found_next_round<E: std::fmt::Display>(
    described: Result<OperationDescription, E>,
    sealed: impl FnOnce(&OperationDescription) -> bool,
) -> Result<OperationRef, McpError> {
    match described {
        Ok(d) if sealed(&d) => Ok(d.reference),
        Ok(_) => Err(McpError::invalid_params(
            "the next round of this call was started by someone other than this connector, so it is not followed: call the tool again without inputResponses and requestState",
            None,
        )),
        Err(e) => Err(internal("reading the next round of this call", e)),
    }
}

/// The refusal of an answer past [`MAX_ROUNDS`].
fn too_many_rounds() -> McpError {
    McpError::invalid_params(
        "the tool asked for input too many times; call it again",
        None,
    )
}

/// A cap's refusal of a re-issued call (R-CON-40), told truly: the cap and its data as the
/// cap gave them, then whether the tool's next round runs (`Some(true)`: an earlier answer
/// started it), is not started (`Some(false)`) or could not be read (`None`), and what to do.
pub(super) fn resume_refused(refused: McpError, running: Option<bool>) -> McpError {
    let said = format!("; {NOTHING_STARTED}");
    let cause = refused
        .message
        .split_once(&said)
        .map_or(&*refused.message, |(cause, _)| cause);
    let (then, next) = match running {
        Some(true) => (
            "; the tool's next round was already started by an earlier answer to this request \
             (this call's inputResponses are ignored), and this call does not wait for it",
            "Re-issue the call with the same requestState in a few seconds to wait for the \
             round's result",
        ),
        Some(false) => (
            "; nothing was started: the tool still waits for these answers",
            "Re-issue the call with the same inputResponses and requestState in a few seconds \
             (before --input-timeout ends the request)",
        ),
        None => (
            "; this call started nothing (whether an earlier answer started the tool's next \
             round could not be read)",
            "Re-issue the call with the same inputResponses and requestState in a few seconds \
             (a round is started once, however often it is re-issued)",
        ),
    };
    let message = format!("{cause}{then}. {next}, or ask the operator to raise the limit named.");
    McpError::new(refused.code, message, refused.data)
}

/// Whether a call's answer is the tool error of a round that asked for input.
pub(super) fn asks(json: &Value) -> bool {
    json.get("_meta")
        .and_then(|m| m.get(ERROR_TYPE_META))
        .and_then(Value::as_str)
        == Some(INPUT_REQUIRED_ERROR_TYPE)
}

impl Typed {
    /// The answer for a caller whose call (round `op`) ended asking for input: for a
    /// 2026-07-28 caller an `InputRequiredResult` with the upstream's requests and this round's
    /// signed reference as `requestState` (R-CON-40), or -32021 when it did not declare the
    /// capabilities they need (R-CON-44); for a session client of an earlier version, the
    /// requests relayed to its session and the call followed to its end (R-CON-43). `None` for
    /// any other answer.
    pub(super) async fn input_required_answer(
        &self,
        op: &OperationRef,
        json: &Value,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
    ) -> Result<Option<CallToolResponse>, McpError> {
        if !asks(json) {
            return Ok(None);
        }
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if !modern {
            return self.relay_input(op, context, scope).await.map(Some);
        }
        let described = self
            .inner
            .client
            .describe(op)
            .await
            .map_err(|e| internal("reading the tool call", e))?;
        let Some(asked) = asked_of(&described) else {
            return Ok(None);
        };
        let missing = super::capabilities::undeclared(
            &asked.input_requests(),
            &super::capabilities::request_capabilities(context),
        );
        if !missing.is_empty() {
            return Err(super::capabilities::missing_capabilities(&missing));
        }
        let requests: InputRequests = serde_json::from_value(asked.input_requests())
            .map_err(|e| internal("reading the tool's input requests", e))?;
        let state = request_state(&self.task_id(&described.reference, scope));
        info!(operation_id = %op.operation_id, "tool call asks its caller for input");
        let answer = InputRequiredResult::new(Some(requests), Some(state));
        Ok(Some(CallToolResponse::InputRequired(answer)))
    }

    /// A call re-issued with `inputResponses` and a `requestState` this connector gave
    /// (R-CON-40): the round it names is checked (signature, caller, tool, still asking, in
    /// time), the next round starts (once, however often the call is re-issued) and the caller
    /// waits for it like for any call.
    pub(super) async fn resume_call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
    ) -> Result<CallToolResponse, McpError> {
        let state = request.request_state.as_deref().unwrap_or_default();
        let task_id = state
            .strip_prefix(INPUT_STATE_PREFIX)
            .ok_or_else(unknown_state)?;
        let op = self.task_op(task_id, scope).map_err(|_| unknown_state())?;
        let described = match self.inner.client.describe(&op).await {
            Ok(d) => d,
            Err(OperationClientError::NotFound { .. }) => return Err(unknown_state()),
            Err(e) => return Err(internal("reading the tool call", e)),
        };
        if asked_of(&described).is_none() || round_tool(&described) != *request.name {
            return Err(unknown_state());
        }
        let timeout = self.inner.options.input_timeout;
        if input_expired(&described.times, timeout, SystemTime::now()) {
            self.end_expired_round(&described);
            return Err(McpError::invalid_params(
                format!(
                    "the tool's input request expired: nobody answered within {} (the connector's --input-timeout); call the tool again without inputResponses and requestState",
                    humantime::format_duration(timeout)
                ),
                None,
            ));
        }
        // A round a cancel took runs nothing, and its caller is told so (R-CON-46).
        if self.next_round_cancelled(&described).await? {
            return Err(super::cancelled_round::cancelled_while_waiting());
        }
        let responses = request.input_responses.clone().unwrap_or_default();
        let share = super::scope::request_share(context);
        let what = format!("calling tool {:?}", request.name);
        let found = {
            // Waiting for a listing counts in the caller's share (R-CON-38).
            let waiting = self.inner.in_flight.try_share(&what, share.as_ref());
            let _waiting = self.admitted(&described, waiting).await?;
            self.lookup(&request.name).await?
        };
        // The resumed call's place (R-CON-17, held through a relay of its later rounds too) and
        // its start (R-CON-38), both taken before the round starts: a refusal can then say
        // truly whether the round runs (R-CON-40).
        let admission = self
            .inner
            .in_flight
            .try_start(&what, share.as_ref())
            .and_then(|slot| {
                let started = self.inner.call_starts.try_start(&what, share.as_ref());
                started.map(|()| slot)
            });
        let slot = self.admitted(&described, admission).await?;
        let responses = responses.into_iter().collect();
        let caller = self.caller_of(scope, share.as_ref());
        let (next, _) = self
            .answer_round(described.clone(), &responses, (found, &caller))
            .await?;
        // A cancel that took the round between the look above and the start (R-CON-46).
        if self.next_round_cancelled(&described).await? {
            return Err(super::cancelled_round::cancelled_while_waiting());
        }
        self.wait_round(&request.name, &next, slot, context, scope)
            .await
    }

    /// `admission`, or its refusal told as a resume's ([`resume_refused`]): whether the round
    /// after `last` runs (an earlier answer started it) is read from Temporal.
    async fn admitted<T>(
        &self,
        last: &OperationDescription,
        admission: Result<T, McpError>,
    ) -> Result<T, McpError> {
        let refused = match admission {
            Ok(admitted) => return Ok(admitted),
            Err(refused) => refused,
        };
        let Some(next) = next_round_id(&last.reference.operation_id) else {
            return Err(resume_refused(refused, Some(false)));
        };
        let next = OperationRef {
            operation_id: next,
            run_id: String::new(),
        };
        let running = match self.inner.client.describe(&next).await {
            Ok(_) => Some(true),
            Err(OperationClientError::NotFound { .. }) => Some(false),
            Err(_) => None,
        };
        Err(resume_refused(refused, running))
    }

    /// Waits for a round the caller resumed, as for any call of the tool, in the call's
    /// `_slot` (R-CON-17).
    async fn wait_round(
        &self,
        tool: &str,
        op: &OperationRef,
        _slot: InFlightSlot,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
    ) -> Result<CallToolResponse, McpError> {
        let json = match self.follow_round(tool, op, context, scope).await? {
            Answer::Result(json) => json,
            Answer::Task(task) => return Ok(CallToolResponse::Task(task)),
        };
        if let Some(asked) = self
            .input_required_answer(op, &json, context, scope)
            .await?
        {
            return Ok(asked);
        }
        super::as_written::keep(self.written.as_ref(), context, json.clone());
        complete(json)
    }

    /// Follows a round started for the caller as any call of the tool: its answer, or a task.
    /// The caller holds the call's in-flight slot: a round is the same call, not another one
    /// (R-CON-17, R-CON-43).
    pub(super) async fn follow_round(
        &self,
        tool: &str,
        op: &OperationRef,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
    ) -> Result<Answer, McpError> {
        let plan = self.plan(tool, context).await?;
        let timeout = match self.lookup(tool).await {
            Ok((_, definition)) => advertised_timeout(&definition),
            Err(_) => None,
        }
        .unwrap_or(self.inner.options.default_timeout);
        let deadline = tokio::time::Instant::now() + timeout + ROUND_GRACE;
        self.answer_started(tool, op, deadline, context, scope, (plan, false))
            .await
    }
}

/// The `requestState` naming a round (R-CON-40): [`INPUT_STATE_PREFIX`] and its task ID.
fn request_state(task_id: &str) -> String {
    format!("{INPUT_STATE_PREFIX}{task_id}")
}

/// The answers to a round go only to the service that asked for them (R-CON-40): when the
/// tool's name is now served by another route, the arguments, the answers (which may be
/// secrets) and the upstream's opaque state would reach a service that never saw the call.
/// The endpoint is compared too: two routes may name one service on two endpoints.
fn still_served_by(last: &OperationDescription, route: &Route) -> Result<(), McpError> {
    if route.service == last.service && route.endpoint == last.endpoint {
        return Ok(());
    }
    Err(McpError::invalid_params(
        format!(
            "the tool of this task is no longer served by the service that asked for this input \
             ({:?} on endpoint {:?}); the answers were not sent anywhere. Call the tool again",
            last.service, last.endpoint
        ),
        None,
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::limits::{CallStarts, InFlight};
    use super::*;

    /// No host limits `requestState` (the TypeScript SDK and Claude Code take any string); the
    /// longest the connector writes is 132 characters of `!`..`~` all the same.
    #[test]
    fn the_longest_request_state_is_the_prefix_and_the_longest_task_id() {
        let task_id = crate::task_ref::longest_task_id();
        let state = request_state(&task_id);
        assert_eq!(state.len(), INPUT_STATE_PREFIX.len() + task_id.len());
        assert_eq!(state.len(), 132);
        assert_eq!(
            state.strip_prefix(INPUT_STATE_PREFIX),
            Some(task_id.as_str())
        );
        assert!(state.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    }

    #[test]
    fn a_refused_resume_says_whether_its_round_runs_and_what_to_do() {
        let alice = Share::Address("10.0.0.1".parse().unwrap());
        let starts = CallStarts::new(1);
        starts
            .try_start("calling tool \"ask\"", Some(&alice))
            .unwrap();
        let over_rate = || {
            starts
                .try_start("calling tool \"ask\"", Some(&alice))
                .unwrap_err()
        };
        let cap = InFlight::new(1, 0);
        let _held = cap.try_start("calling x", None).unwrap();
        let over_cap = cap.try_start("calling tool \"ask\"", None).unwrap_err();
        for refused in [over_rate(), over_cap] {
            let started = resume_refused(refused.clone(), Some(true));
            assert!(
                !started.message.contains(NOTHING_STARTED)
                    && started
                        .message
                        .contains("already started by an earlier answer")
                    && started.message.contains("same requestState")
                    && started.message.starts_with("calling tool \"ask\" refused"),
                "{}",
                started.message
            );
            assert_eq!((started.code, &started.data), (refused.code, &refused.data));
            let waiting = resume_refused(refused.clone(), Some(false));
            assert!(
                waiting.message.contains(NOTHING_STARTED)
                    && waiting
                        .message
                        .contains("same inputResponses and requestState")
                    && waiting.message.matches(NOTHING_STARTED).count() == 1,
                "{}",
                waiting.message
            );
            let unknown = resume_refused(refused, None);
            assert!(
                unknown.message.contains("could not be read")
                    && !unknown.message.contains(NOTHING_STARTED),
                "{}",
                unknown.message
            );
        }
        // The cap's own words name it (the flag) before what the resume adds.
        let named = resume_refused(over_rate(), Some(true));
        assert!(
            named
                .message
                .contains("--max-call-starts-per-caller-minute 1"),
            "{}",
            named.message
        );
    }

    #[test]
    fn a_request_expires_its_timeout_after_its_round_closed() {
        let closed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let times = OperationTimes {
            last_changed: Some(closed),
            ..Default::default()
        };
        let hour = Duration::from_secs(3600);
        assert!(!input_expired(&times, hour, closed + hour));
        assert!(input_expired(
            &times,
            hour,
            closed + hour + Duration::from_secs(1)
        ));
        // A clock behind the server's, or no close time: not expired.
        assert!(!input_expired(&times, hour, closed - hour));
        assert!(!input_expired(&OperationTimes::default(), hour, closed));
    }

    /// A described operation of `service` running `operation`, as the server would answer it.
    pub(in crate::server) fn described(
        operation_id: &str,
        service: &str,
        operation: &str,
    ) -> OperationDescription {
        OperationDescription {
            reference: OperationRef {
                operation_id: operation_id.into(),
                run_id: String::new(),
            },
            status: durable_mcp_runtime::nexus::OperationStatus::Failed,
            endpoint: "ep".into(),
            service: service.into(),
            operation: operation.into(),
            attempt: 1,
            last_attempt_failure: None,
            headers: Default::default(),
            operation_token: String::new(),
            handler_request_id: String::new(),
            outcome: None,
            input: None,
            times: OperationTimes::default(),
            cancellation: None,
        }
    }

    #[test]
    fn a_next_round_is_followed_only_when_it_reads_back_sealed() {
        let mut round = described("op~r2", "s", "o");
        round.reference.run_id = "run-1".into();
        let followed = found_next_round::<String>(Ok(round.clone()), |_| true);
        assert_eq!(followed.map(|r| r.run_id).ok(), Some("run-1".to_owned()));
        let foreign = found_next_round::<String>(Ok(round), |_| false).unwrap_err();
        assert!(
            foreign
                .message
                .contains("someone other than this connector")
        );
        // Unreadable (a codec refusing the input a foreign run chose): not followed by its ID.
        let unread = found_next_round(Err("the codec refused the payload"), |_| true);
        let unread = unread.unwrap_err();
        assert!(
            unread.message.contains("reading the next round"),
            "{unread:?}"
        );
        assert!(!unread.message.contains("codec"), "details stay in the log");
    }

    #[test]
    fn only_a_marker_started_after_the_request_expired_ends_the_rounds_as_expired() {
        let closed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let asking = OperationTimes {
            last_changed: Some(closed),
            ..Default::default()
        };
        let hour = Duration::from_secs(3600);
        let round = |operation: &str, started: Option<SystemTime>| {
            let mut round = described("op~r2", "s", operation);
            round.times.scheduled = started;
            round
        };
        let marker = super::super::cancelled_round::CANCELLED_ROUND;
        let late = Some(closed + hour + Duration::from_secs(1));
        assert!(expiry_marker(&asking, &round(marker, late), hour));
        // A caller's cancel, while the request waited; an answer's round; no start time.
        assert!(!expiry_marker(
            &asking,
            &round(marker, Some(closed + hour)),
            hour
        ));
        assert!(!expiry_marker(&asking, &round("ask", late), hour));
        assert!(!expiry_marker(&asking, &round(marker, None), hour));
    }

    #[test]
    fn answers_go_only_to_the_service_that_asked_for_them() {
        let asked_by = |service: &str| described("op", service, "ask");
        let route = Route::new("billing", "ep");
        assert!(still_served_by(&asked_by("billing"), &route).is_ok());
        let moved = still_served_by(&asked_by("mail"), &route).unwrap_err();
        assert!(
            moved.message.contains("\"mail\"")
                && moved.message.contains("not sent anywhere")
                && !moved.message.contains("billing"),
            "{}",
            moved.message
        );
    }

    /// Two routes may name one service on two endpoints: the answers go only to the endpoint
    /// whose service asked, never to a namesake on another (R-CON-40).
    #[test]
    fn answers_go_only_to_the_endpoint_that_asked_for_them() {
        let asked = described("op", "billing", "ask");
        assert!(still_served_by(&asked, &Route::new("billing", "ep")).is_ok());
        let namesake = still_served_by(&asked, &Route::new("billing", "ep-other")).unwrap_err();
        assert!(
            namesake.message.contains("\"ep\"")
                && namesake.message.contains("not sent anywhere")
                && !namesake.message.contains("ep-other"),
            "{}",
            namesake.message
        );
    }

    #[test]
    fn only_responses_to_requests_asked_go_to_the_next_round() {
        let asked = InputRequired {
            result: json!({"resultType": "input_required", "inputRequests": {"a": {}, "b": {}}}),
            arguments: Map::new(),
            ..Default::default()
        };
        let responses: InputResponses = [
            ("a".to_owned(), json!({"action": "accept"})),
            ("z".to_owned(), json!({"action": "decline"})),
        ]
        .into();
        let kept = outstanding(&asked, responses);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept["a"]["action"], "accept");
    }

    #[test]
    fn an_expired_request_is_a_typed_tool_error_naming_the_flag() {
        let result = expired_result(Duration::from_secs(60));
        assert_eq!(result["isError"], true);
        assert_eq!(result["_meta"][ERROR_TYPE_META], INPUT_REQUIRED_ERROR_TYPE);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("--input-timeout") && text.contains("1m"),
            "{text}"
        );
    }
}
