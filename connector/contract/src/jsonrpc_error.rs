//! An upstream's JSON-RPC error, carried through Temporal unchanged (R-PRX-4, R-CON-4).
//!
//! When an upstream answers `tools/call` with a JSON-RPC `error` object (not a result) and the
//! call is not retried again, the proxy's Activity ends with that error object as its result:
//! a `json/plain` payload marked [`JSONRPC_ERROR`] (the codec applies as for any result), so
//! `code`, `message` and `data` reach the connector exactly as the upstream wrote them. The
//! connector answers a task caller with a `failed` task inlining it, and a waiting caller
//! with the same JSON-RPC error. A tool error (`isError: true`) is a result, never this.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use temporalio_protos::temporal::api::common::v1::Payload;

use crate::{errors::ToolCallErrorType, payload};

/// The [`payload::MCP_TYPE_KEY`] value for a payload holding an upstream's JSON-RPC error
/// object.
pub const JSONRPC_ERROR: &str = "JSONRPCError";

/// A JSON-RPC error object: `{code, message, data?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    pub code: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl JsonRpcError {
    /// The error as a payload marked [`JSONRPC_ERROR`].
    pub fn to_payload(&self) -> Result<Payload, payload::PayloadError> {
        payload::to_marked_payload(self, JSONRPC_ERROR)
    }

    /// The error a payload holds, when it is marked [`JSONRPC_ERROR`]: `None` for any other
    /// payload, an error for a marked one that is no JSON-RPC error object.
    pub fn from_payload(p: &Payload) -> Option<Result<Self, String>> {
        if payload::mcp_type(p) != Some(JSONRPC_ERROR) {
            return None;
        }
        Some(
            payload::to_json(p)
                .map_err(|e| e.to_string())
                .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
                .map_err(|e| format!("the call ended with a malformed JSON-RPC error: {e}")),
        )
    }

    /// The error object as JSON, for a `failed` task's `error` (SEP-2663).
    pub fn to_object(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }

    /// The stable error type of this error (R-NXC-4).
    pub fn error_type(&self) -> ToolCallErrorType {
        ToolCallErrorType::of_jsonrpc_code(self.code)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_error_object_survives_a_payload_unchanged() {
        let e = JsonRpcError {
            code: -32603,
            message: "boom".into(),
            data: Some(json!({"n": 1, "x": [1.5, "a", null]})),
        };
        let p = e.to_payload().unwrap();
        assert_eq!(payload::mcp_type(&p), Some(JSONRPC_ERROR));
        assert_eq!(JsonRpcError::from_payload(&p), Some(Ok(e.clone())));
        assert_eq!(
            Value::Object(e.to_object()),
            json!({"code": -32603, "message": "boom", "data": {"n": 1, "x": [1.5, "a", null]}})
        );
        let bare = JsonRpcError {
            code: 7,
            message: String::new(),
            data: None,
        };
        assert_eq!(
            Value::Object(bare.to_object()),
            json!({"code": 7, "message": ""})
        );
    }

    #[test]
    fn other_payloads_are_no_error_and_malformed_ones_say_so() {
        let result = payload::to_marked_payload(&json!({}), payload::CALL_TOOL_RESULT).unwrap();
        assert_eq!(JsonRpcError::from_payload(&result), None);
        let bad = payload::to_marked_payload(&json!({"code": "x"}), JSONRPC_ERROR).unwrap();
        assert!(
            matches!(JsonRpcError::from_payload(&bad), Some(Err(m)) if m.contains("malformed"))
        );
    }
}
