//! The MCP-tool contract over Nexus (R-NXC-*): everything both sides of a tool service agree on.
//!
//! The connector, the proxy, native tool services and the in-Workflow client all build on this
//! module and on nothing of each other's:
//!
//! - [`listing`]: the reserved `list_tools` operation and the advertised per-tool timeout.
//! - [`operation_name`]: a tool's Nexus operation name, reversibly encoded (R-NXC-5).
//! - [`call`]: the operation token of an Activity-backed call, its heartbeat and progress shapes.
//! - [`outcome`]: a Nexus outcome as the MCP `CallToolResult` a caller sees.
//! - [`errors`]: the stable error type names.
//! - [`payload`]: MCP values as Temporal payloads (the `CallToolResult` marker).
//! - [`local`]: tools a connector serves in-process beside its routed ones.
//! - [`logs`]: the binaries' logger, which keeps MCP message contents out of log lines.
//!
//! Plain data and pure functions only (but for installing that logger); the I/O is in the
//! layers above and below.

pub mod call;
pub mod errors;
pub mod listing;
pub mod local;
pub mod logs;
pub mod operation_name;
pub mod outcome;
pub mod payload;
