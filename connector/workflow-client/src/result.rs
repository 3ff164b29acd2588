//! What a Workflow gets back from a tool service (R-WFC-3): a tool's `CallToolResult` (an
//! `isError` result included) is a result; a call that produced none is a [`ToolCallError`]
//! carrying the stable error type (R-NXC-4). Both go through the one outcome table the connector
//! uses ([`durable_mcp_contract::outcome`]): no second conversion.
//!
//! Pure functions over what the SDK hands the Workflow, so they run the same live and on replay.

use std::fmt;

use serde_json::Value;
use temporalio_protos::{
    coresdk::nexus::{NexusOperationResult, nexus_operation_result::Status},
    temporal::api::failure::v1::Failure,
};

use durable_mcp_contract::operation::{OperationOutcome, OperationStatus};
use durable_mcp_contract::{
    call::CallToken,
    errors::ToolCallErrorType,
    input::InputRequired,
    outcome::{Outcome, to_call_tool_result},
    payload,
};

/// How a call that produced no `CallToolResult` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallErrorKind {
    /// The operation failed: the tool service refused or could not run the call.
    Failed,
    /// The call was cancelled (by the Workflow, by its own token, or by the service).
    Canceled,
    /// The call's timeout passed first.
    TimedOut,
    /// The operation was terminated.
    Terminated,
}

/// A tool call (or listing) that produced no result, typed by how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallError {
    /// The operation: the tool's name, or `list_tools`.
    pub operation: String,
    outcome: Outcome,
}

impl ToolCallError {
    /// An error found before anything was scheduled, or in what the service answered.
    pub fn local(operation: &str, error_type: ToolCallErrorType, message: String) -> Self {
        Self {
            operation: operation.to_owned(),
            outcome: Outcome::Failed {
                message,
                error_type: Some(error_type.as_str().to_owned()),
            },
        }
    }

    pub(crate) fn from_outcome(operation: &str, outcome: Outcome) -> Self {
        Self {
            operation: operation.to_owned(),
            outcome,
        }
    }

    /// How the call ended.
    pub fn kind(&self) -> ToolCallErrorKind {
        match self.outcome {
            Outcome::Canceled { .. } => ToolCallErrorKind::Canceled,
            Outcome::TimedOut { .. } => ToolCallErrorKind::TimedOut,
            Outcome::Terminated { .. } => ToolCallErrorKind::Terminated,
            Outcome::Failed { .. }
            | Outcome::Result { .. }
            | Outcome::JsonRpcError(_)
            | Outcome::InputRequired(_) => ToolCallErrorKind::Failed,
        }
    }

    /// The stable error type (R-NXC-4) when the failure carries one of ours; a cancel is
    /// [`ToolCallErrorType::Canceled`].
    pub fn error_type(&self) -> Option<ToolCallErrorType> {
        match &self.outcome {
            Outcome::Canceled { .. } => Some(ToolCallErrorType::Canceled),
            _ => self.failure_type().and_then(ToolCallErrorType::parse),
        }
    }

    /// The failure's type as Temporal reports it: one of the stable types, another application
    /// type (e.g. `IdempotencyConflict`); a Nexus handler error has its kind's stable type
    /// (R-NXC-6, e.g. `NOT_FOUND` is `UnknownTool`).
    pub fn failure_type(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Failed { error_type, .. } => error_type.as_deref(),
            Outcome::JsonRpcError(e) => Some(e.error_type().as_str()),
            _ => None,
        }
    }

    /// The most specific message Temporal reports.
    pub fn message(&self) -> &str {
        match &self.outcome {
            Outcome::Failed { message, .. }
            | Outcome::Canceled { message }
            | Outcome::TimedOut { message }
            | Outcome::Terminated { message } => message,
            Outcome::JsonRpcError(e) => &e.message,
            Outcome::Result { .. } => "",
            // Answered with `McpTools::answer_input_json` (R-WFC-8).
            Outcome::InputRequired(_) => durable_mcp_contract::outcome::INPUT_NOT_GIVEN,
        }
    }

    /// The input requests the call's round ended with (SEP-2322; R-WFC-8), when it asked for
    /// input: `input_requests()` names them, and `McpTools::answer_input_json` answers them.
    pub fn input_required(&self) -> Option<&InputRequired> {
        match &self.outcome {
            Outcome::InputRequired(asked) => Some(asked.as_ref()),
            _ => None,
        }
    }

    /// The `isError` `CallToolResult` the connector gives an MCP client for this end (R-CON-4),
    /// for Workflows that hand failures to a model as tool errors.
    pub fn to_call_tool_result(&self) -> Value {
        to_call_tool_result(&self.outcome)
    }
}

impl fmt::Display for ToolCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.kind() {
            ToolCallErrorKind::Failed => "failed",
            ToolCallErrorKind::Canceled => "was canceled",
            ToolCallErrorKind::TimedOut => "timed out",
            ToolCallErrorKind::Terminated => "was terminated",
        };
        write!(f, "{} {how}", self.operation)?;
        if let Some(t) = self.failure_type() {
            write!(f, " ({t})")?;
        }
        if !self.message().is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}

impl std::error::Error for ToolCallError {}

/// The typed outcome of a Nexus operation as the Workflow received it.
pub fn operation_outcome(result: NexusOperationResult) -> OperationOutcome {
    match result.status {
        Some(Status::Completed(p)) => OperationOutcome::Succeeded(p),
        Some(Status::Failed(f)) => OperationOutcome::from_failure(&f, None),
        Some(Status::Cancelled(f)) => {
            OperationOutcome::from_failure(&f, Some(OperationStatus::Canceled))
        }
        Some(Status::TimedOut(f)) => {
            OperationOutcome::from_failure(&f, Some(OperationStatus::TimedOut))
        }
        None => OperationOutcome::Failed {
            message: "the Nexus operation ended without an outcome".into(),
            error_type: None,
            handler_error: None,
        },
    }
}

/// A start that failed (the service refused the call before it began).
pub fn start_failed(operation: &str, failure: &Failure) -> ToolCallError {
    let outcome = Outcome::from_operation(OperationOutcome::from_failure(failure, None));
    ToolCallError::from_outcome(operation, outcome)
}

/// The whole `CallToolResult` of a finished call, or why there is none. An answer of the other
/// kind is [`wrong_kind`]'s to find first.
pub fn call_result(tool: &str, outcome: OperationOutcome) -> Result<Value, ToolCallError> {
    match Outcome::from_operation(outcome) {
        o @ Outcome::Result { .. } => Ok(to_call_tool_result(&o)),
        o => Err(ToolCallError::from_outcome(tool, o)),
    }
}

/// The tools of a finished `list_tools` (R-NXC-2), or why there are none. An answer of the
/// other kind is [`wrong_kind`]'s to find first.
pub fn tool_list(outcome: OperationOutcome) -> Result<Vec<Value>, ToolCallError> {
    use durable_mcp_contract::listing::{LIST_TOOLS, tool_name};
    match Outcome::from_operation(outcome) {
        Outcome::Result {
            payload_json: Value::Array(tools),
            ..
        } if tools.iter().all(|t| tool_name(t).is_some()) => Ok(tools),
        Outcome::Result { payload_json, .. } => Err(ToolCallError::local(
            LIST_TOOLS,
            ToolCallErrorType::UpstreamProtocolError,
            format!(
                "list_tools answered with something that is not a list of named tools: {}",
                truncate(&payload_json.to_string(), 200)
            ),
        )),
        o => Err(ToolCallError::from_outcome(LIST_TOOLS, o)),
    }
}

/// The MCP result a finished reserved operation (R-NXC-8) answered as written, or why there
/// is none (an upstream's JSON-RPC error is a failed error of its code's type, R-WFC-3).
pub fn feature_result(operation: &str, outcome: OperationOutcome) -> Result<Value, ToolCallError> {
    match Outcome::from_operation(outcome) {
        Outcome::Result { payload_json, .. } => Ok(payload_json),
        o => Err(ToolCallError::from_outcome(operation, o)),
    }
}

/// What is wrong when `outcome`, the answer to `operation`, is an answer of `other_kind` (a
/// tool list where a call was asked for, or a call's result where a listing was): the recorded
/// run asked for something else (R-WFC-4), or the tool service answered with the wrong kind.
pub fn wrong_kind(operation: &str, outcome: &OperationOutcome, other_kind: &str) -> Option<String> {
    match outcome {
        OperationOutcome::Succeeded(p) if payload::mcp_type(p) == Some(other_kind) => Some(
            format!("the Workflow calls {operation:?} where the answer is a {other_kind}"),
        ),
        _ => None,
    }
}

/// What is wrong when an operation token names a proxied call of another tool (R-WFC-4):
/// Temporal core does not compare Nexus operation names on replay, so the client does where it
/// can.
pub fn token_mismatch(service: &str, tool: &str, operation_token: Option<&str>) -> Option<String> {
    let token = operation_token.and_then(CallToken::parse)?;
    (token.is_call_of(service, tool) == Some(false)).then(|| {
        format!(
            "the Workflow calls {tool:?} on {service:?} where the answer is the call {:?}",
            token.activity_id
        )
    })
}

/// The patch marker a Workflow records the first time a tool service answers it with something
/// that does not fit the call (R-WFC-4): so that a replay of that history gives the same error
/// instead of reading it as a changed call sequence.
pub const UNEXPECTED_ANSWER_PATCH: &str = "durable-mcp/unexpected-answer";

/// The answer to `operation` does not fit it (`what`). `recorded` is the Workflow's
/// [`UNEXPECTED_ANSWER_PATCH`]: true in a live run (which records it) and in a replay of a run
/// that met such an answer live; then the call fails with `UpstreamProtocolError`, the same on
/// every replay. False only on a replay whose history never met one: the code changed the
/// order of its MCP calls, and this panics (failing the Workflow task, as a nondeterminism does).
pub fn unexpected_answer(operation: &str, what: &str, recorded: bool) -> ToolCallError {
    if !recorded {
        panic!(
            "[durable-mcp] nondeterminism: {what} in its history; the code changed the order of \
             its MCP calls"
        );
    }
    ToolCallError::local(
        operation,
        ToolCallErrorType::UpstreamProtocolError,
        format!("the tool service's answer does not fit the call: {what}"),
    )
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use temporalio_protos::temporal::api::common::v1::Payload;
    use temporalio_protos::temporal::api::failure::v1::{
        ApplicationFailureInfo, CanceledFailureInfo, NexusOperationFailureInfo,
        failure::FailureInfo,
    };

    use super::*;
    use durable_mcp_contract::errors::ConnectorErrorType;

    fn completed(p: Payload) -> NexusOperationResult {
        NexusOperationResult {
            status: Some(Status::Completed(p)),
        }
    }

    fn app_failure(message: &str, error_type: &str) -> Failure {
        Failure {
            message: "nexus operation completed unsuccessfully".into(),
            failure_info: Some(FailureInfo::NexusOperationExecutionFailureInfo(
                NexusOperationFailureInfo::default(),
            )),
            cause: Some(Box::new(Failure {
                message: message.into(),
                failure_info: Some(FailureInfo::ApplicationFailureInfo(
                    ApplicationFailureInfo {
                        r#type: error_type.into(),
                        non_retryable: true,
                        ..Default::default()
                    },
                )),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn whole_results_and_is_error_results_are_results() {
        for r in [
            json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}], "isError": false}),
            json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
        ] {
            let p = payload::to_marked_payload(&r, payload::CALL_TOOL_RESULT).unwrap();
            assert_eq!(call_result("t", operation_outcome(completed(p))), Ok(r));
        }
    }

    #[test]
    fn plain_values_go_through_the_connectors_table() {
        let p = payload::to_payload(&json!({"a": 1})).unwrap();
        let r = call_result("t", operation_outcome(completed(p))).unwrap();
        assert_eq!(r["structuredContent"], json!({"a": 1}));
        assert_eq!(r["isError"], false);
    }

    #[test]
    fn an_upstreams_jsonrpc_error_is_a_failed_call_of_its_codes_type() {
        let error = durable_mcp_contract::jsonrpc_error::JsonRpcError {
            code: -32602,
            message: "bad x".into(),
            data: Some(json!({"field": "x"})),
        };
        let result = NexusOperationResult {
            status: Some(Status::Completed(error.to_payload().unwrap())),
        };
        let err = call_result("x", operation_outcome(result)).unwrap_err();
        assert_eq!(err.kind(), ToolCallErrorKind::Failed);
        assert_eq!(err.error_type(), Some(ToolCallErrorType::InvalidArguments));
        assert_eq!(err.message(), "bad x");
        assert_eq!(err.to_string(), "x failed (InvalidArguments): bad x");
        let result = err.to_call_tool_result();
        assert_eq!(result["isError"], true);
        assert_eq!(
            result["_meta"]["io.durable-mcp/jsonRpcError"],
            json!({"code": -32602, "message": "bad x", "data": {"field": "x"}})
        );
    }

    #[test]
    fn feature_answers_are_as_written_and_jsonrpc_errors_are_typed() {
        let read = json!({"contents": [{"uri": "a://b", "text": "hi"}]});
        let done = NexusOperationResult {
            status: Some(Status::Completed(payload::to_payload(&read).unwrap())),
        };
        assert_eq!(
            feature_result("read_resource", operation_outcome(done)).unwrap(),
            read
        );
        let missing = durable_mcp_contract::jsonrpc_error::JsonRpcError {
            code: -32002,
            message: "Resource not found: a://c".into(),
            data: None,
        };
        let result = NexusOperationResult {
            status: Some(Status::Completed(missing.to_payload().unwrap())),
        };
        let err = feature_result("read_resource", operation_outcome(result)).unwrap_err();
        assert_eq!(err.kind(), ToolCallErrorKind::Failed);
        assert_eq!(err.error_type(), Some(ToolCallErrorType::UpstreamRejected));
        assert_eq!(err.message(), "Resource not found: a://c");
    }

    #[test]
    fn failures_are_typed_errors_with_the_stable_type() {
        let result = NexusOperationResult {
            status: Some(Status::Failed(app_failure("no tool x", "UnknownTool"))),
        };
        let err = call_result("x", operation_outcome(result)).unwrap_err();
        assert_eq!(err.kind(), ToolCallErrorKind::Failed);
        assert_eq!(err.error_type(), Some(ToolCallErrorType::UnknownTool));
        assert_eq!(err.failure_type(), Some("UnknownTool"));
        assert_eq!(err.message(), "no tool x");
        assert_eq!(err.to_string(), "x failed (UnknownTool): no tool x");
        assert_eq!(
            err.to_call_tool_result(),
            json!({
                "content": [{"type": "text", "text": "no tool x"}],
                "isError": true,
                "_meta": {"io.durable-mcp/errorType": "UnknownTool"}
            })
        );
        let other = call_result(
            "x",
            operation_outcome(NexusOperationResult {
                status: Some(Status::Failed(app_failure(
                    "differs",
                    ConnectorErrorType::IdempotencyConflict.as_str(),
                ))),
            }),
        )
        .unwrap_err();
        assert_eq!(other.error_type(), None);
        assert_eq!(
            other.failure_type(),
            Some(ConnectorErrorType::IdempotencyConflict.as_str())
        );
    }

    #[test]
    fn cancels_and_timeouts_are_their_own_kinds() {
        let canceled = NexusOperationResult {
            status: Some(Status::Cancelled(Failure {
                message: "operation canceled".into(),
                failure_info: Some(FailureInfo::CanceledFailureInfo(
                    CanceledFailureInfo::default(),
                )),
                ..Default::default()
            })),
        };
        let err = call_result("slow", operation_outcome(canceled)).unwrap_err();
        assert_eq!(err.kind(), ToolCallErrorKind::Canceled);
        assert_eq!(err.error_type(), Some(ToolCallErrorType::Canceled));
        assert_eq!(
            err.to_call_tool_result()["content"][0]["text"],
            "The tool call was canceled: operation canceled"
        );
        let timed_out = NexusOperationResult {
            status: Some(Status::TimedOut(Failure {
                message: "operation timed out".into(),
                ..Default::default()
            })),
        };
        let err = call_result("slow", operation_outcome(timed_out)).unwrap_err();
        assert_eq!(err.kind(), ToolCallErrorKind::TimedOut);
        assert_eq!(err.error_type(), None);
    }

    #[test]
    fn listings_are_arrays_of_named_tools() {
        let tools = json!([{"name": "a", "inputSchema": {"type": "object"}}]);
        let p = payload::to_marked_payload(&tools, payload::TOOL_LIST).unwrap();
        assert_eq!(
            tool_list(operation_outcome(completed(p))).unwrap(),
            tools.as_array().unwrap().clone()
        );
        let bad = payload::to_payload(&json!({"tools": []})).unwrap();
        let err = tool_list(operation_outcome(completed(bad))).unwrap_err();
        assert_eq!(
            err.error_type(),
            Some(ToolCallErrorType::UpstreamProtocolError)
        );
    }

    /// The answer of a listing to a call (or of a call to a listing) is found, and is an
    /// `UpstreamProtocolError` once recorded (a live run) instead of a stuck Workflow.
    fn refused(operation: &str, outcome: &OperationOutcome, other_kind: &str) -> ToolCallError {
        let what = wrong_kind(operation, outcome, other_kind).expect("the wrong kind is found");
        unexpected_answer(operation, &what, true)
    }

    #[test]
    fn a_wrong_kind_of_answer_in_a_live_run_is_an_error() {
        let listing = payload::to_marked_payload(&json!([]), payload::TOOL_LIST).unwrap();
        let err = refused(
            "echo",
            &operation_outcome(completed(listing)),
            payload::TOOL_LIST,
        );
        assert_eq!(
            err.error_type(),
            Some(ToolCallErrorType::UpstreamProtocolError)
        );
        assert!(err.message().contains("\"echo\""), "{err}");
        let call =
            payload::to_marked_payload(&json!({"content": []}), payload::CALL_TOOL_RESULT).unwrap();
        let err = refused(
            "list_tools",
            &operation_outcome(completed(call)),
            payload::CALL_TOOL_RESULT,
        );
        assert_eq!(err.kind(), ToolCallErrorKind::Failed);
        // Answers of the right kind, and unmarked ones, are not wrong.
        let plain = payload::to_payload(&json!({"content": []})).unwrap();
        let outcome = operation_outcome(completed(plain));
        assert_eq!(wrong_kind("echo", &outcome, payload::TOOL_LIST), None);
    }

    #[test]
    #[should_panic(expected = "nondeterminism")]
    fn a_listing_where_a_call_was_recorded_is_nondeterminism() {
        let p =
            payload::to_marked_payload(&json!({"content": []}), payload::CALL_TOOL_RESULT).unwrap();
        let outcome = operation_outcome(completed(p));
        let what = wrong_kind("list_tools", &outcome, payload::CALL_TOOL_RESULT).unwrap();
        let _ = unexpected_answer("list_tools", &what, false);
    }

    #[test]
    #[should_panic(expected = "nondeterminism")]
    fn a_call_where_a_listing_was_recorded_is_nondeterminism() {
        let p = payload::to_marked_payload(&json!([]), payload::TOOL_LIST).unwrap();
        let outcome = operation_outcome(completed(p));
        let what = wrong_kind("echo", &outcome, payload::TOOL_LIST).unwrap();
        let _ = unexpected_answer("echo", &what, false);
    }

    #[test]
    fn tokens_of_the_same_call_or_of_other_kinds_pass() {
        let token = |id: &str| {
            serde_json::to_string(&CallToken {
                activity_id: id.into(),
                run_id: "r".into(),
            })
            .unwrap()
        };
        assert_eq!(token_mismatch("svc", "echo", None), None);
        assert_eq!(token_mismatch("svc", "echo", Some("wf-token")), None);
        assert_eq!(
            token_mismatch("svc", "echo", Some(&token("mcp/svc/echo/req"))),
            None
        );
        let other = token_mismatch("svc", "echo", Some(&token("mcp/svc/add/req")))
            .expect("another tool's token does not fit");
        assert!(other.contains("mcp/svc/add/req"), "{other}");
        let caught = std::panic::catch_unwind(|| unexpected_answer("echo", &other, false));
        assert!(
            caught.is_err(),
            "unrecorded, another tool's token is nondeterminism"
        );
        let err = unexpected_answer("echo", &other, true);
        assert_eq!(
            err.error_type(),
            Some(ToolCallErrorType::UpstreamProtocolError)
        );
    }

    #[test]
    fn a_round_that_asks_is_an_error_carrying_the_requests() {
        let asked = InputRequired {
            result: json!({
                "resultType": "input_required",
                "inputRequests": {"confirm": {"method": "elicitation/create", "params": {}}},
                "requestState": "s"
            }),
            arguments: json!({"path": "/x"}).as_object().unwrap().clone(),
            ..Default::default()
        };
        let p = payload::to_marked_payload(&asked, durable_mcp_contract::input::INPUT_REQUIRED)
            .unwrap();
        let e = call_result("delete_files", operation_outcome(completed(p))).unwrap_err();
        assert_eq!(e.input_required(), Some(&asked));
        assert_eq!(
            e.input_required().unwrap().input_requests()["confirm"]["method"],
            "elicitation/create"
        );
        let failed = ToolCallError::local("t", ToolCallErrorType::InvalidArguments, "x".into());
        assert_eq!(failed.input_required(), None);
    }
}
