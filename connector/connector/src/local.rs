//! Local tools: tools a connector serves itself, by calling Temporal directly, beside the
//! routed tools that are durable Nexus operations (R-OPS-1). The Temporal operations toolset
//! implements this; the connector lists and calls whatever implements it, without knowing
//! what the tools do.

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value};

/// A set of tools served in-process.
pub trait LocalTools: Send + Sync + 'static {
    /// The tool definitions, in listing order.
    fn tools(&self) -> Vec<Tool>;
    /// Whether `name` is one of these tools.
    fn has_tool(&self, name: &str) -> bool;
    /// Calls a tool. Failures are `isError` results, never protocol errors.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, CallToolResult>;
    /// What this set is called in messages (e.g. `--temporal-tools`).
    fn origin(&self) -> &str;
    /// The OAuth scopes a caller's token must carry to call `name` (R-OPS-5). The connector
    /// checks them before calling; without inbound OAuth, a set that requires scopes is
    /// refused at start.
    fn required_scopes(&self, _name: &str) -> Vec<&str> {
        Vec::new()
    }
}
