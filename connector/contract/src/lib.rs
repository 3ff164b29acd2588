//! # durable-mcp-contract
//!
//! The MCP-tool contract over Nexus (R-NXC-*): everything both sides of a tool service agree
//! on. The connector, the proxy, native tool services and the in-Workflow client all build on
//! this crate and on nothing of each other's:
//!
//! - [`listing`]: the reserved `list_tools` operation and the advertised per-tool timeout.
//! - [`operation_name`]: a tool's Nexus operation name, reversibly encoded (R-NXC-5).
//! - [`call`]: the operation token of an Activity-backed call, its heartbeat and progress shapes.
//! - [`operation`]: how a Nexus operation ends (outcome, status, handler error kinds).
//! - [`outcome`]: a Nexus outcome as the MCP `CallToolResult` a caller sees.
//! - [`errors`]: the stable error type names.
//! - [`jsonrpc_error`]: an upstream's JSON-RPC error, carried as a call's end.
//! - [`input`]: durable input: a round that asks for input, the next round's input.
//! - [`payload`]: MCP values as Temporal payloads (`json/plain`, the `CallToolResult` marker,
//!   the codec hook).
//! - [`trace_context`]: the names a call's W3C trace context travels under.
//! - [`json`]: a JSON value's kind as messages name it.
//!
//! Plain data and pure rules only: no network, no runtime. The I/O is in the crates above.

pub mod call;
pub mod errors;
pub mod features;
pub mod input;
pub mod json;
pub mod jsonrpc_error;
pub mod listing;
pub mod operation;
pub mod operation_name;
pub mod outcome;
pub mod payload;
#[cfg(any(test, feature = "props"))]
pub mod props;
pub mod trace_context;
