//! # durable-mcp-cli
//!
//! The binaries `durable-mcp-connector`, `durable-mcp-proxy` and `durable-mcp-example-agent`,
//! and what they share: [`logs`], the logger that keeps MCP message contents out of log lines
//! (R-CON-33).

pub mod logs;
