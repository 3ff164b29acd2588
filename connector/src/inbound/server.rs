//! The connector's MCP server: every route's Nexus service is a set of MCP tools; `tools/list`
//! asks each route's `list_tools` operation and `tools/call` starts a standalone Nexus
//! operation and waits for it.
//!
//! The server is an rmcp [`ServerHandler`], so a host serves it over stdio or Streamable HTTP
//! and adds its own middleware.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::future::join_all;
use rmcp::{
    ErrorData as McpError, Peer, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        CreateTaskResult, DetailedTask, ErrorCode, GetTaskParams, GetTaskResult, Implementation,
        ListToolsResult, PaginatedRequestParams, ProgressToken, ResultType, ServerCapabilities,
        ServerConfig, TASKS_EXTENSION_ID, Task, TaskPayload, TaskStatus, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    idempotency::{
        IdempotencyKey, arguments_fingerprint, key_from_meta,
        operation_id as idempotent_operation_id,
    },
    outcome::ERROR_TYPE_META,
    outcome::{Outcome, to_call_tool_result},
    progress::{call_of, call_progress, forward_progress},
    route::{Route, merge_tool_lists},
    task_ref::{CallerScope, SigningKey, TaskRef, caller_hash, sign, verify},
};
use crate::{
    nexus::{
        ConflictPolicy, OperationClient, OperationClientError, OperationOutcome, OperationRef,
        OperationStatus, ReusePolicy, StartOperation,
    },
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
    /// How long a task-capable caller waits before the call becomes a task.
    pub task_after: Duration,
    /// Signs task IDs. Replicas that serve each other's tasks share it.
    pub signing_key: SigningKey,
    /// Whose tasks these are when the request names no verified caller: one stdio client, or
    /// (HTTP without authentication) everyone.
    pub caller_scope: CallerScope,
    /// Refuse requests that carry no verified [`CallerScope`] in their HTTP extensions (set
    /// with inbound auth, so a missing middleware can never mean a shared scope).
    pub require_verified_caller: bool,
}

impl ConnectorOptions {
    pub fn new(routes: Vec<Route>) -> Self {
        Self {
            routes,
            connector_name: "durable-mcp".into(),
            operation_id_prefix: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
            default_timeout: Duration::from_secs(300),
            list_timeout: Duration::from_secs(30),
            task_after: Duration::from_secs(2),
            signing_key: SigningKey::generate(),
            // One stdio client, or everyone on an unauthenticated HTTP connector: a stable scope,
            // so idempotency keys and tasks survive a restart with the same signing key.
            caller_scope: CallerScope::Anonymous,
            require_verified_caller: false,
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
        Self {
            inner: Arc::new(Inner {
                client,
                options,
                tools: RwLock::default(),
            }),
        }
    }

    fn operation_id(&self, what: &str) -> String {
        let o = &self.inner.options;
        format!(
            "{}-{}-{what}{}",
            o.connector_name,
            o.operation_id_prefix,
            uuid::Uuid::new_v4()
        )
    }

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
                        format!(
                            "listing the tools of service {:?} (endpoint {:?}) failed: {e}",
                            route.service, route.endpoint
                        ),
                        None,
                    ));
                }
            }
        }
        let merged =
            merge_tool_lists(ok).map_err(|e| McpError::internal_error(e.to_string(), None))?;
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
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("unknown tool: {tool}"),
                    Some(json!({"tool": tool})),
                )
            })
    }

    /// Starts the tool's operation on its route. With an idempotency key the operation id is a
    /// function of (caller scope, tool, key), so a repeated call reattaches to the same
    /// execution, running or finished; different arguments under the same key are a conflict.
    async fn start_call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        key: Option<(IdempotencyKey, &CallerScope)>,
    ) -> Result<Started, McpError> {
        let (route, definition) = self.lookup(tool).await?;
        let timeout = definition["_meta"][TIMEOUT_META_KEY]
            .as_u64()
            .map(Duration::from_millis)
            .unwrap_or(self.inner.options.default_timeout);
        let arguments = Value::Object(arguments);
        let input = payload::to_payload(&arguments)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let client = &self.inner.client;
        let Some((key, scope)) = key else {
            let mut start = StartOperation::new(
                self.operation_id(""),
                &route.endpoint,
                &route.service,
                tool,
                input,
            );
            start.schedule_to_close = Some(timeout);
            let (op, _) = client
                .start(start)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            info!(operation_id = %op.operation_id, tool, service = %route.service, "tool call started");
            return Ok(Started::Op(op));
        };
        let operation_id = idempotent_operation_id(
            &self.inner.options.connector_name,
            &self.owner(scope),
            tool,
            &key,
        );
        let fingerprint = arguments_fingerprint(&arguments);
        let mut start =
            StartOperation::new(&operation_id, &route.endpoint, &route.service, tool, input);
        // Same key and same arguments => same request id: the server answers with the same
        // run, even after it closed. Temporal attaches silently on a conflict, so the
        // arguments' fingerprint travels in a header and is compared here.
        start.request_id = format!("{operation_id}-{fingerprint}");
        start.schedule_to_close = Some(timeout);
        start.conflict_policy = ConflictPolicy::UseExisting;
        start.reuse_policy = ReusePolicy::RejectDuplicate;
        start
            .headers
            .insert(FINGERPRINT_HEADER.into(), fingerprint.clone());
        let op = match client.start(start).await {
            Ok((op, true)) => {
                info!(operation_id = %op.operation_id, tool, "idempotent tool call started");
                return Ok(Started::Op(op));
            }
            Ok((op, false)) => op,
            // Closed, and started by a request with other arguments.
            Err(OperationClientError::AlreadyExists { .. }) => OperationRef {
                operation_id,
                run_id: String::new(),
            },
            Err(e) => return Err(McpError::internal_error(e.to_string(), None)),
        };
        let existing = client
            .describe(&op)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if existing.headers.get(FINGERPRINT_HEADER) != Some(&fingerprint) {
            return Ok(Started::Conflict);
        }
        info!(operation_id = %op.operation_id, tool, "reattached to an idempotent tool call");
        Ok(Started::Op(existing.reference))
    }

    /// Waits for the operation; `cancel` (the MCP request's cancellation) cancels it. With a
    /// caller's progress token, the upstream's progress reaches the caller meanwhile.
    async fn finish_call(
        &self,
        op: &OperationRef,
        cancel: &CancellationToken,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
    ) -> Result<Value, McpError> {
        let client = &self.inner.client;
        let forward = async {
            if let Some((peer, token)) = progress {
                forward_progress(client, op, &peer, token).await;
            }
            // Nothing (more) to forward: keep waiting for the outcome.
            std::future::pending::<()>().await
        };
        let waited = tokio::select! {
            waited = client.wait(op, cancel) => waited,
            _ = forward => unreachable!("forwarding never ends on its own"),
        };
        let outcome = match waited {
            Ok(outcome) => outcome,
            Err(OperationClientError::WaitCancelled { .. }) => {
                // The caller cancelled: cancel the operation, and report truthfully.
                if let Err(e) = client.cancel(op, "MCP request cancelled").await {
                    warn!(operation_id = %op.operation_id, error = %e, "could not cancel the operation");
                }
                return Err(McpError::internal_error(
                    "the tool call was cancelled by the client",
                    None,
                ));
            }
            Err(e) => return Err(McpError::internal_error(e.to_string(), None)),
        };
        Ok(to_call_tool_result(&to_outcome(outcome)))
    }

    /// Calls a tool through its route and waits for the outcome. `cancel` (the MCP request's
    /// cancellation) cancels the Nexus operation.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        cancel: CancellationToken,
    ) -> Result<Value, McpError> {
        match self.start_call(tool, arguments, None).await? {
            Started::Op(op) => self.finish_call(&op, &cancel, None).await,
            Started::Conflict => Ok(conflict_result()),
        }
    }

    fn owner(&self, scope: &CallerScope) -> String {
        caller_hash(&self.inner.options.signing_key, scope)
    }

    /// Whose request this is: the verified caller an HTTP middleware put in the request's
    /// extensions (see [`super::auth`]), else the connector's configured scope. A connector
    /// that requires verified callers refuses requests without one rather than fall back.
    pub fn request_scope(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallerScope, McpError> {
        let verified = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<CallerScope>());
        match verified {
            Some(scope) => Ok(scope.clone()),
            None if self.inner.options.require_verified_caller => Err(McpError::invalid_request(
                "this connector requires an authenticated caller",
                None,
            )),
            None => Ok(self.inner.options.caller_scope.clone()),
        }
    }

    /// The signed task ID for an operation, owned by `scope`.
    pub fn task_id(&self, op: &OperationRef, scope: &CallerScope) -> String {
        let r = TaskRef::new(
            self.inner.client.namespace(),
            &op.operation_id,
            &op.run_id,
            self.owner(scope),
        );
        sign(&self.inner.options.signing_key, &r)
    }

    /// Verifies a task ID (signature, then owner, then namespace) before any Temporal call.
    /// Every kind of bad ID gets the same answer.
    fn task_op(&self, task_id: &str, scope: &CallerScope) -> Result<OperationRef, McpError> {
        let unknown = || McpError::invalid_params("unknown task", None);
        let r = verify(&self.inner.options.signing_key, task_id, &self.owner(scope))
            .map_err(|_| unknown())?;
        if r.ns != self.inner.client.namespace() {
            return Err(unknown());
        }
        Ok(OperationRef {
            operation_id: r.op,
            run_id: r.run,
        })
    }

    /// The task's state: working while the operation runs, then its result.
    pub async fn task_state(
        &self,
        task_id: &str,
        scope: &CallerScope,
    ) -> Result<DetailedTask, McpError> {
        let op = self.task_op(task_id, scope)?;
        let described =
            self.inner.client.describe(&op).await.map_err(|e| {
                McpError::internal_error(format!("could not read the task: {e}"), None)
            })?;
        let now = now_rfc3339();
        let task =
            Task::new(task_id, TaskStatus::Working, now.clone(), now).with_poll_interval_ms(1000);
        let mut task = task;
        let payload = match (described.status, described.outcome) {
            (OperationStatus::Running | OperationStatus::Unknown, _) | (_, None) => {
                // The upstream's latest progress message, when the tool reports one.
                let call = call_of(&described.operation_token);
                let progress = match &call {
                    Some(call) => call_progress(&self.inner.client, call).await,
                    None => None,
                };
                if let Some(message) = progress.and_then(|p| p.message) {
                    task = task.with_status_message(message);
                }
                TaskPayload::Working
            }
            (_, Some(OperationOutcome::Canceled { .. })) => TaskPayload::Cancelled,
            (_, Some(outcome)) => match to_call_tool_result(&to_outcome(outcome)) {
                Value::Object(result) => TaskPayload::Completed { result },
                _ => TaskPayload::Working,
            },
        };
        Ok(DetailedTask::new(task, payload))
    }

    /// Requests cancellation of the task's operation.
    pub async fn cancel_task_op(&self, task_id: &str, scope: &CallerScope) -> Result<(), McpError> {
        let op = self.task_op(task_id, scope)?;
        self.inner
            .client
            .cancel(&op, "MCP tasks/cancel")
            .await
            .map_err(|e| McpError::internal_error(format!("could not cancel the task: {e}"), None))
    }
}

/// Nexus header carrying the arguments' fingerprint of an idempotent call.
const FINGERPRINT_HEADER: &str = "x-durable-mcp-arguments";

/// How a start went.
enum Started {
    Op(OperationRef),
    /// The idempotency key names an execution with other arguments; it was not touched.
    Conflict,
}

/// The tool error for a reused idempotency key with different arguments.
fn conflict_result() -> Value {
    json!({
        "content": [{"type": "text", "text": "IdempotencyConflict: this idempotency key was already used with different arguments; the first call is unchanged. Use a new key for new arguments."}],
        "isError": true,
        "_meta": {ERROR_TYPE_META: "IdempotencyConflict"},
    })
}

/// The request's idempotency key, from `_meta` (the params' or the context's).
fn idempotency_key(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Option<IdempotencyKey>, McpError> {
    let metas = [
        request
            .meta
            .as_ref()
            .and_then(|m| serde_json::to_value(m).ok()),
        serde_json::to_value(&context.meta).ok(),
    ];
    for meta in metas.into_iter().flatten() {
        if let Value::Object(map) = meta
            && let Some(key) =
                key_from_meta(&map).map_err(|e| McpError::invalid_params(e.to_string(), None))?
        {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Whether the request's caller declared the tasks extension (per request for stateless
/// 2026-07-28 clients, at initialize for session clients).
fn supports_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
        || context
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.supports_tasks())
}

/// The answer to a task method from a caller without the tasks extension.
fn tasks_extension_required() -> McpError {
    McpError::new(
        ErrorCode(-32021),
        "this method needs the io.modelcontextprotocol/tasks extension",
        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})),
    )
}

/// The Nexus outcome in the shape the outcome table maps.
fn to_outcome(outcome: OperationOutcome) -> Outcome {
    match outcome {
        OperationOutcome::Succeeded(p) => {
            let marked = payload::mcp_type(&p) == Some(payload::CALL_TOOL_RESULT);
            match payload::to_json(&p) {
                Ok(payload_json) => Outcome::Result {
                    payload_json,
                    marked_call_tool_result: marked,
                },
                Err(e) => Outcome::Failed {
                    message: e.to_string(),
                    error_type: None,
                },
            }
        }
        OperationOutcome::Failed {
            message,
            error_type,
            handler_error,
        } => Outcome::Failed {
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
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        );
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
            .map(|(_, t)| {
                serde_json::from_value::<Tool>(t).map_err(|e| {
                    McpError::internal_error(format!("a listed tool is not valid MCP: {e}"), None)
                })
            })
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
        let scope = self.request_scope(&context)?;
        let key = idempotency_key(&request, &context)?;
        let arguments = request.arguments.clone().unwrap_or_default();
        let op = match self
            .start_call(&request.name, arguments, key.map(|k| (k, &scope)))
            .await?
        {
            Started::Op(op) => op,
            Started::Conflict => {
                let mut result: CallToolResult = serde_json::from_value(conflict_result())
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                result.result_type = Some(ResultType::COMPLETE);
                return Ok(result.into());
            }
        };
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (context.peer.clone(), token));
        let json = if supports_tasks(&context) {
            // A task-capable caller waits `task_after`, then gets a task it can poll from any
            // replica; after that only tasks/cancel cancels the call.
            tokio::select! {
                finished = self.finish_call(&op, &context.ct, progress) => finished?,
                _ = tokio::time::sleep(self.inner.options.task_after) => {
                    let now = now_rfc3339();
                    let task = Task::new(self.task_id(&op, &scope), TaskStatus::Working, now.clone(), now)
                        .with_poll_interval_ms(1000);
                    info!(operation_id = %op.operation_id, "tool call continues as a task");
                    return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
                }
            }
        } else {
            self.finish_call(&op, &context.ct, progress).await?
        };
        let mut result: CallToolResult = serde_json::from_value(json).map_err(|e| {
            McpError::internal_error(
                format!("the tool returned an invalid CallToolResult: {e}"),
                None,
            )
        })?;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        if !supports_tasks(&context) {
            return Err(tasks_extension_required());
        }
        let scope = self.request_scope(&context)?;
        Ok(GetTaskResult::new(
            self.task_state(&request.task_id, &scope).await?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !supports_tasks(&context) {
            return Err(tasks_extension_required());
        }
        let scope = self.request_scope(&context)?;
        self.cancel_task_op(&request.task_id, &scope).await
    }
}
