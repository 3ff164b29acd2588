//! MCP tasks (R-CON-4, R-CON-6): signed, caller-scoped task IDs over Nexus operations, with no
//! task table anywhere; `tasks/get` reads the operation, `tasks/cancel` cancels it.

use std::time::SystemTime;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{DetailedTask, ErrorCode, TASKS_EXTENSION_ID, Task, TaskPayload, TaskStatus},
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{Connector, internal::internal};
use crate::{
    progress::{ProgressSource, call_progress},
    task_ref::{CallerScope, Deployment, KeyRing, TaskRef, caller_hash, sign, verify_with_ring},
};
use durable_mcp_contract::{
    input::asks_for_input,
    operation_name::tool_for_operation,
    outcome::{Outcome, to_call_tool_result_for},
};
use durable_mcp_runtime::nexus::{
    CancelState, OperationClientError, OperationOutcome, OperationRef, OperationStatus,
    OperationTimes,
};

impl Connector {
    /// The signed task ID for an operation, owned by `scope`: compact, at most 128
    /// characters for the connector's own operations (R-CON-6).
    pub fn task_id(&self, op: &OperationRef, scope: &CallerScope) -> String {
        let r = TaskRef::new(
            self.inner.client.namespace(),
            &op.operation_id,
            &op.run_id,
            self.owner(scope),
        );
        let o = &self.inner.options;
        sign(&o.signing_key, &o.connector_name, &r)
    }

    /// The current signing key and the previous ones still accepted (R-CON-18).
    fn key_ring(&self) -> KeyRing {
        KeyRing {
            current: self.inner.options.signing_key.clone(),
            previous: self.inner.options.previous_signing_keys.clone(),
        }
    }

    /// Verifies a task ID (signature under the current or a listed previous key, for this
    /// namespace, connector name and caller) before any Temporal call.
    /// Every kind of bad ID gets the same answer.
    pub(super) fn task_op(
        &self,
        task_id: &str,
        scope: &CallerScope,
    ) -> Result<OperationRef, McpError> {
        let deployment = Deployment {
            namespace: self.inner.client.namespace(),
            connector_name: &self.inner.options.connector_name,
        };
        let r = verify_with_ring(&self.key_ring(), task_id, &deployment, |key| {
            caller_hash(key, scope)
        })
        .map_err(|_| McpError::invalid_params("unknown task", None))?;
        Ok(OperationRef {
            operation_id: r.op,
            run_id: r.run,
        })
    }

    /// The task's state: working while the operation runs, then its result.
    pub async fn task_state(
        &self,
        task_id: &str,
        scope: &CallerScope,
    ) -> Result<DetailedTask, McpError> {
        let op = self.task_op(task_id, scope)?;
        // The call's last round: a call that asked for input goes on in rounds (R-CON-40).
        let described = self
            .last_round(&op)
            .await
            .map_err(|e| task_error("reading the task", e))?;
        let (created, updated) = task_times(described.times, SystemTime::now());
        let ttl = task_ttl_ms(described.times, self.inner.client.retention().await);
        let mut task = with_ttl(
            Task::new(task_id, TaskStatus::Working, created, updated),
            ttl,
        );
        let call = ProgressSource::of(&described);
        let taken = super::cancelled_round::cancelled_round(&described);
        let payload = match (described.status, described.outcome.clone()) {
            // Cancelled while it waited for input (R-CON-46).
            _ if taken => TaskPayload::Cancelled,
            (OperationStatus::Running | OperationStatus::Unknown, _) | (_, None) => {
                // The upstream's latest progress message, when the tool reports one.
                let progress = match &call {
                    Some(call) => call_progress(&self.inner.client, call).await,
                    None => None,
                };
                if let Some(message) = progress.and_then(|p| p.message) {
                    task = task.with_status_message(message);
                }
                TaskPayload::Working
            }
            (_, Some(OperationOutcome::Canceled { .. })) => TaskPayload::Cancelled,
            (_, Some(outcome)) if asks_for_input(&outcome) => {
                let payload = self.waiting_payload(&described.times, &outcome);
                if matches!(payload, TaskPayload::Completed { .. }) {
                    self.end_expired_round(&described);
                }
                payload
            }
            (_, Some(outcome)) => {
                // The listing names the tool, not its escaped operation name (R-NXC-5).
                let tool = tool_for_operation(&described.operation)
                    .unwrap_or_else(|| described.operation.clone());
                let one_attempt = self.one_attempt(&tool).await;
                match Outcome::from_operation(outcome) {
                    // The upstream's JSON-RPC error, inlined unchanged (R-CON-6, SEP-2663).
                    Outcome::JsonRpcError(e) => TaskPayload::Failed {
                        error: e.to_object(),
                    },
                    outcome => match to_call_tool_result_for(&outcome, one_attempt) {
                        Value::Object(result) => TaskPayload::Completed { result },
                        _ => TaskPayload::Working,
                    },
                }
            }
        };
        task.poll_interval_ms = poll_interval_ms(&payload);
        Ok(DetailedTask::new(task, payload))
    }

    /// The task a call continues as (R-CON-6), with its times from Temporal (R-CON-29): the
    /// same `createdAt` every later `tasks/get` reports.
    pub(super) async fn created_task(&self, op: &OperationRef, scope: &CallerScope) -> Task {
        // Bounded: the caller's answer (its new task) must not wait on a Temporal that
        // accepted the connection but does not answer.
        let described = tokio::time::timeout(TASK_TIMES_WAIT, self.inner.client.describe(op)).await;
        let times = match described {
            Ok(Ok(described)) => described.times,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the new task's times are the connector's clock");
                OperationTimes::default()
            }
            Err(_) => {
                tracing::debug!(
                    "reading the new task's times timed out; using the connector's clock"
                );
                OperationTimes::default()
            }
        };
        let (created, updated) = task_times(times, SystemTime::now());
        let ttl = task_ttl_ms(times, self.inner.client.retention().await);
        with_ttl(
            Task::new(
                self.task_id(op, scope),
                TaskStatus::Working,
                created,
                updated,
            )
            .with_poll_interval_ms(TASK_POLL_INTERVAL_MS),
            ttl,
        )
    }

    /// Requests cancellation of the task's operation, retrying for a while through a Temporal
    /// outage (R-CON-16); a cancel that still could not be delivered is an error, never dropped.
    /// A cancel that comes after the task ended, or again, is acknowledged like one that won
    /// (R-CON-6): the task's status tells the caller which happened.
    pub async fn cancel_task_op(&self, task_id: &str, scope: &CallerScope) -> Result<(), McpError> {
        let op = self.task_op(task_id, scope)?;
        // A call that asked for input runs on in its later rounds (R-CON-40); one that waits
        // for an answer ends with the round the cancel takes (R-CON-46).
        let op = match self.last_round(&op).await {
            Ok(last) if self.waits_for_input(&last) => self.take_next_round(&last).await?,
            Ok(last) if last.reference.operation_id != op.operation_id => last.reference,
            _ => op,
        };
        let deadline = tokio::time::Instant::now() + TASK_CANCEL_OUTAGE_BUDGET;
        let refused = match self
            .inner
            .client
            .cancel_until(&op, "MCP tasks/cancel", deadline)
            .await
        {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match self.inner.client.describe(&op).await {
            Ok(d) if cancel_stands(d.status, d.cancellation) => Ok(()),
            Err(e @ OperationClientError::NotFound { .. }) => {
                Err(task_error("cancelling the task", e))
            }
            _ => Err(task_error("cancelling the task", refused)),
        }
    }
}

/// The `pollIntervalMs` a task that is not finished suggests (R-CON-6): every `tasks/get`
/// reads Temporal, and a call's progress changes no faster (heartbeats every second, R-PRX-9).
pub(crate) const TASK_POLL_INTERVAL_MS: u64 = 1000;

/// The `pollIntervalMs` of a task in this state: [`TASK_POLL_INTERVAL_MS`] while it is not
/// finished, none once it is (there is nothing left to poll for).
pub(crate) fn poll_interval_ms(payload: &TaskPayload) -> Option<u64> {
    (!payload.status().is_terminal()).then_some(TASK_POLL_INTERVAL_MS)
}

/// Whether a cancel that could not be requested again is still answered as a success: the
/// operation closed, or an earlier cancel is being delivered or was (R-CON-6). One that failed,
/// timed out or is blocked is not.
fn cancel_stands(status: OperationStatus, cancellation: Option<CancelState>) -> bool {
    !matches!(status, OperationStatus::Running | OperationStatus::Unknown)
        || matches!(
            cancellation,
            Some(CancelState::InProgress | CancelState::Delivered)
        )
}

/// A failed Temporal call about a task: a task Temporal no longer keeps (its namespace's
/// retention passed) is invalid params, as an unknown one (R-CON-6); anything else is internal.
pub(super) fn task_error(what: &str, error: OperationClientError) -> McpError {
    match error {
        OperationClientError::NotFound { .. } => McpError::invalid_params(
            "unknown task: Temporal no longer keeps it (its namespace's retention passed)",
            None,
        ),
        e => internal(what, e),
    }
}

/// How long the answer that creates a task waits for Temporal's times before it uses the
/// connector's clock (R-CON-29).
const TASK_TIMES_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long `tasks/cancel` keeps trying to reach Temporal before it answers with an error.
const TASK_CANCEL_OUTAGE_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);

/// A task's `createdAt` and `lastUpdatedAt` (R-CON-29), RFC 3339 with milliseconds: when its
/// operation was scheduled and when its state last changed, as Temporal records them, so they
/// hold still between reads and agree across replicas. `now` stands in only for a time the
/// server did not give; `lastUpdatedAt` is never before `createdAt`.
fn task_times(times: OperationTimes, now: SystemTime) -> (String, String) {
    let created = times.scheduled.unwrap_or(now);
    let updated = times.last_changed.unwrap_or(created).max(created);
    let format = |t| humantime::format_rfc3339_millis(t).to_string();
    (format(created), format(updated))
}

/// A task's `ttlMs` (R-CON-6): from its creation until Temporal may delete it, that is until the
/// operation ends (or must end, its schedule-to-close deadline, while it runs) plus the
/// namespace's retention. Unknown (no deadline, or a retention the server would not give) is
/// `None`, which the wire says as `null`.
fn task_ttl_ms(times: OperationTimes, retention: Option<std::time::Duration>) -> Option<u64> {
    let lives = times
        .ends_by?
        .duration_since(times.scheduled?)
        .unwrap_or_default();
    u64::try_from((lives + retention?).as_millis()).ok()
}

fn with_ttl(task: Task, ttl_ms: Option<u64>) -> Task {
    match ttl_ms {
        Some(ms) => task.with_ttl_ms(ms),
        None => task,
    }
}

/// Whether the request's caller declared the tasks extension (per request for stateless
/// 2026-07-28 clients, at initialize for session clients).
pub(super) fn supports_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
        || context
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.supports_tasks())
}

/// The answer to a task method from a caller without the tasks extension.
pub(super) fn tasks_extension_required() -> McpError {
    needs_tasks_extension("this method needs the io.modelcontextprotocol/tasks extension".into())
}

/// The answer to a call of a tool that runs only as a task (R-CON-39) from a caller without the
/// tasks extension: nothing ran.
pub(super) fn tool_needs_tasks(tool: &str) -> McpError {
    needs_tasks_extension(format!(
        "tool {tool:?} runs only as a task (its upstream lists execution.taskSupport \"required\") and this \
         caller did not declare the io.modelcontextprotocol/tasks extension; nothing ran. \
         Declare the extension (at initialize, or in the request's _meta client capabilities) \
         to call it"
    ))
}

/// -32021 with the tasks extension as the required capability.
fn needs_tasks_extension(message: String) -> McpError {
    McpError::new(
        ErrorCode(-32021),
        message,
        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_a_task_that_is_not_finished_suggests_a_poll_interval() {
        let every = Some(TASK_POLL_INTERVAL_MS);
        assert_eq!(poll_interval_ms(&TaskPayload::Working), every);
        let input = TaskPayload::InputRequired {
            input_requests: Default::default(),
        };
        assert_eq!(poll_interval_ms(&input), every);
        let result = TaskPayload::Completed {
            result: Default::default(),
        };
        let error = TaskPayload::Failed {
            error: Default::default(),
        };
        for done in [result, error, TaskPayload::Cancelled] {
            assert_eq!(poll_interval_ms(&done), None, "{done:?}");
        }
    }

    #[test]
    fn a_tasks_ttl_runs_from_its_creation_to_its_end_plus_the_retention() {
        let at = |s| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let day = Some(Duration::from_secs(86_400));
        let times = |scheduled, ends_by| OperationTimes {
            scheduled,
            last_changed: scheduled,
            ends_by,
        };
        // Running with a 2 h deadline, or closed after 5 s; then a day's retention.
        assert_eq!(task_ttl_ms(times(at(100), at(7300)), day), Some(93_600_000));
        assert_eq!(task_ttl_ms(times(at(100), at(105)), day), Some(86_405_000));
        // Nothing known is no promise (null), never a made-up one.
        assert_eq!(task_ttl_ms(times(at(100), None), day), None);
        assert_eq!(task_ttl_ms(times(None, at(105)), day), None);
        assert_eq!(task_ttl_ms(times(at(100), at(105)), None), None);
        // An end recorded before the schedule counts as none.
        assert_eq!(task_ttl_ms(times(at(100), at(50)), day), Some(86_400_000));
    }

    #[test]
    fn a_cancel_is_acknowledged_only_when_it_stands_or_the_operation_closed() {
        use CancelState as C;
        use OperationStatus as S;
        for (status, cancellation, acknowledged) in [
            (S::Running, Some(C::InProgress), true),
            (S::Running, Some(C::Delivered), true),
            (S::Running, Some(C::Failed), false),
            (S::Running, Some(C::Unknown), false),
            (S::Running, None, false),
            (S::Unknown, Some(C::Failed), false),
            (S::Canceled, Some(C::Delivered), true),
            (S::Completed, Some(C::Failed), true),
            (S::Failed, None, true),
            (S::TimedOut, None, true),
        ] {
            assert_eq!(
                cancel_stands(status, cancellation),
                acknowledged,
                "{status:?} {cancellation:?}"
            );
        }
    }

    #[test]
    fn task_times_are_temporals_and_never_run_backwards() {
        let at = |s| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let times = OperationTimes {
            scheduled: at(1_800_000_000),
            last_changed: at(1_800_000_002),
            ..Default::default()
        };
        assert_eq!(
            task_times(times, now),
            (
                "2027-01-15T08:00:00.000Z".to_owned(),
                "2027-01-15T08:00:02.000Z".to_owned()
            ),
            "the clock plays no part"
        );
        let (created, updated) = task_times(
            OperationTimes {
                scheduled: at(1_800_000_000),
                last_changed: None,
                ..Default::default()
            },
            now,
        );
        assert_eq!(created, updated);
        let (created, updated) = task_times(OperationTimes::default(), now);
        assert_eq!(
            (created.as_str(), updated.as_str()),
            ("2033-05-18T03:33:20.000Z", "2033-05-18T03:33:20.000Z")
        );
        let (created, updated) = task_times(
            OperationTimes {
                scheduled: at(1_800_000_005),
                last_changed: at(1_800_000_000),
                ..Default::default()
            },
            now,
        );
        assert!(created <= updated, "{created} <= {updated}");
    }
}
