//! How a Nexus operation's outcome becomes the MCP `CallToolResult` the caller sees (R-CON-3):
//! one table, shared by every caller (the connector, the in-Workflow client).
//!
//! | Outcome | `CallToolResult` |
//! |---|---|
//! | Result, payload marked `CallToolResult` | passed through unchanged (content, `structuredContent`, `_meta` and `isError` as the tool gave them) |
//! | Result, plain string | `{"content": [{"type": "text", "text": <the string>}], "isError": false}` |
//! | Result, plain object | text content with the compact JSON text, `"isError": false`, and `"structuredContent": <the object>` |
//! | Result, any other plain value | text content with the compact JSON text, `"isError": false` |
//! | Failed, type `ToolCallOutcomeUnknown` | `isError: true`, text: [`OUTCOME_UNKNOWN`] then the failure message; type in `_meta` |
//! | Failed | `isError: true`, text: the failure message (`The tool call failed.` when empty); `_meta["io.durable-mcp/errorType"]` = the failure's type when known |
//! | Canceled | `isError: true`, text: `The tool call was canceled: <message>`; type `Canceled` |
//! | TimedOut, one-attempt tool | `isError: true`, text: [`OUTCOME_UNKNOWN`] then `(<message>)`; type `ToolCallOutcomeUnknown` |
//! | TimedOut | `isError: true`, text: `The tool call timed out: <message>`; type `UpstreamTimeout` |
//! | Terminated | `isError: true`, text: `The tool call was terminated: <message>` |
//! | InputRequired (payload marked `InputRequired`, R-PRX-29) | for a caller that cannot answer input requests: `isError: true`, text: [`INPUT_NOT_GIVEN`]; type `InputRequired` (the connector answers its own callers with the requests instead, R-CON-40) |
//! | JsonRpcError | `isError: true`, text: `The upstream answered with JSON-RPC error <code>: <message>`; the code's type (R-PRX-4) in `_meta`, and the error object under [`JSONRPC_ERROR_META`] |
//!
//! The connector answers a JsonRpcError outcome without this table: a task caller's task is
//! `failed` with the error inlined, a waiting caller gets the JSON-RPC error itself (R-CON-4);
//! the `CallToolResult` above is for callers that can only take a result (the in-Workflow
//! client's `to_call_tool_result`).
//!
//! The message is the one Temporal reports; an empty message drops the `: <message>` tail.
//! A one-attempt tool (one that must not run twice, see
//! [`super::listing::ONE_ATTEMPT_META_KEY`]) whose attempt ended without an answer (its worker
//! was killed, its heartbeat or attempt timed out) may or may not have run, and it was not run
//! again: the caller is told exactly that, so it checks before calling again.
//! Failures are tool errors (`isError`), not JSON-RPC errors: the call reached the tool's
//! execution, and MCP tells models to read tool errors and react to them. The three fixed
//! prefixes let a caller tell "stopped" apart from "the tool said no" without parsing Temporal
//! messages. Only a plain *object* becomes `structuredContent`, because MCP requires it to be
//! one.

use serde_json::{Map, Value, json};

use temporalio_protos::temporal::api::common::v1::Payload;

use super::{
    errors::ToolCallErrorType,
    input::{INPUT_REQUIRED, INPUT_REQUIRED_ERROR_TYPE, InputRequired},
    jsonrpc_error::JsonRpcError,
    payload,
};
use crate::operation::{HandlerErrorKind, OperationOutcome};

/// `_meta` key carrying a tool error's type: a failed operation's (a [`ToolCallErrorType`], or an
/// application error type the tool service chose), or one of the connector's own
/// ([`ConnectorErrorType`](crate::errors::ConnectorErrorType), such as `IdempotencyConflict`).
pub const ERROR_TYPE_META: &str = "io.durable-mcp/errorType";

/// `_meta` key carrying, in the `CallToolResult` a JSON-RPC error outcome becomes, the
/// upstream's error object unchanged.
pub const JSONRPC_ERROR_META: &str = "io.durable-mcp/jsonRpcError";
/// The text of a tool error about a call that asked for input its caller cannot give.
pub const INPUT_NOT_GIVEN: &str = "The tool asked for input (an elicitation, a sampling or a roots request) that this caller cannot give, so the call stopped there. Call it through a caller that answers input requests (MCP 2026-07-28, or the tasks extension).";

/// How a tool error about a call of unknown outcome begins.
pub const OUTCOME_UNKNOWN: &str = "The tool call's outcome is unknown: it may or may not have run, and it was not retried, because this tool must not run twice. Check its effects before calling it again.";

/// How a Nexus operation ended, as the connector sees it after decoding payloads.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Completed with a value; `marked_call_tool_result` says the payload was marked as a whole
    /// MCP `CallToolResult` (see [`payload::CALL_TOOL_RESULT`]).
    Result {
        payload_json: Value,
        marked_call_tool_result: bool,
    },
    /// The operation failed; `error_type` is the failure's type when Temporal reports one.
    Failed {
        message: String,
        error_type: Option<String>,
    },
    Canceled {
        message: String,
    },
    TimedOut {
        message: String,
    },
    Terminated {
        message: String,
    },
    /// The upstream answered with a JSON-RPC error and no retry was left: its error object,
    /// unchanged (R-PRX-4, R-CON-4; a payload marked
    /// [`JSONRPC_ERROR`](crate::jsonrpc_error::JSONRPC_ERROR)).
    JsonRpcError(JsonRpcError),
    /// The round ended asking for input (R-PRX-29): the upstream's requests, and the arguments
    /// the next round calls the tool with again.
    InputRequired(Box<InputRequired>),
}

impl Outcome {
    /// The outcome of a Nexus operation, with its result payload decoded. A result that cannot
    /// be decoded is a failure saying why; a handler error (no application error type) gets
    /// the stable type of its kind (R-NXC-6), its kind stays in the message.
    pub fn from_operation(outcome: OperationOutcome) -> Self {
        match outcome {
            OperationOutcome::Succeeded(p) if payload::mcp_type(&p) == Some(INPUT_REQUIRED) => {
                match payload::from_payload::<InputRequired>(&p) {
                    Ok(asked) => Outcome::InputRequired(Box::new(asked)),
                    Err(e) => Outcome::Failed {
                        message: e.to_string(),
                        error_type: None,
                    },
                }
            }
            OperationOutcome::Succeeded(p) => match JsonRpcError::from_payload(&p) {
                Some(Ok(error)) => Outcome::JsonRpcError(error),
                Some(Err(message)) => Outcome::Failed {
                    message,
                    error_type: Some(ToolCallErrorType::UpstreamProtocolError.as_str().into()),
                },
                None => Self::result(&p),
            },
            OperationOutcome::Failed {
                message,
                error_type,
                handler_error,
            } => Outcome::Failed {
                message,
                error_type: error_type
                    .or_else(|| handler_error.map(|k| handler_error_type(k).as_str().to_owned())),
            },
            OperationOutcome::Canceled { message } => Outcome::Canceled { message },
            OperationOutcome::TimedOut { message } => Outcome::TimedOut { message },
            OperationOutcome::Terminated { message } => Outcome::Terminated { message },
        }
    }

    /// A completed operation's result payload, decoded; one that cannot be decoded is a
    /// failure saying why.
    fn result(p: &Payload) -> Self {
        let marked = payload::mcp_type(p) == Some(payload::CALL_TOOL_RESULT);
        match payload::to_json(p) {
            Ok(payload_json) => Outcome::Result {
                payload_json,
                marked_call_tool_result: marked,
            },
            Err(e) => Outcome::Failed {
                message: e.to_string(),
                error_type: None,
            },
        }
    }
}

/// The stable type (R-NXC-4) of a Nexus handler error (R-NXC-6): the kinds are Nexus's words
/// for a request that failed, which callers matching on R-NXC-4's types cannot know.
pub fn handler_error_type(kind: HandlerErrorKind) -> ToolCallErrorType {
    use HandlerErrorKind as K;
    match kind {
        // The service has no such operation: the tool is not there.
        K::NotFound | K::NotImplemented => ToolCallErrorType::UnknownTool,
        K::BadRequest => ToolCallErrorType::InvalidArguments,
        K::RequestTimeout | K::UpstreamTimeout => ToolCallErrorType::UpstreamTimeout,
        K::Unauthenticated | K::Unauthorized | K::Conflict => ToolCallErrorType::UpstreamRejected,
        K::ResourceExhausted | K::Internal | K::Unavailable => {
            ToolCallErrorType::UpstreamUnavailable
        }
    }
}

/// The `CallToolResult` JSON for an outcome of a tool that is retried (see the module doc's
/// table).
pub fn to_call_tool_result(o: &Outcome) -> Value {
    to_call_tool_result_for(o, false)
}

/// The `CallToolResult` JSON for an outcome; `one_attempt` says the tool gets one attempt
/// (see the module doc's table).
pub fn to_call_tool_result_for(o: &Outcome, one_attempt: bool) -> Value {
    match o {
        Outcome::Result {
            payload_json,
            marked_call_tool_result: true,
        } => payload_json.clone(),
        Outcome::Result {
            payload_json,
            marked_call_tool_result: false,
        } => {
            let text = match payload_json {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut result = text_result(text, false);
            if payload_json.is_object() {
                result.insert("structuredContent".into(), payload_json.clone());
            }
            Value::Object(result)
        }
        Outcome::Failed {
            message,
            error_type: Some(t),
        } if t == ToolCallErrorType::ToolCallOutcomeUnknown.as_str() => typed_error(
            format!("{OUTCOME_UNKNOWN} {message}").trim_end().to_owned(),
            t,
        ),
        Outcome::Failed {
            message,
            error_type,
        } => {
            let text = if message.is_empty() {
                "The tool call failed.".to_owned()
            } else {
                message.clone()
            };
            let mut result = text_result(text, true);
            if let Some(t) = error_type {
                result.insert("_meta".into(), json!({ ERROR_TYPE_META: t }));
            }
            Value::Object(result)
        }
        Outcome::Canceled { message } => typed_error(
            prefixed("The tool call was canceled", message),
            ToolCallErrorType::Canceled.as_str(),
        ),
        Outcome::TimedOut { message } if one_attempt => {
            let text = if message.is_empty() {
                OUTCOME_UNKNOWN.to_owned()
            } else {
                format!("{OUTCOME_UNKNOWN} ({message})")
            };
            typed_error(text, ToolCallErrorType::ToolCallOutcomeUnknown.as_str())
        }
        Outcome::TimedOut { message } => typed_error(
            prefixed("The tool call timed out", message),
            ToolCallErrorType::UpstreamTimeout.as_str(),
        ),
        Outcome::Terminated { message } => Value::Object(text_result(
            prefixed("The tool call was terminated", message),
            true,
        )),
        Outcome::JsonRpcError(e) => {
            let text = format!(
                "The upstream answered with JSON-RPC error {}: {}",
                e.code, e.message
            );
            let mut result = text_result(text, true);
            result.insert(
                "_meta".into(),
                json!({ ERROR_TYPE_META: e.error_type().as_str(), JSONRPC_ERROR_META: e }),
            );
            Value::Object(result)
        }
        Outcome::InputRequired(_) => {
            typed_error(INPUT_NOT_GIVEN.to_owned(), INPUT_REQUIRED_ERROR_TYPE)
        }
    }
}

/// A tool error with its stable type in `_meta`.
fn typed_error(text: String, error_type: &str) -> Value {
    let mut result = text_result(text, true);
    result.insert("_meta".into(), json!({ ERROR_TYPE_META: error_type }));
    Value::Object(result)
}

fn prefixed(prefix: &str, message: &str) -> String {
    if message.is_empty() {
        format!("{prefix}.")
    } else {
        format!("{prefix}: {message}")
    }
}

fn text_result(text: String, is_error: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("content".into(), json!([{ "type": "text", "text": text }]));
    m.insert("isError".into(), Value::Bool(is_error));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::ConnectorErrorType;

    const IDEMPOTENCY_CONFLICT: &str = ConnectorErrorType::IdempotencyConflict.as_str();

    fn plain(v: Value) -> Value {
        to_call_tool_result(&Outcome::Result {
            payload_json: v,
            marked_call_tool_result: false,
        })
    }

    #[test]
    fn marked_results_pass_unchanged() {
        let r = json!({
            "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structuredContent": {"a": 1},
            "isError": true,
            "_meta": {"x": 1}
        });
        assert_eq!(
            to_call_tool_result(&Outcome::Result {
                payload_json: r.clone(),
                marked_call_tool_result: true
            }),
            r
        );
    }

    #[test]
    fn plain_strings_become_their_text() {
        assert_eq!(
            plain(json!("hello")),
            json!({"content": [{"type": "text", "text": "hello"}], "isError": false})
        );
    }

    #[test]
    fn plain_objects_also_become_structured_content() {
        let value = json!({"b": [1, 2], "a": "x"});
        let r = plain(value.clone());
        assert_eq!(r["isError"], false);
        assert_eq!(r["structuredContent"], value);
        assert_eq!(r["content"].as_array().unwrap().len(), 1);
        assert_eq!(r["content"][0]["type"], "text");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(!text.contains(' '), "compact JSON: {text}");
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), value);
        assert_eq!(r.as_object().unwrap().len(), 3);
    }

    #[test]
    fn other_plain_values_become_json_text_only() {
        for (v, text) in [
            (json!(42), "42"),
            (json!([1, "a"]), r#"[1,"a"]"#),
            (json!(null), "null"),
            (json!(true), "true"),
        ] {
            assert_eq!(
                plain(v),
                json!({"content": [{"type": "text", "text": text}], "isError": false})
            );
        }
    }

    #[test]
    fn handler_errors_get_stable_types_and_keep_their_kind_in_the_message() {
        for kind in HandlerErrorKind::ALL {
            let outcome = Outcome::from_operation(OperationOutcome::Failed {
                message: format!("handler error ({}): no", kind.as_str()),
                error_type: None,
                handler_error: Some(kind),
            });
            let Outcome::Failed {
                error_type,
                message,
            } = &outcome
            else {
                panic!("{outcome:?}")
            };
            let t = error_type.as_deref().unwrap();
            assert!(ToolCallErrorType::parse(t).is_some(), "{kind:?} became {t}");
            assert!(message.contains(kind.as_str()), "{message}");
        }
        assert_eq!(
            handler_error_type(HandlerErrorKind::NotFound),
            ToolCallErrorType::UnknownTool
        );
        // An application error type the tool service chose is kept.
        let kept = Outcome::from_operation(OperationOutcome::Failed {
            message: "x".into(),
            error_type: Some(IDEMPOTENCY_CONFLICT.into()),
            handler_error: Some(HandlerErrorKind::Conflict),
        });
        assert!(
            matches!(&kept, Outcome::Failed { error_type: Some(t), .. } if t == IDEMPOTENCY_CONFLICT),
            "{kept:?}"
        );
    }

    #[test]
    fn a_jsonrpc_error_payload_is_the_jsonrpc_error_outcome() {
        let error = JsonRpcError {
            code: -32602,
            message: "bad x".into(),
            data: Some(json!({"field": "x", "n": 1})),
        };
        let outcome =
            Outcome::from_operation(OperationOutcome::Succeeded(error.to_payload().unwrap()));
        assert_eq!(outcome, Outcome::JsonRpcError(error.clone()));
        assert_eq!(
            to_call_tool_result(&outcome),
            json!({
                "content": [{"type": "text", "text": "The upstream answered with JSON-RPC error -32602: bad x"}],
                "isError": true,
                "_meta": {
                    ERROR_TYPE_META: "InvalidArguments",
                    JSONRPC_ERROR_META: {"code": -32602, "message": "bad x", "data": {"field": "x", "n": 1}},
                }
            })
        );
        let malformed =
            payload::to_marked_payload(&json!("no error"), crate::jsonrpc_error::JSONRPC_ERROR)
                .unwrap();
        assert!(matches!(
            Outcome::from_operation(OperationOutcome::Succeeded(malformed)),
            Outcome::Failed { error_type: Some(t), .. } if t == "UpstreamProtocolError"
        ));
    }

    #[test]
    fn failures_carry_message_and_type() {
        let typed = Outcome::Failed {
            message: "arguments differ".into(),
            error_type: Some(IDEMPOTENCY_CONFLICT.into()),
        };
        assert_eq!(
            to_call_tool_result(&typed),
            json!({
                "content": [{"type": "text", "text": "arguments differ"}],
                "isError": true,
                "_meta": {"io.durable-mcp/errorType": IDEMPOTENCY_CONFLICT}
            })
        );
        let untyped = Outcome::Failed {
            message: "boom".into(),
            error_type: None,
        };
        assert_eq!(
            to_call_tool_result(&untyped),
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true})
        );
        let empty = Outcome::Failed {
            message: String::new(),
            error_type: None,
        };
        assert_eq!(
            to_call_tool_result(&empty)["content"][0]["text"],
            "The tool call failed."
        );
    }

    #[test]
    fn stops_have_distinct_prefixes() {
        let cases = [
            (
                Outcome::Canceled {
                    message: "by caller".into(),
                },
                "The tool call was canceled: by caller",
            ),
            (
                Outcome::TimedOut {
                    message: "after 30s".into(),
                },
                "The tool call timed out: after 30s",
            ),
            (
                Outcome::Terminated {
                    message: "by admin".into(),
                },
                "The tool call was terminated: by admin",
            ),
            (
                Outcome::Canceled {
                    message: String::new(),
                },
                "The tool call was canceled.",
            ),
            (
                Outcome::TimedOut {
                    message: String::new(),
                },
                "The tool call timed out.",
            ),
            (
                Outcome::Terminated {
                    message: String::new(),
                },
                "The tool call was terminated.",
            ),
        ];
        for (o, text) in cases {
            let result = to_call_tool_result(&o);
            assert_eq!(result["content"], json!([{"type": "text", "text": text}]));
            assert_eq!(result["isError"], true);
            let error_type = match o {
                Outcome::Canceled { .. } => json!("Canceled"),
                Outcome::TimedOut { .. } => json!("UpstreamTimeout"),
                _ => Value::Null,
            };
            assert_eq!(result["_meta"][ERROR_TYPE_META], error_type, "{text}");
        }
    }

    #[test]
    fn one_attempt_tools_that_ended_without_an_answer_have_unknown_outcomes() {
        let timed_out = Outcome::TimedOut {
            message: "activity Heartbeat timeout".into(),
        };
        let result = to_call_tool_result_for(&timed_out, true);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(OUTCOME_UNKNOWN), "{text}");
        assert!(text.contains("may or may not have run"), "{text}");
        assert!(text.ends_with("(activity Heartbeat timeout)"), "{text}");
        assert_eq!(result["isError"], true);
        assert_eq!(result["_meta"][ERROR_TYPE_META], "ToolCallOutcomeUnknown");
        // A tool that is retried just timed out.
        let retried = to_call_tool_result_for(&timed_out, false);
        assert_eq!(retried["_meta"][ERROR_TYPE_META], "UpstreamTimeout");
        // The proxy's own verdict (a crash or reset after the send) says the same, whatever the
        // caller knows of the tool.
        let failed = Outcome::Failed {
            message: "upstream \"s\" failed during the request: connection closed".into(),
            error_type: Some("ToolCallOutcomeUnknown".into()),
        };
        let result = to_call_tool_result(&failed);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(OUTCOME_UNKNOWN), "{text}");
        assert!(text.ends_with("connection closed"), "{text}");
        assert_eq!(result["_meta"][ERROR_TYPE_META], "ToolCallOutcomeUnknown");
    }

    #[test]
    fn a_round_that_asks_for_input_is_its_own_outcome() {
        let asked = InputRequired {
            result: json!({"resultType": "input_required", "requestState": "s"}),
            arguments: Map::new(),
            ..Default::default()
        };
        let marked = payload::to_marked_payload(&asked, INPUT_REQUIRED).unwrap();
        let outcome = Outcome::from_operation(OperationOutcome::Succeeded(marked));
        assert_eq!(outcome, Outcome::InputRequired(Box::new(asked)));
        // A caller that cannot answer gets a tool error saying so.
        let result = to_call_tool_result(&outcome);
        assert_eq!(result["isError"], true);
        assert_eq!(result["content"][0]["text"], INPUT_NOT_GIVEN);
        assert_eq!(result["_meta"][ERROR_TYPE_META], INPUT_REQUIRED_ERROR_TYPE);
        // Marked but unreadable is a failure, never a result.
        let broken = payload::to_marked_payload(&json!(1), INPUT_REQUIRED).unwrap();
        assert!(matches!(
            Outcome::from_operation(OperationOutcome::Succeeded(broken)),
            Outcome::Failed { .. }
        ));
    }
}
