//! # durable-mcp
//!
//! Durable Model Context Protocol tool calls on Temporal Nexus.
//!
//! Layers, each depending only on the ones below it:
//!
//! 1. [`temporal`]: connection settings, JSON payloads and the codec hook, standalone Activities.
//! 2. [`nexus`]: the Nexus handler runtime (on `temporalio-sdk-core`) and the standalone Nexus
//!    operation client, sharing one set of handler and failure types.
//! 3. [`mcp`]: the MCP-tool contract over Nexus (listing, call token, heartbeat, outcome table,
//!    stable error types, payload marker) that every caller and tool service shares.
//! 4. [`inbound`] (the connector: MCP callers in, Nexus operations out), [`outbound`] (the
//!    proxy: upstream MCP servers as Nexus services), [`native`] (Rust functions and Workflows
//!    published as MCP tools) and [`workflow_client`] (Workflow code calling MCP tools through
//!    Nexus): siblings that never import each other.
//!    [`temporal_tools`] (Temporal operations as MCP tools the connector serves itself) sits beside them on `mcp`
//!    and `temporal` only; the connector serves it through [`mcp::local::LocalTools`].
//!
//! The binaries sit on top.

pub mod inbound;
pub mod mcp;
pub mod native;
pub mod nexus;
pub mod outbound;
pub mod temporal;
pub mod temporal_tools;
pub mod workflow_client;
