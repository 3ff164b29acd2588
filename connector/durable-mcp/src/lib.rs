//! # durable-mcp
//!
//! Durable Model Context Protocol tool calls on Temporal Nexus: every durable-mcp crate under
//! one roof, for users who want all of it. Each part is also its own crate, with only the
//! dependencies it needs (R-LAY-1), and each module here bears its crate's name:
//!
//! | module | crate | what it is |
//! |---|---|---|
//! | [`contract`] | `durable-mcp-contract` | the MCP-tool contract over Nexus: plain data and pure rules |
//! | [`temporal`], [`nexus`], [`panics`] | `durable-mcp-runtime` | Temporal connection, codec, Activities; Nexus handlers and operation client |
//! | [`connector`], [`temporal_tools`] | `durable-mcp-connector` | MCP callers in, Nexus operations out; Temporal operations as tools |
//! | [`proxy`] | `durable-mcp-proxy` | upstream MCP servers as Nexus services |
//! | [`native`] | `durable-mcp-native` | Rust functions and Workflows published as MCP tools |
//! | [`workflow_client`] | `durable-mcp-workflow-client` | Workflow code calling MCP tools |
//!
//! Dependencies run one way: the connector, the proxy and native tools stand on the runtime,
//! which stands on the contract; the Workflow client stands on the contract alone.
//!
//! ## Renamed modules
//!
//! Until 0.2.0 the contract, the connector and the proxy were `mcp`, `inbound` and `outbound`.
//! Those names stay for one release as deprecated aliases of the same items:
//!
//! ```
//! #![allow(deprecated)]
//! use durable_mcp::{connector, contract, inbound, mcp, outbound, proxy};
//! let _: Option<contract::outcome::Outcome> = None::<mcp::outcome::Outcome>;
//! let _: Option<connector::server::Connector> = None::<inbound::server::Connector>;
//! let _: Option<proxy::UpstreamConfig> = None::<outbound::UpstreamConfig>;
//! ```
//!
//! rustc reports a deprecated module where a path ends at it, not where a path only passes
//! through it: `use durable_mcp::mcp;` warns, `use durable_mcp::mcp::payload;` does not.
//!
//! ```compile_fail
//! #![deny(deprecated)]
//! use durable_mcp::mcp;
//! ```

pub use durable_mcp_connector as connector;
pub use durable_mcp_connector::temporal_tools;
pub use durable_mcp_contract as contract;
pub use durable_mcp_native as native;
pub use durable_mcp_proxy as proxy;
pub use durable_mcp_runtime::{nexus, panics, temporal};
pub use durable_mcp_workflow_client as workflow_client;

/// The contract's name before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed `contract`, as its crate")]
pub mod mcp {
    pub use durable_mcp_contract::*;
}

/// The connector's name before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed `connector`, as its crate")]
pub mod inbound {
    pub use durable_mcp_connector::*;
}

/// The proxy's name before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed `proxy`, as its crate")]
pub mod outbound {
    pub use durable_mcp_proxy::*;
}
