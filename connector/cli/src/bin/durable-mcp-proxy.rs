//! `durable-mcp-proxy`: fronts unchanged MCP servers as Temporal Nexus services; every tool
//! call runs in a standalone Activity.

use std::path::PathBuf;

use clap::Parser;
use durable_mcp_proxy::{ProxyOptions, config, run_proxy};
use durable_mcp_runtime::temporal;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Fronts the upstream MCP servers listed in a config file as Temporal Nexus services, one
/// service per upstream, on one task queue. Every tool call runs in a standalone Activity with
/// a retry policy inferred from the tool's annotations.
///
/// The Temporal connection comes from the config's [temporal] table, else from Temporal's
/// environment configuration (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS
/// variables, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE). Point a Nexus endpoint at the task
/// queue, e.g. `temporal operator nexus endpoint create --name mcp-proxy
/// --target-namespace default --target-task-queue mcp-proxy`.
///
/// With a [codec] table (endpoint, headers, timeout), tool arguments and results pass through
/// that remote codec server (Temporal's /encode and /decode protocol) before Temporal stores
/// them; connectors calling this proxy need the same codec (--codec-endpoint).
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The proxy config file (TOML). `${VAR}` and `${VAR:-default}` in values are read from
    /// the environment: keep secrets there, not in the file.
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Check the config file and exit without connecting.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    // Logs go to stderr, without MCP message contents (R-CON-33).
    durable_mcp_cli::logs::init_stderr_logging("info");
    let cli = Cli::parse();
    let config =
        config::load(&cli.config).map_err(|e| anyhow::anyhow!("{}: {e}", cli.config.display()))?;
    if cli.check {
        println!(
            "{}: ok ({} upstreams)",
            cli.config.display(),
            config.upstreams.len()
        );
        return Ok(());
    }
    if let Some(section) = &config.temporal {
        // SAFETY: still single-threaded: the runtime starts below.
        unsafe {
            if let Some(address) = &section.address {
                std::env::set_var("TEMPORAL_ADDRESS", address);
            }
            if let Some(namespace) = &section.namespace {
                std::env::set_var("TEMPORAL_NAMESPACE", namespace);
            }
        }
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config))
}

/// Connects and runs the proxy until SIGINT or SIGTERM.
async fn serve(config: config::ProxyConfig) -> anyhow::Result<()> {
    let identity = durable_mcp_runtime::nexus::worker::default_identity();
    let temporal::TemporalConnection {
        connection,
        namespace,
    } = temporal::connect_from_env(&identity).await?;
    let codec = config
        .codec
        .as_ref()
        .map(|c| c.client(&namespace))
        .transpose()?;
    let options = ProxyOptions {
        namespace,
        task_queue: config.worker.task_queue.clone(),
        max_concurrent_calls: config.worker.max_concurrent_calls.unwrap_or(100),
        codec,
    };
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        info!("interrupt received; shutting down (in-flight calls resume on another worker)");
        on_signal.cancel();
    });
    run_proxy(connection, options, config.upstreams, shutdown).await?;
    Ok(())
}
