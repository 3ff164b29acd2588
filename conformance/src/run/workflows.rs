//! The `workflows` expectation: the Workflows on the scenario's task queue, read from the server
//! itself (a Workflow-backed tool runs one Workflow per call and an MCP cancel leaves it
//! CANCELED, R-NAT-4, R-NAT-5).

use std::time::Duration;

use temporalio_protos::temporal::api::workflowservice::v1::ListWorkflowExecutionsRequest;

use super::{Failure, StepEnv};
use crate::scenario::{Expect, WorkflowsExpect};

/// How long visibility may lag behind the Workflows' real state (a loaded machine).
const VISIBILITY_WAIT: Duration = Duration::from_secs(60);

/// Each Workflow on the task queue as `id: STATUS`.
async fn listed(env: &StepEnv<'_>) -> Result<Vec<(String, String)>, Failure> {
    let request = ListWorkflowExecutionsRequest {
        namespace: env.client.namespace().to_owned(),
        page_size: 100,
        query: format!("TaskQueue = '{}'", env.task_queue),
        ..Default::default()
    };
    let answer = env
        .client
        .connection()
        .clone()
        .workflow_service()
        .list_workflow_executions(tonic::Request::new(request))
        .await
        .map_err(|e| Failure::Setup(format!("listing Workflows: {}", e.message())))?
        .into_inner();
    Ok(answer
        .executions
        .iter()
        .map(|e| {
            let id = e
                .execution
                .as_ref()
                .map(|x| x.workflow_id.clone())
                .unwrap_or_default();
            let status = e.status().as_str_name();
            let status = status.trim_start_matches("WORKFLOW_EXECUTION_STATUS_");
            (id, status.to_owned())
        })
        .collect())
}

/// Whether what is listed is what `want` says.
fn matches(want: &WorkflowsExpect, seen: &[(String, String)]) -> bool {
    seen.len() == want.count
        && want
            .status
            .as_ref()
            .is_none_or(|status| seen.iter().all(|(_, s)| s == status))
}

/// Applies `expect.workflows`: waits (visibility is eventually consistent) until the task queue
/// lists exactly the expected Workflows, else fails with what it lists.
pub(crate) async fn check_workflows(
    env: &StepEnv<'_>,
    expect: &Expect,
    summary: &mut String,
) -> Result<(), Failure> {
    let Some(want) = &expect.workflows else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + VISIBILITY_WAIT;
    loop {
        let seen = listed(env).await?;
        if matches(want, &seen) {
            summary.push_str(&format!(
                ", {} Workflow(s){}",
                seen.len(),
                want.status
                    .as_ref()
                    .map(|s| format!(" {s}"))
                    .unwrap_or_default()
            ));
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let shown: Vec<_> = seen.iter().map(|(id, s)| format!("{id}: {s}")).collect();
            return Err(Failure::Violated(format!(
                "expected {} Workflow(s){} on the task queue, the server lists {}: [{}]",
                want.count,
                want.status
                    .as_ref()
                    .map(|s| format!(" {s}"))
                    .unwrap_or_default(),
                seen.len(),
                shown.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `wait_heartbeat`: waits (up to [`VISIBILITY_WAIT`]) until a running call Activity of the
/// step's tool on the scenario's task queue has heartbeated the step's field (R-PRX-28's
/// `upstream_task`), so a fault that follows finds it recorded.
pub(crate) async fn wait_heartbeat(
    env: &StepEnv<'_>,
    step: &crate::scenario::WaitHeartbeat,
) -> Result<String, Failure> {
    use temporalio_protos::temporal::api::workflowservice::v1::ListActivityExecutionsRequest;
    let started = std::time::Instant::now();
    // The proxy's call Activity ids: `mcp/<service>/<operation>/<Nexus request id>`.
    let operation = durable_mcp::contract::operation_name::operation_for_tool(&step.tool);
    let prefix = format!("mcp/{}/{operation}/", env.service);
    let connection = env.client.connection().clone();
    loop {
        let request = ListActivityExecutionsRequest {
            namespace: env.client.namespace().to_owned(),
            page_size: 1000,
            query: format!("TaskQueue = '{}'", env.task_queue),
            ..Default::default()
        };
        let listed = connection
            .clone()
            .workflow_service()
            .list_activity_executions(tonic::Request::new(request))
            .await
            .map_err(|e| Failure::Setup(format!("listing Activities: {}", e.message())))?
            .into_inner();
        for activity in listed
            .executions
            .iter()
            .filter(|a| a.activity_id.starts_with(&prefix))
        {
            let described = durable_mcp::temporal::activity::describe_activity(
                &connection,
                env.client.namespace(),
                &activity.activity_id,
                &activity.run_id,
            )
            .await
            .map_err(|e| {
                Failure::Setup(format!(
                    "describing {}: {}",
                    activity.activity_id,
                    e.message()
                ))
            })?;
            if described
                .as_ref()
                .and_then(|d| d.heartbeat.as_ref())
                .is_some_and(|h| !h[step.field.as_str()].is_null())
            {
                return Ok(format!(
                    "{} heartbeated {} after {} ms",
                    activity.activity_id,
                    step.field,
                    started.elapsed().as_millis()
                ));
            }
        }
        if started.elapsed() > VISIBILITY_WAIT {
            return Err(Failure::Setup(format!(
                "no call Activity of {} heartbeated {} within {} s",
                step.tool,
                step.field,
                VISIBILITY_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(statuses: &[&str]) -> Vec<(String, String)> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("w{i}"), (*s).to_owned()))
            .collect()
    }

    #[test]
    fn exactly_the_count_and_every_status() {
        let want = WorkflowsExpect {
            count: 1,
            status: Some("CANCELED".into()),
        };
        assert!(matches(&want, &seen(&["CANCELED"])));
        assert!(!matches(&want, &seen(&["RUNNING"])));
        assert!(!matches(&want, &seen(&["CANCELED", "CANCELED"])));
        assert!(!matches(&want, &seen(&[])));
        let any = WorkflowsExpect {
            count: 2,
            status: None,
        };
        assert!(matches(&any, &seen(&["RUNNING", "COMPLETED"])));
    }
}
