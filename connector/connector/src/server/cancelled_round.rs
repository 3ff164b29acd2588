//! A cancel of a task that waits for input (R-CON-46). Its last round has ended, asking: a
//! cancel of that closed operation would change nothing, and the task would read
//! `input_required` until `--input-timeout`. Instead the cancel takes the round after it (the
//! ID the caller's answer would start, `next_round_id`) with an operation that runs nothing:
//! its name ([`CANCELLED_ROUND`]) is no tool's operation (a lone `~` is never written by
//! `operation_for_tool`, R-NXC-5), so a handler refuses it, and it is cancelled at once. Rounds
//! are followed to it, and a task whose last round is one reads `cancelled`; an answer that
//! comes later finds the round taken (`RejectDuplicate`) and runs nothing, as two answers do
//! (R-CON-40). When an answer started the round first, the cancel goes to that round, as any.
//! The marker's input is the waiting round's recorded `requestState`, so a proxy whose upstream
//! task waits on it cancels that task before refusing the marker alike (R-PRX-29).

use std::time::Duration;

use rmcp::ErrorData as McpError;
use tracing::info;

use super::{Connector, internal::internal};
use durable_mcp_contract::{
    input::{CancelledRound, next_round_id},
    outcome::Outcome,
    payload,
};
use durable_mcp_runtime::nexus::{
    ConflictPolicy, OperationClientError, OperationDescription, OperationRef, ReusePolicy,
    StartOperation,
};

/// The operation name of a round a cancel took: no tool's (shared with the proxy, which
/// cancels its upstream task waiting for the input, R-PRX-29).
pub(super) use durable_mcp_contract::input::CANCELLED_ROUND;

/// How long the marker operation may live: it is cancelled at once, and refused if it starts.
const MARKER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long taking the round rides out a Temporal outage.
const TAKE_BUDGET: Duration = Duration::from_secs(20);

/// Whether `last` (a call's last round) is one a cancel took.
pub(super) fn cancelled_round(last: &OperationDescription) -> bool {
    last.operation == CANCELLED_ROUND
}

/// The refusal of an answer to a round whose next round a cancel took: nothing runs.
pub(super) fn cancelled_while_waiting() -> McpError {
    McpError::invalid_params(
        "the call was cancelled while it waited for input, so this answer runs nothing; call the tool again without inputResponses and requestState",
        None,
    )
}

/// The marker's input: the `requestState` the waiting round's outcome recorded, the only
/// source (never a caller's), so the tool service can end what waits on it (R-PRX-29).
fn marker_input(last: &OperationDescription) -> CancelledRound {
    CancelledRound {
        request_state: match last.outcome.clone().map(Outcome::from_operation) {
            Some(Outcome::InputRequired(asked)) => asked.request_state().map(str::to_owned),
            _ => None,
        },
    }
}

/// The start of the marker taking round `next` after the waiting round `last`: on the very
/// endpoint and service that asked (read from `last`, a round the connector follows, R-CON-40),
/// never on whatever route now has the service's name or the tool (two routes may name one
/// service on two endpoints), since its input is that service's `requestState`.
fn marker_start(last: &OperationDescription, next: String) -> Result<StartOperation, McpError> {
    let input = payload::to_marked_payload(&marker_input(last), "CancelledRound")
        .map_err(|e| internal("cancelling the task", e))?;
    let mut start = StartOperation::new(
        next.clone(),
        &last.endpoint,
        &last.service,
        CANCELLED_ROUND.to_owned(),
        input,
    );
    start.request_id = next;
    start.schedule_to_close = Some(MARKER_TIMEOUT);
    Ok(start)
}

impl Connector {
    /// Whether a cancel took the round after `last` (R-CON-46): an answer to `last` then runs
    /// nothing.
    pub(super) async fn next_round_cancelled(
        &self,
        last: &OperationDescription,
    ) -> Result<bool, McpError> {
        let Some(next) = next_round_id(&last.reference.operation_id) else {
            return Ok(false);
        };
        let next = OperationRef {
            operation_id: next,
            run_id: String::new(),
        };
        match self.inner.client.describe_with_input(&next).await {
            Ok(described) => Ok(cancelled_round(&described) && self.sealed_round(&described)),
            Err(OperationClientError::NotFound { .. }) => Ok(false),
            Err(e) => Err(internal("reading the tool call", e)),
        }
    }

    /// Takes the round after `last` (whose requests nobody answered yet) for the cancel: the
    /// round to cancel, the taken one or the answer's when that came first. A round found
    /// started is followed only when it reads back sealed (R-CON-40): an operation someone
    /// else started under its ID is refused, never cancelled in the owner's name.
    pub(super) async fn take_next_round(
        &self,
        last: &OperationDescription,
    ) -> Result<OperationRef, McpError> {
        let Some(next) = next_round_id(&last.reference.operation_id) else {
            return Ok(last.reference.clone());
        };
        let mut start = marker_start(last, next.clone())?;
        self.seal_round(&mut start);
        start.conflict_policy = ConflictPolicy::UseExisting;
        start.reuse_policy = ReusePolicy::RejectDuplicate;
        let deadline = tokio::time::Instant::now() + TAKE_BUDGET;
        let found = match self.inner.client.start_until(start, deadline).await {
            Ok((op, true)) => {
                info!(operation_id = %op.operation_id, "task cancelled while it waited for input");
                return Ok(op);
            }
            Ok((op, false)) => op,
            Err(OperationClientError::AlreadyExists { .. }) => OperationRef {
                operation_id: next,
                run_id: String::new(),
            },
            Err(e) => return Err(internal("cancelling the task", e)),
        };
        // The read gets a budget of its own: a start that rode out an outage and attached to
        // its own earlier try must not lose the cancel to one failed read.
        let read_by = tokio::time::Instant::now() + TAKE_BUDGET;
        self.sealed_next(&found, read_by)
            .await
            .map_err(not_taken_by_cancel)
    }
}

/// A cancel's refusal when the round after the waiting one is not this connector's (the
/// check's own refusal speaks of answers); an error reading it stays as it is.
fn not_taken_by_cancel(refused: McpError) -> McpError {
    if !foreign_round(&refused) {
        return refused;
    }
    McpError::invalid_params(
        "the round after this task's input request was started by someone other than this \
         connector, so the cancel cannot take it and cancelled nothing; the task reads as \
         waiting for input until the connector's --input-timeout ends it, and an answer is \
         refused alike: call the tool again for a new task",
        None,
    )
}

/// Whether [`Connector::take_next_round`] refused because the next round is someone else's
/// (not an error reading it): taking it again would find the same.
pub(super) fn foreign_round(refused: &McpError) -> bool {
    refused.code == rmcp::model::ErrorCode::INVALID_PARAMS
}

/// The expired rounds whose next round this connector takes or took (R-CON-46): every read of
/// an expired round would otherwise start a marker in the background, one per read. A round is
/// taken once (until [`Self::REMEMBERED`] later ones push it out), at most [`Self::AT_ONCE`]
/// at a time; a round skipped because of that cap, or whose take failed, is taken by a later
/// read.
#[derive(Default)]
pub(super) struct ExpiryTakes(std::sync::Mutex<ExpiryState>);

#[derive(Default)]
struct ExpiryState {
    /// Operation IDs taken or being taken, oldest first.
    order: std::collections::VecDeque<String>,
    known: std::collections::HashSet<String>,
    running: usize,
}

/// One take in flight: [`ExpiryTakes::begin`]'s permit, handed back to
/// [`ExpiryTakes::end`].
#[must_use]
pub(super) struct ExpiryTake(String);

impl ExpiryTakes {
    /// Takes at once at most.
    pub(super) const AT_ONCE: usize = 16;
    /// Taken rounds remembered.
    pub(super) const REMEMBERED: usize = 4096;

    /// A permit to take the round after `operation_id`, unless it is taken or being taken, or
    /// [`Self::AT_ONCE`] takes run.
    pub(super) fn begin(&self, operation_id: &str) -> Option<ExpiryTake> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if s.running >= Self::AT_ONCE || s.known.contains(operation_id) {
            return None;
        }
        s.running += 1;
        s.known.insert(operation_id.to_owned());
        s.order.push_back(operation_id.to_owned());
        while s.order.len() > Self::REMEMBERED {
            if let Some(old) = s.order.pop_front() {
                s.known.remove(&old);
            }
        }
        Some(ExpiryTake(operation_id.to_owned()))
    }

    /// The take ended; a failed one is forgotten, so a later read takes the round again.
    pub(super) fn end(&self, take: ExpiryTake, taken: bool) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.running = s.running.saturating_sub(1);
        if !taken {
            s.known.remove(&take.0);
            s.order.retain(|id| *id != take.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_round_is_taken_once_and_only_so_many_at_once() {
        let takes = ExpiryTakes::default();
        let first = takes.begin("op-1").expect("the first read takes it");
        assert!(takes.begin("op-1").is_none(), "a second read while it runs");
        takes.end(first, true);
        assert!(takes.begin("op-1").is_none(), "nor once it was taken");
        let failed = takes.begin("op-2").unwrap();
        takes.end(failed, false);
        let again = takes.begin("op-2").expect("a failed take is retried");
        let mut running = vec![again];
        for i in 3..=ExpiryTakes::AT_ONCE + 1 {
            running.push(takes.begin(&format!("op-{i}")).unwrap());
        }
        assert!(takes.begin("op-x").is_none(), "past the cap");
        takes.end(running.pop().unwrap(), true);
        assert!(takes.begin("op-x").is_some(), "a place freed");
    }

    /// R-CON-40: the marker goes to the endpoint and service whose round asked, even when a
    /// namesake service is configured on another endpoint.
    #[test]
    fn a_cancel_marker_goes_to_the_endpoint_and_service_that_asked() {
        let mut waiting = super::super::input::tests::described("op", "billing", "ask");
        waiting.endpoint = "ep-asked".into();
        let start = marker_start(&waiting, "op~r2".into()).unwrap();
        assert_eq!(
            (&*start.endpoint, &*start.service, &*start.operation),
            ("ep-asked", "billing", CANCELLED_ROUND)
        );
        assert_eq!(
            (&*start.operation_id, &*start.request_id),
            ("op~r2", "op~r2")
        );
    }

    #[test]
    fn taken_rounds_are_remembered_up_to_a_bound() {
        let takes = ExpiryTakes::default();
        for i in 0..=ExpiryTakes::REMEMBERED {
            let take = takes.begin(&format!("op-{i}")).unwrap();
            takes.end(take, true);
        }
        assert!(takes.begin("op-1").is_none(), "still remembered");
        assert!(takes.begin("op-0").is_some(), "the oldest was pushed out");
        assert!(takes.0.lock().unwrap().known.len() <= ExpiryTakes::REMEMBERED);
    }
}
