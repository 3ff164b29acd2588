//! The `examples` tool service: what a team writing its Temporal services in Rust adds to
//! publish them as MCP tools (R-NAT-*). Served by `durable-mcp-example-tools`.
//!
//! - `word_count` (sync, read-only): `{"text": string}` -> structured `{"words": n}` plus text.
//! - `slow_report` (Workflow-backed): `{"seconds": n}`; the [`SlowReport`] Workflow sleeps `n`
//!   seconds, reporting progress each second, and ends CANCELED when the call is cancelled.
//! - `delete_files` (Workflow-backed, asks for input, R-NAT-7): `{"path": string, "gigabytes":
//!   n}`; the [`DeleteFiles`] Workflow asks "Delete n GB at path?" (an `elicitation/create`
//!   under [`CONFIRM_KEY`]) and ends its round; the answer starts the next round, which
//!   "deletes" (nothing is touched: it says so) on accept and answers "declined" otherwise.
//! - `server_info`: a Nexus operation that is not a tool (MCP hosts never see it).
//! - the resource [`GUIDE_URI`] (static text) and the prompt `review` (one required argument,
//!   `path`, completed from [`REVIEW_PATHS`]), published with the same builder (R-NAT-8).
//!
//! [`serve`] shows a worker of one's own serving these native tools and proxied MCP servers
//! side by side on one task queue (R-PRX-26).

use std::time::Duration;

use durable_mcp::native::input::finish;
use durable_mcp::{
    contract::call::ToolProgress,
    native::{
        AskInput, BuildError, CompletionRequest, Contents, Prompt, PromptMessages, Resource, Round,
        Structured, Tool, ToolFailure, ToolResult, ToolService, report_progress,
        sleep_unless_cancelled,
    },
    nexus::{NexusWorker, NexusWorkerOptions, Service},
    proxy::{Proxy, UpstreamConfig},
    temporal::TemporalConnection,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use temporalio_client::{Client, ClientOptions};
use temporalio_common::data_converters::RawValue;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    Runtime, Worker, WorkerOptions, WorkflowContext, WorkflowResult, WorkflowTermination,
};
use tokio_util::sync::CancellationToken;

/// The Nexus service name of these native tools, which callers route to.
pub const NATIVE_SERVICE: &str = "examples";

/// Counts the words of a text (split on whitespace).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WordCountInput {
    /// The text to count the words of.
    pub text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WordCount {
    /// How many whitespace-separated words the text has.
    pub words: usize,
}

/// A plain async function is a tool.
pub async fn word_count(input: WordCountInput) -> Result<Structured<WordCount>, ToolFailure> {
    let words = input.text.split_whitespace().count();
    let noun = if words == 1 { "word" } else { "words" };
    Ok(Structured::new(WordCount { words }).with_text(format!("{words} {noun}")))
}

/// Writes a report slowly: one second per requested second, reporting progress as it goes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SlowReportInput {
    /// How many seconds the report takes (at most one hour).
    pub seconds: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SlowReportOutput {
    /// The seconds the report took.
    pub seconds: u32,
    /// The report.
    pub report: String,
}

/// The Workflow behind `slow_report`: an ordinary Workflow, published as a tool in one line.
#[workflow]
#[derive(Default)]
pub struct SlowReport;

#[workflow_methods]
impl SlowReport {
    #[run]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: SlowReportInput,
    ) -> WorkflowResult<SlowReportOutput> {
        let ctx = &*ctx;
        let total = input.seconds.min(3600);
        for done in 0..total {
            if !sleep_unless_cancelled(ctx, Duration::from_secs(1)).await {
                return Err(WorkflowTermination::cancelled());
            }
            report_progress(
                ctx,
                ToolProgress {
                    progress: f64::from(done + 1),
                    total: Some(f64::from(total)),
                    message: Some(format!("{} of {total} seconds", done + 1)),
                },
            );
        }
        Ok(SlowReportOutput {
            seconds: total,
            report: format!("The report took {total} seconds."),
        })
    }
}

/// The key of `delete_files`'s confirmation request.
pub const CONFIRM_KEY: &str = "confirm";

/// Deletes files after a person confirms (the example deletes nothing: it only says so).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeleteFilesInput {
    /// What to delete.
    pub path: String,
    /// How much it is, for the question.
    pub gigabytes: u32,
}

/// The Workflow behind `delete_files`: one run per round. The first asks; the next acts on
/// the answer. Nothing waits between rounds, so the question outlives any restart.
#[workflow]
#[derive(Default)]
pub struct DeleteFiles;

#[workflow_methods]
impl DeleteFiles {
    #[run]
    pub async fn run(
        _ctx: &mut WorkflowContext<Self>,
        round: Round<DeleteFilesInput>,
    ) -> WorkflowResult<RawValue> {
        let input = &round.arguments;
        let Some(answers) = &round.answers else {
            let question = format!("Delete {} GB at {}?", input.gigabytes, input.path);
            return Ok(round.ask(&AskInput::new().confirm(CONFIRM_KEY, question))?);
        };
        let result = if answers.accepted(CONFIRM_KEY) {
            ToolResult::text(format!("deleted {} ({} GB)", input.path, input.gigabytes))
        } else {
            ToolResult::text(format!("declined: nothing was deleted at {}", input.path))
        };
        Ok(finish(&result)?)
    }
}

/// Nothing to declare: `server_info` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoInput {}

async fn server_info(_: NoInput) -> Result<String, ToolFailure> {
    Ok(format!(
        "durable-mcp-example-tools {}",
        env!("CARGO_PKG_VERSION")
    ))
}

/// The URI of the example service's one resource.
pub const GUIDE_URI: &str = "examples://guide";

/// The text of [`GUIDE_URI`].
pub const GUIDE_TEXT: &str = "word_count counts words; slow_report takes its time; \
                              delete_files asks first.";

/// Asks for a review of the files at a path.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReviewInput {
    /// The path to review.
    pub path: String,
}

/// A prompt is a plain async function too.
pub async fn review(input: ReviewInput) -> Result<PromptMessages, ToolFailure> {
    Ok(PromptMessages::new().user(format!(
        "Review the files at {} and say what slow_report should report.",
        input.path
    )))
}

/// The paths `review`'s `path` argument is completed from.
pub const REVIEW_PATHS: [&str; 4] = ["src/", "src/bin/", "docs/", "tests/"];

/// Completes `review`'s `path`: the [`REVIEW_PATHS`] that start with what was typed.
pub async fn review_paths(asked: CompletionRequest) -> Result<Vec<String>, ToolFailure> {
    Ok(REVIEW_PATHS
        .iter()
        .filter(|p| p.starts_with(&asked.value))
        .map(|p| p.to_string())
        .collect())
}

/// The `examples` tool service; `task_queue` is where [`SlowReport`] runs.
pub fn tool_service(temporal: TemporalConnection, task_queue: &str) -> Result<Service, BuildError> {
    ToolService::new(NATIVE_SERVICE)
        .temporal(temporal)
        .tool(
            Tool::sync("word_count", word_count)
                .title("Count words")
                .read_only()
                .idempotent()
                .open_world(false)
                .timeout(Duration::from_secs(10)),
        )
        .tool(
            Tool::workflow("slow_report", SlowReport::run, task_queue)
                .title("Write a slow report")
                .description(
                    "Writes a report in the given number of seconds, reporting progress every \
                     second. Cancellable.",
                )
                .read_only()
                .open_world(false)
                .timeout(Duration::from_secs(2 * 3600)),
        )
        .tool(
            Tool::workflow_asking("delete_files", DeleteFiles::run, task_queue)
                .title("Delete files (asks first)")
                .description(
                    "Deletes the files at a path after the caller confirms. Asks for \
                     confirmation (an elicitation) first.",
                )
                .destructive(true)
                .open_world(false),
        )
        .operation(Tool::sync("server_info", server_info))
        .resource(
            Resource::new(
                GUIDE_URI,
                "guide",
                Contents::text(GUIDE_TEXT).mime_type("text/plain"),
            )
            .title("Guide to the example tools"),
        )
        .prompt(
            Prompt::new("review", review)
                .title("Review files")
                .completion(review_paths),
        )
        .build()
}

/// Serves the `examples` service and runs its Workflow on `task_queue` until `shutdown`
/// fires: [`serve`] with no proxied upstreams.
pub async fn run(
    temporal: TemporalConnection,
    task_queue: &str,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    serve(temporal, task_queue, Vec::new(), shutdown, ready).await
}

/// One worker, one task queue, native and proxied tools side by side (R-PRX-26): the
/// `examples` service and one Nexus service per upstream in `upstreams` on one Nexus worker, and
/// the [`SlowReport`] Workflow with the proxy's tool-call Activity (its plugin) on one SDK
/// worker. `ready` is called once both poll. The SDK worker's future is not `Send`: await this
/// on the runtime's own thread (`block_on`, a `LocalSet`).
pub async fn serve(
    temporal: TemporalConnection,
    task_queue: &str,
    upstreams: Vec<UpstreamConfig>,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    let proxy = Proxy::builder(temporal.clone(), task_queue)
        .upstreams(upstreams)
        .build()?;
    let mut services = proxy.services();
    services.push(tool_service(temporal.clone(), task_queue)?);
    let nexus = NexusWorker::new(
        temporal.connection.clone(),
        NexusWorkerOptions::new(&temporal.namespace, task_queue),
        services,
    )
    .await?;
    let nexus_shutdown = nexus.shutdown_handle();

    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| anyhow::anyhow!("Temporal SDK runtime: {e}"))?;
    let client = Client::new(
        temporal.connection.clone(),
        ClientOptions::new(temporal.namespace.clone()).build(),
    )?;
    let options = WorkerOptions::new(task_queue)
        .deployment_options(
            temporalio_common::worker::WorkerDeploymentOptions::from_build_id(
                concat!("durable-mcp-examples-", env!("CARGO_PKG_VERSION")).to_owned(),
            ),
        )
        .register_workflow::<SlowReport>()?
        .register_workflow::<DeleteFiles>()?
        .worker_plugin(proxy.worker_plugin())
        .build();
    let mut workflows = Worker::new(&runtime, client, options)?;
    let workflows_shutdown = workflows.shutdown_handle();
    ready();
    let stop = shutdown.clone();
    let (nexus_result, workflows_result, (), ()) = tokio::join!(
        nexus.run(),
        workflows.run(),
        proxy.run(shutdown),
        async move {
            stop.cancelled().await;
            nexus_shutdown.shutdown();
            workflows_shutdown();
        }
    );
    nexus_result?;
    workflows_result?;
    Ok(())
}
