//! One call run inline by the Nexus handler (R-PRX-30): the answer is the payload the call
//! Activity would complete with, and failures keep the Activity's stable types. A failure the
//! Activity would retry is a retryable handler error (the server re-sends the start, the next
//! attempt) until the call's attempts ([`inline::allowed_attempts`]) are spent, then the
//! failure itself, non-retryable. Dropping the upstream request sends
//! `notifications/cancelled` (R-PRX-7).

use std::{sync::Mutex, time::Duration};

use tracing::{info, warn};

use super::{
    call_activity::{action_for, finished_payload},
    errors::{Backoff, OnJsonRpcError, on_jsonrpc_error},
    inline,
    input::{self, RoundAnswers},
    options::ResolvedCallOptions,
    transport_failure::FailureAction,
    upstream::{UpstreamClient, UpstreamError},
};
use durable_mcp_contract::{
    call::CallNotifications, errors::ToolCallErrorType, jsonrpc_error::JsonRpcError,
};
use durable_mcp_runtime::nexus::{
    HandlerError, HandlerErrorKind, OperationError, RetryBehavior, StartContext, StartError,
    StartOutcome,
};
use durable_mcp_runtime::trace::WithTraceContext as _;

/// One inline call: the upstream, the tool, its arguments and options, and which start of the
/// call this is (1 for the first).
pub struct InlineCall<'a> {
    pub client: &'a UpstreamClient,
    pub tool: &'a str,
    pub arguments: serde_json::Map<String, serde_json::Value>,
    pub answers: Option<RoundAnswers>,
    /// The caller the call is for, as the connector named it (R-PRX-10).
    pub caller: Option<String>,
    pub options: &'a ResolvedCallOptions,
    pub attempt: u32,
}

/// How one try ended.
enum Try {
    Answered(Result<serde_json::Value, UpstreamError>),
    /// The request deadline passed or the worker is stopping: the answer would be discarded.
    Cancelled,
    /// The attempt timeout (or the deadline less its margin) passed first.
    Overran,
}

impl InlineCall<'_> {
    /// Runs the call and answers as the Activity would have ended.
    pub async fn run(self, start: &StartContext) -> Result<StartOutcome, StartError> {
        if self.options.one_attempt && self.attempt > 1 {
            // Its first start was cut off or its answer lost: it may have run (R-PRX-30).
            return Err(failed(
                ToolCallErrorType::ToolCallOutcomeUnknown,
                format!(
                    "tool {:?} must not run twice and its inline call was started before without an answer; check the upstream before calling again",
                    self.tool
                ),
            ));
        }
        let budget = match inline::remaining(start.deadline) {
            Some(left) => self
                .options
                .start_to_close
                .min(left.saturating_sub(inline::DEADLINE_MARGIN)),
            None => self.options.start_to_close,
        };
        let cut_at = tokio::time::Instant::now() + budget;
        let mut backoff = Backoff::within_attempt().start();
        loop {
            let ended = self.try_once(start, cut_at).await;
            let error = match ended {
                Try::Answered(Ok(result)) => {
                    return self.answer(input::answer_payload(&result, &self.arguments));
                }
                Try::Answered(Err(UpstreamError::JsonRpc {
                    code,
                    message,
                    data,
                    ..
                })) => {
                    return self.jsonrpc_end(JsonRpcError {
                        code,
                        message,
                        data,
                    });
                }
                Try::Answered(Err(error)) => error,
                Try::Cancelled => return Err(cut_off(self.tool, self.options.one_attempt)),
                Try::Overran => return Err(self.overran(budget)),
            };
            match action_for(&error, self.options.one_attempt) {
                FailureAction::RetryWithinAttempt => {
                    let delay = backoff.next_delay();
                    warn!(tool = %self.tool, error = %error, retry_in = ?delay,
                          "the inline call never reached the tool; retrying");
                    if tokio::time::Instant::now() + delay >= cut_at {
                        return Err(
                            self.again(ToolCallErrorType::UpstreamUnavailable, error.to_string())
                        );
                    }
                    tokio::time::sleep(delay).await;
                }
                FailureAction::FailRetryable(kind) => {
                    return Err(self.again(kind, error.to_string()));
                }
                FailureAction::FailNonRetryable(kind) => {
                    return Err(failed(kind, error.to_string()));
                }
            }
        }
    }

    /// One try of the upstream, in its span under the Nexus handler's (R-RUN-9): its answer,
    /// unless the request is cancelled or `cut_at` passes first.
    async fn try_once(&self, start: &StartContext, cut_at: tokio::time::Instant) -> Try {
        let traced = crate::trace::upstream_span(self.tool);
        let request = self
            .client
            .call_tool_round(
                self.tool,
                self.arguments.clone(),
                crate::upstream::CallRound {
                    answers: self.answers.as_ref(),
                    caller: self.caller.as_deref(),
                },
                |_| {},
            )
            .with_context(traced.clone());
        let ended = tokio::select! {
            answered = request => Try::Answered(answered),
            _ = start.cancelled.cancelled() => Try::Cancelled,
            _ = tokio::time::sleep_until(cut_at) => Try::Overran,
        };
        match &ended {
            Try::Answered(answer) => crate::trace::upstream_ended(&traced, answer),
            Try::Cancelled | Try::Overran => crate::trace::upstream_cut(&traced),
        }
        ended
    }

    /// The Activity's answer: the payload as written, or its non-retryable failure.
    // The runtime's StartError is the handler's error type; it goes straight to the worker.
    #[allow(clippy::result_large_err)]
    fn answer(
        &self,
        payload: Result<
            temporalio_protos::temporal::api::common::v1::Payload,
            durable_mcp_contract::payload::PayloadError,
        >,
    ) -> Result<StartOutcome, StartError> {
        let none = Mutex::new(CallNotifications::default());
        match finished_payload(self.tool, payload, &none) {
            Ok(payload) => Ok(StartOutcome::Sync(payload)),
            Err((kind, message)) => Err(failed(kind, message)),
        }
    }

    /// A JSON-RPC error answer: another attempt while R-PRX-4's table allows one, else the
    /// call's end is the upstream's error object, unchanged.
    #[allow(clippy::result_large_err)]
    fn jsonrpc_end(&self, error: JsonRpcError) -> Result<StartOutcome, StartError> {
        let policy = self.options.retry_policy.to_proto();
        let (code, attempt) = (error.code, self.attempt);
        match on_jsonrpc_error(code, attempt, self.options.one_attempt, Some(&policy)) {
            OnJsonRpcError::Retry(kind) => {
                let text = format!(
                    "the upstream answered JSON-RPC error {code}: {}",
                    error.message
                );
                Err(self.again(kind, text))
            }
            OnJsonRpcError::Answer => self.answer(error.to_payload()),
        }
    }

    /// The call outlived its attempt timeout (or the request deadline less its margin): it was
    /// cancelled upstream. A one-attempt tool may have run: its outcome is unknown.
    fn overran(&self, budget: Duration) -> StartError {
        if self.options.one_attempt {
            return failed(
                ToolCallErrorType::ToolCallOutcomeUnknown,
                format!(
                    "tool {:?} ran inline for {budget:?} without answering and was cancelled; it may have run and must not run twice: check the upstream before calling again",
                    self.tool
                ),
            );
        }
        self.again(
            ToolCallErrorType::UpstreamTimeout,
            format!(
                "tool {:?} timed out after {budget:?} running inline and was cancelled upstream",
                self.tool
            ),
        )
    }

    /// A failure the Activity would retry: a retryable handler error while attempts are left
    /// (the server re-sends the start), else the failure, final.
    fn again(&self, kind: ToolCallErrorType, message: String) -> StartError {
        let allowed = inline::allowed_attempts(self.options);
        if self.attempt >= allowed || self.options.one_attempt {
            info!(tool = %self.tool, attempt = self.attempt, "inline call failed; attempts spent");
            return failed(
                kind,
                format!("{message} (attempt {} of {allowed})", self.attempt),
            );
        }
        // A handler error has no application type: the type leads the message instead.
        HandlerError::new(
            HandlerErrorKind::Unavailable,
            format!("{}: {message}", kind.as_str()),
        )
        .with_retry(RetryBehavior::Retryable)
        .into()
    }
}

/// The call's end with a stable type, non-retryable (R-NXC-4).
fn failed(kind: ToolCallErrorType, message: String) -> StartError {
    OperationError::Failed {
        message,
        error_type: kind.as_str().to_owned(),
        details: None,
    }
    .into()
}

/// The request was cut off by a worker shutdown or the request deadline while the tool may
/// have been running. A one-attempt tool's call ends, final, as `ToolCallOutcomeUnknown`: a
/// retryable answer would have the server send the start again, to another worker, whose count
/// of starts knows nothing of this one, and the tool would run twice (R-PRX-30). Another tool's
/// start is sent again.
fn cut_off(tool: &str, one_attempt: bool) -> StartError {
    if one_attempt {
        return failed(
            ToolCallErrorType::ToolCallOutcomeUnknown,
            format!(
                "tool {tool:?} was cut off running inline by a worker shutdown or the request deadline; it may have run and must not run twice: check the upstream before calling again"
            ),
        );
    }
    deadline_passed()
}

/// The server gave up on this request (its answer is discarded) or the worker is stopping.
fn deadline_passed() -> StartError {
    HandlerError::new(
        HandlerErrorKind::Unavailable,
        "the inline call was cut off by the request deadline or a worker shutdown",
    )
    .with_retry(RetryBehavior::Retryable)
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-attempt tool cut off by a shutdown ends final, so no other worker runs it again;
    /// another tool's start is sent again (R-PRX-30).
    #[test]
    fn a_cut_off_one_attempt_call_ends_final_and_another_is_sent_again() {
        let StartError::Operation(OperationError::Failed { error_type, .. }) =
            cut_off("publish", true)
        else {
            panic!("a one-attempt call's cut-off must be a final operation failure")
        };
        assert_eq!(error_type, "ToolCallOutcomeUnknown");
        let StartError::Handler(handler) = cut_off("read", false) else {
            panic!("a re-runnable call's cut-off is a handler error")
        };
        assert!(handler.is_retryable(), "the server sends the start again");
    }
}
