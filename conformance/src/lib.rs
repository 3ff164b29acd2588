//! Temporal dev-server harness, upstream fixtures and the durable-mcp conformance runner.

pub mod chaos;
pub mod fixtures;
pub mod fuzz;
pub mod harness;
pub mod hosts;
pub mod kit;
pub mod load;
pub mod official;
pub mod proxy_thread;
pub mod report;
pub mod run;
pub mod scenario;
pub mod skip;
pub mod smoke;
pub mod snapshots;
pub mod third_party;

pub use harness::{
    Backend, DevServer, DevServerOptions, HarnessError, ServerVersion, shared, unique_name,
};
