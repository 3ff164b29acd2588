//! The tool catalog: every route's `list_tools` (R-NXC-2), merged into one list (R-CON-2).

use std::time::{Duration, Instant};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared, join_all},
};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

use super::list_changed::tools_changed;
use super::{
    Connector,
    internal::internal,
    limits::{self, Listing},
};
use crate::route::{Merged, Route, merge_tool_lists};
use durable_mcp_contract::listing::tool_name;
use durable_mcp_contract::{
    listing::{LIST_TOOLS, ToolListing, WITH_INSTRUCTIONS_KEY},
    payload,
};
use durable_mcp_runtime::nexus::OperationOutcome;

impl Connector {
    /// One listing of the route, with its upstream's instructions (R-NXC-7).
    async fn list_route(&self, route: &Route) -> Result<ToolListing, String> {
        let asked = json!({WITH_INSTRUCTIONS_KEY: true});
        let p = self.run_reserved(route, LIST_TOOLS, asked).await?;
        match payload::to_json(&p) {
            Ok(answer) => ToolListing::read(answer),
            Err(e) => Err(e.to_string()),
        }
    }

    /// One route's tools: its listing from the last [`ConnectorOptions::list_cache`] when
    /// there is one (R-CON-17), else the route's running listing or a new one. Concurrent
    /// askers of one route share one operation and its outcome, success or failure, and a
    /// failure is answered again for [`limits::failure_backoff`] without asking the route: a
    /// route that times out costs each asker one list timeout at most, never one per asker
    /// ahead of it.
    ///
    /// [`ConnectorOptions::list_cache`]: super::ConnectorOptions::list_cache
    async fn cached_route(&self, index: usize) -> Result<Vec<Value>, RouteError> {
        let ttl = self.inner.options.list_cache;
        let flight = {
            let mut state = self.route_state(index);
            let now = Instant::now();
            if let Some(tools) = state.listing.fresh(ttl, now) {
                return Ok(tools.clone());
            }
            if let Some(why) = state
                .listing
                .recent_failure(limits::failure_backoff(ttl), now)
            {
                return Err(RouteError::Failed {
                    why: why.to_owned(),
                    last_good: state.listing.last_good().cloned(),
                });
            }
            state
                .running
                .get_or_insert_with(|| self.start_listing(index))
                .clone()
        };
        match flight.await {
            Ok(tools) => Ok(tools),
            Err(Flop::OverCap(e)) => Err(RouteError::OverCap(e)),
            Err(Flop::Failed(why)) => Err(RouteError::Failed {
                why,
                last_good: self.route_state(index).listing.last_good().cloned(),
            }),
        }
    }

    /// Each route's instructions (R-CON-41), in route order: from its last good listing,
    /// asking the routes whose cache is stale first and waiting for them at most `wait` (a
    /// listing that outlasts it still records its answer for the next asker).
    pub(super) async fn route_instructions(&self, wait: Duration) -> Vec<Option<String>> {
        let routes = self.inner.options.routes.len();
        let listings = join_all((0..routes).map(|i| self.cached_route(i)));
        let _ = tokio::time::timeout(wait, listings).await;
        (0..routes)
            .map(|i| self.route_state(i).instructions.clone())
            .collect()
    }

    fn route_state(&self, index: usize) -> std::sync::MutexGuard<'_, RouteListing> {
        self.inner.listings[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts one listing of the route as its own task, which records its outcome, so it ends
    /// (within the list timeout) and is recorded even when every asker went away. The caller
    /// holds the route's state, so the task's record comes after the caller's `running`.
    fn start_listing(&self, index: usize) -> Flight {
        let this = self.clone();
        let task = tokio::spawn(async move {
            let outcome = match this.inner.in_flight.try_start("listing the tools", None) {
                Ok(_slot) => this
                    .list_route(&this.inner.options.routes[index])
                    .await
                    .map_err(Flop::Failed),
                Err(e) => Err(Flop::OverCap(e)),
            };
            let mut state = this.route_state(index);
            state.running = None;
            match outcome {
                Ok(listing) => {
                    if tools_changed(state.listing.last_good(), &listing.tools) {
                        this.inner.tool_changes.bump();
                    }
                    state.instructions = listing.instructions;
                    state.listing.store(listing.tools.clone(), Instant::now());
                    Ok(listing.tools)
                }
                Err(Flop::Failed(why)) => {
                    state.listing.fail(why.clone(), Instant::now());
                    Err(Flop::Failed(why))
                }
                Err(e) => Err(e),
            }
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(Flop::Failed(format!("the listing task ended: {e}"))))
        }
        .boxed()
        .shared()
    }

    /// Every route's tools, merged (R-CON-2). A route whose listing fails is left out (logged,
    /// and asked again once its failure's back-off passed, R-CON-17), so one upstream cannot
    /// stop the listing of the others; its failure is answered beside the merge. Its last good
    /// listing still takes part in the merge, so a failure frees none of its names: a name it
    /// shares with another route stays ambiguous, never handed to the other route alone.
    async fn merged_routes(&self) -> Result<(Merged, Vec<String>), McpError> {
        let routes = &self.inner.options.routes;
        let lists = join_all((0..routes.len()).map(|i| self.cached_route(i))).await;
        let mut merging = Vec::new();
        let mut reserving = Vec::new();
        let mut failed = Vec::new();
        for (route, listed) in routes.iter().zip(lists) {
            match listed {
                Ok(tools) => merging.push((route.clone(), tools)),
                Err(RouteError::OverCap(e)) => return Err(e),
                Err(RouteError::Failed { why, last_good }) => {
                    let why = format!(
                        "listing the tools of service {:?} (endpoint {:?}): {why}",
                        route.service, route.endpoint
                    );
                    tracing::warn!(
                        "{why}; its tools are left out until a listing succeeds (the names of \
                         its last good listing stay reserved)"
                    );
                    failed.push(why);
                    if let Some(tools) = last_good {
                        reserving.push(route.clone());
                        merging.push((route.clone(), tools));
                    }
                }
            }
        }
        let mut merged = self.merge(merging).await;
        merged.tools.retain(|(route, _)| !reserving.contains(route));
        Ok((merged, failed))
    }

    /// Merges the routes' lists (R-CON-2): an ambiguous name is left out, remembered for the
    /// error a call of it gets, and logged when it first appears.
    async fn merge(&self, lists: Vec<(Route, Vec<Value>)>) -> Merged {
        let local = self.inner.local.as_ref();
        let companions = self.inner.options.companion_tools;
        let merged = merge_tool_lists(lists, |name| {
            local
                .filter(|l| l.has_tool(name))
                .map(|l| l.origin())
                .or_else(|| companion_origin(companions, name))
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
            Ok((_, failed)) if !failed.is_empty() => Err(failed.join("; ")),
            Ok((merged, _)) => Ok(merged.ambiguous.iter().map(|a| a.to_string()).collect()),
            Err(e) => Err(e.message.to_string()),
        }
    }

    /// Asks every route for its tools and replaces the catalog. An ambiguous name, and the
    /// tools of a route whose listing failed, are left out (R-CON-2); the failures are
    /// answered beside the tools.
    pub async fn refresh_tools(&self) -> Result<(Vec<(Route, Value)>, Vec<String>), McpError> {
        let (merged, failed) = self.merged_routes().await?;
        let merged = merged.tools;
        let mut catalog = self.inner.tools.write().await;
        *catalog = merged
            .iter()
            .map(|(r, t)| {
                (
                    tool_name(t).unwrap_or_default().to_owned(),
                    (r.clone(), t.clone()),
                )
            })
            .collect();
        Ok((merged, failed))
    }

    /// The tool's route and listing. A tool the catalog lacks is looked up again through the
    /// routes' cached listings (R-CON-17): calls of unknown tools start no operation while the
    /// cache is fresh.
    pub(super) async fn lookup(&self, tool: &str) -> Result<(Route, Value), McpError> {
        if let Some(found) = self.inner.tools.read().await.get(tool) {
            return Ok(found.clone());
        }
        let (_, failed) = self.refresh_tools().await?;
        let found = self.inner.tools.read().await.get(tool).cloned();
        let ambiguous = self.inner.ambiguous.read().await.contains_key(tool);
        match found {
            Some(found) => Ok(found),
            // The tool may be one of a route that could not be listed: not "unknown".
            None if !failed.is_empty() && !ambiguous => Err(internal(
                "listing the tools",
                format_args!("{tool:?} is not listed: {}", failed.join("; ")),
            )),
            None => Err(self.unknown_tool(tool).await),
        }
    }

    /// The error for a tool the catalog lacks: ambiguous (naming every service that exposes
    /// it, R-CON-2) or unknown.
    async fn unknown_tool(&self, tool: &str) -> McpError {
        if let Some(why) = self.inner.ambiguous.read().await.get(tool).cloned() {
            return McpError::invalid_params(why, Some(json!({"tool": tool, "ambiguous": true})));
        }
        let shown = shown_tool_name(tool);
        McpError::invalid_params(
            format!("unknown tool: {shown}"),
            Some(json!({"tool": shown})),
        )
    }
}

/// Longest tool name an error repeats whole: MCP's bound on a tool name (128 characters).
const SHOWN_TOOL_NAME_CHARS: usize = 128;

/// An unknown tool's name as its error repeats it (R-CON-3): whole up to MCP's bound on a tool
/// name, else its start and its length, so a hostile name of megabytes is not echoed twice
/// (message and `data`), escaped, into the answer.
fn shown_tool_name(tool: &str) -> std::borrow::Cow<'_, str> {
    let length = tool.chars().count();
    if length <= SHOWN_TOOL_NAME_CHARS {
        return tool.into();
    }
    let start: String = tool.chars().take(SHOWN_TOOL_NAME_CHARS / 2).collect();
    format!("{start}... ({length} characters; no tool name is longer than {SHOWN_TOOL_NAME_CHARS})")
        .into()
}

/// The origin a routed tool named `name` yields to: the companion tools, when they are served
/// and `name` is one of theirs (R-CON-11). The routed tool is left out, as for a local tool.
fn companion_origin(companions: bool, name: &str) -> Option<&'static str> {
    (companions && super::companion::is_companion(name)).then_some("--companion-tools")
}

/// One route's listing state (R-CON-17): its last listing and failure, and the listing running
/// now, which every concurrent asker awaits.
#[derive(Default)]
pub(super) struct RouteListing {
    listing: Listing,
    running: Option<Flight>,
    /// The instructions the route's last good listing carried (R-CON-41).
    pub(super) instructions: Option<String>,
}

/// A running listing, shared by its askers.
type Flight = Shared<BoxFuture<'static, Result<Vec<Value>, Flop>>>;

/// Why a running listing had no tools for its askers.
#[derive(Clone)]
enum Flop {
    OverCap(McpError),
    Failed(String),
}

/// Why a route's tools could not be had.
enum RouteError {
    /// `--max-in-flight` operations are running (R-CON-17): the caller reads why.
    OverCap(McpError),
    /// The listing failed: internal, logged (R-CON-15). `last_good` is the route's last
    /// listing that succeeded, if any: its names stay reserved (R-CON-2).
    Failed {
        why: String,
        last_good: Option<Vec<Value>>,
    },
}

/// Why a reserved operation (a listing) did not succeed, for the log (R-CON-15 keeps it from
/// callers). A timeout most often means that nothing polls the endpoint's task queue, so the
/// line says where to look.
pub(super) fn did_not_succeed(
    operation: &str,
    outcome: &OperationOutcome,
    timeout: Duration,
) -> String {
    match outcome {
        OperationOutcome::TimedOut { message } => format!(
            "{operation} timed out after {timeout:?} ({message}): no worker may be polling the \
             endpoint's task queue; check that the proxy or tool service serving this service \
             runs and polls the task queue the endpoint targets"
        ),
        other => format!("{operation} did not succeed: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routed_companion_name_yields_only_while_the_companions_are_served() {
        assert_eq!(
            companion_origin(true, "task_status"),
            Some("--companion-tools")
        );
        assert_eq!(
            companion_origin(true, "task_input"),
            Some("--companion-tools")
        );
        assert_eq!(companion_origin(true, "echo"), None);
        assert_eq!(companion_origin(false, "task_status"), None);
    }

    #[test]
    fn a_listing_that_timed_out_points_at_the_task_queue_worker() {
        let timed_out = OperationOutcome::TimedOut {
            message: "operation timed out".into(),
        };
        let line = did_not_succeed(LIST_TOOLS, &timed_out, Duration::from_secs(10));
        assert!(
            line.contains("10s")
                && line.contains("no worker may be polling the endpoint's task queue"),
            "{line}"
        );
        let failed = OperationOutcome::Failed {
            message: "no".into(),
            error_type: None,
            handler_error: None,
        };
        assert!(
            !did_not_succeed(LIST_TOOLS, &failed, Duration::from_secs(10)).contains("task queue")
        );
    }

    #[test]
    fn an_unknown_tools_name_is_repeated_whole_only_up_to_mcps_bound() {
        let name = "a".repeat(SHOWN_TOOL_NAME_CHARS);
        assert_eq!(shown_tool_name(&name), name.as_str());
        let long = "é".repeat(1 << 20);
        let shown = shown_tool_name(&long);
        assert!(shown.starts_with(&"é".repeat(64)), "{shown}");
        assert!(shown.contains("1048576 characters"), "{shown}");
        assert!(shown.chars().count() < 200);
    }
}
