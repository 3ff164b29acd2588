//! Starting a tool call's Nexus operation and waiting for its outcome (R-CON-3, R-CON-5),
//! idempotency keys (R-CON-7) and progress for waiting callers (R-CON-10).

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{CallToolRequestParams, ProgressToken},
    service::RequestContext,
};
use serde_json::{Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    Connector,
    caller_key::CallCaller,
    explicit_cancel::CallCancel,
    internal::{internal, outcome_unknown},
};
use crate::{
    fair::Share,
    idempotency::{
        FingerprintKey, IdempotencyKey, arguments_fingerprint, fingerprint_matches, key_from_meta,
        operation_id as idempotent_operation_id,
    },
    progress::{follows_live, forward_live, replay_notifications},
    route::Route,
    task_ref::{
        CallerScope, KEYED_SEAL_HEADER, SealedRound, SigningKey, caller_hash, keyed_seal,
        keyed_sealed,
    },
};
use durable_mcp_contract::{
    call::{CallNotifications, LiveNotifications},
    errors::ConnectorErrorType,
    jsonrpc_error::JsonRpcError,
    listing::{advertised_inline, advertised_one_attempt, advertised_timeout},
    operation_name::operation_for_tool,
    outcome::{ERROR_TYPE_META, Outcome, to_call_tool_result_for},
    payload,
};
use durable_mcp_runtime::nexus::{
    ConflictPolicy, OperationClientError, OperationDescription, OperationOutcome, OperationRef,
    ReusePolicy, StartOperation,
};

impl Connector {
    /// Starts the tool's operation on its route. With an idempotency key the operation id is a
    /// function of (caller scope, tool, key), so a repeated call reattaches to the same
    /// execution, running or finished; different arguments under the same key are a conflict.
    pub(super) async fn start_call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        (key, scope): (Option<IdempotencyKey>, Option<&CallerScope>),
        share: Option<&Share>,
    ) -> Result<Started, McpError> {
        let mut call = self.prepare_call(tool, arguments, share).await?;
        call.caller = scope.map(|scope| self.caller_of(scope, share));
        match (key, scope) {
            (Some(key), Some(scope)) => self.start_idempotent(call, &key, scope).await,
            _ => self.start_unkeyed(call).await,
        }
    }

    /// The caller a tool call is for, as its operation names it to the tool service: for log
    /// attribution (R-PRX-10) and as its fairness key (R-PRX-40).
    pub(super) fn caller_of(&self, scope: &CallerScope, share: Option<&Share>) -> CallCaller {
        CallCaller::of(&self.inner.options.signing_key, scope, share)
    }

    /// Everything a start needs before it names its operation: the tool's route and timeout,
    /// its in-flight slot (the caller's `share` of it and of call starts too, R-CON-38), and
    /// the arguments as a payload of an allowed size.
    async fn prepare_call<'t>(
        &self,
        tool: &'t str,
        arguments: serde_json::Map<String, Value>,
        share: Option<&Share>,
    ) -> Result<PreparedCall<'t>, McpError> {
        let what = format!("calling tool {tool:?}");
        let (route, definition) = {
            // A name the catalog lacks waits for a listing: in the caller's share (R-CON-38).
            let _waiting = self.inner.in_flight.try_share(&what, share)?;
            self.lookup(tool).await?
        };
        let slot = self.inner.in_flight.try_start(&what, share)?;
        // A call that becomes a task gives its place back: starts are capped too (R-CON-38).
        self.inner.call_starts.try_start(&what, share)?;
        let timeout = advertised_timeout(&definition).unwrap_or(self.inner.options.default_timeout);
        let arguments = Value::Object(arguments);
        let input = payload::to_payload(&arguments)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let arguments_bytes = input.data.len();
        check_arguments_size(tool, arguments_bytes)?;
        let now = tokio::time::Instant::now();
        // Through a Temporal outage (R-CON-16) the start is retried for a while (same request
        // id: one run), and the wait for as long as the tool may run, plus time to read the
        // outcome once the server is back.
        Ok(PreparedCall {
            tool,
            route,
            arguments,
            input,
            arguments_bytes,
            timeout,
            start_deadline: now + timeout.min(START_OUTAGE_BUDGET),
            deadline: outage_deadline(now, timeout),
            slot,
            caller: None,
        })
    }

    /// Starts a call without an idempotency key: a new operation every time.
    async fn start_unkeyed(&self, mut call: PreparedCall<'_>) -> Result<Started, McpError> {
        let start = call.operation(self.operation_id(""));
        let starting = self.inner.client.start_until(start, call.start_deadline);
        let (op, _) = self
            .inner
            .metrics
            .timed(START_RPC, starting)
            .await
            .map_err(start_failed)?;
        let (tool, arguments_bytes) = (call.tool, call.arguments_bytes);
        // The tool and sizes only: arguments are the caller's data (R-CON-33).
        info!(operation_id = %op.operation_id, tool, service = %call.route.service, arguments_bytes, "tool call started");
        Ok(call.started(op))
    }

    /// Starts a call with an idempotency key, or reattaches to the execution the key already
    /// names (under the current signing key, or a previous one, R-CON-18); a
    /// [`Started::Conflict`] when that execution has other arguments.
    async fn start_idempotent(
        &self,
        mut call: PreparedCall<'_>,
        key: &IdempotencyKey,
        scope: &CallerScope,
    ) -> Result<Started, McpError> {
        if let Some((existing, fingerprint_key)) = self
            .keyed_under_previous_keys(call.tool, key, scope)
            .await?
        {
            self.check_keyed_run(&existing, &call.route)?;
            return Ok(call.reattached(existing, &fingerprint_key));
        }
        let signing = &self.inner.options.signing_key;
        let fingerprint_key = FingerprintKey::derive(signing);
        let operation_id = self.keyed_operation_id(signing, call.tool, key, scope);
        let fingerprint = arguments_fingerprint(&fingerprint_key, &call.arguments);
        let start = call.idempotent_operation(&operation_id, &fingerprint, signing);
        let (tool, arguments_bytes) = (call.tool, call.arguments_bytes);
        let starting = self.inner.client.start_until(start, call.start_deadline);
        let op = match self.inner.metrics.timed(START_RPC, starting).await {
            Ok((op, true)) => {
                info!(operation_id = %op.operation_id, tool, arguments_bytes, "idempotent tool call started");
                return Ok(call.started(op));
            }
            Ok((op, false)) => op,
            // Closed, and started by a request with other arguments (or by an earlier build,
            // whose fingerprints had another form).
            Err(OperationClientError::AlreadyExists { .. }) => OperationRef {
                operation_id,
                run_id: String::new(),
            },
            Err(e) => return Err(start_failed(e)),
        };
        let existing = self
            .inner
            .client
            .describe_with_input(&op)
            .await
            .map_err(|e| internal("starting the tool call", e))?;
        self.check_keyed_run(&existing, &call.route)?;
        Ok(call.reattached(existing, &fingerprint_key))
    }

    /// Refuses the keyed run `existing` (described with its input) unless it carries the
    /// keyed seal of one of the connector's keys over its ID, endpoint, service, operation and
    /// input, on the tool's own route (R-CON-7): a keyed operation's ID can be started again
    /// once it closed, by whoever may start operations, with headers copied from the first
    /// run, and its result is not the caller's.
    fn check_keyed_run(
        &self,
        existing: &OperationDescription,
        route: &Route,
    ) -> Result<(), McpError> {
        let on_route = existing.endpoint == route.endpoint && existing.service == route.service;
        let sealed = self.sealed_as(existing, KEYED_SEAL_HEADER, |keys, seal, start| {
            keyed_sealed(keys, seal, start)
        });
        if on_route && sealed {
            return Ok(());
        }
        warn!(operation_id = %existing.reference.operation_id, on_route, sealed, "the operation an idempotency key names was not started by this connector for it; it is not followed");
        Err(McpError::invalid_params(
            "the operation this idempotency key names was started again by someone other than this connector (or by a build before keyed calls were sealed), so its result is not yours and is not returned; nothing was started for this request. Call again with a new idempotency key (the key's first call may already have run)",
            None,
        ))
    }

    /// The operation id of a keyed call under `signing` (the current or a previous key).
    fn keyed_operation_id(
        &self,
        signing: &SigningKey,
        tool: &str,
        key: &IdempotencyKey,
        scope: &CallerScope,
    ) -> String {
        idempotent_operation_id(
            &FingerprintKey::derive(signing),
            &self.inner.options.connector_name,
            &caller_hash(signing, scope),
            tool,
            key,
        )
    }

    /// The execution `key` names under a previous signing key, with that key's fingerprint
    /// key, if one exists: a call retried across a rotation reattaches to it instead of running
    /// again (R-CON-18). A look-up that fails is an error, never "none": a guess could run a
    /// destructive call twice.
    async fn keyed_under_previous_keys(
        &self,
        tool: &str,
        key: &IdempotencyKey,
        scope: &CallerScope,
    ) -> Result<Option<(OperationDescription, FingerprintKey)>, McpError> {
        for previous in &self.inner.options.previous_signing_keys {
            let op = OperationRef {
                operation_id: self.keyed_operation_id(previous, tool, key, scope),
                run_id: String::new(),
            };
            match self.inner.client.describe_with_input(&op).await {
                Ok(existing) => return Ok(Some((existing, FingerprintKey::derive(previous)))),
                Err(OperationClientError::NotFound { .. }) => {}
                Err(e) => return Err(internal("starting the tool call", e)),
            }
        }
        Ok(None)
    }

    /// Waits for the operation; `cancel` says what ends the wait and whether that end cancels
    /// the operation (R-CON-5: a keyed call's dropped stream does not). A waiting
    /// caller (`listener`) gets the upstream's progress meanwhile when it sent a progress token,
    /// and, before the result, what travelled with it (R-CON-10, R-CON-13). Until `deadline`
    /// the wait rides out Temporal outages, and so does the cancel (R-CON-16).
    pub(super) async fn finish_call(
        &self,
        op: &OperationRef,
        deadline: tokio::time::Instant,
        cancel: &CallCancel,
        listener: Option<Listener>,
        one_attempt: bool,
    ) -> Result<Value, McpError> {
        let client = &self.inner.client;
        // What the caller got live, so the replay below sends only what it missed.
        let live = std::sync::Mutex::new(LiveNotifications::default());
        let forward = async {
            if let Some(l) = &listener
                && follows_live(&l.progress_token, l.min_log_level, l.inline)
            {
                let token = l.progress_token.clone();
                forward_live(client, op, &l.peer, token, l.min_log_level, &live).await;
            }
            // Nothing (more) to forward: keep waiting for the outcome.
            std::future::pending::<()>().await
        };
        let waited = tokio::select! {
            waited = client.wait_until(op, cancel.ended(), deadline) => waited,
            _ = forward => unreachable!("forwarding never ends on its own"),
        };
        let outcome = match waited {
            Ok(outcome) => outcome,
            Err(OperationClientError::WaitCancelled { .. }) if !cancel.cancels().await => {
                // A keyed call whose stream closed: it runs on, and the re-issue reattaches.
                info!(operation_id = %op.operation_id, "keyed tool call runs on without its caller");
                return Err(McpError::internal_error(
                    "the request ended; the tool call runs on: re-issue it with the same idempotency key for its result",
                    None,
                ));
            }
            Err(OperationClientError::WaitCancelled { .. }) => {
                // The caller cancelled: cancel the operation, and report truthfully. The cancel
                // is retried through an outage, on a task of its own: the caller is gone.
                let (client, op) = (client.clone(), op.clone());
                tokio::spawn(async move {
                    if let Err(e) = client
                        .cancel_until(&op, "MCP request cancelled", deadline)
                        .await
                    {
                        warn!(operation_id = %op.operation_id, error = %e, "could not cancel the operation");
                    }
                });
                return Err(McpError::internal_error(
                    "the tool call was cancelled by the client",
                    None,
                ));
            }
            // Started, and maybe run: never "try again" (R-CON-34).
            Err(e) => return Err(outcome_unknown("waiting for the tool call", e)),
        };
        match &outcome {
            OperationOutcome::Succeeded(result) => {
                debug!(operation_id = %op.operation_id, result_bytes = result.data.len(), "tool call succeeded");
            }
            other => {
                debug!(operation_id = %op.operation_id, outcome = other.kind(), "tool call ended")
            }
        }
        // What the heartbeats could not show (a call shorter than the polling interval, log
        // messages missed live) travelled with the result: the caller gets it now, in order,
        // before the result.
        if let (Some(listener), OperationOutcome::Succeeded(result)) = (&listener, &outcome) {
            let live = live.lock().unwrap().clone();
            replay_notifications(
                &listener.peer,
                listener.progress_token.as_ref(),
                &CallNotifications::from_payload(result),
                &live,
                listener.min_log_level,
            )
            .await;
        }
        answer(outcome, one_attempt)
    }

    /// Whether the tool's listing says it gets one attempt (R-NXC-4): then a call of it that
    /// timed out is one of unknown outcome. An unknown tool counts as retried.
    pub(super) async fn one_attempt(&self, tool: &str) -> bool {
        self.lookup(tool)
            .await
            .is_ok_and(|(_, definition)| advertised_one_attempt(&definition))
    }

    /// Whether the tool's listing says its calls are answered inline (R-PRX-30): then its
    /// progress is not looked up while a call runs (R-CON-26). An unknown tool is not.
    pub(super) async fn listed_inline(&self, tool: &str) -> bool {
        self.lookup(tool)
            .await
            .is_ok_and(|(_, definition)| advertised_inline(&definition))
    }

    /// Calls a tool through its route and waits for the outcome. `cancel` (the MCP request's
    /// cancellation) cancels the Nexus operation.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        cancel: CancellationToken,
    ) -> Result<Value, McpError> {
        match self.start_call(tool, arguments, (None, None), None).await? {
            Started::Op(call) => {
                let one_attempt = self.one_attempt(tool).await;
                let cancel = CallCancel::Any(cancel);
                self.finish_call(&call.op, call.deadline, &cancel, None, one_attempt)
                    .await
            }
            Started::Conflict => Ok(conflict_result()),
        }
    }
}

/// A waiting caller's answer for an operation's end: its `CallToolResult`, or the upstream's
/// JSON-RPC error itself (R-CON-4).
fn answer(outcome: OperationOutcome, one_attempt: bool) -> Result<Value, McpError> {
    match Outcome::from_operation(outcome) {
        Outcome::JsonRpcError(e) => Err(jsonrpc_error(e)),
        outcome => Ok(to_call_tool_result_for(&outcome, one_attempt)),
    }
}

/// An upstream's JSON-RPC error as the connector's answer: code, message and data unchanged
/// (R-CON-4).
pub(super) fn jsonrpc_error(e: JsonRpcError) -> McpError {
    McpError::new(rmcp::model::ErrorCode(e.code), e.message, e.data)
}

/// The caller's error for a start that failed: refused (nothing started, R-CON-15), or cut
/// off by an outage after which it may have reached Temporal (R-CON-34).
fn start_failed(e: OperationClientError) -> McpError {
    if e.is_transient() {
        outcome_unknown("starting the tool call", e)
    } else {
        internal("starting the tool call", e)
    }
}

/// Arguments larger than a Temporal payload may be are refused before anything starts
/// (R-CON-3), with the size and the limit, instead of Temporal's refusal of the start.
fn check_arguments_size(tool: &str, size: usize) -> Result<(), McpError> {
    let limit = payload::MAX_PAYLOAD_BYTES;
    if size <= limit {
        return Ok(());
    }
    Err(McpError::invalid_params(
        format!(
            "the arguments of tool {tool:?} are {size} bytes of JSON, more than the {limit} bytes a durable tool call can carry (Temporal's 2 MiB payload limit, less room for metadata); send less (for example a reference to the data instead of the data)"
        ),
        Some(json!({"tool": tool, "size": size, "limit": limit})),
    ))
}

/// The caller waiting for a call, to whom the call's notifications go.
pub(super) struct Listener {
    pub peer: Peer<RoleServer>,
    /// The request's progress token: no progress without one.
    pub progress_token: Option<ProgressToken>,
    /// The caller's `logging/setLevel`, as a rank in MCP's levels: no log messages without one.
    pub min_log_level: Option<usize>,
    /// The tool's listing says its calls are answered inline: nothing to follow live, what
    /// the call reports (if it ran in an Activity after all) comes with its result.
    pub inline: bool,
}

/// The metrics' name of the start of a call's operation (R-RUN-6).
const START_RPC: &str = "start_nexus_operation";

/// Nexus header carrying the arguments' fingerprint of an idempotent call.
const FINGERPRINT_HEADER: &str = "x-durable-mcp-arguments";

/// How long a start is retried through a Temporal outage at most (R-CON-16).
const START_OUTAGE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// How long past a tool's timeout the connector keeps waiting through an outage: the operation
/// is over by then, and a server that comes back tells how.
const OUTCOME_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// A started call.
pub(super) struct Call {
    pub op: OperationRef,
    /// Until when the connector waits for it through outages (R-CON-16).
    pub deadline: tokio::time::Instant,
    /// Its place under `--max-in-flight` (R-CON-17), held while the connector waits for it.
    pub slot: super::limits::InFlightSlot,
}

/// A tool call ready to start: everything but its operation id.
struct PreparedCall<'t> {
    tool: &'t str,
    route: Route,
    arguments: Value,
    input: Payload,
    arguments_bytes: usize,
    timeout: std::time::Duration,
    /// Until when the start is retried through an outage (R-CON-16).
    start_deadline: tokio::time::Instant,
    /// Until when the wait rides out outages (R-CON-16).
    deadline: tokio::time::Instant,
    slot: super::limits::InFlightSlot,
    /// The caller it is for ([`CallCaller`]), when known.
    caller: Option<CallCaller>,
}

impl PreparedCall<'_> {
    /// The tool's operation, under `operation_id`, closed after the tool's timeout. Takes the
    /// input: one start per prepared call.
    fn operation(&mut self, operation_id: impl Into<String>) -> StartOperation {
        let mut start = StartOperation::new(
            operation_id,
            &self.route.endpoint,
            &self.route.service,
            operation_for_tool(self.tool),
            std::mem::take(&mut self.input),
        );
        start.schedule_to_close = Some(self.timeout);
        // The call's span goes with the operation (R-RUN-9).
        start
            .headers
            .extend(durable_mcp_runtime::trace::current_fields());
        if let Some(caller) = &self.caller {
            caller.name_in(&mut start.headers);
        }
        start
    }

    /// The operation of an idempotent call: same key and same arguments => same request id,
    /// so the server answers with the same run, even after it closed. Temporal attaches
    /// silently on a conflict, so the arguments' fingerprint travels in a header and is
    /// compared on reattaching.
    /// The start is sealed with `signing` (R-CON-7), so a retry follows only this run.
    fn idempotent_operation(
        &mut self,
        operation_id: &str,
        fingerprint: &str,
        signing: &SigningKey,
    ) -> StartOperation {
        let mut start = self.operation(operation_id);
        let sealed = SealedRound {
            operation_id: &start.operation_id,
            endpoint: &start.endpoint,
            service: &start.service,
            operation: &start.operation,
            input: &start.input,
        };
        let seal = keyed_seal(signing, sealed);
        start.headers.insert(KEYED_SEAL_HEADER.into(), seal);
        start.request_id = format!("{operation_id}-{fingerprint}");
        start.conflict_policy = ConflictPolicy::UseExisting;
        start.reuse_policy = ReusePolicy::RejectDuplicate;
        start
            .headers
            .insert(FINGERPRINT_HEADER.into(), fingerprint.to_owned());
        start
    }

    /// The existing execution of an idempotent call, if it was started with these arguments
    /// (its fingerprint, in the form it was stored in, under `fingerprint_key`); else a conflict.
    fn reattached(
        self,
        existing: OperationDescription,
        fingerprint_key: &FingerprintKey,
    ) -> Started {
        let stored = existing
            .headers
            .get(FINGERPRINT_HEADER)
            .map_or("", String::as_str);
        if !fingerprint_matches(fingerprint_key, stored, &self.arguments) {
            return Started::Conflict;
        }
        info!(operation_id = %existing.reference.operation_id, tool = self.tool, "reattached to an idempotent tool call");
        self.started(existing.reference)
    }

    /// The started call `op`, holding this call's slot.
    fn started(self, op: OperationRef) -> Started {
        Started::Op(Call {
            op,
            deadline: self.deadline,
            slot: self.slot,
        })
    }
}

/// Until when a call's wait rides out outages: its timeout plus [`OUTCOME_GRACE`], at most a
/// year (a listing may advertise any timeout, and an `Instant` must not overflow).
fn outage_deadline(
    now: tokio::time::Instant,
    timeout: std::time::Duration,
) -> tokio::time::Instant {
    const YEAR: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
    now + timeout.saturating_add(OUTCOME_GRACE).min(YEAR)
}

/// How a start went.
pub(super) enum Started {
    Op(Call),
    /// The idempotency key names an execution with other arguments; it was not touched.
    Conflict,
}

/// The tool error for a reused idempotency key with different arguments.
pub(super) fn conflict_result() -> Value {
    let error_type = ConnectorErrorType::IdempotencyConflict.as_str();
    json!({
        "content": [{"type": "text", "text": format!("{error_type}: this idempotency key was already used with different arguments; the first call is unchanged. Use a new key for new arguments.")}],
        "isError": true,
        "_meta": {ERROR_TYPE_META: error_type},
    })
}

/// The request's idempotency key, from `_meta` (the params' or the context's).
pub(super) fn idempotency_key(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Option<IdempotencyKey>, McpError> {
    let metas = [
        request
            .meta
            .as_ref()
            .and_then(|m| serde_json::to_value(m).ok()),
        serde_json::to_value(&context.meta).ok(),
    ];
    for meta in metas.into_iter().flatten() {
        if let Value::Object(map) = meta
            && let Some(key) =
                key_from_meta(&map).map_err(|e| McpError::invalid_params(e.to_string(), None))?
        {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_deadlines_add_the_grace_and_never_overflow() {
        let now = tokio::time::Instant::now();
        let minute = std::time::Duration::from_secs(60);
        assert_eq!(outage_deadline(now, minute), now + minute + OUTCOME_GRACE);
        assert!(outage_deadline(now, std::time::Duration::MAX) > now + minute);
    }

    #[test]
    fn conflicts_carry_their_stable_type_in_meta_and_text() {
        let result = conflict_result();
        assert_eq!(result["isError"], true);
        assert_eq!(result["_meta"][ERROR_TYPE_META], "IdempotencyConflict");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("IdempotencyConflict: "), "{text}");
    }

    #[test]
    fn oversized_arguments_are_invalid_params_naming_size_and_limit() {
        let limit = payload::MAX_PAYLOAD_BYTES;
        assert!(check_arguments_size("t", limit).is_ok());
        let err = check_arguments_size("t", limit + 1).unwrap_err();
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(
            err.message.contains(&(limit + 1).to_string()),
            "{}",
            err.message
        );
        assert!(err.message.contains(&limit.to_string()), "{}", err.message);
        assert_eq!(err.data.unwrap()["size"], limit + 1);
    }
}
