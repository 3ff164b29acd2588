//! The connector's MCP server: every route's Nexus service is a set of MCP tools; `tools/list`
//! asks each route's `list_tools` operation and `tools/call` starts a standalone Nexus
//! operation and waits for it.
//!
//! The server is an rmcp [`ServerHandler`], so a host serves it over stdio or Streamable HTTP
//! and adds its own middleware.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::future::join_all;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    outcome::{Outcome, to_call_tool_result},
    route::{Route, merge_tool_lists},
};
use crate::{
    nexus::{OperationClient, OperationClientError, OperationOutcome, StartOperation},
    outbound::service::{LIST_TOOLS, TIMEOUT_META_KEY},
    payload,
};

/// How the connector names and times its operations.
#[derive(Debug, Clone)]
pub struct ConnectorOptions {
    pub routes: Vec<Route>,
    /// Logical deployment name, shared by replicas; the first part of every operation id.
    pub connector_name: String,
    /// The part of operation ids after the connector name (naming and visibility only).
    pub operation_id_prefix: String,
    /// Schedule-to-close for tools whose listing carries no timeout.
    pub default_timeout: Duration,
    /// How long `list_tools` on one route may take.
    pub list_timeout: Duration,
}

impl ConnectorOptions {
    pub fn new(routes: Vec<Route>) -> Self {
        Self {
            routes,
            connector_name: "durable-mcp".into(),
            operation_id_prefix: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
            default_timeout: Duration::from_secs(300),
            list_timeout: Duration::from_secs(30),
        }
    }
}

/// The MCP server. Cheap to clone; clones share the tool catalog.
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

struct Inner {
    client: OperationClient,
    options: ConnectorOptions,
    /// Tool name -> (route, MCP Tool JSON), from the last `tools/list`.
    tools: RwLock<HashMap<String, (Route, Value)>>,
}

impl Connector {
    pub fn new(client: OperationClient, options: ConnectorOptions) -> Self {
        Self { inner: Arc::new(Inner { client, options, tools: RwLock::default() }) }
    }

    fn operation_id(&self, what: &str) -> String {
        let o = &self.inner.options;
        format!("{}-{}-{what}{}", o.connector_name, o.operation_id_prefix, uuid::Uuid::new_v4())
    }

    async fn list_route(&self, route: &Route) -> Result<Vec<Value>, String> {
        let o = &self.inner.options;
        let input = payload::to_payload(&json!({})).map_err(|e| e.to_string())?;
        let mut start =
            StartOperation::new(self.operation_id("list-"), &route.endpoint, &route.service, LIST_TOOLS, input);
        start.schedule_to_close = Some(o.list_timeout);
        let (op, _) = self.inner.client.start(start).await.map_err(|e| e.to_string())?;
        match self.inner.client.wait(&op, &CancellationToken::new()).await.map_err(|e| e.to_string())? {
            OperationOutcome::Succeeded(p) => match payload::to_json(&p).map_err(|e| e.to_string())? {
                Value::Array(tools) => Ok(tools),
                other => Err(format!("list_tools answered {other}, not a list of tools")),
            },
            other => Err(format!("list_tools did not succeed: {other:?}")),
        }
    }

    /// Asks every route for its tools and replaces the catalog. Two routes exposing one tool
    /// name is an error naming both.
    pub async fn refresh_tools(&self) -> Result<Vec<(Route, Value)>, McpError> {
        let routes = &self.inner.options.routes;
        let lists = join_all(routes.iter().map(|r| self.list_route(r))).await;
        let mut ok = Vec::new();
        for (route, listed) in routes.iter().zip(lists) {
            match listed {
                Ok(tools) => ok.push((route.clone(), tools)),
                Err(e) => {
                    return Err(McpError::internal_error(
                        format!("listing the tools of service {:?} (endpoint {:?}) failed: {e}", route.service, route.endpoint),
                        None,
                    ));
                }
            }
        }
        let merged = merge_tool_lists(ok).map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let mut catalog = self.inner.tools.write().await;
        *catalog = merged.iter().map(|(r, t)| (t["name"].as_str().unwrap_or_default().to_owned(), (r.clone(), t.clone()))).collect();
        Ok(merged)
    }

    async fn lookup(&self, tool: &str) -> Result<(Route, Value), McpError> {
        if let Some(found) = self.inner.tools.read().await.get(tool) {
            return Ok(found.clone());
        }
        self.refresh_tools().await?;
        self.inner
            .tools
            .read()
            .await
            .get(tool)
            .cloned()
            .ok_or_else(|| McpError::invalid_params(format!("unknown tool: {tool}"), Some(json!({"tool": tool}))))
    }

    /// Calls a tool through its route and waits for the outcome. `cancel` (the MCP request's
    /// cancellation) cancels the Nexus operation.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        cancel: CancellationToken,
    ) -> Result<Value, McpError> {
        let (route, definition) = self.lookup(tool).await?;
        let timeout = definition["_meta"][TIMEOUT_META_KEY]
            .as_u64()
            .map(Duration::from_millis)
            .unwrap_or(self.inner.options.default_timeout);
        let input = payload::to_payload(&Value::Object(arguments)).map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let mut start = StartOperation::new(self.operation_id(""), &route.endpoint, &route.service, tool, input);
        start.schedule_to_close = Some(timeout);
        let client = &self.inner.client;
        let (op, _) = client.start(start).await.map_err(|e| McpError::internal_error(e.to_string(), None))?;
        info!(operation_id = %op.operation_id, tool, service = %route.service, "tool call started");
        let outcome = match client.wait(&op, &cancel).await {
            Ok(outcome) => outcome,
            Err(OperationClientError::WaitCancelled { .. }) => {
                // The caller cancelled: cancel the operation, and report truthfully.
                if let Err(e) = client.cancel(&op, "MCP request cancelled").await {
                    warn!(operation_id = %op.operation_id, error = %e, "could not cancel the operation");
                }
                return Err(McpError::internal_error("the tool call was cancelled by the client", None));
            }
            Err(e) => return Err(McpError::internal_error(e.to_string(), None)),
        };
        Ok(to_call_tool_result(&to_outcome(outcome)))
    }
}

/// The Nexus outcome in the shape the outcome table maps.
fn to_outcome(outcome: OperationOutcome) -> Outcome {
    match outcome {
        OperationOutcome::Succeeded(p) => {
            let marked = payload::mcp_type(&p) == Some(payload::CALL_TOOL_RESULT);
            match payload::to_json(&p) {
                Ok(payload_json) => Outcome::Result { payload_json, marked_call_tool_result: marked },
                Err(e) => Outcome::Failed { message: e.to_string(), error_type: None },
            }
        }
        OperationOutcome::Failed { message, error_type, handler_error } => Outcome::Failed {
            message,
            error_type: error_type.or_else(|| handler_error.map(|k| k.as_str().to_owned())),
        },
        OperationOutcome::Canceled { message } => Outcome::Canceled { message },
        OperationOutcome::TimedOut { message } => Outcome::TimedOut { message },
        OperationOutcome::Terminated { message } => Outcome::Terminated { message },
    }
}

impl ServerHandler for Connector {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("durable-mcp-connector", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .refresh_tools()
            .await?
            .into_iter()
            .map(|(_, t)| serde_json::from_value::<Tool>(t).map_err(|e| McpError::internal_error(format!("a listed tool is not valid MCP: {e}"), None)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let catalog = self.inner.tools.try_read().ok()?;
        serde_json::from_value(catalog.get(name)?.1.clone()).ok()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let json = self.call(&request.name, arguments, context.ct.clone()).await?;
        let mut result: CallToolResult = serde_json::from_value(json)
            .map_err(|e| McpError::internal_error(format!("the tool returned an invalid CallToolResult: {e}"), None))?;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result.into())
    }
}
