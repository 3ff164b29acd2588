//! The Workflow tools: start, result, describe, list, history, event, query, signal, cancel,
//! terminate, continue-as-new. Each is one or a few WorkflowService requests.

use std::time::Duration;

use serde_json::{Value, json};
use temporalio_protos::temporal::api::{
    common::v1::{Payloads, WorkflowExecution, WorkflowType},
    enums::v1::{EventType, HistoryEventFilterType, WorkflowExecutionStatus},
    history::v1::{HistoryEvent, history_event::Attributes},
    query::v1::WorkflowQuery,
    taskqueue::v1::TaskQueue,
    workflow::v1::WorkflowExecutionInfo,
    workflowservice::v1::{
        DescribeWorkflowExecutionRequest, DescribeWorkflowExecutionResponse,
        GetWorkflowExecutionHistoryRequest, GetWorkflowExecutionHistoryResponse,
        ListWorkflowExecutionsRequest, ListWorkflowExecutionsResponse, QueryWorkflowRequest,
        RequestCancelWorkflowExecutionRequest, SignalWorkflowExecutionRequest,
        StartWorkflowExecutionRequest, TerminateWorkflowExecutionRequest,
    },
};

use super::{
    Answer, Ctx,
    args::Args,
    catalog::{Input, Output, ToolFamily::*, ToolSpec, args, int, nullable, objects, s, t, with},
    error::{ErrorKind, ToolError},
    paging::{self, Paging},
    payloads::{Decode, object, proto_json, prune, with_fields},
    reserved, size,
};
use durable_mcp_runtime::temporal::proto_duration;

/// How often a tool that watches a Workflow close looks again.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The Workflow tools, in listing order.
pub(super) fn specs() -> Vec<ToolSpec> {
    vec![
        start_spec(),
        result_spec(),
        describe_spec(),
        list_spec(),
        history_spec(),
        event_spec(),
        query_spec(),
        signal_spec(),
        cancel_spec(),
        terminate_spec(),
        continue_as_new_spec(),
    ]
}

const WORKFLOW_ID: &str = "Workflow Id";

/// The Workflow id and run id, then `more`.
fn inputs(more: Vec<Input>) -> Vec<Input> {
    let execution = vec![
        ("workflow_id", s(WORKFLOW_ID), true),
        ("run_id", s("Run Id; omit for the latest run"), false),
    ];
    with(execution, more)
}

/// The namespace, Workflow id and run id, then `more`.
fn outputs(more: Vec<Output>) -> Vec<Output> {
    let execution = vec![
        ("namespace", t("string")),
        ("workflow_id", t("string")),
        ("run_id", t("string")),
    ];
    with(execution, more)
}

/// An answer's data: the namespace, Workflow id and run id, then `more`.
fn data<const N: usize>(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    more: [(&str, Value); N],
) -> Value {
    let data = object([
        ("namespace", json!(ctx.namespace)),
        ("workflow_id", json!(workflow_id)),
        ("run_id", json!(run_id)),
    ]);
    with_fields(data, more.map(|(k, v)| (k.to_owned(), v)))
}

pub(super) fn execution(workflow_id: &str, run_id: Option<&str>) -> WorkflowExecution {
    WorkflowExecution {
        workflow_id: workflow_id.to_owned(),
        run_id: run_id.unwrap_or_default().to_owned(),
    }
}

fn target(workflow_id: &str) -> String {
    format!("Workflow {workflow_id:?}")
}

/// `COMPLETED`, `RUNNING`, ... for a status number.
pub(super) fn status_name(status: i32) -> String {
    WorkflowExecutionStatus::try_from(status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("WORKFLOW_EXECUTION_STATUS_")
                .to_owned()
        })
        .unwrap_or_else(|_| format!("UNKNOWN({status})"))
}

pub(super) fn time(t: Option<&prost_wkt_types::Timestamp>) -> Value {
    t.map(proto_json).unwrap_or(Value::Null)
}

/// One Workflow execution in list form.
pub(super) fn summary(info: &WorkflowExecutionInfo) -> Value {
    let exec = info.execution.clone().unwrap_or_default();
    json!({
        "workflow_id": exec.workflow_id,
        "run_id": exec.run_id,
        "workflow_type": info.r#type.as_ref().map(|t| t.name.clone()).unwrap_or_default(),
        "status": status_name(info.status),
        "task_queue": info.task_queue,
        "start_time": time(info.start_time.as_ref()),
        "close_time": time(info.close_time.as_ref()),
        "history_length": info.history_length,
    })
}

/// One Workflow execution as visibility lists it. Visibility records `HistoryLength` only when
/// a run closes, so a running Workflow's length is unknown here (null, not a misleading 0);
/// `describe_workflow` reports the current one.
pub(super) fn listed_summary(info: &WorkflowExecutionInfo) -> Value {
    let v = summary(info);
    if info.status == WorkflowExecutionStatus::Running as i32 {
        return with_fields(v, [("history_length".into(), Value::Null)]);
    }
    v
}

async fn describe_raw(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: Option<&str>,
) -> Result<DescribeWorkflowExecutionResponse, ToolError> {
    ctx.connection
        .workflow_service()
        .describe_workflow_execution(tonic::Request::new(DescribeWorkflowExecutionRequest {
            namespace: ctx.namespace.clone(),
            execution: Some(execution(workflow_id, run_id)),
        }))
        .await
        .map(|r| r.into_inner())
        .map_err(|s| ToolError::from_status(&s, &target(workflow_id)))
}

/// The run's status and run id, as described.
async fn status_of(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: Option<&str>,
) -> Result<(String, String), ToolError> {
    let d = describe_raw(ctx, workflow_id, run_id).await?;
    let info = d.workflow_execution_info.unwrap_or_default();
    Ok((
        status_name(info.status),
        info.execution.map(|e| e.run_id).unwrap_or_default(),
    ))
}

/// Describes the run every [`WATCH_INTERVAL`] until it is no longer running or `wait` passed.
async fn watch_close(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    wait: Duration,
) -> Result<String, ToolError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let (status, _) = status_of(ctx, workflow_id, Some(run_id)).await?;
        if status != "RUNNING" || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(WATCH_INTERVAL).await;
    }
}

fn start_spec() -> ToolSpec {
    ToolSpec {
        name: "start_workflow",
        title: "Start a Workflow",
        description: "Start a new Workflow execution of `workflow_type` on `task_queue` with JSON `args` (encoded through the codec when one is configured). Answers the run id; a Workflow id that is already running is an AlreadyExists error.",
        family: Write,
        idempotent: false,
        inputs: vec![
            ("workflow_type", s("Workflow type name"), true),
            (
                "task_queue",
                s("Task queue a worker for this type polls"),
                true,
            ),
            (
                "workflow_id",
                s("Workflow Id; a random one when omitted"),
                false,
            ),
            (
                "args",
                args("Workflow arguments, one JSON value each"),
                false,
            ),
            (
                "execution_timeout_seconds",
                int("Execution timeout in seconds; 0 for none", 0, 31_536_000, 0),
                false,
            ),
        ],
        outputs: outputs(vec![("started", t("boolean"))]),
    }
}

pub async fn start(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_type = args.string("workflow_type")?;
    let task_queue = args.string("task_queue")?;
    let workflow_id = args
        .opt_string("workflow_id")?
        .unwrap_or_else(|| format!("{workflow_type}-{}", uuid::Uuid::new_v4()));
    reserved::check_id(&workflow_id)?;
    let input = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    let timeout = args.int("execution_timeout_seconds", 0, 0, 31_536_000)?;
    let response = ctx
        .connection
        .workflow_service()
        .start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace: ctx.namespace.clone(),
            workflow_id: workflow_id.clone(),
            workflow_type: Some(WorkflowType {
                name: workflow_type.clone(),
            }),
            task_queue: Some(TaskQueue {
                name: task_queue.clone(),
                ..Default::default()
            }),
            input,
            workflow_execution_timeout: (timeout > 0)
                .then(|| proto_duration(Duration::from_secs(timeout))),
            identity: ctx.identity(),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, &target(&workflow_id)))?
        .into_inner();
    Ok(Answer {
        headline: format!(
            "Started Workflow {workflow_id:?} ({workflow_type} on task queue {task_queue:?}), run {}",
            response.run_id
        ),
        data: data(
            ctx,
            &workflow_id,
            &response.run_id,
            [("started", json!(response.started))],
        ),
    })
}

/// How a run closed, from its close event.
struct Closed {
    status: &'static str,
    result: Value,
    failure: Value,
    next_run: Option<String>,
}

async fn closed(ctx: &Ctx<'_>, event: HistoryEvent) -> Result<Option<Closed>, ToolError> {
    let failure = |f: Option<temporalio_protos::temporal::api::failure::v1::Failure>| async move {
        match f {
            Some(f) => {
                let mut v = proto_json(&f);
                prune(&mut v);
                ctx.io
                    .show(&ctx.namespace, &mut v, Decode::Everything)
                    .await?;
                Ok::<_, ToolError>(v)
            }
            None => Ok(Value::Null),
        }
    };
    let next = |id: String| (!id.is_empty()).then_some(id);
    Ok(Some(match event.attributes {
        Some(Attributes::WorkflowExecutionCompletedEventAttributes(a)) => Closed {
            status: "COMPLETED",
            result: ctx
                .io
                .decode(&ctx.namespace, a.result)
                .await?
                .into_iter()
                .next()
                .unwrap_or(Value::Null),
            failure: Value::Null,
            next_run: next(a.new_execution_run_id),
        },
        Some(Attributes::WorkflowExecutionFailedEventAttributes(a)) => Closed {
            status: "FAILED",
            result: Value::Null,
            failure: failure(a.failure).await?,
            next_run: next(a.new_execution_run_id),
        },
        Some(Attributes::WorkflowExecutionCanceledEventAttributes(a)) => Closed {
            status: "CANCELED",
            result: json!({"details": ctx.io.decode(&ctx.namespace, a.details).await?}),
            failure: Value::Null,
            next_run: None,
        },
        Some(Attributes::WorkflowExecutionTerminatedEventAttributes(a)) => Closed {
            status: "TERMINATED",
            result: json!({"reason": a.reason}),
            failure: Value::Null,
            next_run: None,
        },
        Some(Attributes::WorkflowExecutionTimedOutEventAttributes(a)) => Closed {
            status: "TIMED_OUT",
            result: Value::Null,
            failure: Value::Null,
            next_run: next(a.new_execution_run_id),
        },
        Some(Attributes::WorkflowExecutionContinuedAsNewEventAttributes(a)) => Closed {
            status: "CONTINUED_AS_NEW",
            result: Value::Null,
            failure: Value::Null,
            next_run: next(a.new_execution_run_id),
        },
        _ => return Ok(None),
    }))
}

fn result_spec() -> ToolSpec {
    ToolSpec {
        name: "get_workflow_result",
        title: "Get a Workflow's result",
        description: "Wait up to `wait_seconds` for a Workflow to close and return its result (or failure). Follows continue-as-new to the last run unless a run_id is given. A Workflow still running is reported as RUNNING, not as an error.",
        family: Read,
        idempotent: true,
        inputs: inputs(vec![(
            "wait_seconds",
            int("How long to wait for the Workflow to close", 0, 300, 30),
            false,
        )]),
        outputs: outputs(vec![
            ("status", t("string")),
            ("closed", t("boolean")),
            ("result", json!({})),
            ("failure", nullable("object")),
        ]),
    }
}

pub async fn result(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let explicit_run = args.opt_string("run_id")?;
    let wait = Duration::from_secs(args.int("wait_seconds", 30, 0, 300)?);
    let deadline = tokio::time::Instant::now() + wait;
    let (_, mut run_id) = status_of(ctx, &workflow_id, explicit_run.as_deref()).await?;
    loop {
        let Some(event) = close_event(ctx, &workflow_id, &run_id, wait, deadline).await? else {
            return Ok(still_running(ctx, &workflow_id, &run_id, wait));
        };
        let Some(closed) = closed(ctx, event).await? else {
            // Not a close event (never expected with the close-event filter): look again.
            if tokio::time::Instant::now() >= deadline {
                return Ok(still_running(ctx, &workflow_id, &run_id, wait));
            }
            tokio::time::sleep(WATCH_INTERVAL).await;
            continue;
        };
        if let (Some(next), None) = (&closed.next_run, &explicit_run) {
            run_id = next.clone();
            continue;
        }
        return Ok(closed_answer(ctx, &workflow_id, &run_id, closed));
    }
}

/// The run's close event, long-polled page by page until `deadline`; `None` when the run is
/// still running then.
async fn close_event(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    wait: Duration,
    deadline: tokio::time::Instant,
) -> Result<Option<HistoryEvent>, ToolError> {
    let mut page_token = Vec::new();
    loop {
        let response = poll_close(ctx, workflow_id, run_id, &page_token, wait, deadline).await?;
        let event = response
            .as_ref()
            .and_then(|r| r.history.as_ref())
            .and_then(|h| h.events.last().cloned());
        if event.is_some() {
            return Ok(event);
        }
        match response {
            Some(r) if !r.next_page_token.is_empty() => page_token = r.next_page_token,
            _ if tokio::time::Instant::now() < deadline => {}
            _ => return Ok(None),
        }
    }
}

/// One history request for the run's close event (waiting for it unless `wait` is zero), cut
/// off at `deadline`: `None` when the deadline came first.
async fn poll_close(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    page_token: &[u8],
    wait: Duration,
    deadline: tokio::time::Instant,
) -> Result<Option<GetWorkflowExecutionHistoryResponse>, ToolError> {
    let request = GetWorkflowExecutionHistoryRequest {
        namespace: ctx.namespace.clone(),
        execution: Some(execution(workflow_id, Some(run_id))),
        next_page_token: page_token.to_vec(),
        wait_new_event: !wait.is_zero(),
        history_event_filter_type: HistoryEventFilterType::CloseEvent.into(),
        ..Default::default()
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut service = ctx.connection.workflow_service();
    let call = service.get_workflow_execution_history(tonic::Request::new(request));
    match tokio::time::timeout(left.max(Duration::from_millis(1)), call).await {
        Err(_) => Ok(None),
        Ok(r) => Ok(Some(
            r.map_err(|s| ToolError::from_status(&s, &target(workflow_id)))?
                .into_inner(),
        )),
    }
}

/// `get_workflow_result`'s answer for a run still running after `wait`.
fn still_running(ctx: &Ctx<'_>, workflow_id: &str, run_id: &str, wait: Duration) -> Answer {
    Answer {
        headline: format!(
            "Workflow {workflow_id:?} is still RUNNING after {}s; call again to keep waiting",
            wait.as_secs()
        ),
        data: data(
            ctx,
            workflow_id,
            run_id,
            [
                ("status", json!("RUNNING")),
                ("closed", json!(false)),
                ("result", Value::Null),
                ("failure", Value::Null),
            ],
        ),
    }
}

/// `get_workflow_result`'s answer for a closed run.
fn closed_answer(ctx: &Ctx<'_>, workflow_id: &str, run_id: &str, closed: Closed) -> Answer {
    Answer {
        headline: format!(
            "Workflow {workflow_id:?} (run {run_id}) closed: {}",
            closed.status
        ),
        data: data(
            ctx,
            workflow_id,
            run_id,
            [
                ("status", json!(closed.status)),
                ("closed", json!(true)),
                ("result", closed.result),
                ("failure", closed.failure),
            ],
        ),
    }
}

fn describe_spec() -> ToolSpec {
    ToolSpec {
        name: "describe_workflow",
        title: "Describe a Workflow",
        description: "Status, type, task queue, timing, history length, parent and pending activities of a Workflow execution.",
        family: Read,
        idempotent: true,
        inputs: inputs(vec![]),
        outputs: outputs(vec![
            ("workflow_type", t("string")),
            ("status", t("string")),
            ("task_queue", t("string")),
            ("start_time", nullable("string")),
            ("close_time", nullable("string")),
            ("history_length", t("integer")),
            ("parent", nullable("object")),
            ("pending_activities", objects()),
        ]),
    }
}

pub async fn describe(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let d = describe_raw(ctx, &workflow_id, args.opt_string("run_id")?.as_deref()).await?;
    let info = d.workflow_execution_info.unwrap_or_default();
    let data = summary(&info);
    let parent = info
        .parent_execution
        .map(|p| json!({"workflow_id": p.workflow_id, "run_id": p.run_id}));
    let mut pending: Vec<Value> = Vec::new();
    for a in &d.pending_activities {
        let mut v = json!({
            "activity_id": a.activity_id,
            "activity_type": a.activity_type.as_ref().map(|t| t.name.clone()).unwrap_or_default(),
            "attempt": a.attempt,
            "last_heartbeat_time": time(a.last_heartbeat_time.as_ref()),
            "last_failure": a.last_failure.as_ref().map(proto_json).unwrap_or(Value::Null),
        });
        prune(&mut v);
        ctx.io
            .show(&ctx.namespace, &mut v, Decode::FailuresOnly)
            .await?;
        pending.push(v);
    }
    let more = [
        ("namespace", json!(ctx.namespace)),
        ("execution_time", time(info.execution_time.as_ref())),
        ("parent", parent.unwrap_or(Value::Null)),
        ("pending_activities", Value::Array(pending)),
        ("pending_children", json!(d.pending_children.len())),
    ];
    Ok(Answer {
        headline: format!("Workflow {workflow_id:?} is {}", status_name(info.status)),
        data: with_fields(data, more.map(|(k, v)| (k.to_owned(), v))),
    })
}

fn list_spec() -> ToolSpec {
    ToolSpec {
        name: "list_workflows",
        title: "List Workflows",
        description: "List Workflow executions matching a visibility query (e.g. ExecutionStatus = 'Running' AND WorkflowType = 'Order'), newest first, with `limit` and `skip` for paging. `history_length` is null for running Workflows (visibility records it at close; describe_workflow has the current one).",
        family: Read,
        idempotent: true,
        inputs: with(
            vec![("query", s("Visibility query; empty lists all"), false)],
            Paging::inputs("How many matches to skip (paging)"),
        ),
        outputs: with(
            vec![
                ("namespace", t("string")),
                ("query", t("string")),
                ("workflows", objects()),
            ],
            Paging::outputs(),
        ),
    }
}

/// One page of Workflow executions matching `query`; an error names `shown` as the query.
pub(super) async fn visibility_page(
    ctx: &Ctx<'_>,
    query: String,
    shown: &str,
    token: Vec<u8>,
    size: i32,
) -> Result<ListWorkflowExecutionsResponse, ToolError> {
    ctx.connection
        .workflow_service()
        .list_workflow_executions(tonic::Request::new(ListWorkflowExecutionsRequest {
            namespace: ctx.namespace.clone(),
            page_size: size,
            next_page_token: token,
            query,
        }))
        .await
        .map(|r| r.into_inner())
        .map_err(|s| ToolError::from_status(&s, &format!("visibility query {shown:?}")))
}

pub async fn list(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let query = args.opt_string("query")?.unwrap_or_default();
    let paging = Paging::from_args(args)?;
    let sent = &reserved::exclude_reserved(&query)?;
    let shown = query.as_str();
    let found = paging::collect(paging.want(), |token, size| async move {
        let response = visibility_page(ctx, sent.clone(), shown, token, size).await?;
        let listed = response
            .executions
            .iter()
            .filter(|e| {
                !e.execution
                    .as_ref()
                    .is_some_and(|x| reserved::is_reserved(&x.workflow_id))
            })
            .map(listed_summary);
        Ok((listed.collect(), response.next_page_token))
    })
    .await?;
    let (page, has_more) = paging.page(found);
    Ok(Answer {
        headline: format!(
            "{} Workflow(s){}{}",
            page.len(),
            if query.is_empty() {
                String::new()
            } else {
                format!(" matching {query:?}")
            },
            paging.next(has_more)
        ),
        data: object([
            ("namespace", json!(ctx.namespace)),
            ("query", json!(query)),
            ("count", json!(page.len())),
            ("workflows", Value::Array(page)),
            ("has_more", json!(has_more)),
        ]),
    })
}

/// An event as JSON: id, time, type and its attributes, defaults dropped.
pub(super) fn event_json(event: &HistoryEvent) -> Value {
    let attributes = proto_json(&event.attributes);
    let single = attributes.as_object().filter(|o| o.len() == 1);
    let (kind, attributes) = match single.and_then(|o| o.iter().next()) {
        Some((k, v)) => (k.trim_end_matches("EventAttributes").to_owned(), v.clone()),
        None => (
            EventType::try_from(event.event_type)
                .map(|t| t.as_str_name().to_owned())
                .unwrap_or_default(),
            Value::Null,
        ),
    };
    let mut v = json!({
        "event_id": event.event_id,
        "event_time": time(event.event_time.as_ref()),
        "event_type": kind,
        "attributes": attributes,
    });
    prune(&mut v);
    reserved::redact_callbacks(&mut v);
    v
}

/// How many events one history request asks for: with Temporal's blob limits, one page stays
/// far below the budget of an answer.
const HISTORY_PAGE: i32 = 100;

/// One page of a run's history from `token`: its events and the next token (empty after the
/// last page).
async fn history_page(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    token: Vec<u8>,
) -> Result<(Vec<HistoryEvent>, Vec<u8>), ToolError> {
    let response = ctx
        .connection
        .workflow_service()
        .get_workflow_execution_history(tonic::Request::new(GetWorkflowExecutionHistoryRequest {
            namespace: ctx.namespace.clone(),
            execution: Some(execution(workflow_id, Some(run_id))),
            maximum_page_size: HISTORY_PAGE,
            next_page_token: token,
            ..Default::default()
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, &target(workflow_id)))?
        .into_inner();
    let events = response.history.map(|h| h.events).unwrap_or_default();
    Ok((events, response.next_page_token))
}

/// The first events of a run, as JSON: at most `max`, and no more than `budget` bytes of JSON
/// (R-OPS-8). Answers the events and why it stopped early, if it did.
async fn events(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    max: usize,
    budget: usize,
) -> Result<(Vec<Value>, Option<Cut>), ToolError> {
    let mut all = Vec::new();
    let mut bytes = 0;
    let mut token = Vec::new();
    loop {
        let (page, next) = history_page(ctx, workflow_id, run_id, token).await?;
        let in_page = page.len();
        for (i, event) in page.iter().enumerate() {
            let more = i + 1 < in_page || !next.is_empty();
            let shown = event_json(event);
            bytes += size::json_len(&shown);
            if bytes > budget {
                return Ok((all, Some(Cut::Bytes)));
            }
            all.push(shown);
            if all.len() >= max && more {
                return Ok((all, Some(Cut::Count)));
            }
        }
        token = next;
        if token.is_empty() {
            return Ok((all, None));
        }
    }
}

/// Why a history answer holds fewer events than the run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// `max_events` were read.
    Count,
    /// The next event would have taken the answer over its byte budget.
    Bytes,
}

/// The event `event_id` of a run, paging until it is found; only that event is kept. `Err`
/// with the number of events when the run has no such event.
async fn find_event(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: &str,
    event_id: i64,
) -> Result<Result<HistoryEvent, usize>, ToolError> {
    let mut seen = 0;
    let mut token = Vec::new();
    loop {
        let (page, next) = history_page(ctx, workflow_id, run_id, token).await?;
        seen += page.len();
        if let Some(found) = page.into_iter().find(|e| e.event_id >= event_id) {
            return Ok(if found.event_id == event_id {
                Ok(found)
            } else {
                Err(seen)
            });
        }
        token = next;
        if token.is_empty() {
            return Ok(Err(seen));
        }
    }
}

fn history_spec() -> ToolSpec {
    ToolSpec {
        name: "get_workflow_history",
        title: "Get a Workflow's history",
        description: "The event history of a Workflow run (up to `max_events`). JSON payloads are shown as values; with a codec, failure messages and stack traces are decoded (inputs and results stay encoded: use get_workflow_event).",
        family: Read,
        idempotent: true,
        inputs: inputs(vec![(
            "max_events",
            int("At most this many events", 1, 10_000, 1000),
            false,
        )]),
        outputs: outputs(vec![
            ("events", objects()),
            ("count", t("integer")),
            ("truncated", t("boolean")),
        ]),
    }
}

pub async fn history(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let max = args.int("max_events", 1000, 1, 10_000)? as usize;
    let (_, run_id) = status_of(ctx, &workflow_id, args.opt_string("run_id")?.as_deref()).await?;
    let (shown, cut) = events(ctx, &workflow_id, &run_id, max, ctx.answer_bytes / 2).await?;
    let count = shown.len();
    let mut list = Value::Array(shown);
    ctx.io
        .show(&ctx.namespace, &mut list, Decode::FailuresOnly)
        .await?;
    let note = match cut {
        None => String::new(),
        Some(Cut::Count) => " (truncated: raise max_events for more)".into(),
        Some(Cut::Bytes) => format!(
            " (truncated at the answer limit of {} bytes: read the rest event by event with get_workflow_event, or lower max_events)",
            ctx.answer_bytes
        ),
    };
    Ok(Answer {
        headline: format!("{count} event(s) of Workflow {workflow_id:?} run {run_id}{note}"),
        data: data(
            ctx,
            &workflow_id,
            &run_id,
            [
                ("count", json!(count)),
                ("truncated", json!(cut.is_some())),
                ("events", list),
            ],
        ),
    })
}

fn event_spec() -> ToolSpec {
    ToolSpec {
        name: "get_workflow_event",
        title: "Get one history event",
        description: "One event of a Workflow's history by `event_id`, with its payloads (inputs, results, failure details) decoded through the codec when one is configured.",
        family: Read,
        idempotent: true,
        inputs: inputs(vec![(
            "event_id",
            json!({"type": "integer", "minimum": 1, "description": "Event id (1 is WorkflowExecutionStarted)"}),
            true,
        )]),
        outputs: outputs(vec![("event", t("object"))]),
    }
}

pub async fn event(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let event_id = args.int("event_id", 0, 1, i64::MAX as u64)? as i64;
    if args.0.get("event_id").is_none() {
        return Err(ToolError::invalid("`event_id` is required"));
    }
    let (_, run_id) = status_of(ctx, &workflow_id, args.opt_string("run_id")?.as_deref()).await?;
    let found = match find_event(ctx, &workflow_id, &run_id, event_id).await? {
        Ok(found) => found,
        Err(seen) => {
            return Err(ToolError::new(
                ErrorKind::NotFound,
                format!(
                    "Workflow {workflow_id:?} run {run_id} has no event {event_id} (it has {seen})"
                ),
                "get_workflow_history lists the event ids",
            ));
        }
    };
    let mut event = event_json(&found);
    ctx.io
        .show(&ctx.namespace, &mut event, Decode::Everything)
        .await?;
    Ok(Answer {
        headline: format!(
            "Event {event_id} of Workflow {workflow_id:?}: {}",
            event
                .get("event_type")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        data: data(ctx, &workflow_id, &run_id, [("event", event)]),
    })
}

fn query_spec() -> ToolSpec {
    ToolSpec {
        name: "query_workflow",
        title: "Query a Workflow",
        description: "Run a query handler of a Workflow and return its answer, without changing the Workflow. A worker must be running for the Workflow's task queue.",
        family: Read,
        idempotent: true,
        inputs: inputs(vec![
            ("query_type", s("Query name"), true),
            ("args", args("Query arguments, one JSON value each"), false),
        ]),
        outputs: outputs(vec![("query_type", t("string")), ("result", json!({}))]),
    }
}

pub async fn query(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let run_id = args.opt_string("run_id")?;
    let query_type = args.string("query_type")?;
    let query_args = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    let response = ctx
        .connection
        .workflow_service()
        .query_workflow(tonic::Request::new(QueryWorkflowRequest {
            namespace: ctx.namespace.clone(),
            execution: Some(execution(&workflow_id, run_id.as_deref())),
            query: Some(WorkflowQuery {
                query_type: query_type.clone(),
                query_args,
                header: None,
            }),
            ..Default::default()
        }))
        .await
        .map_err(|s| {
            ToolError::from_status(
                &s,
                &format!("query {query_type:?} on {}", target(&workflow_id)),
            )
        })?
        .into_inner();
    if let Some(rejected) = response.query_rejected {
        return Err(ToolError::new(
            ErrorKind::FailedPrecondition,
            format!(
                "the query was rejected: the Workflow is {}",
                status_name(rejected.status)
            ),
            "query a running Workflow, or read its result with get_workflow_result",
        ));
    }
    let result = ctx
        .io
        .decode(&ctx.namespace, response.query_result)
        .await?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    Ok(Answer {
        headline: format!("Query {query_type:?} on Workflow {workflow_id:?} answered"),
        data: data(
            ctx,
            &workflow_id,
            &run_id.unwrap_or_default(),
            [("query_type", json!(query_type)), ("result", result)],
        ),
    })
}

/// A request that acts on one Workflow run.
pub(super) enum Op {
    Signal {
        name: String,
        input: Option<Payloads>,
    },
    Cancel {
        reason: String,
    },
    Terminate {
        reason: String,
    },
}

/// Sends `op` to the run (the latest when `run_id` is `None`).
pub(super) async fn send(
    ctx: &Ctx<'_>,
    workflow_id: &str,
    run_id: Option<&str>,
    op: &Op,
) -> Result<(), ToolError> {
    let mut service = ctx.connection.workflow_service();
    let workflow_execution = Some(execution(workflow_id, run_id));
    let sent = match op {
        Op::Signal { name, input } => service
            .signal_workflow_execution(tonic::Request::new(SignalWorkflowExecutionRequest {
                namespace: ctx.namespace.clone(),
                workflow_execution,
                signal_name: name.clone(),
                input: input.clone(),
                identity: ctx.identity(),
                request_id: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            }))
            .await
            .map(|_| ()),
        Op::Cancel { reason } => service
            .request_cancel_workflow_execution(tonic::Request::new(
                RequestCancelWorkflowExecutionRequest {
                    namespace: ctx.namespace.clone(),
                    workflow_execution,
                    identity: ctx.identity(),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    reason: reason.clone(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ()),
        Op::Terminate { reason } => service
            .terminate_workflow_execution(tonic::Request::new(TerminateWorkflowExecutionRequest {
                namespace: ctx.namespace.clone(),
                workflow_execution,
                reason: reason.clone(),
                identity: ctx.identity(),
                ..Default::default()
            }))
            .await
            .map(|_| ()),
    };
    sent.map_err(|s| ToolError::from_status(&s, &target(workflow_id)))
}

fn signal_spec() -> ToolSpec {
    ToolSpec {
        name: "signal_workflow",
        title: "Signal a Workflow",
        description: "Send a signal with JSON `args` to a running Workflow.",
        family: Write,
        idempotent: false,
        inputs: inputs(vec![
            ("signal_name", s("Signal name"), true),
            ("args", args("Signal arguments, one JSON value each"), false),
        ]),
        outputs: outputs(vec![
            ("signal_name", t("string")),
            ("signalled", t("boolean")),
        ]),
    }
}

pub async fn signal(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let run_id = args.opt_string("run_id")?;
    let signal_name = args.string("signal_name")?;
    let input = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    let op = Op::Signal {
        name: signal_name.clone(),
        input,
    };
    send(ctx, &workflow_id, run_id.as_deref(), &op).await?;
    Ok(Answer {
        headline: format!("Signal {signal_name:?} sent to Workflow {workflow_id:?}"),
        data: data(
            ctx,
            &workflow_id,
            &run_id.unwrap_or_default(),
            [
                ("signal_name", json!(signal_name)),
                ("signalled", json!(true)),
            ],
        ),
    })
}

/// Refuses to act on a run that already closed: Temporal may accept a request that can no
/// longer change anything, and the caller must not read that as an effect.
fn must_be_running(workflow_id: &str, status: &str, what: &str) -> Result<(), ToolError> {
    if status == "RUNNING" {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorKind::FailedPrecondition,
        format!("Workflow {workflow_id:?} already closed as {status}; there is nothing to {what}"),
        "get_workflow_result shows how it ended",
    ))
}

fn cancel_spec() -> ToolSpec {
    ToolSpec {
        name: "cancel_workflow",
        title: "Request a Workflow's cancellation",
        description: "Request cancellation of a running Workflow. The Workflow decides how to handle it: the answer says whether it is already CANCELED or still running after `wait_seconds` (a cancel request is not a cancellation).",
        family: Write,
        idempotent: true,
        inputs: inputs(vec![
            ("reason", s("Why, recorded in the history"), false),
            (
                "wait_seconds",
                int(
                    "How long to watch for the Workflow to close before answering",
                    0,
                    60,
                    2,
                ),
                false,
            ),
        ]),
        outputs: outputs(vec![
            ("cancel_requested", t("boolean")),
            ("status", t("string")),
            ("cancelled", t("boolean")),
        ]),
    }
}

pub async fn cancel(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let reason = args
        .opt_string("reason")?
        .unwrap_or_else(|| "cancel_workflow tool".into());
    let wait = Duration::from_secs(args.int("wait_seconds", 2, 0, 60)?);
    let (status, run_id) =
        status_of(ctx, &workflow_id, args.opt_string("run_id")?.as_deref()).await?;
    must_be_running(&workflow_id, &status, "cancel")?;
    send(ctx, &workflow_id, Some(&run_id), &Op::Cancel { reason }).await?;
    let status = watch_close(ctx, &workflow_id, &run_id, wait).await?;
    let cancelled = status == "CANCELED";
    let headline = match status.as_str() {
        "CANCELED" => format!("Workflow {workflow_id:?} was cancelled (status CANCELED)"),
        "RUNNING" => format!(
            "Cancellation requested; Workflow {workflow_id:?} is still RUNNING after {}s (the Workflow decides how to handle the request; describe_workflow shows when it closes)",
            wait.as_secs()
        ),
        other => format!(
            "Cancellation requested; Workflow {workflow_id:?} closed as {other}, not as cancelled"
        ),
    };
    Ok(Answer {
        headline,
        data: data(
            ctx,
            &workflow_id,
            &run_id,
            [
                ("cancel_requested", json!(true)),
                ("status", json!(status)),
                ("cancelled", json!(cancelled)),
            ],
        ),
    })
}

fn terminate_spec() -> ToolSpec {
    ToolSpec {
        name: "terminate_workflow",
        title: "Terminate a Workflow",
        description: "Forcefully terminate a running Workflow: no cleanup code runs. Use cancel_workflow to let it clean up.",
        family: Admin,
        idempotent: false,
        inputs: inputs(vec![("reason", s("Why, recorded in the history"), true)]),
        outputs: outputs(vec![("terminated", t("boolean")), ("status", t("string"))]),
    }
}

pub async fn terminate(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let reason = args.string("reason")?;
    let (status, run_id) =
        status_of(ctx, &workflow_id, args.opt_string("run_id")?.as_deref()).await?;
    must_be_running(&workflow_id, &status, "terminate")?;
    send(ctx, &workflow_id, Some(&run_id), &Op::Terminate { reason }).await?;
    let (status, _) = status_of(ctx, &workflow_id, Some(&run_id)).await?;
    Ok(Answer {
        headline: format!("Workflow {workflow_id:?} terminated (status {status})"),
        data: data(
            ctx,
            &workflow_id,
            &run_id,
            [("terminated", json!(true)), ("status", json!(status))],
        ),
    })
}

fn continue_as_new_spec() -> ToolSpec {
    ToolSpec {
        name: "continue_as_new",
        title: "Ask a Workflow to continue as new",
        description: "Send the signal (default `continue_as_new`) with which a Workflow asks itself to continue as new with `args`; Temporal cannot force it from outside, so the Workflow must handle that signal. Answers whether a new run started within `wait_seconds`.",
        family: Write,
        idempotent: false,
        inputs: vec![
            ("workflow_id", s(WORKFLOW_ID), true),
            (
                "signal_name",
                s("The Workflow's continue-as-new signal; default continue_as_new"),
                false,
            ),
            (
                "args",
                args("Signal arguments (the new input), one JSON value each"),
                false,
            ),
            (
                "wait_seconds",
                int("How long to wait for the new run", 0, 60, 5),
                false,
            ),
        ],
        outputs: vec![
            ("namespace", t("string")),
            ("workflow_id", t("string")),
            ("previous_run_id", t("string")),
            ("signal_name", t("string")),
            ("continued", t("boolean")),
            ("new_run_id", nullable("string")),
            ("status", t("string")),
        ],
    }
}

pub async fn continue_as_new(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let workflow_id = args.string("workflow_id")?;
    let signal_name = args
        .opt_string("signal_name")?
        .unwrap_or_else(|| "continue_as_new".into());
    let wait = Duration::from_secs(args.int("wait_seconds", 5, 0, 60)?);
    let input = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    let (status, run_id) = status_of(ctx, &workflow_id, None).await?;
    must_be_running(&workflow_id, &status, "continue as new")?;
    let op = Op::Signal {
        name: signal_name.clone(),
        input,
    };
    send(ctx, &workflow_id, Some(&run_id), &op).await?;
    let status = watch_close(ctx, &workflow_id, &run_id, wait).await?;
    let continued = status == "CONTINUED_AS_NEW";
    let new_run = if continued {
        Some(status_of(ctx, &workflow_id, None).await?.1)
    } else {
        None
    };
    let headline = match &new_run {
        Some(run) => format!("Workflow {workflow_id:?} continued as new: run {run}"),
        None => format!(
            "Signal {signal_name:?} sent, but run {run_id} is {status} after {}s (does the Workflow handle that signal by continuing as new?)",
            wait.as_secs()
        ),
    };
    Ok(Answer {
        headline,
        data: object([
            ("namespace", json!(ctx.namespace)),
            ("workflow_id", json!(workflow_id)),
            ("previous_run_id", json!(run_id)),
            ("signal_name", json!(signal_name)),
            ("continued", json!(continued)),
            ("new_run_id", json!(new_run)),
            ("status", json!(status)),
        ]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(status: WorkflowExecutionStatus, history_length: i64) -> WorkflowExecutionInfo {
        WorkflowExecutionInfo {
            status: status as i32,
            history_length,
            ..Default::default()
        }
    }

    #[test]
    fn a_listed_running_workflow_has_no_history_length_and_a_closed_one_has_its_own() {
        let running = listed_summary(&info(WorkflowExecutionStatus::Running, 0));
        assert_eq!(running["history_length"], Value::Null, "{running}");
        let closed = listed_summary(&info(WorkflowExecutionStatus::Completed, 77));
        assert_eq!(closed["history_length"], 77);
        // describe_workflow reads the live length of a running run.
        let described = summary(&info(WorkflowExecutionStatus::Running, 77));
        assert_eq!(described["history_length"], 77);
    }
}
