//! The tool catalog: every route's `list_tools` (R-NXC-2), merged into one list (R-CON-2).

use futures::future::join_all;
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Connector, internal::internal};
use crate::{
    inbound::route::{Route, merge_tool_lists},
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
    async fn merged_routes(&self) -> Result<Vec<(Route, Value)>, McpError> {
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
        merge_tool_lists(ok).map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    /// The error for the first routed tool named like a local tool, if any.
    fn local_collision_in(&self, merged: &[(Route, Value)]) -> Option<String> {
        let local = self.inner.local.as_ref()?;
        merged.iter().find_map(|(route, tool)| {
            let name = tool["name"].as_str().unwrap_or_default();
            local
                .has_tool(name)
                .then(|| local_collision(name, route, local.origin()))
        })
    }

    /// The start-up check of local tool names (R-OPS-1): `Err` names a routed tool that
    /// collides with a local one (refuse to start); `Ok(Some(why))` when the routes cannot be
    /// listed yet (their workers may start later; the check repeats at every `tools/list`).
    pub async fn check_local_names(&self) -> Result<Option<String>, String> {
        match self.merged_routes().await {
            Ok(merged) => match self.local_collision_in(&merged) {
                Some(collision) => Err(collision),
                None => Ok(None),
            },
            Err(e) => Ok(Some(e.message.to_string())),
        }
    }

    /// Asks every route for its tools and replaces the catalog. Two routes exposing one tool
    /// name, or a routed tool named like a local tool, is an error naming both.
    pub async fn refresh_tools(&self) -> Result<Vec<(Route, Value)>, McpError> {
        let merged = self.merged_routes().await?;
        if let Some(collision) = self.local_collision_in(&merged) {
            return Err(McpError::internal_error(collision, None));
        }
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
        self.inner
            .tools
            .read()
            .await
            .get(tool)
            .cloned()
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("unknown tool: {tool}"),
                    Some(json!({"tool": tool})),
                )
            })
    }
}

/// The error for a routed tool named like a local one: both are named, and what to do.
pub(super) fn local_collision(tool: &str, route: &Route, origin: &str) -> String {
    format!(
        "tool {tool:?} is served both by {origin} and by service {:?} (endpoint {:?}); rename the routed tool or drop {origin}",
        route.service, route.endpoint
    )
}
