//! MCP <-> Temporal payload conversion (R-NXC-3): the one place where MCP values become payloads.
//!
//! A payload marked [`CALL_TOOL_RESULT`] holds a whole MCP `CallToolResult` that callers pass
//! through unchanged; an unmarked payload is a plain value that the outcome table wraps. The connector, the proxy, native tools and the in-Workflow client
//! all convert through here, so the marker is written and read in one place. The `json/plain`
//! encoding underneath (and the codec hook between it and the wire) is in the private
//! `encoding` module, re-exported here so that one import serves.

use serde::Serialize;
use temporalio_protos::temporal::api::common::v1::Payload;

mod encoding;

pub use encoding::{
    ENCODING_KEY, IdentityCodec, JSON_ENCODING, NULL_ENCODING, PayloadCodec, PayloadError,
    decode_one, encode_one, encoding, from_payload, to_json, to_payload,
};

/// Metadata key that marks what a JSON payload holds. Its value names the MCP type, for example
/// [`CALL_TOOL_RESULT`]: a caller tells a whole tool result from a plain value by it.
pub const MCP_TYPE_KEY: &str = "mcp-type";
/// The [`MCP_TYPE_KEY`] value for a whole MCP `CallToolResult`.
pub const CALL_TOOL_RESULT: &str = "CallToolResult";
/// The [`MCP_TYPE_KEY`] value for an MCP `tools/list` answer (a list of Tool objects).
pub const TOOL_LIST: &str = "ToolList";

/// The largest payload a call's arguments or result may be: Temporal refuses payloads over
/// 2 MiB (the server's default blob size limit), and this leaves room for metadata.
pub const MAX_PAYLOAD_BYTES: usize = 2 * 1024 * 1024 - 4 * 1024;

/// Encodes a value as a `json/plain` payload marked with an MCP type (see [`MCP_TYPE_KEY`]).
pub fn to_marked_payload<T: Serialize + ?Sized>(
    value: &T,
    mcp_type: &str,
) -> Result<Payload, PayloadError> {
    let mut payload = to_payload(value)?;
    payload
        .metadata
        .insert(MCP_TYPE_KEY.to_owned(), mcp_type.as_bytes().to_vec());
    Ok(payload)
}

/// The MCP type a payload is marked with, if any.
pub fn mcp_type(payload: &Payload) -> Option<&str> {
    payload
        .metadata
        .get(MCP_TYPE_KEY)
        .and_then(|v| std::str::from_utf8(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn marked_payload_carries_its_mcp_type() {
        let payload = to_marked_payload(&json!({"content": []}), CALL_TOOL_RESULT).unwrap();
        assert_eq!(mcp_type(&payload), Some(CALL_TOOL_RESULT));
        assert_eq!(encoding(&payload), Some(JSON_ENCODING));
    }

    #[test]
    fn plain_payload_has_no_mcp_type() {
        assert_eq!(mcp_type(&to_payload(&json!({"a": 1})).unwrap()), None);
    }
}
