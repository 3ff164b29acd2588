//! The in-Workflow MCP client (R-WFC-*): Rust Workflow code lists and calls the MCP tools of a
//! tool service (a proxied upstream or native tools) through Nexus, durably and
//! deterministically.
//!
//! - [`tools`]: [`McpTools`], the API a Workflow uses.
//! - [`features`]: the service's resources and prompts, listed and read through [`McpTools`].
//! - [`options`]: per-call options and the Nexus operation options they become.
//! - [`result`]: results and typed errors, through the connector's outcome table.
//! - [`trace`]: the Workflow's trace context, carried in each operation's Nexus headers.
//! - [`sequence`]: a ready Workflow that lists the tools and calls a given sequence of them (the
//!   example agent's Workflow).
//!
//! Built on the MCP-tool contract ([`durable_mcp_contract`]) only; it never imports the connector or the
//! proxy.

pub mod features;
pub mod options;
pub mod result;
pub mod sequence;
pub mod tools;
pub mod trace;

pub use durable_mcp_contract::errors::ToolCallErrorType;
pub use durable_mcp_contract::input::InputRequired;
pub use options::{CallOptions, DEFAULT_CALL_TIMEOUT};
pub use result::{ToolCallError, ToolCallErrorKind};
pub use temporalio_workflow::{NexusOperationCancellationType, WorkflowCancellationToken};
pub use tools::McpTools;
pub use trace::TraceContext;
