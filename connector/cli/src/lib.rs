//! # durable-mcp-cli
//!
//! The binaries `durable-mcp-connector`, `durable-mcp-proxy` and `durable-mcp-example-agent`,
//! and what they share: [`logs`], the logger that keeps MCP message contents out of log lines
//! (R-CON-33). The binaries are thin: they parse their flags, build their configuration and
//! start. Their flags and the rules that turn them into options live here, each rule a
//! function with its tests beside it: [`connector_config`] and [`proxy_config`].

pub mod connector_config;
pub mod health_server;
pub mod logs;
pub mod metrics_server;
pub mod proxy_config;
pub mod temporal_flags;
pub mod traces;
