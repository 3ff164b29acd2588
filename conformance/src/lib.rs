//! Temporal dev-server harness, upstream fixtures and the durable-mcp conformance runner.

pub mod harness;
pub mod smoke;

pub use harness::{
    Backend, DevServer, DevServerOptions, HarnessError, ServerVersion, shared, unique_name,
};
