//! One test kit: what the integration tests (`tests/it`), the benches, the load run and the
//! scenario runner share to set up the durable stack, so every one of them sets it up the same
//! way and no second copy of the wiring exists.
//!
//! - The Temporal dev server, and one user's slice of it (a task queue, the Nexus endpoint
//!   created for it, a connection and operation client, the proxy on that queue): [`crate::harness`]
//!   ([`DevServer`](crate::harness::DevServer), [`Slice`](crate::harness::Slice)); the
//!   workspace's binaries: [`crate::harness::bins`].
//! - The mock upstream and the raw MCP clients: [`crate::fixtures`].
//! - [`mcp`]: a connector in front of MCP clients (routes, in-memory pipes, Streamable HTTP,
//!   session and stateless rmcp clients).
//! - [`process`]: the connector and the native tool service as child processes (their command
//!   lines and what they announce once they serve).
//! - [`upstreams`]: what the proxy fronts (the mock upstream over stdio or HTTP).
//! - [`otlp`]: an OTLP/gRPC receiver that keeps the spans the binaries export.

pub mod mcp;
pub mod otlp;
pub mod process;
pub mod python;
pub mod upstreams;
