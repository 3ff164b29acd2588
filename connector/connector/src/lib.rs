//! # durable-mcp-connector
//!
//! The inbound connector: MCP callers in, standalone Nexus operations out.
//!
//! The rules are plain data and functions, without I/O, so each is tested on its own:
//!
//! - [`task_ref`]: signed, caller-scoped task IDs (no task table anywhere).
//! - [`idempotency`]: `_meta` idempotency keys, the operation IDs they give, argument fingerprints.
//! - [`route`]: `--route` values and the merged tool list of all routes.
//!
//! The I/O around them: [`server`] (the rmcp `ServerHandler`), [`http`] (Streamable HTTP in
//! axum, on the bounded accept loop of [`listener`], with [`as_written_http`] writing answers as
//! the tool service gave them and [`unreadable_body`] answering bodies rmcp cannot read with
//! JSON-RPC errors), [`auth`] (inbound OAuth: bearer tokens to caller scopes) and [`progress`] (the
//! upstream's progress for waiting callers).
//!
//! Beside the routed tools, [`local`] tools are served in-process: [`temporal_tools`] (Temporal
//! operations as MCP tools, `--temporal-tools`) is one such set.

pub mod as_written_http;
pub mod auth;
pub mod counted_sessions;
pub mod fair;
pub mod forwarded;
pub mod health;
pub mod http;
pub mod idempotency;
pub mod listener;
pub mod local;
pub mod metrics;
pub mod operation_id;
pub mod progress;
#[cfg(test)]
mod props;
pub mod route;
pub mod server;
pub mod session_requests;
pub mod stdio;
pub mod task_ref;
pub mod temporal_tools;
pub mod trace;
pub mod unreadable_body;
mod yaml;
