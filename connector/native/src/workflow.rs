//! Workflow-backed tools (R-NAT-4): the tool's operation starts a Workflow and answers async;
//! the Workflow's completion callback completes the operation.
//!
//! - The Workflow id is `mcp/<service>/<tool>/<Nexus request id>` and the start's request id is
//!   the Nexus request id, with `UseExisting` and all attach flags: a start the server retries
//!   attaches to the same Workflow instead of running a second one. After the Workflow closed,
//!   `RejectDuplicate` keeps the id to that run, which the retried start answers with.
//! - The operation token ([`WorkflowCallToken`]) names the Workflow; a Nexus cancel (any of the
//!   connector's cancel routes ends in one) requests the Workflow's cancellation, and a
//!   Workflow that honours it ends CANCELED, which the callback reports as a canceled operation.
//! - The Workflow's result is the operation's result: a plain value, which callers turn into a
//!   `CallToolResult` by the outcome table (R-CON-4; an object becomes `structuredContent`).
//! - The Workflow reports progress with [`report_progress`] (a memo entry callers read) and
//!   waits with [`sleep_unless_cancelled`].

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use temporalio_common::WorkflowDefinition;
use temporalio_protos::temporal::api::common::v1::Payload;
use temporalio_sdk::{
    MemoValue, TimerOptions, TimerResult, WorkflowCancellationToken, WorkflowContext,
};

use super::{
    input::{Round, decode_round},
    result::{BadArguments, decode_arguments, schema_of},
    tool::{HandlerFactory, Tool},
};
use durable_mcp_contract::{
    call::{PROGRESS_MEMO_KEY, ToolProgress, WorkflowCallToken},
    payload,
};
use durable_mcp_runtime::nexus::{
    CancelContext, HandlerError, HandlerErrorKind, OperationHandler, RetryBehavior, StartContext,
    StartError, StartOutcome,
};
use durable_mcp_runtime::temporal::{
    TemporalConnection,
    workflow::{WorkflowStart, cancel_workflow, describe_workflow, start_workflow},
};

/// The timeout a Workflow-backed tool advertises unless it sets one.
pub const DEFAULT_WORKFLOW_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The Workflow id of one call: a function of (service, tool, Nexus request id), so a retried
/// start finds the Workflow its first attempt started.
/// The same form as a proxied call's Activity id, which callers check a token against
/// (R-CON-10).
pub fn workflow_id(service: &str, tool: &str, request_id: &str) -> String {
    durable_mcp_contract::call::call_activity_id(service, tool, request_id)
}

impl Tool {
    /// Publishes an existing Workflow type as a tool, in one line:
    /// `Tool::workflow("slow_report", SlowReport::run, "my-task-queue")`. The input schema is
    /// the Workflow input's, the output schema its output's when that is an object. The
    /// service needs a Temporal connection (`ToolService::temporal`), and a worker must run
    /// the Workflow on `task_queue`.
    pub fn workflow<WD>(
        name: impl Into<String>,
        workflow: WD,
        task_queue: impl Into<String>,
    ) -> Tool
    where
        WD: WorkflowDefinition,
        WD::Input: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
        WD::Output: JsonSchema,
    {
        let output = schema_of::<WD::Output>();
        let output =
            (output.get("type") == Some(&serde_json::Value::from("object"))).then_some(output);
        Self::workflow_tool::<WD::Input>(
            name.into(),
            workflow.name(),
            task_queue.into(),
            output,
            false,
        )
    }

    /// Publishes a Workflow that may ask its caller for input (R-NAT-7): it takes a
    /// [`Round<I>`] (the arguments, and the answers after a round that asked) and returns a
    /// [`RawValue`](temporalio_common::data_converters::RawValue) made by
    /// [`Round::ask`] (input requests: this round ends, the caller's answers start the next
    /// round's Workflow) or by [`finish`](super::input::finish) (the result). The input schema
    /// is `I`'s. Between rounds no Workflow runs, so a question waits out any restart.
    pub fn workflow_asking<WD, I>(
        name: impl Into<String>,
        workflow: WD,
        task_queue: impl Into<String>,
    ) -> Tool
    where
        WD: WorkflowDefinition<Input = Round<I>>,
        I: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
    {
        Self::workflow_tool::<I>(name.into(), workflow.name(), task_queue.into(), None, true)
    }

    fn workflow_tool<I>(
        name: String,
        workflow_type: &str,
        task_queue: String,
        output: Option<serde_json::Value>,
        rounds: bool,
    ) -> Tool
    where
        I: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
    {
        let workflow_type = workflow_type.to_owned();
        let tool_name = name.clone();
        let handler: HandlerFactory = Box::new(move |ctx, timeout| {
            let temporal = ctx.temporal.clone().ok_or_else(|| {
                format!(
                    "tool {tool_name:?} runs a Workflow and needs a Temporal connection: call \
                     ToolService::temporal(connection) before build()"
                )
            })?;
            Ok(Arc::new(WorkflowTool::<I> {
                service: ctx.service.clone(),
                tool: tool_name,
                workflow_type,
                task_queue,
                temporal,
                timeout,
                rounds,
                _input: std::marker::PhantomData,
            }) as Arc<dyn OperationHandler>)
        });
        Tool::new(
            name,
            schema_of::<I>(),
            output,
            DEFAULT_WORKFLOW_TIMEOUT,
            handler,
        )
    }
}

struct WorkflowTool<I> {
    service: String,
    tool: String,
    workflow_type: String,
    task_queue: String,
    temporal: TemporalConnection,
    /// The tool's timeout, which bounds the Workflow too: it never outlives its caller.
    timeout: Duration,
    /// The Workflow takes a [`Round`] (an asking tool, R-NAT-7), not the bare arguments.
    rounds: bool,
    _input: std::marker::PhantomData<fn(I)>,
}

/// The Workflow's input for an operation's: the arguments, or for an asking tool its
/// [`Round`] (with the answers of a later round's input).
fn workflow_input<I>(input: &Payload, rounds: bool) -> Result<Payload, Box<StartError>>
where
    I: DeserializeOwned + Serialize,
{
    let refused = |b: BadArguments| Box::new(StartError::from(b));
    let encoded = if rounds {
        payload::to_payload(&decode_round::<I>(input).map_err(refused)?.0)
    } else {
        payload::to_payload(&decode_arguments::<I>(input).map_err(refused)?)
    };
    encoded.map_err(|e| {
        Box::new(HandlerError::internal(format!("encoding the arguments: {e}")).into())
    })
}

fn unavailable(what: &str, status: &tonic::Status) -> StartError {
    HandlerError::new(
        HandlerErrorKind::Unavailable,
        format!("{what}: {}", status.message()),
    )
    .with_retry(RetryBehavior::Retryable)
    .into()
}

impl<I> OperationHandler for WorkflowTool<I>
where
    I: DeserializeOwned + Serialize + Send + 'static,
{
    fn start(
        &self,
        ctx: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
        let args = workflow_input::<I>(&input, self.rounds);
        let workflow_id = workflow_id(&self.service, &self.tool, &ctx.request_id);
        let start = WorkflowStart {
            workflow_id: workflow_id.clone(),
            request_id: ctx.request_id.clone(),
            workflow_type: self.workflow_type.clone(),
            task_queue: self.task_queue.clone(),
            input: Vec::new(),
            execution_timeout: Some(self.timeout),
            // A start delivered by hand has no callback to attach.
            completion_callback: (!ctx.callback.is_empty())
                .then(|| (ctx.callback.clone(), ctx.callback_headers.clone())),
            summary: Some(format!("MCP tool {}/{}", self.service, self.tool)),
        };
        let temporal = self.temporal.clone();
        Box::pin(async move {
            let input = args.map_err(|e| *e)?;
            let start = WorkflowStart {
                input: vec![input],
                ..start
            };
            let (conn, ns) = (&temporal.connection, temporal.namespace.as_str());
            let run_id = match start_workflow(conn, ns, start).await {
                Ok((run_id, _started)) => run_id,
                // Closed, and RejectDuplicate keeps the id to that run: a start retried after
                // the Workflow finished answers with it.
                Err(s) if s.code() == tonic::Code::AlreadyExists => {
                    match describe_workflow(conn, ns, &workflow_id, "").await {
                        Ok(Some(found)) => found.run_id,
                        Ok(None) => return Err(unavailable("finding the Workflow", &s)),
                        Err(e) => return Err(unavailable("finding the Workflow", &e)),
                    }
                }
                Err(s) => return Err(unavailable("starting the Workflow", &s)),
            };
            let token = WorkflowCallToken {
                workflow_id,
                run_id,
            }
            .to_token();
            Ok(StartOutcome::Async { token })
        })
    }

    fn cancel(&self, ctx: CancelContext) -> BoxFuture<'static, Result<(), HandlerError>> {
        let temporal = self.temporal.clone();
        Box::pin(async move {
            let token = WorkflowCallToken::parse(&ctx.token).ok_or_else(|| {
                HandlerError::bad_request("the operation token names no Workflow")
                    .with_retry(RetryBehavior::NonRetryable)
            })?;
            match cancel_workflow(
                &temporal.connection,
                &temporal.namespace,
                &token.workflow_id,
                &token.run_id,
                "the MCP caller cancelled the tool call",
            )
            .await
            {
                Ok(()) => Ok(()),
                // Already closed: its outcome is on its way through the callback.
                Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
                Err(s) => Err(HandlerError::new(
                    HandlerErrorKind::Unavailable,
                    format!("cancelling the Workflow: {}", s.message()),
                )
                .with_retry(RetryBehavior::Retryable)),
            }
        })
    }
}

/// Sleeps `duration` of Workflow time unless the Workflow is cancelled first: `true` when the
/// whole duration passed, `false` on cancel (R-NAT-5). Use it where a Workflow tool would race
/// `ctx.timer` against `ctx.cancelled()`: the timer gets a cancellation token of its own, because
/// temporalio-workflow 1.1 panics (the Workflow task then fails on every retry, and the call
/// never ends) when a cancel and the firing of a timer that inherited the Workflow's
/// cancellation arrive in one activation. The timer left pending on cancel is harmless.
pub async fn sleep_unless_cancelled<W>(ctx: &WorkflowContext<W>, duration: Duration) -> bool {
    let mut own = TimerOptions::from(duration);
    own.cancellation_token = Some(WorkflowCancellationToken::new());
    futures::select_biased! {
        _ = ctx.cancelled() => false,
        fired = ctx.timer(own).fuse() => fired == TimerResult::Fired,
    }
}

/// Records a Workflow-backed tool's progress where callers read it (a memo entry under
/// [`PROGRESS_MEMO_KEY`]): a waiting MCP caller gets it as `notifications/progress`, a task's
/// `tasks/get` as its status message (R-CON-10).
pub fn report_progress<W>(ctx: &WorkflowContext<W>, progress: ToolProgress) {
    if let Err(e) = ctx.upsert_memo([(PROGRESS_MEMO_KEY, Some(MemoValue::new(progress)))]) {
        // Progress is advisory: a value that does not encode must not fail the Workflow.
        tracing::warn!("could not record tool progress: {e}");
    }
}
