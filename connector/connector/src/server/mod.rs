//! The connector's MCP server: every route's Nexus service is a set of MCP tools; `tools/list`
//! asks each route's `list_tools` operation and `tools/call` starts a standalone Nexus
//! operation and waits for it.
//!
//! The server is an rmcp [`ServerHandler`], so a host serves it over stdio or Streamable HTTP
//! and adds its own middleware. One file per concern: [`catalog`] (the merged tool list),
//! [`call`] (starting and waiting for a call, idempotency keys), [`tasks`] (signed task IDs,
//! `tasks/get` and `tasks/cancel`), [`companion`] (task tools for callers without the tasks
//! extension) and [`scope`] (whose request this is); this file holds the options and the rmcp
//! glue.

use std::{collections::HashMap, sync::Arc, time::Duration};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};
use tokio::sync::RwLock;
use tracing::info;

use durable_mcp_runtime::trace::WithTraceContext as _;

use super::{
    route::Route,
    task_ref::{CallerScope, SigningKey},
};
use crate::local::LocalTools;
use durable_mcp_runtime::nexus::{OperationClient, OperationRef};

pub(crate) mod as_written;
mod call;
mod caller_key;
mod cancelled_round;
mod capabilities;
mod catalog;
mod catch_panics;
pub mod companion;
mod explicit_cancel;
mod feature_cache;
pub mod feature_changes;
mod features;
mod input;
pub mod instructions;
mod internal;
mod limits;
pub mod list_changed;
mod logging;
mod paging;
mod relay;
mod resource_subscriptions;
pub(crate) mod result_type;
mod scope;
pub mod subscriptions;
mod task_support;
mod tasks;

pub use crate::task_ref::MAX_OPERATION_ID_PREFIX_LEN;
use call::{Started, conflict_result, idempotency_key};
pub use catch_panics::CatchPanics;
use companion::{companion_tools, continues_as_task, is_companion};
use explicit_cancel::CallCancel;
pub use input::{DEFAULT_INPUT_TIMEOUT, INPUT_STATE_PREFIX};
use internal::internal;
pub use logging::DEFAULT_LOG_LEVEL;
use scope::{granted_scopes, insufficient_scope, request_share};
use task_support::{Caller, Plan, TaskSupport};
use tasks::{supports_tasks, tasks_extension_required, tool_needs_tasks};

pub use crate::operation_id::call_operation_id;

/// How the connector names and times its operations.
#[derive(Debug, Clone)]
pub struct ConnectorOptions {
    pub routes: Vec<Route>,
    /// Logical deployment name, shared by replicas; the first part of every operation id.
    pub connector_name: String,
    /// The part of operation ids after the connector name (naming and visibility only), at
    /// most [`MAX_OPERATION_ID_PREFIX_LEN`] bytes: a task ID carries it, and a longer one would
    /// make task IDs longer than hosts accept (R-CON-6).
    pub operation_id_prefix: String,
    /// Schedule-to-close for tools whose listing carries no timeout.
    pub default_timeout: Duration,
    /// How long `list_tools` on one route may take.
    pub list_timeout: Duration,
    /// How long a route's listing is reused before `tools/list` or a call of an unknown tool
    /// asks the route again (R-CON-17); zero asks every time.
    pub list_cache: Duration,
    /// How often, while a caller listens for list changes, the connector re-lists its routes on
    /// its own (R-CON-42, at least 1 s); zero turns that off (changes then show when a listing
    /// happens for another reason).
    pub list_changed_poll: Duration,
    /// How many Temporal operations (calls and listings) the connector waits for at once;
    /// past that, callers get an error naming the cap (R-CON-17).
    pub max_in_flight: usize,
    /// How many of those, and of management calls, companion tool calls and task look-ups, one
    /// caller (a verified subject, else one address) holds at once (R-CON-38); 0 for no such
    /// cap. Over stdio there is one caller and this does not apply.
    pub max_in_flight_per_caller: usize,
    /// How many tool calls one caller may start a minute (R-CON-38): a call that became a
    /// task no longer holds an in-flight place. 0 for no such cap; over stdio it does not
    /// apply.
    pub max_call_starts_per_caller_minute: usize,
    /// How long a task-capable caller waits before the call becomes a task.
    pub task_after: Duration,
    /// Serve the companion tools (`task_status`, `task_result`, `task_cancel`, `task_input`) and answer a
    /// caller without the tasks extension whose call outlasts `task_after` with a task ID.
    pub companion_tools: bool,
    /// Signs task IDs. Replicas that serve each other's tasks share it.
    pub signing_key: SigningKey,
    /// Earlier signing keys: task IDs they signed still verify (R-CON-18), so rotating the
    /// key does not orphan running tasks. New IDs are signed with `signing_key`.
    pub previous_signing_keys: Vec<SigningKey>,
    /// Whose tasks these are when the request names no verified caller: one stdio client, or
    /// (HTTP without authentication) everyone.
    pub caller_scope: CallerScope,
    /// Refuse requests that carry no verified [`CallerScope`] in their HTTP extensions (set
    /// with inbound auth, so a missing middleware can never mean a shared scope).
    pub require_verified_caller: bool,
    /// How long a tool's input request waits for its answer after its round ended
    /// (R-CON-40); then the call ends with a tool error.
    pub input_timeout: Duration,
    /// How often, while a caller subscribes to a resource, the connector asks each route the
    /// versions of its subscribed resources (R-CON-49, at least 1 s); zero serves no
    /// subscriptions.
    pub resource_poll: Duration,
}

impl ConnectorOptions {
    pub fn new(routes: Vec<Route>) -> Self {
        Self {
            routes,
            connector_name: "durable-mcp".into(),
            operation_id_prefix: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
            default_timeout: Duration::from_secs(300),
            list_timeout: Duration::from_secs(30),
            list_cache: DEFAULT_LIST_CACHE,
            list_changed_poll: DEFAULT_LIST_CHANGED_POLL,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_in_flight_per_caller: DEFAULT_MAX_IN_FLIGHT_PER_CALLER,
            max_call_starts_per_caller_minute: DEFAULT_MAX_CALL_STARTS_PER_CALLER_MINUTE,
            task_after: Duration::from_secs(2),
            companion_tools: false,
            signing_key: SigningKey::generate(),
            previous_signing_keys: Vec::new(),
            // One stdio client, or everyone on an unauthenticated HTTP connector: a stable scope,
            // so idempotency keys and tasks survive a restart with the same signing key.
            caller_scope: CallerScope::Anonymous,
            require_verified_caller: false,
            input_timeout: input::DEFAULT_INPUT_TIMEOUT,
            resource_poll: subscriptions::DEFAULT_RESOURCE_POLL,
        }
    }
}

/// How long a route's listing is reused by default (R-CON-17): long enough that a burst of
/// `tools/list` or unknown-tool calls costs one operation per route, short enough that a
/// changed upstream shows within seconds.
pub const DEFAULT_LIST_CACHE: Duration = Duration::from_secs(5);

/// How often the connector re-lists its routes for listeners by default (R-CON-42): each
/// re-listing is one persisted operation per route and list on every replica.
pub const DEFAULT_LIST_CHANGED_POLL: Duration = Duration::from_secs(60);

/// How many operations a connector waits for at once by default (R-CON-17).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 512;

/// How many of them one caller holds at once by default (R-CON-38): an eighth, so one token or
/// address cannot take them all.
pub const DEFAULT_MAX_IN_FLIGHT_PER_CALLER: usize = 64;

/// Default for [`ConnectorOptions::max_call_starts_per_caller_minute`]: ten a second on
/// average, a minute's worth at once.
pub const DEFAULT_MAX_CALL_STARTS_PER_CALLER_MINUTE: usize = 600;

/// The MCP server. Cheap to clone; clones share the tool catalog, but each clone has its own
/// log level (R-CON-13), keyed calls (R-CON-5) and resource subscriber (R-CON-49), so a host
/// serving several clients from clones of one connector keeps those clients apart.
pub struct Connector {
    inner: Arc<Inner>,
    /// The `logging/setLevel` of the client this connector value serves (see [`Typed`]).
    log_level: logging::LogLevel,
    /// The keyed calls its client waits for, which only an explicit cancel cancels (R-CON-5).
    keyed_calls: explicit_cancel::KeyedCalls,
    /// The resource subscriber of the client it serves, scoped like `log_level` (R-CON-49).
    subscriber: subscriptions::SessionSubscriber,
}

impl Clone for Connector {
    /// Shares everything but what belongs to its client (log level, keyed calls, resource
    /// subscriber): a clone serves another client.
    fn clone(&self) -> Self {
        Self::of(self.inner.clone())
    }
}

struct Inner {
    client: OperationClient,
    options: ConnectorOptions,
    /// Tool name -> (route, MCP Tool JSON), from the last `tools/list`.
    tools: RwLock<HashMap<String, (Route, Value)>>,
    /// Tool name -> why it is left out (exposed twice, R-CON-2), from the last `tools/list`.
    ambiguous: RwLock<HashMap<String, String>>,
    /// Per route (same order as the options' routes): its last listing and the one running,
    /// which concurrent askers share (R-CON-17).
    listings: Vec<std::sync::Mutex<catalog::RouteListing>>,
    /// The cap on operations in flight (R-CON-17).
    in_flight: limits::InFlight,
    call_starts: limits::CallStarts,
    /// Tools served in-process (R-OPS-1), listed after the routed ones.
    local: Option<Arc<dyn LocalTools>>,
    /// What it counts (R-RUN-6).
    metrics: crate::metrics::Metrics,
    /// Its tools version, which listeners follow (R-CON-42).
    tool_changes: list_changed::ToolChanges,
    /// Each route's resources, prompts and completions capabilities (R-CON-45).
    declared: features::Declared,
    /// Its resources and prompts versions, which listeners follow (R-CON-42).
    feature_changes: feature_changes::FeatureChanges,
    /// Each route's resource, template and prompt lists and the listings running (R-CON-45).
    feature_lists: feature_cache::FeatureLists,
    /// Who subscribes to which resource, and the tokens seen (R-CON-49).
    resource_subs: subscriptions::ResourceSubscriptions,
    /// The expired rounds whose next round it takes or took (R-CON-46).
    expiry_takes: cancelled_round::ExpiryTakes,
}

impl Connector {
    pub fn new(client: OperationClient, options: ConnectorOptions) -> Self {
        Self::with_local_tools(client, options, None)
    }

    /// A connector that also serves `local` tools in-process (for example the Temporal
    /// operations toolset). A routed tool with a local tool's name is left out (R-CON-2).
    pub fn with_local_tools(
        client: OperationClient,
        options: ConnectorOptions,
        local: Option<Arc<dyn LocalTools>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                listings: options.routes.iter().map(|_| Default::default()).collect(),
                in_flight: limits::InFlight::new(
                    options.max_in_flight,
                    options.max_in_flight_per_caller,
                ),
                call_starts: limits::CallStarts::new(options.max_call_starts_per_caller_minute),
                options,
                tools: RwLock::default(),
                ambiguous: RwLock::default(),
                local,
                metrics: Default::default(),
                tool_changes: Default::default(),
                declared: Default::default(),
                feature_changes: Default::default(),
                feature_lists: Default::default(),
                resource_subs: Default::default(),
                expiry_takes: Default::default(),
            }),
            log_level: logging::LogLevel::default(),
            keyed_calls: Default::default(),
            subscriber: Default::default(),
        }
    }

    /// A connector value of `inner` serving no client of its own (for background work).
    fn of(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            log_level: Default::default(),
            keyed_calls: Default::default(),
            subscriber: Default::default(),
        }
    }

    /// What it counts (R-RUN-6), for the host to serve: [`crate::metrics::Metrics::encode`].
    pub fn metrics(&self) -> crate::metrics::Metrics {
        self.inner.metrics.clone()
    }

    /// Its readiness checks (R-RUN-4): Temporal answers and every route's endpoint exists.
    pub fn readiness(&self) -> crate::health::Readiness {
        crate::health::Readiness::new(&self.inner.client, &self.inner.options.routes)
    }

    /// Whether a listing has nothing to offer but failures: every route failed and no local
    /// tool is served. The caller then reads that listing failed (R-CON-15), not an empty list.
    fn nothing_listable(&self, failed: &[String]) -> bool {
        !failed.is_empty()
            && failed.len() == self.inner.options.routes.len()
            && self.inner.local.is_none()
    }

    /// The local tool set, when `name` is one of its tools.
    fn local_for(&self, name: &str) -> Option<&Arc<dyn LocalTools>> {
        self.inner.local.as_ref().filter(|n| n.has_tool(name))
    }

    /// A fresh operation ID of this connector; `kind` follows the prefix (`-reserved` for
    /// reserved operations, empty for calls).
    fn operation_id(&self, kind: &str) -> String {
        let o = &self.inner.options;
        call_operation_id(
            &o.connector_name,
            &format!("{}{kind}", o.operation_id_prefix),
            uuid::Uuid::new_v4(),
        )
    }
}

/// The rmcp handler behind [`Connector`]'s `Service` (see [`as_written`]): one per request, so
/// the answer as it is to be written can be handed back beside rmcp's typed one. rmcp's
/// Streamable HTTP service needs a `ServerHandler` and serves this one ([`Connector::typed`]),
/// one per session; its answers as written go into the HTTP request's
/// [`as_written::HttpAnswers`] instead (see the crate's `as_written_http` module).
#[derive(Clone)]
pub struct Typed {
    connector: Connector,
    /// Set for a handler serving one request through the connector's own `Service`; `None` for
    /// rmcp's HTTP service, which keeps nothing beyond the request.
    written: Option<as_written::Written>,
    /// The caller's `logging/setLevel` (R-CON-13): one per session over HTTP, one per
    /// connector value over stdio and for library hosts.
    log_level: logging::LogLevel,
    /// The keyed calls of the caller it serves, scoped like `log_level` (R-CON-5).
    keyed_calls: explicit_cancel::KeyedCalls,
    /// The resource subscriber of the caller it serves, scoped like `log_level` (R-CON-49).
    subscriber: subscriptions::SessionSubscriber,
}

impl Connector {
    /// The connector as an rmcp `ServerHandler`, for hosts that need one (rmcp's Streamable
    /// HTTP service).
    pub fn typed(&self) -> Typed {
        Typed {
            connector: self.clone(),
            written: None,
            log_level: logging::LogLevel::default(),
            keyed_calls: Default::default(),
            subscriber: Default::default(),
        }
    }

    /// The typed handler for one request served through this connector's own `Service`, with
    /// the level its caller set.
    fn typed_sharing_level(&self) -> Typed {
        Typed {
            log_level: self.log_level.clone(),
            keyed_calls: self.keyed_calls.clone(),
            subscriber: self.subscriber.clone(),
            written: Some(as_written::Written::default()),
            ..self.typed()
        }
    }
}

impl std::ops::Deref for Typed {
    type Target = Connector;
    fn deref(&self) -> &Connector {
        &self.connector
    }
}

// MCP logging is deprecated (SEP-2577) but clients still use it (R-CON-13).
#[allow(deprecated)]
impl ServerHandler for Typed {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .enable_logging()
            .build();
        let subscribe = self.serves_subscriptions();
        features::declare(&mut capabilities, self.inner.declared.union(), subscribe);
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new("durable-mcp-connector", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        self.initialize_with_instructions(request, context).await
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        self.discover_with_instructions().await
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.follow_for_session(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let resources = self.serves_subscriptions().then_some(requested);
        let mut offered =
            list_changed::offered_subscriptions(&self.inner.declared.union(), resources);
        if let Some(uris) = &mut offered.resource_subscriptions {
            let lists = self.cached_lists();
            uris.retain(|uri| self.cached_subscribable(uri, &lists));
        }
        Some(offered)
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let share = request_share(&context);
        let id = self.session_subscriber(&self.subscriber, context.peer, share.clone());
        self.subscribe_resource(id, &request.uri, share.as_ref())
            .await
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Some(id) = *self.subscriber.lock().unwrap() {
            self.unsubscribe_resource(id, &request.uri);
        }
        Ok(())
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        self.listen_for_changes(context).await;
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // Waiting for the routes' listings holds a place in the caller's share (R-CON-38); the
        // listings, which every asker shares, hold the global places (R-CON-17).
        let _waiting = self
            .inner
            .in_flight
            .try_share("listing the tools", request_share(&context).as_ref())
            .inspect_err(|e| self.inner.metrics.note_refusal(e))?;
        // A routed tool named like a companion tool is left out of the routed list, and so are
        // the tools of a route that could not be listed (R-CON-2).
        let (routed, failed) = self.refresh_tools().await?;
        if self.nothing_listable(&failed) {
            return Err(internal("listing the tools", failed.join("; ")));
        }
        // Each tool says what the connector offers, to a caller whose version reads it.
        let reads = task_support::reads_task_support(context.protocol_version().as_ref());
        let mut listed: Vec<Value> = routed
            .into_iter()
            .map(|(route, t)| {
                let offer = TaskSupport::offered(&t, &route.tasks);
                task_support::as_listed(t, offer, reads)
            })
            .collect();
        if self.inner.options.companion_tools {
            listed.extend(companion_tools());
        }
        let tools = listed
            .iter()
            .map(|t| {
                serde_json::from_value::<Tool>(t.clone()).map_err(|e| {
                    McpError::internal_error(format!("a listed tool is not valid MCP: {e}"), None)
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Local tools are answered here, never as tasks: they list no `execution` (MCP's
        // default, taskSupport "forbidden").
        let local: Vec<Tool> = self.inner.local.iter().flat_map(|n| n.tools()).collect();
        let mut written = listed;
        for tool in &local {
            written.push(serde_json::to_value(tool).map_err(|e| {
                McpError::internal_error(format!("a local tool is not valid MCP: {e}"), None)
            })?);
        }
        as_written::keep(self.written.as_ref(), &context, Value::Array(written));
        Ok(ListToolsResult::with_all_items(
            tools.into_iter().chain(local).collect(),
        ))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        self.feature_answer("resources/list", paging::cursor_params(request), &context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        self.feature_answer(
            "resources/templates/list",
            paging::cursor_params(request),
            &context,
        )
        .await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let params = features::params(&request)?;
        self.feature_answer::<rmcp::model::ReadResourceResult>("resources/read", params, &context)
            .await
            .map(Into::into)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        self.feature_answer("prompts/list", paging::cursor_params(request), &context)
            .await
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let params = features::params(&request)?;
        self.feature_answer::<rmcp::model::GetPromptResult>("prompts/get", params, &context)
            .await
            .map(Into::into)
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        let params = features::params(&request)?;
        self.feature_answer("completion/complete", params, &context)
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if let Some(local) = self.local_for(name) {
            return local.tools().into_iter().find(|t| t.name == name);
        }
        if self.inner.options.companion_tools && is_companion(name) {
            let found = companion_tools()
                .into_iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(name))?;
            return serde_json::from_value(found).ok();
        }
        let catalog = self.inner.tools.try_read().ok()?;
        serde_json::from_value(catalog.get(name)?.1.clone()).ok()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let timer = self.inner.metrics.call_started();
        let tool = request.name.clone();
        let traced = crate::trace::call_span(&context);
        let answer = self.answer_call(request, context);
        let answer = answer.with_context(traced.clone()).await;
        let service = self.service_label(&tool).await;
        let (service, tool) = crate::metrics::bounded_labels(service.as_deref(), &tool);
        crate::trace::call_ended(&traced, service, tool, &answer);
        timer.finished(service, tool, &answer);
        answer
    }

    async fn on_cancelled(
        &self,
        notification: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        if let Some(id) = &notification.request_id {
            self.keyed_calls.cancel(id);
        }
    }

    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let answer = async {
            if !supports_tasks(&context) {
                return Err(tasks_extension_required());
            }
            let scope = self.request_scope(&context)?;
            let _slot = self
                .inner
                .in_flight
                .try_start("reading the task", request_share(&context).as_ref())
                .inspect_err(|e| self.inner.metrics.note_refusal(e))?;
            Ok(GetTaskResult::new(
                self.task_state(&request.task_id, &scope).await?,
            ))
        };
        crate::trace::task_request("mcp.tasks.get", &context, answer).await
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let answer = async {
            let (scope, _slot) = self.task_request(&context, "updating the task")?;
            let share = request_share(&context);
            self.update_task_op(
                &request.task_id,
                &scope,
                request.input_responses,
                share.as_ref(),
                companion::Answerer::Owner,
            )
            .await
            .map(|_| ())
        };
        crate::trace::task_request("mcp.tasks.update", &context, answer).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let answer = async {
            let (scope, _slot) = self.task_request(&context, "cancelling the task")?;
            self.cancel_task_op(&request.task_id, &scope).await
        };
        crate::trace::task_request("mcp.tasks.cancel", &context, answer).await
    }
}

impl Typed {
    /// A `tools/call` answered (counted by [`ServerHandler::call_tool`], R-RUN-6).
    async fn answer_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let scope = self.request_scope(&context)?;
        let share = request_share(&context);
        let key = idempotency_key(&request, &context)?;
        if let Some(local) = self.local_for(&request.name) {
            if key.is_some() {
                return Err(keyed_local_call(&request.name, local.origin()));
            }
            // Held until answered: management calls count like operations (R-CON-38).
            let _slot = self.start_work(&request.name, share.as_ref())?;
            return Ok(call_local(local, &request, &context, &scope).await);
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        if self.inner.options.companion_tools && is_companion(&request.name) {
            let _slot = self.start_work(&request.name, share.as_ref())?;
            let caller = (&scope, share.as_ref());
            let json = self
                .call_companion(&request.name, &arguments, caller, &context)
                .await?;
            // `task_result` answers the call's own result: written as the tool wrote it.
            as_written::keep(self.written.as_ref(), &context, json.clone());
            return complete(json);
        }
        // A call re-issued with the answers to its input requests resumes it (R-CON-40).
        if request.request_state.is_some() || request.input_responses.is_some() {
            return self.resume_call(&request, &context, &scope).await;
        }
        // What the call may become is the upstream tool's to say (R-CON-39): decided, and a
        // caller that cannot follow a required task refused, before anything starts.
        let plan = {
            // A name the catalog lacks waits for a listing: in the caller's share (R-CON-38).
            let what = format!("calling tool {:?}", request.name);
            let _waiting = self.inner.in_flight.try_share(&what, share.as_ref())?;
            self.plan(&request.name, &context).await?
        };
        // The call holds its in-flight slot (R-CON-17) until this answer: a result, or a task.
        let keyed = key.is_some();
        let call::Call {
            op,
            deadline,
            slot: _slot,
        } = match self
            .start_call(
                &request.name,
                arguments,
                (key, Some(&scope)),
                share.as_ref(),
            )
            .await?
        {
            Started::Op(call) => call,
            Started::Conflict => return complete(conflict_result()),
        };
        let json = match self
            .answer_started(
                &request.name,
                &op,
                deadline,
                &context,
                &scope,
                (plan, keyed),
            )
            .await?
        {
            Answer::Result(json) => json,
            Answer::Task(task) => return Ok(CallToolResponse::Task(task)),
        };
        if let Some(asked) = self
            .input_required_answer(&op, &json, &context, &scope)
            .await?
        {
            return Ok(asked);
        }
        as_written::keep(self.written.as_ref(), &context, json.clone());
        complete(json)
    }

    /// The service label of a call of `tool` (R-RUN-6): its route's service, the local tool
    /// set's origin, `companion`; `None` for a tool the connector never listed.
    async fn service_label(&self, tool: &str) -> Option<String> {
        if let Some(local) = self.local_for(tool) {
            return Some(local.origin().to_owned());
        }
        if self.inner.options.companion_tools && is_companion(tool) {
            return Some("companion".into());
        }
        let catalog = self.inner.tools.read().await;
        catalog.get(tool).map(|(route, _)| route.service.clone())
    }
}

impl Typed {
    /// A task method's caller (it must have declared the tasks extension) and its slot under
    /// the in-flight caps (R-CON-17, R-CON-38).
    fn task_request(
        &self,
        context: &RequestContext<RoleServer>,
        what: &str,
    ) -> Result<(CallerScope, limits::InFlightSlot), McpError> {
        if !supports_tasks(context) {
            return Err(tasks_extension_required());
        }
        let scope = self.request_scope(context)?;
        let slot = self
            .inner
            .in_flight
            .try_start(what, request_share(context).as_ref())
            .inspect_err(|e| self.inner.metrics.note_refusal(e))?;
        Ok((scope, slot))
    }
}

impl Connector {
    /// A slot under the in-flight caps (R-CON-17, R-CON-38) for a call answered without a
    /// durable operation of its own (a local or companion tool).
    fn start_work(
        &self,
        tool: &str,
        share: Option<&crate::fair::Share>,
    ) -> Result<limits::InFlightSlot, McpError> {
        self.inner
            .in_flight
            .try_start(&format!("calling tool {tool:?}"), share)
    }
}

/// The error for a local tool called with an idempotency key (R-OPS-1): it is answered
/// directly, not as a durable operation, so nothing could find the first call again and a
/// retry would run it twice. Refused, nothing runs, rather than ignore the key.
fn keyed_local_call(tool: &str, origin: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "{tool} ({origin}) is answered directly, not as a durable operation, so it cannot \
             honour an idempotency key: a retry would run it again. Nothing ran. Call it \
             without the key, after checking its effect (e.g. describe_workflow) if an earlier \
             call may have run"
        ),
        Some(json!({"tool": tool, "idempotencyKey": "unsupported"})),
    )
}

/// A management call made directly, not a durable operation (R-OPS-1), by a caller whose token
/// carries the scope its family needs (R-OPS-5); refused with a tool error otherwise.
async fn call_local(
    local: &Arc<dyn LocalTools>,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    scope: &CallerScope,
) -> CallToolResponse {
    let granted = granted_scopes(context);
    let needed = local.required_scopes(&request.name);
    let identified = matches!(scope, CallerScope::Subject { .. });
    let mut result = match crate::local::missing_scope(granted.as_ref(), identified, needed) {
        Some(missing) => {
            info!(tool = %request.name, caller = ?scope, "local tool refused: missing scope");
            insufficient_scope(&request.name, missing)
        }
        None => {
            let arguments = request.arguments.clone().unwrap_or_default();
            let result = local.call(&request.name, &arguments).await;
            info!(tool = %request.name, caller = ?scope, "local tool called");
            result
        }
    };
    result.result_type = Some(ResultType::COMPLETE);
    result.into()
}

/// How a started call is answered: its result, or a task the caller follows.
enum Answer {
    /// A `CallToolResult` JSON: the call's, or a companion task ID in a text result.
    Result(Value),
    Task(CreateTaskResult),
}

impl Typed {
    /// How a call of `tool` by this request's caller is answered (R-CON-39); -32021 for a tool
    /// that runs only as a task and a caller that cannot follow one.
    async fn plan(
        &self,
        tool: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Plan, McpError> {
        let (route, definition) = self.lookup(tool).await?;
        let caller = if supports_tasks(context) {
            Caller::Tasks
        } else if self.inner.options.companion_tools {
            Caller::Companion
        } else {
            Caller::Waits
        };
        let support = TaskSupport::offered(&definition, &route.tasks);
        match task_support::plan(support, caller, self.inner.options.task_after) {
            Plan::NeedsTasks => Err(tool_needs_tasks(tool)),
            plan => Ok(plan),
        }
    }

    /// Waits for the started call `op` (until `deadline` through outages, see [`call::Call`]),
    /// as `plan` says: a caller that can follow a task (the tasks extension, or the companion
    /// tools) waits `--task-after` at most, then gets the call as a task; others wait for the
    /// result (R-CON-39). A keyed call runs on when its request ends without an explicit cancel
    /// (R-CON-5).
    async fn answer_started(
        &self,
        tool: &str,
        op: &OperationRef,
        deadline: tokio::time::Instant,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
        (plan, keyed): (Plan, bool),
    ) -> Result<Answer, McpError> {
        if plan == Plan::TaskNow {
            return Ok(Answer::Task(self.continued_as_task(op, scope).await));
        }
        let registered = keyed.then(|| self.keyed_calls.register(context.id.clone()));
        let cancel = match &registered {
            Some(registered) => CallCancel::Explicit {
                ended: context.ct.clone(),
                explicit: registered.explicit(),
            },
            None => CallCancel::Any(context.ct.clone()),
        };
        let progress = Some(call::Listener {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            min_log_level: logging::request_log_level(&context.meta, &self.log_level),
            inline: self.listed_inline(tool).await,
        });
        let one_attempt = self.one_attempt(tool).await;
        let finished = self.finish_call(op, deadline, &cancel, progress, one_attempt);
        match plan {
            // A task-capable caller waits `task_after`, then gets a task it can poll from any
            // replica; after that only tasks/cancel cancels the call.
            Plan::TaskAfter(after) => tokio::select! {
                finished = finished => Ok(Answer::Result(finished?)),
                _ = tokio::time::sleep(after) => {
                    Ok(Answer::Task(self.continued_as_task(op, scope).await))
                }
            },
            // No tasks extension, but companion tools: after `task_after` the caller gets the
            // task ID in a text result and follows it with the companion tools.
            Plan::CompanionAfter(after) => tokio::select! {
                finished = finished => Ok(Answer::Result(finished?)),
                _ = tokio::time::sleep(after) => {
                    Ok(Answer::Result(self.companion_task(tool, op, scope).await))
                }
            },
            _ => Ok(Answer::Result(finished.await?)),
        }
    }

    /// The call `op` handed to its caller as a task.
    async fn continued_as_task(&self, op: &OperationRef, scope: &CallerScope) -> CreateTaskResult {
        let task = self.created_task(op, scope).await;
        info!(operation_id = %op.operation_id, "tool call continues as a task");
        CreateTaskResult::new(task)
    }

    /// The text result that hands a caller without the tasks extension its call's task ID.
    async fn companion_task(&self, tool: &str, op: &OperationRef, scope: &CallerScope) -> Value {
        info!(operation_id = %op.operation_id, "tool call continues as a companion task");
        let has_output_schema = self
            .lookup(tool)
            .await
            .is_ok_and(|(_, tool)| tool.get("outputSchema").is_some());
        continues_as_task(&self.task_id(op, scope), has_output_schema)
    }
}

/// A `CallToolResult` JSON as rmcp's complete answer.
fn complete(json: Value) -> Result<CallToolResponse, McpError> {
    let mut result: CallToolResult = serde_json::from_value(json).map_err(|e| {
        McpError::internal_error(
            format!("the tool returned an invalid CallToolResult: {e}"),
            None,
        )
    })?;
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result.into())
}
