//! What a native tool's handler answers (R-NAT-3): a result (text, structured content, any MCP
//! content, or a tool error with `isError`) or an operation failure. Pure conversions.
//!
//! A *tool error* is a result: the call ran, and the model reads the message and reacts (MCP's
//! `isError`). An *operation failure* means the call could not produce a result: a
//! non-retryable one ends the Nexus operation failed with a stable error type
//! ([`ToolCallErrorType`]); a retryable one is a retryable handler error, so the server sends
//! the start again (with the same request id) until the tool's timeout.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;

use durable_mcp_contract::{errors::ToolCallErrorType, payload};
use durable_mcp_runtime::nexus::{
    HandlerError, HandlerErrorKind, OperationError, RetryBehavior, StartError,
};

/// A whole MCP `CallToolResult`, built up by a handler.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolResult {
    content: Vec<Value>,
    structured: Option<Value>,
    is_error: bool,
    meta: Option<Map<String, Value>>,
}

impl ToolResult {
    /// One text content.
    pub fn text(text: impl Into<String>) -> Self {
        Self::default().with_text(text)
    }

    /// MCP content items as given (text, image, audio, resource links, embedded resources);
    /// `rmcp::model::ContentBlock` values serialize to exactly these.
    pub fn content<C: Serialize>(items: impl IntoIterator<Item = C>) -> Result<Self, String> {
        let content = items
            .into_iter()
            .map(|c| serde_json::to_value(c).map_err(|e| format!("content item: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            content,
            ..Self::default()
        })
    }

    /// A tool error: the call ran and says no. The model sees `message` with `isError: true`.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(message)
        }
    }

    /// Appends a text content.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.content
            .push(json!({"type": "text", "text": text.into()}));
        self
    }

    /// Sets `structuredContent` (MCP requires a JSON object).
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// Adds a key to the result's `_meta`.
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta
            .get_or_insert_with(Map::new)
            .insert(key.into(), value);
        self
    }

    /// The `CallToolResult` JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("content".into(), Value::Array(self.content.clone()));
        if let Some(s) = &self.structured {
            m.insert("structuredContent".into(), s.clone());
        }
        m.insert("isError".into(), Value::Bool(self.is_error));
        if let Some(meta) = &self.meta {
            m.insert("_meta".into(), Value::Object(meta.clone()));
        }
        Value::Object(m)
    }

    /// The operation's result payload: the whole result, marked `CallToolResult` (R-PAY-2), so
    /// every caller passes it through unchanged.
    pub fn to_payload(&self) -> Result<Payload, HandlerError> {
        payload::to_marked_payload(&self.to_json(), payload::CALL_TOOL_RESULT)
            .map_err(|e| HandlerError::internal(format!("encoding the tool result: {e}")))
    }
}

/// A typed structured result: `structuredContent` is the value, its JSON Schema is the tool's
/// `outputSchema`, and the text content is [`Structured::with_text`]'s (else the compact JSON,
/// for clients that read only text).
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T> {
    pub value: T,
    pub text: Option<String>,
}

impl<T> Structured<T> {
    pub fn new(value: T) -> Self {
        Self { value, text: None }
    }
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }
}

/// What a handler may return: converted into a [`ToolResult`], with the output schema its type
/// implies (only [`Structured`] has one).
pub trait IntoToolResult: Send + 'static {
    /// The tool's `outputSchema`, derived from the type.
    fn output_schema() -> Option<Value> {
        None
    }
    fn into_tool_result(self) -> Result<ToolResult, ToolFailure>;
}

impl IntoToolResult for ToolResult {
    fn into_tool_result(self) -> Result<ToolResult, ToolFailure> {
        Ok(self)
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> Result<ToolResult, ToolFailure> {
        Ok(ToolResult::text(self))
    }
}

impl<T: Serialize + JsonSchema + Send + 'static> IntoToolResult for Structured<T> {
    fn output_schema() -> Option<Value> {
        Some(schema_of::<T>())
    }
    fn into_tool_result(self) -> Result<ToolResult, ToolFailure> {
        let value = serde_json::to_value(&self.value).map_err(|e| {
            ToolFailure::non_retryable(
                ToolCallErrorType::UpstreamProtocolError,
                format!("the tool's structured result does not serialize: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(ToolFailure::non_retryable(
                ToolCallErrorType::UpstreamProtocolError,
                "the tool's structured result is not a JSON object, as MCP requires",
            ));
        }
        let text = self.text.unwrap_or_else(|| value.to_string());
        Ok(ToolResult::text(text).with_structured(value))
    }
}

/// The JSON Schema of a Rust type (schemars, draft 2020-12).
pub fn schema_of<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// The call could not produce a result (as opposed to a tool error, which is a result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error_type}: {message}")]
pub struct ToolFailure {
    pub error_type: ToolCallErrorType,
    pub message: String,
    pub retryable: bool,
}

impl ToolFailure {
    /// Final: the operation fails with `error_type` and is never retried.
    pub fn non_retryable(error_type: ToolCallErrorType, message: impl Into<String>) -> Self {
        Self {
            error_type,
            message: message.into(),
            retryable: false,
        }
    }
    /// Passing: the server retries the start (same request id) until the tool's timeout.
    pub fn retryable(error_type: ToolCallErrorType, message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            ..Self::non_retryable(error_type, message)
        }
    }
    /// The arguments do not fit the tool's input type.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::non_retryable(ToolCallErrorType::InvalidArguments, message)
    }
}

impl From<ToolFailure> for StartError {
    fn from(f: ToolFailure) -> Self {
        if f.retryable {
            // A handler error has no application type: the type leads the message instead.
            HandlerError::new(HandlerErrorKind::Unavailable, f.to_string())
                .with_retry(RetryBehavior::Retryable)
                .into()
        } else {
            OperationError::Failed {
                message: f.message,
                error_type: f.error_type.as_str().to_owned(),
                details: None,
            }
            .into()
        }
    }
}

/// Why a tool's arguments were refused.
#[derive(Debug, Clone, PartialEq)]
pub enum BadArguments {
    /// Not a JSON object (nor null): the request itself is wrong.
    NotAnObject(HandlerError),
    /// An object that does not fit the input type: the call fails with `InvalidArguments`.
    Invalid(ToolFailure),
}

impl From<BadArguments> for StartError {
    fn from(b: BadArguments) -> Self {
        match b {
            BadArguments::NotAnObject(h) => h.into(),
            BadArguments::Invalid(f) => f.into(),
        }
    }
}

/// The tool's arguments from the operation's input (R-NXC-3): a JSON object, null meaning `{}`;
/// anything else is a `BAD_REQUEST`; an object that does not fit `I` is `InvalidArguments`.
pub fn decode_arguments<I: serde::de::DeserializeOwned>(
    input: &Payload,
) -> Result<I, BadArguments> {
    let args = payload::to_json(input).map_err(|e| {
        BadArguments::NotAnObject(HandlerError::bad_request(format!("tool arguments: {e}")))
    })?;
    let args = match args {
        Value::Null => Value::Object(Map::new()),
        Value::Object(_) => args,
        other => {
            return Err(BadArguments::NotAnObject(HandlerError::bad_request(
                format!("tool arguments must be a JSON object, not {other}"),
            )));
        }
    };
    serde_json::from_value(args).map_err(|e| {
        BadArguments::Invalid(ToolFailure::invalid_arguments(format!(
            "invalid arguments: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, JsonSchema)]
    struct Count {
        words: u64,
    }

    #[test]
    fn results_have_every_part_a_handler_set() {
        let r = ToolResult::text("a")
            .with_text("b")
            .with_structured(json!({"k": 1}))
            .with_meta("x", json!(2))
            .to_json();
        assert_eq!(
            r,
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                   "structuredContent": {"k": 1}, "isError": false, "_meta": {"x": 2}})
        );
        assert_eq!(
            ToolResult::error("no such file").to_json(),
            json!({"content": [{"type": "text", "text": "no such file"}], "isError": true})
        );
        let image = rmcp::model::ContentBlock::image("AAAA", "image/png");
        let r = ToolResult::content([image]).unwrap().to_json();
        assert_eq!(r["content"][0]["type"], "image");
        assert_eq!(r["content"][0]["mimeType"], "image/png");
    }

    #[test]
    fn results_travel_marked() {
        let p = ToolResult::text("x").to_payload().unwrap();
        assert_eq!(payload::mcp_type(&p), Some(payload::CALL_TOOL_RESULT));
    }

    #[test]
    fn structured_results_carry_their_schema_and_text() {
        let schema = Structured::<Count>::output_schema().unwrap();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["words"]["type"], "integer");
        let r = Structured::new(Count { words: 3 })
            .with_text("3 words")
            .into_tool_result()
            .unwrap()
            .to_json();
        assert_eq!(r["structuredContent"], json!({"words": 3}));
        assert_eq!(r["content"][0]["text"], "3 words");
        let r = Structured::new(Count { words: 1 })
            .into_tool_result()
            .unwrap()
            .to_json();
        assert_eq!(r["content"][0]["text"], r#"{"words":1}"#);
        assert!(Structured::new(5u8).into_tool_result().is_err());
    }

    #[test]
    fn failures_are_final_or_retried_with_their_stable_type() {
        let final_: StartError =
            ToolFailure::non_retryable(ToolCallErrorType::UpstreamRejected, "no").into();
        assert_eq!(
            final_,
            StartError::Operation(OperationError::Failed {
                message: "no".into(),
                error_type: "UpstreamRejected".into(),
                details: None
            })
        );
        let passing: StartError =
            ToolFailure::retryable(ToolCallErrorType::UpstreamUnavailable, "down").into();
        let StartError::Handler(h) = passing else {
            panic!("{passing:?}")
        };
        assert!(h.is_retryable());
        assert_eq!(h.message, "UpstreamUnavailable: down");
    }

    #[test]
    fn arguments_are_an_object_or_null() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct In {
            #[serde(default)]
            text: String,
        }
        let p = |v: Value| payload::to_payload(&v).unwrap();
        assert_eq!(
            decode_arguments::<In>(&p(json!({"text": "a"}))).unwrap(),
            In { text: "a".into() }
        );
        assert_eq!(
            decode_arguments::<In>(&p(Value::Null)).unwrap(),
            In { text: "".into() }
        );
        assert!(matches!(
            decode_arguments::<In>(&p(json!([1]))),
            Err(BadArguments::NotAnObject(HandlerError {
                kind: HandlerErrorKind::BadRequest,
                ..
            }))
        ));
        let bad: StartError = decode_arguments::<In>(&p(json!({"text": 5})))
            .unwrap_err()
            .into();
        let StartError::Operation(OperationError::Failed { error_type, .. }) = bad else {
            panic!("{bad:?}")
        };
        assert_eq!(error_type, "InvalidArguments");
    }
}
