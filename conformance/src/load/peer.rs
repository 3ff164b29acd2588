//! The peer: Temporal's own `temporalio-mcp` (PyPI), one Workflow per call whose Activity
//! calls the same upstream. Installed once with pip into the cache the Temporal CLI uses;
//! skipped with the reason when Python or pip is missing.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use temporalio_client::Connection;
use temporalio_protos::temporal::api::{
    common::v1::{Payload, Payloads, WorkflowExecution, WorkflowType},
    enums::v1::HistoryEventFilterType,
    failure::v1::Failure,
    history::v1::history_event::Attributes,
    taskqueue::v1::TaskQueue,
    workflowservice::v1::{GetWorkflowExecutionHistoryRequest, StartWorkflowExecutionRequest},
};

/// The pinned peer, as the issue measured it.
pub const PEER_PACKAGE: &str = "temporalio-mcp==0.2.0";
/// The workflow type the worker script registers for the echo rows.
pub const WORKFLOW: &str = "durable-mcp-load.echo";
/// The workflow type for the result-size section (R-CNF-18): calls `large` with a byte count.
pub const LARGE_WORKFLOW: &str = "durable-mcp-load.large";

/// The peer's worker: a Workflow that calls the upstream's `echo` through `TemporalMCPClient`
/// and returns the echoed text (`{"key": ...}`), and one that calls `large` and returns its
/// text, so the caller receives the whole result as an MCP client of ours does (two Activity
/// attempts, so a size the peer cannot carry ends with its error, not the run timeout).
/// Arguments: address namespace task_queue url.
pub const WORKER_SCRIPT: &str = r#"
import asyncio, sys
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import mcp
    from temporalio.mcp import MCPPlugin, TemporalMCPClient


@workflow.defn(name="durable-mcp-load.echo")
class Echo:
    @workflow.run
    async def run(self, key: str) -> str:
        result = await TemporalMCPClient("upstream").call_tool("echo", {"key": key})
        return result.content[0].text


@workflow.defn(name="durable-mcp-load.large")
class Large:
    @workflow.run
    async def run(self, size: int) -> str:
        # Two attempts, not the default's unlimited: a size the peer cannot carry ends with its
        # error instead of retrying until the Workflow's run timeout.
        retry = RetryPolicy(maximum_attempts=2)
        client = TemporalMCPClient("upstream", activity_config={"retry_policy": retry})
        result = await client.call_tool("large", {"bytes": size})
        text = "".join(getattr(c, "text", "") for c in result.content)
        if getattr(result, "is_error", None) or getattr(result, "isError", None):
            raise ApplicationError("isError: " + text[:300], non_retryable=True)
        return text


async def main():
    address, namespace, task_queue, url = sys.argv[1:5]
    client = await Client.connect(address, namespace=namespace)
    plugin = MCPPlugin({"upstream": lambda: mcp.Client(url)})
    worker = Worker(client, task_queue=task_queue, workflows=[Echo, Large], plugins=[plugin])
    print("READY", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
"#;

/// Where the peer is installed (`pip install --target`).
pub fn install_dir() -> PathBuf {
    crate::harness::cache_dir().join(PEER_PACKAGE.replace("==", "-"))
}

/// Installs the peer when missing; `Err(reason)` when it cannot be (the row is then skipped).
pub fn ensure_installed() -> Result<PathBuf, String> {
    let dir = install_dir();
    if dir.join("temporalio").join("mcp").is_dir() {
        return Ok(dir);
    }
    let python = python().ok_or("no python3 on PATH")?;
    let staging = dir.with_extension("staging");
    let _ = std::fs::remove_dir_all(&staging);
    super::progress(format_args!(
        "installing {PEER_PACKAGE} into {} ...",
        dir.display()
    ));
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--no-input",
            "--target",
        ])
        .arg(&staging)
        .arg(PEER_PACKAGE)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {python} -m pip: {e}"))?;
    if !staging.join("temporalio").join("mcp").is_dir() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "pip install {PEER_PACKAGE} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    std::fs::rename(&staging, &dir)
        .map_err(|e| format!("cannot move the install into place: {e}"))?;
    Ok(dir)
}

/// `python3` when it runs.
pub fn python() -> Option<String> {
    ["python3", "python"]
        .into_iter()
        .map(str::to_owned)
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// The worker command: the script written into `dir`, the install on `PYTHONPATH`.
pub fn worker_command(
    python: &str,
    install: &Path,
    dir: &Path,
    address: &str,
    namespace: &str,
    task_queue: &str,
    upstream_url: &str,
) -> std::io::Result<Command> {
    let script = dir.join("peer_worker.py");
    std::fs::write(&script, WORKER_SCRIPT)?;
    let mut command = Command::new(python);
    command
        .arg(script)
        .args([address, namespace, task_queue, upstream_url])
        .env("PYTHONPATH", install)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    Ok(command)
}

/// One peer call: start the Workflow with `key` and wait for its close event; answers the
/// Workflow's result (the echoed text).
pub async fn call(
    connection: &Connection,
    namespace: &str,
    task_queue: &str,
    key: &str,
) -> anyhow::Result<String> {
    let value = run_workflow(
        connection,
        namespace,
        task_queue,
        (WORKFLOW, &format!("peer-{key}")),
        serde_json::json!(key),
    )
    .await?;
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("not a string: {value}"))
}

/// Starts the Workflow `(type, id)` with one argument and waits for its close event; answers
/// its result, or an error with the failure's messages (a payload Temporal refuses says so).
pub async fn run_workflow(
    connection: &Connection,
    namespace: &str,
    task_queue: &str,
    (workflow_type, workflow_id): (&str, &str),
    input: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let workflow_id = workflow_id.to_owned();
    let started = connection
        .workflow_service()
        .start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace: namespace.to_owned(),
            workflow_id: workflow_id.clone(),
            workflow_type: Some(WorkflowType {
                name: workflow_type.to_owned(),
            }),
            task_queue: Some(TaskQueue {
                name: task_queue.to_owned(),
                ..Default::default()
            }),
            input: Some(Payloads {
                payloads: vec![json_payload(&input)],
            }),
            identity: connection.identity().to_owned(),
            request_id: uuid::Uuid::new_v4().to_string(),
            workflow_run_timeout: Some(prost_wkt_types::Duration {
                seconds: 120,
                nanos: 0,
            }),
            ..Default::default()
        }))
        .await?
        .into_inner();
    let execution = WorkflowExecution {
        workflow_id,
        run_id: started.run_id,
    };
    loop {
        let history = connection
            .workflow_service()
            .get_workflow_execution_history(tonic::Request::new(
                GetWorkflowExecutionHistoryRequest {
                    namespace: namespace.to_owned(),
                    execution: Some(execution.clone()),
                    wait_new_event: true,
                    history_event_filter_type: HistoryEventFilterType::CloseEvent.into(),
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        let Some(event) = history.history.and_then(|h| h.events.into_iter().next()) else {
            // An empty long-poll answer: ask again.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        return match event.attributes {
            Some(Attributes::WorkflowExecutionCompletedEventAttributes(done)) => {
                let payload = done
                    .result
                    .and_then(|r| r.payloads.into_iter().next())
                    .ok_or_else(|| anyhow::anyhow!("the workflow returned nothing"))?;
                Ok(serde_json::from_slice(&payload.data)?)
            }
            Some(Attributes::WorkflowExecutionFailedEventAttributes(failed)) => {
                anyhow::bail!(
                    "the workflow failed: {}",
                    failed
                        .failure
                        .as_ref()
                        .map_or("no failure".into(), messages)
                )
            }
            _ => anyhow::bail!("the workflow closed with {:?}", event.event_type()),
        };
    }
}

/// A failure's message and its causes' messages, outermost first, joined by `: ` (the peer's
/// refusal of a size is an Activity failure whose cause says what Temporal refused).
pub fn messages(failure: &Failure) -> String {
    let mut parts = Vec::new();
    let mut next = Some(failure);
    while let Some(f) = next {
        if !f.message.is_empty() && parts.last() != Some(&f.message.as_str()) {
            parts.push(f.message.as_str());
        }
        next = f.cause.as_deref();
    }
    parts.join(": ")
}

fn json_payload(value: &serde_json::Value) -> Payload {
    Payload {
        metadata: [("encoding".to_owned(), b"json/plain".to_vec())].into(),
        data: serde_json::to_vec(value).expect("JSON serializes"),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_every_cause_once() {
        let failure = |message: &str, cause: Option<Failure>| Failure {
            message: message.to_owned(),
            cause: cause.map(Box::new),
            ..Default::default()
        };
        let refused = failure(
            "Activity task failed",
            Some(failure(
                "Complete result exceeds size limit.",
                Some(failure("Complete result exceeds size limit.", None)),
            )),
        );
        assert_eq!(
            messages(&refused),
            "Activity task failed: Complete result exceeds size limit."
        );
        assert_eq!(messages(&failure("", Some(failure("x", None)))), "x");
    }
}
