//! # durable-mcp-runtime
//!
//! The Temporal side every durable-mcp component runs on, built on the contract
//! (`durable-mcp-contract`):
//!
//! - [`temporal`]: connection settings, the remote payload codec, standalone Activities and
//!   Workflow starts, the direct (proxy-free) HTTP client for loopback endpoints.
//! - [`nexus`]: the Nexus handler runtime (on `temporalio-sdk-core`) and the standalone Nexus
//!   operation client, sharing one set of handler and failure types.
//! - [`metrics`]: what the connector's and the proxy's Prometheus metrics share.
//! - [`panics`]: a panic while serving a request ends that request, counted and logged.
//! - [`trace`]: W3C trace context through a call, its spans and their OTLP exporter.

pub mod metrics;
pub mod nexus;
pub mod panics;
pub mod sdk_metrics;
pub mod temporal;
pub mod trace;
