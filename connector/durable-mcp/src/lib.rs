//! # durable-mcp
//!
//! Durable Model Context Protocol tool calls on Temporal Nexus: every durable-mcp crate under
//! one roof, for users who want all of it. Each part is also its own crate, with only the
//! dependencies it needs (R-LAY-1):
//!
//! | module | crate | what it is |
//! |---|---|---|
//! | [`mcp`] | `durable-mcp-contract` | the MCP-tool contract over Nexus: plain data and pure rules |
//! | [`temporal`], [`nexus`] | `durable-mcp-runtime` | Temporal connection, codec, Activities; Nexus handlers and operation client |
//! | [`inbound`], [`temporal_tools`] | `durable-mcp-connector` | MCP callers in, Nexus operations out; Temporal operations as tools |
//! | [`outbound`] | `durable-mcp-proxy` | upstream MCP servers as Nexus services |
//! | [`native`] | `durable-mcp-native` | Rust functions and Workflows published as MCP tools |
//! | [`workflow_client`] | `durable-mcp-workflow-client` | Workflow code calling MCP tools |
//!
//! Dependencies run one way: the connector, the proxy and native tools stand on the runtime,
//! which stands on the contract; the Workflow client stands on the contract alone.

pub use durable_mcp_connector as inbound;
pub use durable_mcp_connector::temporal_tools;
pub use durable_mcp_contract as mcp;
pub use durable_mcp_native as native;
pub use durable_mcp_proxy as outbound;
pub use durable_mcp_runtime::{nexus, panics, temporal};
pub use durable_mcp_workflow_client as workflow_client;
