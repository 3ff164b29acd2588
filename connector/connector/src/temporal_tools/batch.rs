//! Batch tools: one operation over every Running Workflow a visibility query matches.
//!
//! The connector lists the matches (at most `max_workflows`) and sends the requests itself,
//! `batch_size` at a time, so the answer reports each failure, not just a job id.

use futures::{StreamExt, stream};
use serde_json::{Value, json};
use temporalio_protos::temporal::api::{
    common::v1::Payloads, workflowservice::v1::ListWorkflowExecutionsRequest,
};

use super::{
    Answer, Ctx,
    args::Args,
    error::ToolError,
    payloads::object,
    reserved,
    workflows::{request_cancel, send_signal, send_terminate},
};

/// What to do to each Workflow.
enum Op {
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

/// The query restricted to Running Workflows: the only ones these operations apply to.
pub fn running_only(query: &str) -> String {
    format!("({query}) AND ExecutionStatus = 'Running'")
}

async fn matches(
    ctx: &Ctx<'_>,
    query: &str,
    max: usize,
) -> Result<(Vec<(String, String)>, bool), ToolError> {
    let mut found = Vec::new();
    let mut token = Vec::new();
    loop {
        let response = ctx
            .connection
            .workflow_service()
            .list_workflow_executions(tonic::Request::new(ListWorkflowExecutionsRequest {
                namespace: ctx.namespace.clone(),
                page_size: (max + 1 - found.len()).min(1000) as i32,
                next_page_token: token,
                query: query.to_owned(),
            }))
            .await
            .map_err(|s| ToolError::from_status(&s, &format!("visibility query {query:?}")))?
            .into_inner();
        found.extend(
            response
                .executions
                .into_iter()
                .filter_map(|e| e.execution)
                .filter(|e| !reserved::is_reserved(&e.workflow_id))
                .map(|e| (e.workflow_id, e.run_id)),
        );
        token = response.next_page_token;
        if token.is_empty() || found.len() > max {
            let truncated = found.len() > max;
            found.truncate(max);
            return Ok((found, truncated));
        }
    }
}

async fn run(ctx: &Ctx<'_>, args: &Args<'_>, op: Op, verb: &str) -> Result<Answer, ToolError> {
    let query = args.string("query")?;
    let batch_size = args.int("batch_size", 10, 1, 100)? as usize;
    let max = args.int("max_workflows", 1000, 1, 10_000)? as usize;
    let (targets, truncated) =
        matches(ctx, &running_only(&reserved::exclude_reserved(&query)), max).await?;
    let op = &op;
    let outcomes: Vec<(String, String, Result<(), ToolError>)> = stream::iter(targets)
        .map(|(wf, run)| async move {
            let r = match op {
                Op::Signal { name, input } => {
                    send_signal(ctx, &wf, Some(&run), name, input.clone()).await
                }
                Op::Cancel { reason } => request_cancel(ctx, &wf, Some(&run), reason).await,
                Op::Terminate { reason } => send_terminate(ctx, &wf, Some(&run), reason).await,
            };
            (wf, run, r)
        })
        .buffer_unordered(batch_size)
        .collect()
        .await;
    let matched = outcomes.len();
    let failures: Vec<Value> = outcomes
        .iter()
        .filter_map(|(wf, run, r)| {
            r.as_ref()
                .err()
                .map(|e| json!({"workflow_id": wf, "run_id": run, "error": format!("{}: {}", e.kind.as_str(), e.message)}))
        })
        .collect();
    let failed = failures.len();
    Ok(Answer {
        headline: format!(
            "{verb} {} of {matched} Running Workflow(s) matching {query:?}{}{}",
            matched - failed,
            if failed > 0 {
                format!("; {failed} failed")
            } else {
                String::new()
            },
            if truncated {
                format!("; more matched than max_workflows={max}, call again for the rest")
            } else {
                String::new()
            }
        ),
        data: object([
            ("namespace", json!(ctx.namespace)),
            ("query", json!(query)),
            ("matched", json!(matched)),
            ("succeeded", json!(matched - failed)),
            ("failed", json!(failed)),
            ("failures", Value::Array(failures)),
            ("truncated", json!(truncated)),
        ]),
    })
}

pub async fn signal(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let name = args.string("signal_name")?;
    let input = ctx.io.encode(&ctx.namespace, &args.values("args")?).await?;
    run(ctx, args, Op::Signal { name, input }, "Signalled").await
}

pub async fn cancel(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let reason = args
        .opt_string("reason")?
        .unwrap_or_else(|| "batch_cancel tool".into());
    run(
        ctx,
        args,
        Op::Cancel { reason },
        "Requested cancellation of",
    )
    .await
}

pub async fn terminate(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Answer, ToolError> {
    let reason = args.string("reason")?;
    run(ctx, args, Op::Terminate { reason }, "Terminated").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_query_is_kept_whole_and_narrowed_to_running() {
        assert_eq!(
            running_only("WorkflowType = 'A' OR WorkflowType = 'B'"),
            "(WorkflowType = 'A' OR WorkflowType = 'B') AND ExecutionStatus = 'Running'"
        );
    }
}
