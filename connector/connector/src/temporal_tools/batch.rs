//! Batch tools: one operation over every Running Workflow a visibility query matches.
//!
//! The connector lists the matches (at most `max_workflows`) and sends the requests itself,
//! `batch_size` at a time, so the answer reports each failure, not just a job id.

use super::{
    Answer, Ctx,
    args::Args,
    catalog::{Input, Output, ToolFamily::*, ToolSpec, args, int, objects, s, t, with},
    error::ToolError,
    paging,
    payloads::object,
    reserved,
    workflows::{Op, send, visibility_page},
};
use futures::{StreamExt, stream};
use serde_json::{Value, json};

/// The batch tools, in listing order.
pub(super) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "batch_signal",
            title: "Signal many Workflows",
            description: "Send a signal to every Running Workflow matching a visibility query, `batch_size` requests at a time. Answers how many matched, succeeded and failed (with each failure).",
            family: Write,
            idempotent: false,
            inputs: inputs(vec![
                ("signal_name", s("Signal name"), true),
                ("args", args("Signal arguments, one JSON value each"), false),
            ]),
            outputs: outputs(),
        },
        ToolSpec {
            name: "batch_cancel",
            title: "Request cancellation of many Workflows",
            description: "Request cancellation of every Running Workflow matching a visibility query, `batch_size` requests at a time. Each Workflow decides how to handle its cancel request.",
            family: Write,
            idempotent: true,
            inputs: inputs(vec![reason(false)]),
            outputs: outputs(),
        },
        ToolSpec {
            name: "batch_terminate",
            title: "Terminate many Workflows",
            description: "Forcefully terminate every Running Workflow matching a visibility query, `batch_size` requests at a time. No cleanup code runs.",
            family: Admin,
            idempotent: false,
            inputs: inputs(vec![reason(true)]),
            outputs: outputs(),
        },
    ]
}

fn reason(required: bool) -> Input {
    ("reason", s("Why, recorded in each history"), required)
}

/// The query, batch size and limit every batch tool takes, then `more`.
fn inputs(more: Vec<Input>) -> Vec<Input> {
    let common = vec![
        (
            "query",
            s(
                "Visibility query selecting the Workflows, e.g. WorkflowType = 'Order'; only Running ones are affected",
            ),
            true,
        ),
        (
            "batch_size",
            int("How many requests are in flight at once", 1, 100, 10),
            false,
        ),
        (
            "max_workflows",
            int(
                "At most this many Workflows are affected; the answer says when more matched",
                1,
                10_000,
                1000,
            ),
            false,
        ),
    ];
    with(common, more)
}

fn outputs() -> Vec<Output> {
    vec![
        ("namespace", t("string")),
        ("query", t("string")),
        ("matched", t("integer")),
        ("succeeded", t("integer")),
        ("failed", t("integer")),
        ("failures", objects()),
        ("truncated", t("boolean")),
    ]
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
    let mut found = paging::collect(max + 1, |token, size| async move {
        let response = visibility_page(ctx, query.to_owned(), query, token, size).await?;
        let matched = response
            .executions
            .into_iter()
            .filter_map(|e| e.execution)
            .filter(|e| !reserved::is_reserved(&e.workflow_id))
            .map(|e| (e.workflow_id, e.run_id));
        Ok((matched.collect(), response.next_page_token))
    })
    .await?;
    let truncated = found.len() > max;
    found.truncate(max);
    Ok((found, truncated))
}

async fn run(ctx: &Ctx<'_>, args: &Args<'_>, op: Op, verb: &str) -> Result<Answer, ToolError> {
    let query = args.string("query")?;
    let batch_size = args.int("batch_size", 10, 1, 100)? as usize;
    let max = args.int("max_workflows", 1000, 1, 10_000)? as usize;
    let (targets, truncated) = matches(
        ctx,
        &running_only(&reserved::exclude_reserved(&query)?),
        max,
    )
    .await?;
    let op = &op;
    let outcomes: Vec<(String, String, Result<(), ToolError>)> = stream::iter(targets)
        .map(|(wf, run)| async move {
            let r = send(ctx, &wf, Some(&run), op).await;
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
