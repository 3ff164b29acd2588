//! `durable-mcp-example-agent`: a Temporal Workflow, written in Rust, that lists the MCP tools of
//! one tool service and calls them in order through the in-Workflow client (R-WFC-5).

use anyhow::Context as _;
use clap::Parser;
use durable_mcp_runtime::temporal;
use durable_mcp_workflow_client::sequence::{ListThenCall, PlannedCall, SequenceInput};
use serde_json::Value;
use temporalio_client::{Client, ClientOptions, WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

/// Runs a Workflow worker and one Workflow that lists the tools of `--service` on the Nexus
/// `--endpoint`, then calls each `--call` in order, durably: every listing and call is a Nexus
/// operation recorded in the Workflow's history. Prints one JSON line per call,
/// `{"tool": ..., "result": <the whole CallToolResult>}` (with `"error"` added when the call
/// produced no result: then `result` is the isError form the connector would give), and exits 0
/// when the Workflow completed.
///
/// The tool service is any Nexus service following the durable-mcp contract: an upstream MCP
/// server behind `durable-mcp-proxy`, or native tools. The Temporal connection comes from
/// Temporal's environment configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
/// TEMPORAL_API_KEY, TLS variables, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE.
#[derive(Parser)]
#[command(name = "durable-mcp-example-agent", version)]
struct Cli {
    /// The Nexus endpoint that routes to the tool service.
    #[arg(long)]
    endpoint: String,
    /// The tool service (the Nexus service name, e.g. the proxy's upstream `service`).
    #[arg(long)]
    service: String,
    /// A call, as TOOL=JSON where JSON is the arguments object, e.g. 'get-sum={"a":2,"b":3}'.
    /// Repeat for more calls; they run in the order given.
    #[arg(long = "call", value_name = "TOOL=JSON", value_parser = parse_call)]
    calls: Vec<PlannedCall>,
    /// The task queue of this process's Workflow worker [default: a fresh one per run].
    #[arg(long)]
    task_queue: Option<String>,
    /// The Workflow id [default: durable-mcp-example-agent-<uuid>].
    #[arg(long)]
    workflow_id: Option<String>,
}

/// `TOOL={json object}` as a planned call; the error says what a good one looks like.
fn parse_call(s: &str) -> Result<PlannedCall, String> {
    let Some((tool, arguments)) = s.split_once('=') else {
        return Err(format!(
            "{s:?} has no '=': write TOOL=JSON, e.g. 'echo={{\"message\":\"hi\"}}'"
        ));
    };
    if tool.is_empty() {
        return Err(format!("{s:?} names no tool before the '='"));
    }
    let arguments: Value = serde_json::from_str(arguments)
        .map_err(|e| format!("the arguments of {tool} are not JSON ({e}): {arguments}"))?;
    if !arguments.is_object() {
        return Err(format!(
            "the arguments of {tool} must be a JSON object such as {{}}, not {arguments}"
        ));
    }
    Ok(PlannedCall {
        tool: tool.to_owned(),
        arguments,
    })
}

/// Refuses an endpoint the server does not know: the Workflow's first Nexus command would fail
/// its task over and over, and the agent would wait forever. A server that does not let us list
/// endpoints (some hosted namespaces) is trusted.
async fn check_endpoint(
    connection: &temporalio_client::Connection,
    endpoint: &str,
) -> anyhow::Result<()> {
    use temporalio_protos::temporal::api::operatorservice::v1::ListNexusEndpointsRequest;
    let request = ListNexusEndpointsRequest {
        page_size: 10,
        name: endpoint.to_owned(),
        ..Default::default()
    };
    let listed = connection
        .operator_service()
        .list_nexus_endpoints(tonic::Request::new(request))
        .await;
    match listed {
        Ok(answer) => {
            let known = answer
                .into_inner()
                .endpoints
                .iter()
                .any(|e| e.spec.as_ref().is_some_and(|s| s.name == endpoint));
            anyhow::ensure!(
                known,
                "there is no Nexus endpoint named {endpoint:?}: create it pointing at the tool \
                 service's task queue, e.g. `temporal operator nexus endpoint create --name \
                 {endpoint} --target-namespace <namespace> --target-task-queue <queue>`"
            );
        }
        Err(status) => tracing::warn!(
            "could not list Nexus endpoints ({}); trusting that {endpoint:?} exists",
            status.message()
        ),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout carries the results: logs go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let run = uuid::Uuid::new_v4();
    let task_queue = cli
        .task_queue
        .unwrap_or_else(|| format!("durable-mcp-example-agent-{run}"));
    let workflow_id = cli
        .workflow_id
        .unwrap_or_else(|| format!("durable-mcp-example-agent-{run}"));

    let temporal::TemporalConnection {
        connection,
        namespace,
    } = temporal::connect_from_env("durable-mcp-example-agent").await?;
    check_endpoint(&connection, &cli.endpoint).await?;
    let client = Client::new(connection, ClientOptions::new(namespace).build())?;
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let options = WorkerOptions::new(task_queue.clone())
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
        )
        .register_workflow::<ListThenCall>()?
        .build();
    let mut worker = Worker::new(&runtime, client.clone(), options)?;
    let shutdown = worker.shutdown_handle();

    let input = SequenceInput {
        endpoint: cli.endpoint,
        service: cli.service,
        calls: cli.calls,
    };
    let agent = async move {
        let outcome = async {
            let handle = client
                .start_workflow(
                    ListThenCall::run,
                    input,
                    WorkflowStartOptions::new(task_queue, workflow_id.clone()).build(),
                )
                .await
                .context("starting the Workflow")?;
            eprintln!("started Workflow {workflow_id}");
            handle
                .get_result(WorkflowGetResultOptions::default())
                .await
                .with_context(|| format!("Workflow {workflow_id} did not complete"))
        }
        .await;
        shutdown();
        outcome
    };
    let (ran, output) = futures::join!(worker.run(), agent);
    let output = output?;
    ran.context("the Workflow worker failed")?;

    eprintln!(
        "listed {} tools: {}",
        output.listed.len(),
        output.listed.join(", ")
    );
    for call in &output.calls {
        // {"tool", "result", "error" when the call produced no result}, in that order.
        println!("{}", serde_json::to_string(call)?);
    }
    if output.calls.is_empty() {
        eprintln!("no --call given: add --call 'TOOL={{...}}' to call one of the tools above");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn calls_parse_and_bad_ones_say_what_to_write() {
        let call = parse_call(r#"get-sum={"a":2,"b":3}"#).unwrap();
        assert_eq!(call.tool, "get-sum");
        assert_eq!(call.arguments, json!({"a": 2, "b": 3}));
        assert_eq!(parse_call("x={}").unwrap().arguments, json!({}));
        assert!(parse_call("echo").unwrap_err().contains("TOOL=JSON"));
        assert!(parse_call("={}").unwrap_err().contains("no tool"));
        assert!(parse_call("echo=[1]").unwrap_err().contains("JSON object"));
        assert!(parse_call("echo={").unwrap_err().contains("not JSON"));
    }
}
