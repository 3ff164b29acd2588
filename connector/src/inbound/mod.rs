//! The inbound connector's pure rules: MCP callers in, standalone Nexus operations out.
//!
//! Everything here is plain data and functions, without I/O, so each rule is tested on its own:
//!
//! - [`task_ref`]: signed, caller-scoped task IDs (no task table anywhere).
//! - [`idempotency`]: `_meta` idempotency keys, the operation IDs they give, argument fingerprints.
//! - [`route`]: `--route` values and the merged tool list of all routes.
//! - [`outcome`]: a Nexus operation's outcome as an MCP `CallToolResult`.

pub mod http;
pub mod idempotency;
pub mod outcome;
pub mod route;
pub mod server;
pub mod task_ref;
