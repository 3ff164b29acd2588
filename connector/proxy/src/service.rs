//! The Nexus service that fronts one upstream: `list_tools` (sync) and a catch-all that runs
//! every other operation name as that tool, in a standalone Activity (async) or, for a call
//! R-PRX-30 places inline, in the handler itself (sync).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use temporalio_client::Connection;
use temporalio_protos::temporal::api::{common::v1::Payload, enums::v1::ActivityIdReusePolicy};
use tracing::{info, warn};

use durable_mcp_runtime::trace::TraceContext;

use super::{
    call_activity::{CALL_TOOL_ACTIVITY, ToolCallInput},
    discovery::Discovery,
    inline::{self, Attempts, Execution, Placement},
    inline_call::InlineCall,
    options::{ActivityOptions, ResolvedCallOptions, resolve},
    refusal::{self, Refusal},
    retry::ToolHints,
};
use durable_mcp_contract::payload::{PayloadCodec, encode_one};
use durable_mcp_contract::{
    call::CallToken,
    errors::ToolCallErrorType,
    input::{INPUT_REQUIRED, PARTIAL_ROUND, partial_round_outcome},
    json::json_kind,
    listing::{
        LIST_TOOLS, ToolListing, advertise_inline, advertise_one_attempt, advertise_timeout,
        asks_for_instructions, requires_task, tool_name,
    },
    operation_name::tool_for_operation,
    payload,
};
use durable_mcp_runtime::nexus::{
    CancelContext, HandlerError, HandlerErrorKind, OperationError, OperationHandler, RetryBehavior,
    Service, StartContext, StartError, StartOutcome, start_fn,
};
use durable_mcp_runtime::temporal::activity::{
    ActivityStart, cancel_activity, find_activity, start_activity,
};

/// The overall time budget of one call: the configured schedule-to-close, else one attempt
/// (plus slack) for one-attempt tools, else five attempts' worth.
pub fn call_timeout(options: &ResolvedCallOptions) -> Duration {
    options.schedule_to_close.unwrap_or_else(|| {
        if options.one_attempt {
            options.start_to_close + Duration::from_secs(10)
        } else {
            options.start_to_close * 5
        }
    })
}

/// Where a call's activity runs and how it is configured.
#[derive(Clone)]
pub struct ServiceContext {
    pub service: String,
    pub connection: Connection,
    pub namespace: String,
    pub task_queue: String,
    pub activity_options: ActivityOptions,
    pub overrides: BTreeMap<String, ActivityOptions>,
    pub discovery: Arc<Discovery>,
    /// Encodes the call Activity's input (R-PRX-20); the Nexus worker and the Activity worker
    /// apply the same codec to everything else.
    pub codec: Option<Arc<dyn PayloadCodec>>,
    /// Verifies the state a cancel marker brings back (R-PRX-35).
    pub state_keys: crate::state_key::StateKeys,
}

impl ServiceContext {
    fn resolve(&self, tool: &serde_json::Value) -> ResolvedCallOptions {
        let name = tool_name(tool).unwrap_or_default();
        resolve(
            &self.activity_options,
            self.overrides.get(name),
            &ToolHints::from_tool_json(tool),
        )
    }

    /// The activity id of one call: a function of (service, tool, Nexus request id), so a
    /// retried start finds the activity its first attempt started.
    pub fn activity_id(&self, tool: &str, request_id: &str) -> String {
        durable_mcp_contract::call::call_activity_id(&self.service, tool, request_id)
    }
}

/// The steps of a tool operation's start: it starts the call's standalone Activity, or
/// reattaches to the one a first start began (R-PRX-3).
impl ServiceContext {
    async fn start_call(
        &self,
        start: &StartContext,
        input: &Payload,
        attempts: &Attempts,
    ) -> Result<StartOutcome, StartError> {
        let tool = tool_named(&start.operation)?;
        let activity_id = self.activity_id(&tool, &start.request_id);
        // A retried start must not depend on discovery, which may have changed (or failed)
        // since the first attempt recorded its input and options. When the tool is listed,
        // the start below attaches to an existing activity by id (UseExisting) and keeps its
        // recorded options, so no lookup is needed; when it is not, look for the first
        // attempt's activity before asking discovery anything.
        let listed = self.discovery.tool(&tool);
        if listed.is_none()
            && let Some(run_id) = self.find_run(&activity_id).await?
        {
            info!(%activity_id, "reattaching a retried start to its activity");
            return Ok(call_token(&activity_id, run_id));
        }
        let (arguments, answers) = match super::input::round_input(input) {
            Some(round) => round
                .map(|(arguments, answers)| (arguments, Some(answers)))
                .map_err(HandlerError::bad_request)?,
            None => (arguments(input)?, None),
        };
        let definition = match listed {
            Some(t) => t,
            None => self.rediscover(&tool).await?,
        };
        let options = self.resolve(&definition);
        let upstream_task = requires_task(&definition);
        let placement = self.place(&tool, &definition, &options, upstream_task, start);
        if placement.inline {
            info!(%tool, reason = placement.reason, "tool call runs inline");
            let attempt = attempts.next(&start.request_id);
            if attempt > 1 {
                // The server re-sent the start: the last answer came after the request deadline
                // or was a retryable failure. A re-runnable tool runs again (R-PRX-30).
                warn!(%tool, request_id = %start.request_id, attempt,
                      "the server sent an inline call's start again; it runs again");
            }
            let call = InlineCall {
                client: self.discovery.client(),
                tool: &tool,
                arguments,
                answers,
                caller: caller_of(start),
                options: &options,
                attempt,
            };
            return call.run(start).await;
        }
        let round = super::task_input::Round::of(&start.links);
        let activity_input = self
            .activity_input(
                &tool,
                (arguments, answers, round, caller_of(start)),
                &options,
                upstream_task,
            )
            .await?;
        let request = self.activity_start(start, &activity_id, &tool, &options, activity_input);
        self.start_or_reattach(&activity_id, request, &options.retry_reason)
            .await
    }

    /// Whether the call runs inline or in an Activity (R-PRX-30).
    fn place(
        &self,
        tool: &str,
        definition: &serde_json::Value,
        options: &ResolvedCallOptions,
        upstream_task: bool,
        start: &StartContext,
    ) -> Placement {
        let hints = ToolHints::from_tool_json(definition);
        let left = inline::remaining(start.deadline);
        inline::place(self.execution(tool), &hints, options, upstream_task, left)
    }

    /// The `execution` of the upstream's `activity_options` and of the tool's override.
    fn execution(&self, tool: &str) -> (Option<Execution>, Option<Execution>) {
        (
            self.activity_options.execution,
            self.overrides.get(tool).and_then(|o| o.execution),
        )
    }

    /// Whether the listing marks `definition`'s calls as answered inline (R-PRX-30).
    fn listed_inline(&self, definition: &serde_json::Value, options: &ResolvedCallOptions) -> bool {
        let Some(tool) = tool_name(definition) else {
            return false;
        };
        let upstream_task = requires_task(definition);
        let hints = ToolHints::from_tool_json(definition);
        inline::listed_inline(self.execution(tool), &hints, options, upstream_task)
    }

    /// The run of the call's activity, if there is one.
    async fn find_run(&self, activity_id: &str) -> Result<Option<String>, StartError> {
        find_activity(&self.connection, &self.namespace, activity_id)
            .await
            .map_err(|s| refused("looking up the call's activity", s))
    }

    /// A tool discovery did not list: maybe it is new, so ask once more before calling it
    /// unknown.
    async fn rediscover(&self, tool: &str) -> Result<serde_json::Value, StartError> {
        let tools = self.discovery.refresh().await.map_err(|e| {
            HandlerError::new(HandlerErrorKind::Unavailable, e.to_string())
                .with_retry(RetryBehavior::Retryable)
        })?;
        let definition = tools.iter().find(|t| tool_name(t) == Some(tool)).cloned();
        Ok(definition.ok_or_else(|| OperationError::Failed {
            message: format!("upstream {:?} has no tool {tool:?}", self.service),
            error_type: ToolCallErrorType::UnknownTool.as_str().into(),
            details: None,
        })?)
    }

    /// The activity's recorded input, encoded by the codec if there is one (R-PRX-20).
    async fn activity_input(
        &self,
        tool: &str,
        (arguments, answers, round, caller): (
            serde_json::Map<String, serde_json::Value>,
            Option<super::input::RoundAnswers>,
            Option<super::task_input::Round>,
            Option<String>,
        ),
        options: &ResolvedCallOptions,
        upstream_task: bool,
    ) -> Result<Payload, StartError> {
        let recorded = ToolCallInput {
            service: self.service.clone(),
            tool: tool.to_owned(),
            arguments,
            one_attempt: options.one_attempt,
            upstream_task,
            answers,
            round,
            caller,
        };
        let input =
            payload::to_payload(&recorded).map_err(|e| HandlerError::bad_request(e.to_string()))?;
        let Some(codec) = &self.codec else {
            return Ok(input);
        };
        Ok(encode_one(codec.as_ref(), input).await.map_err(|e| {
            HandlerError::new(
                HandlerErrorKind::Unavailable,
                format!("encoding the call's input: {e}"),
            )
            .with_retry(RetryBehavior::Retryable)
        })?)
    }

    /// The start request of the call's activity: its id, the resolved options, `UseExisting`
    /// with `RejectDuplicate`, and the Nexus callback as completion callback (R-PRX-3,
    /// R-PRX-16).
    fn activity_start(
        &self,
        start: &StartContext,
        activity_id: &str,
        tool: &str,
        options: &ResolvedCallOptions,
        input: Payload,
    ) -> ActivityStart {
        ActivityStart {
            activity_id: activity_id.to_owned(),
            request_id: start.request_id.clone(),
            activity_type: CALL_TOOL_ACTIVITY.into(),
            task_queue: self.task_queue.clone(),
            input: vec![input],
            schedule_to_close: Some(call_timeout(options)),
            schedule_to_start: options.schedule_to_start,
            search_attributes: options.search_attributes.clone(),
            start_to_close: Some(options.start_to_close),
            heartbeat: Some(options.heartbeat),
            retry_policy: Some(options.retry_policy.to_proto()),
            use_existing: true,
            reuse_policy: Some(ActivityIdReusePolicy::RejectDuplicate),
            completion_callback: (!start.callback.is_empty())
                .then(|| (start.callback.clone(), start.callback_headers.clone())),
            // Each caller's calls are dispatched fairly against the others' (R-PRX-40).
            priority: super::options::call_priority(
                options.priority.as_ref(),
                super::options::caller_key_of(&start.headers),
            ),
            summary: options
                .summary
                .clone()
                .or_else(|| Some(format!("{}: {tool}", self.service))),
            header: durable_mcp_runtime::trace::temporal_header(&TraceContext::current()),
        }
    }

    /// Starts the activity (or attaches to a running one by id); a retried start whose
    /// activity already closed is refused as a duplicate, and that closed run is the call.
    async fn start_or_reattach(
        &self,
        activity_id: &str,
        request: ActivityStart,
        retry_reason: &str,
    ) -> Result<StartOutcome, StartError> {
        let s = match start_activity(&self.connection, &self.namespace, request).await {
            Ok((run_id, started)) => {
                info!(%activity_id, started, retry = %retry_reason, "tool call activity");
                return Ok(call_token(activity_id, run_id));
            }
            Err(s) => s,
        };
        if s.code() == tonic::Code::AlreadyExists
            && let Some(run_id) = self.find_run(activity_id).await?
        {
            info!(%activity_id, "reattaching a retried start to its closed activity");
            return Ok(call_token(activity_id, run_id));
        }
        Err(refused("starting the call's activity", s))
    }
}

/// The caller a call is for, as the connector named it (R-PRX-10).
fn caller_of(start: &StartContext) -> Option<String> {
    start
        .headers
        .get(durable_mcp_contract::call::CALLER_HEADER)
        .cloned()
}

/// The tool an operation name stands for (R-NXC-5).
fn tool_named(operation: &str) -> Result<String, HandlerError> {
    tool_for_operation(operation).ok_or_else(|| {
        HandlerError::not_found(format!(
            "{operation:?} is not the operation name of any tool (R-NXC-5)"
        ))
    })
}

/// The tool's arguments: the operation's input, a JSON object (none is an empty one). The
/// proxy decodes what callers encoded (R-NXC-5).
fn arguments(input: &Payload) -> Result<serde_json::Map<String, serde_json::Value>, HandlerError> {
    match payload::to_json(input) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(serde_json::Value::Null) => Ok(serde_json::Map::new()),
        Ok(other) => Err(HandlerError::bad_request(format!(
            "tool arguments must be a JSON object, got {}",
            json_kind(&other)
        ))),
        Err(e) => Err(HandlerError::bad_request(e.to_string())),
    }
}

/// The answer for a run of the call's activity: its token.
fn call_token(activity_id: &str, run_id: String) -> StartOutcome {
    StartOutcome::Async {
        token: CallToken {
            activity_id: activity_id.to_owned(),
            run_id,
        }
        .to_token(),
    }
}

/// A refusal from Temporal: permanent ones fail the start at once (R-PRX-13), others are
/// retryable.
fn refused(what: &str, s: tonic::Status) -> StartError {
    match refusal::classify(what, s.code(), s.message()) {
        Refusal::Permanent(message) => HandlerError::bad_request(message)
            .with_retry(RetryBehavior::NonRetryable)
            .into(),
        Refusal::Transient(message) => HandlerError::new(HandlerErrorKind::Unavailable, message)
            .with_retry(RetryBehavior::Retryable)
            .into(),
    }
}

/// Builds the Nexus service for one upstream.
pub fn proxy_service(ctx: ServiceContext) -> Service {
    let ctx = Arc::new(ctx);
    let list_ctx = ctx.clone();
    let service = Service::new(ctx.service.clone()).operation(
        LIST_TOOLS,
        start_fn(move |_, input| {
            let ctx = list_ctx.clone();
            let asked = payload::to_json(&input).is_ok_and(|i| asks_for_instructions(&i));
            async move {
                let tools = ctx.discovery.refresh().await.map_err(|e| {
                    HandlerError::new(HandlerErrorKind::Unavailable, e.to_string())
                        .with_retry(RetryBehavior::Retryable)
                })?;
                let listed: Vec<serde_json::Value> = tools
                    .iter()
                    .map(|tool| {
                        let mut tool = tool.clone();
                        let options = ctx.resolve(&tool);
                        let inline = ctx.listed_inline(&tool, &options);
                        if let Some(obj) = tool.as_object_mut() {
                            advertise_timeout(obj, call_timeout(&options));
                            advertise_one_attempt(obj, options.one_attempt);
                            advertise_inline(obj, inline);
                        }
                        tool
                    })
                    .collect();
                let listing = ToolListing {
                    tools: listed,
                    instructions: ctx.discovery.instructions(),
                };
                let payload =
                    payload::to_marked_payload(&listing.answer(asked), payload::TOOL_LIST)
                        .map_err(|e| HandlerError::internal(e.to_string()))?;
                Ok(StartOutcome::Sync(payload))
            }
        }),
    );
    // Answers to some of a round's input requests, kept for the rest (R-CON-40); an upstream
    // task's state it keeps is bound to it (R-PRX-35).
    let (name, keys) = (ctx.service.clone(), ctx.state_keys.clone());
    let service = service.operation(
        PARTIAL_ROUND,
        start_fn(move |start, input| {
            let (name, keys) = (name.clone(), keys.clone());
            async move {
                partial_round_outcome(&input).map_err(HandlerError::bad_request)?;
                let asked = payload::from_payload(&input)
                    .map_err(|e| HandlerError::bad_request(e.to_string()))?;
                let here = super::task_input::Round::of(&start.links);
                let asked = super::task_input::rebound_for_partial_round(
                    asked,
                    &name,
                    here.as_ref(),
                    &keys,
                );
                let payload = payload::to_marked_payload(&asked, INPUT_REQUIRED)
                    .map_err(|e| HandlerError::internal(e.to_string()))?;
                Ok(StartOutcome::Sync(payload))
            }
        }),
    );
    // A cancel while the call waited for input (R-PRX-29).
    let service = super::cancelled_round::add_operation(
        service,
        ctx.service.clone(),
        ctx.discovery.client().clone(),
        ctx.state_keys.clone(),
        tool_named,
    );
    // Resources, prompts and completions (R-PRX-32).
    super::features::add_operations(service, ctx.discovery.client().clone()).catch_all(Arc::new(
        ToolCall {
            ctx,
            attempts: Arc::default(),
        },
    ))
}

struct ToolCall {
    ctx: Arc<ServiceContext>,
    /// Starts seen of each inline call (R-PRX-30).
    attempts: Arc<Attempts>,
}

impl OperationHandler for ToolCall {
    fn start(
        &self,
        start: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
        let (ctx, attempts) = (self.ctx.clone(), self.attempts.clone());
        Box::pin(async move { ctx.start_call(&start, &input, &attempts).await })
    }

    fn cancel(&self, cancel: CancelContext) -> BoxFuture<'static, Result<(), HandlerError>> {
        let ctx = self.ctx.clone();
        Box::pin(async move {
            let token: CallToken = serde_json::from_str(&cancel.token).map_err(|e| {
                HandlerError::bad_request(format!("malformed operation token: {e}"))
            })?;
            cancel_activity(
                &ctx.connection,
                &ctx.namespace,
                &token.activity_id,
                &token.run_id,
                "Nexus operation cancelled",
            )
            .await
            .map_err(|s| HandlerError::new(HandlerErrorKind::Unavailable, s.message().to_owned()))
        })
    }
}
