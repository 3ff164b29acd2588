//! # durable-mcp
//!
//! Durable Model Context Protocol tool calls on Temporal Nexus.
//!
//! - [`nexus`]: the Nexus handler runtime (on `temporalio-sdk-core`) and the standalone Nexus
//!   operation client, sharing one set of handler and failure types.
//! - [`payload`]: the one place where JSON values and MCP results become Temporal payloads.
//! - [`temporal`]: connection settings from the environment and small proto conversions.
//! - [`outbound`]: the proxy that fronts upstream MCP servers as Nexus services.

pub mod inbound;
pub mod nexus;
pub mod outbound;
pub mod payload;
pub mod temporal;
