//! Schedule tools: create (cron), list, describe, pause, unpause, trigger, delete.

use serde_json::{Value, json};
use temporalio_protos::temporal::api::{
    common::v1::WorkflowType,
    schedule::v1::{
        Schedule, ScheduleAction, ScheduleActionResult, SchedulePatch, ScheduleSpec, ScheduleState,
        TriggerImmediatelyRequest, schedule_action,
    },
    taskqueue::v1::TaskQueue,
    workflow::v1::NewWorkflowExecutionInfo,
    workflowservice::v1::{
        CreateScheduleRequest, DeleteScheduleRequest, DescribeScheduleRequest,
        ListSchedulesRequest, PatchScheduleRequest,
    },
};

use super::{
    Answer, Ctx,
    args::Args,
    catalog::{Input, Output, ToolFamily::*, ToolSpec, args, objects, s, t, with},
    error::ToolError,
    paging::{self, Paging},
    payloads::{object, proto_json, prune, with_fields},
    workflows::{status_name, time},
};

/// The schedule tools, in listing order.
pub(super) fn specs() -> Vec<ToolSpec> {
    vec![
        create_spec(),
        list_spec(),
        describe_spec(),
        pause_spec(true),
        pause_spec(false),
        delete_spec(),
        trigger_spec(),
    ]
}

fn schedule_id_input() -> Input {
    ("schedule_id", s("Schedule id"), true)
}

/// The namespace and schedule id, then `more`.
fn outputs(more: Vec<Output>) -> Vec<Output> {
    with(
        vec![("namespace", t("string")), ("schedule_id", t("string"))],
        more,
    )
}

fn target(schedule_id: &str) -> String {
    format!("Schedule {schedule_id:?}")
}

/// An answer's data: the namespace and schedule id, then `more`.
fn data<const N: usize>(ctx: &Ctx<'_>, schedule_id: &str, more: [(&str, Value); N]) -> Value {
    let data = object([
        ("namespace", json!(ctx.namespace)),
        ("schedule_id", json!(schedule_id)),
    ]);
    with_fields(data, more.map(|(k, v)| (k.to_owned(), v)))
}

fn action_results(results: &[ScheduleActionResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| {
                let run = r.start_workflow_result.clone().unwrap_or_default();
                json!({
                    "schedule_time": time(r.schedule_time.as_ref()),
                    "actual_time": time(r.actual_time.as_ref()),
                    "workflow_id": run.workflow_id,
                    "run_id": run.run_id,
                    "status": status_name(r.start_workflow_status),
                })
            })
            .collect(),
    )
}

fn times(ts: &[prost_wkt_types::Timestamp]) -> Value {
    Value::Array(ts.iter().map(|t| time(Some(t))).collect())
}

fn create_spec() -> ToolSpec {
    ToolSpec {
        name: "create_schedule",
        title: "Create a schedule",
        description: "Create a schedule that starts `workflow_type` on `task_queue` at the times of one or more cron expressions (e.g. \"0 9 * * MON-FRI\", UTC).",
        family: Write,
        idempotent: false,
        inputs: vec![
            schedule_id_input(),
            (
                "cron",
                json!({"description": "Cron expression, or a list of them", "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
                true,
            ),
            ("workflow_type", s("Workflow type to start"), true),
            ("task_queue", s("Task queue of the started Workflows"), true),
            (
                "workflow_id",
                s(
                    "Workflow id prefix of the started Workflows (Temporal appends the time); default the schedule id",
                ),
                false,
            ),
            (
                "args",
                args("Workflow arguments, one JSON value each"),
                false,
            ),
            (
                "paused",
                json!({"type": "boolean", "description": "Create it paused", "default": false}),
                false,
            ),
            ("note", s("A note shown with the schedule's state"), false),
        ],
        outputs: outputs(vec![("created", t("boolean")), ("paused", t("boolean"))]),
    }
}

pub async fn create(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let schedule_id = args.string("schedule_id")?;
    let cron = args.strings("cron")?;
    let workflow_type = args.string("workflow_type")?;
    let task_queue = args.string("task_queue")?;
    let workflow_id = args
        .opt_string("workflow_id")?
        .unwrap_or_else(|| schedule_id.clone());
    super::reserved::check_id(&workflow_id)?;
    let paused = args.bool("paused", false)?;
    let note = args.opt_string("note")?.unwrap_or_default();
    let input = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    let schedule = Schedule {
        spec: Some(ScheduleSpec {
            cron_string: cron.clone(),
            ..Default::default()
        }),
        action: Some(ScheduleAction {
            action: Some(schedule_action::Action::StartWorkflow(
                NewWorkflowExecutionInfo {
                    workflow_id,
                    workflow_type: Some(WorkflowType {
                        name: workflow_type.clone(),
                    }),
                    task_queue: Some(TaskQueue {
                        name: task_queue,
                        ..Default::default()
                    }),
                    input,
                    ..Default::default()
                },
            )),
        }),
        policies: None,
        state: Some(ScheduleState {
            notes: note,
            paused,
            ..Default::default()
        }),
    };
    ctx.connection
        .workflow_service()
        .create_schedule(tonic::Request::new(CreateScheduleRequest {
            namespace: ctx.namespace.clone(),
            schedule_id: schedule_id.clone(),
            schedule: Some(schedule),
            identity: ctx.identity(),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, &target(&schedule_id)))?;
    Ok(Answer {
        headline: format!(
            "Created schedule {schedule_id:?}: {workflow_type} at {}{}",
            cron.join(" | "),
            if paused { " (paused)" } else { "" }
        ),
        data: data(
            ctx,
            &schedule_id,
            [("created", json!(true)), ("paused", json!(paused))],
        ),
    })
}

fn list_spec() -> ToolSpec {
    ToolSpec {
        name: "list_schedules",
        title: "List schedules",
        description: "List schedules with their Workflow type, paused state, recent and upcoming actions, with `limit` and `skip` for paging.",
        family: Read,
        idempotent: true,
        inputs: Paging::inputs("How many to skip (paging)"),
        outputs: with(
            vec![("namespace", t("string")), ("schedules", objects())],
            Paging::outputs(),
        ),
    }
}

/// One page of schedules, as listed, and the next page's token.
async fn list_page(
    ctx: &Ctx<'_>,
    token: Vec<u8>,
    size: i32,
) -> Result<(Vec<Value>, Vec<u8>), ToolError> {
    let response = ctx
        .connection
        .workflow_service()
        .list_schedules(tonic::Request::new(ListSchedulesRequest {
            namespace: ctx.namespace.clone(),
            maximum_page_size: size,
            next_page_token: token,
            query: String::new(),
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, "listing schedules"))?
        .into_inner();
    let listed = response.schedules.into_iter().map(|entry| {
        let info = entry.info.unwrap_or_default();
        json!({
            "schedule_id": entry.schedule_id,
            "workflow_type": info.workflow_type.map(|t| t.name).unwrap_or_default(),
            "paused": info.paused,
            "notes": info.notes,
            "recent_actions": action_results(&info.recent_actions),
            "next_action_times": times(&info.future_action_times),
        })
    });
    Ok((listed.collect(), response.next_page_token))
}

pub async fn list(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let paging = Paging::from_args(args)?;
    let found = paging::collect(paging.want(), |token, size| list_page(ctx, token, size)).await?;
    let (page, has_more) = paging.page(found);
    Ok(Answer {
        headline: format!("{} schedule(s){}", page.len(), paging.next(has_more)),
        data: object([
            ("namespace", json!(ctx.namespace)),
            ("count", json!(page.len())),
            ("schedules", Value::Array(page)),
            ("has_more", json!(has_more)),
        ]),
    })
}

fn describe_spec() -> ToolSpec {
    ToolSpec {
        name: "describe_schedule",
        title: "Describe a schedule",
        description: "A schedule's spec, action, state (paused, notes), recent actions, running Workflows and upcoming action times.",
        family: Read,
        idempotent: true,
        inputs: vec![schedule_id_input()],
        outputs: outputs(vec![
            ("paused", t("boolean")),
            ("notes", t("string")),
            ("spec", t("object")),
            ("action", t("object")),
            ("action_count", t("integer")),
            ("recent_actions", objects()),
            ("running_workflows", objects()),
            (
                "next_action_times",
                json!({"type": "array", "items": {"type": "string"}}),
            ),
        ]),
    }
}

pub async fn describe(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let schedule_id = args.string("schedule_id")?;
    let response = ctx
        .connection
        .workflow_service()
        .describe_schedule(tonic::Request::new(DescribeScheduleRequest {
            namespace: ctx.namespace.clone(),
            schedule_id: schedule_id.clone(),
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, &target(&schedule_id)))?
        .into_inner();
    let schedule = response.schedule.unwrap_or_default();
    let info = response.info.unwrap_or_default();
    let state = schedule.state.unwrap_or_default();
    let mut spec = schedule
        .spec
        .as_ref()
        .map(proto_json)
        .unwrap_or(Value::Null);
    prune(&mut spec);
    let action = match schedule.action.and_then(|a| a.action) {
        Some(schedule_action::Action::StartWorkflow(w)) => json!({
            "start_workflow": {
                "workflow_type": w.workflow_type.map(|t| t.name).unwrap_or_default(),
                "task_queue": w.task_queue.map(|t| t.name).unwrap_or_default(),
                "workflow_id": w.workflow_id,
                "args": ctx.io.decode(&ctx.namespace, w.input).await?,
            }
        }),
        None => json!({}),
    };
    let running: Vec<Value> = info
        .running_workflows
        .iter()
        .map(|w| json!({"workflow_id": w.workflow_id, "run_id": w.run_id}))
        .collect();
    Ok(Answer {
        headline: format!(
            "Schedule {schedule_id:?} is {}; {} action(s) taken",
            if state.paused { "PAUSED" } else { "active" },
            info.action_count
        ),
        data: data(
            ctx,
            &schedule_id,
            [
                ("paused", json!(state.paused)),
                ("notes", json!(state.notes)),
                ("spec", spec),
                ("action", action),
                ("action_count", json!(info.action_count)),
                ("recent_actions", action_results(&info.recent_actions)),
                ("running_workflows", Value::Array(running)),
                ("next_action_times", times(&info.future_action_times)),
                ("created", time(info.create_time.as_ref())),
            ],
        ),
    })
}

async fn patch(ctx: &Ctx<'_>, schedule_id: &str, patch: SchedulePatch) -> Result<(), ToolError> {
    ctx.connection
        .workflow_service()
        .patch_schedule(tonic::Request::new(PatchScheduleRequest {
            namespace: ctx.namespace.clone(),
            schedule_id: schedule_id.to_owned(),
            patch: Some(patch),
            identity: ctx.identity(),
            request_id: uuid::Uuid::new_v4().to_string(),
        }))
        .await
        .map(|_| ())
        .map_err(|s| ToolError::from_status(&s, &target(schedule_id)))
}

/// `pause_schedule` (`pause` true) and `unpause_schedule`.
fn pause_spec(pause: bool) -> ToolSpec {
    let (name, title, description) = if pause {
        (
            "pause_schedule",
            "Pause a schedule",
            "Pause a schedule: it starts nothing until unpaused.",
        )
    } else {
        (
            "unpause_schedule",
            "Unpause a schedule",
            "Resume a paused schedule.",
        )
    };
    ToolSpec {
        name,
        title,
        description,
        family: Write,
        idempotent: true,
        inputs: vec![
            schedule_id_input(),
            ("note", s("Why, shown with the schedule's state"), false),
        ],
        outputs: outputs(vec![("paused", t("boolean"))]),
    }
}

/// `pause_schedule` (`pause` true) and `unpause_schedule`.
pub async fn pause(ctx: &Ctx<'_>, args: &Args<'_>, pause: bool) -> Result<Answer, ToolError> {
    let schedule_id = args.string("schedule_id")?;
    let verb = if pause { "Paused" } else { "Unpaused" };
    let note = args.opt_string("note")?.unwrap_or_else(|| {
        format!(
            "{verb} by the {} tool",
            if pause {
                "pause_schedule"
            } else {
                "unpause_schedule"
            }
        )
    });
    let p = if pause {
        SchedulePatch {
            pause: note,
            ..Default::default()
        }
    } else {
        SchedulePatch {
            unpause: note,
            ..Default::default()
        }
    };
    patch(ctx, &schedule_id, p).await?;
    Ok(Answer {
        headline: format!("{verb} schedule {schedule_id:?}"),
        data: data(ctx, &schedule_id, [("paused", json!(pause))]),
    })
}

fn trigger_spec() -> ToolSpec {
    ToolSpec {
        name: "trigger_schedule",
        title: "Trigger a schedule now",
        description: "Start the schedule's action once, immediately (subject to its overlap policy).",
        family: Write,
        idempotent: false,
        inputs: vec![schedule_id_input()],
        outputs: outputs(vec![("triggered", t("boolean"))]),
    }
}

pub async fn trigger(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let schedule_id = args.string("schedule_id")?;
    patch(
        ctx,
        &schedule_id,
        SchedulePatch {
            trigger_immediately: Some(TriggerImmediatelyRequest::default()),
            ..Default::default()
        },
    )
    .await?;
    Ok(Answer {
        headline: format!(
            "Triggered schedule {schedule_id:?}; describe_schedule shows the started Workflow in its recent actions"
        ),
        data: data(ctx, &schedule_id, [("triggered", json!(true))]),
    })
}

fn delete_spec() -> ToolSpec {
    ToolSpec {
        name: "delete_schedule",
        title: "Delete a schedule",
        description: "Permanently delete a schedule. Workflows it started keep running.",
        family: Admin,
        idempotent: false,
        inputs: vec![schedule_id_input()],
        outputs: outputs(vec![("deleted", t("boolean"))]),
    }
}

pub async fn delete(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let schedule_id = args.string("schedule_id")?;
    ctx.connection
        .workflow_service()
        .delete_schedule(tonic::Request::new(DeleteScheduleRequest {
            namespace: ctx.namespace.clone(),
            schedule_id: schedule_id.clone(),
            identity: ctx.identity(),
        }))
        .await
        .map_err(|s| ToolError::from_status(&s, &target(&schedule_id)))?;
    Ok(Answer {
        headline: format!("Deleted schedule {schedule_id:?} (Workflows it started keep running)"),
        data: data(ctx, &schedule_id, [("deleted", json!(true))]),
    })
}
