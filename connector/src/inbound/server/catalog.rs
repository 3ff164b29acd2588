//! The tool catalog: every route's `list_tools` (R-NXC-2), merged into one list (R-CON-2).

use futures::future::join_all;
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Connector, internal::internal};
use crate::{
    inbound::route::{Merged, Route, merge_tool_lists},
    mcp::{listing::LIST_TOOLS, payload},
    nexus::{OperationOutcome, StartOperation},
};

impl Connector {
    async fn list_route(&self, route: &Route) -> Result<Vec<Value>, String> {
        let o = &self.inner.options;
        let input = payload::to_payload(&json!({})).map_err(|e| e.to_string())?;
        let mut start = StartOperation::new(
            self.operation_id("list-"),
            &route.endpoint,
            &route.service,
            LIST_TOOLS,
            input,
        );
        start.schedule_to_close = Some(o.list_timeout);
        let (op, _) = self
            .inner
            .client
            .start(start)
            .await
            .map_err(|e| e.to_string())?;
        match self
            .inner
            .client
            .wait(&op, &CancellationToken::new())
            .await
            .map_err(|e| e.to_string())?
        {
            OperationOutcome::Succeeded(p) => {
                match payload::to_json(&p).map_err(|e| e.to_string())? {
                    Value::Array(tools) => Ok(tools),
                    other => Err(format!("list_tools answered {other}, not a list of tools")),
                }
            }
            other => Err(format!("list_tools did not succeed: {other:?}")),
        }
    }

    /// Every route's tools, merged; two routes exposing one tool name is an error naming both.
    async fn merged_routes(&self) -> Result<Merged, McpError> {
        let routes = &self.inner.options.routes;
        let lists = join_all(routes.iter().map(|r| self.list_route(r))).await;
        let mut ok = Vec::new();
        for (route, listed) in routes.iter().zip(lists) {
            match listed {
                Ok(tools) => ok.push((route.clone(), tools)),
                Err(e) => {
                    return Err(internal(
                        "listing the tools",
                        format_args!(
                            "listing the tools of service {:?} (endpoint {:?}): {e}",
                            route.service, route.endpoint
                        ),
                    ));
                }
            }
        }
        Ok(self.merge(ok).await)
    }

    /// Merges the routes' lists (R-CON-2): an ambiguous name is left out, remembered for the
    /// error a call of it gets, and logged when it first appears.
    async fn merge(&self, lists: Vec<(Route, Vec<Value>)>) -> Merged {
        let local = self.inner.local.as_ref();
        let merged = merge_tool_lists(lists, |name| {
            local.filter(|l| l.has_tool(name)).map(|l| l.origin())
        });
        let mut known = self.inner.ambiguous.write().await;
        for a in &merged.ambiguous {
            if !known.contains_key(&a.tool) {
                tracing::warn!("{a}");
            }
        }
        *known = merged
            .ambiguous
            .iter()
            .map(|a| (a.tool.clone(), a.to_string()))
            .collect();
        merged
    }

    /// The start-up check of tool names (R-CON-2, R-OPS-1): `Ok` with each ambiguous name's
    /// description (the connector starts and leaves them out), `Err(why)` when the routes
    /// cannot be listed yet (their workers may start later).
    pub async fn check_tool_names(&self) -> Result<Vec<String>, String> {
        match self.merged_routes().await {
            Ok(merged) => Ok(merged.ambiguous.iter().map(|a| a.to_string()).collect()),
            Err(e) => Err(e.message.to_string()),
        }
    }

    /// Asks every route for its tools and replaces the catalog. An ambiguous name is left out
    /// (R-CON-2).
    pub async fn refresh_tools(&self) -> Result<Vec<(Route, Value)>, McpError> {
        let merged = self.merged_routes().await?.tools;
        let mut catalog = self.inner.tools.write().await;
        *catalog = merged
            .iter()
            .map(|(r, t)| {
                (
                    t["name"].as_str().unwrap_or_default().to_owned(),
                    (r.clone(), t.clone()),
                )
            })
            .collect();
        Ok(merged)
    }

    pub(super) async fn lookup(&self, tool: &str) -> Result<(Route, Value), McpError> {
        if let Some(found) = self.inner.tools.read().await.get(tool) {
            return Ok(found.clone());
        }
        self.refresh_tools().await?;
        let found = self.inner.tools.read().await.get(tool).cloned();
        match found {
            Some(found) => Ok(found),
            None => Err(self.unknown_tool(tool).await),
        }
    }

    /// The error for a tool the catalog lacks: ambiguous (naming every service that exposes
    /// it, R-CON-2) or unknown.
    async fn unknown_tool(&self, tool: &str) -> McpError {
        if let Some(why) = self.inner.ambiguous.read().await.get(tool).cloned() {
            return McpError::invalid_params(why, Some(json!({"tool": tool, "ambiguous": true})));
        }
        McpError::invalid_params(format!("unknown tool: {tool}"), Some(json!({"tool": tool})))
    }
}
