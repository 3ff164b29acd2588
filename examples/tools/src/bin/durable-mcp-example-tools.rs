//! `durable-mcp-example-tools`: the `examples` native tool service on a task queue.

use clap::Parser;
use durable_mcp::temporal;
use durable_mcp_examples::{NATIVE_SERVICE, run};
use tokio_util::sync::CancellationToken;

/// Serves the Nexus service "examples", whose operations MCP callers see as tools through
/// durable-mcp-connector or the in-Workflow client:
///
///   word_count   sync, read-only: {"text": string} -> structured {"words": n} plus text
///
///   slow_report  Workflow-backed: {"seconds": n}; reports progress each second; cancellable
///
///   server_info  a Nexus operation that is not a tool
///
/// The same process runs the slow_report Workflow on the task queue. The Temporal connection
/// comes from Temporal's environment configuration (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
/// TEMPORAL_API_KEY, TLS variables, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE). Point a Nexus
/// endpoint at the task queue: `temporal operator nexus endpoint create --name examples
/// --target-namespace default --target-task-queue examples`.
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The task queue to serve the Nexus service and run the Workflow on (the Nexus
    /// endpoint's target task queue).
    #[arg(long, value_name = "QUEUE")]
    task_queue: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,durable_mcp=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let connection = temporal::connect_from_env("durable-mcp-example-tools").await?;
    let namespace = connection.namespace.clone();
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    let task_queue = cli.task_queue;
    run(connection, &task_queue, shutdown, || {
        eprintln!(
            "durable-mcp-example-tools: serving Nexus service {NATIVE_SERVICE:?} on task queue \
             {task_queue:?} in namespace {namespace:?}"
        );
    })
    .await
}
