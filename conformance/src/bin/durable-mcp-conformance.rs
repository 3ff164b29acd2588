//! `durable-mcp-conformance`: checks the durable MCP path against a real Temporal dev server.

use std::time::Duration;

use clap::{Parser, Subcommand};
use durable_mcp_conformance::{DevServerOptions, harness::DevServer, smoke};

/// Conformance runner for durable-mcp: starts a real Temporal dev server (installing the
/// Temporal CLI with pip when none is found) and checks the durable MCP path against it.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One durable round trip on a fresh dev server, narrated step by step.
    ///
    /// Starts the server, registers a Nexus endpoint, runs a Nexus worker, completes one
    /// standalone Nexus operation through it, and stops everything. Exit code 0 on success.
    Smoke,
    /// Runs a dev server with the flags durable-mcp needs, for manual use, until Ctrl-C.
    ///
    /// Prints the address to export as TEMPORAL_ADDRESS. State lives in --db-filename when
    /// given, so it survives restarts.
    Temporal {
        /// Keep state in this SQLite file.
        #[arg(long)]
        db_filename: Option<std::path::PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let options = DevServerOptions::from_env()?;
    match cli.command {
        Command::Smoke => {
            println!("durable-mcp smoke run: one durable round trip on a real Temporal dev server");
            let report = smoke::run(options, |step, took| {
                println!("  ok  {step} ({})", fmt_duration(took));
            })
            .await
            .map_err(|e| anyhow::anyhow!("smoke run failed: {e:#}"))?;
            let total: Duration = report.steps.iter().map(|(_, d)| *d).sum();
            println!(
                "smoke run passed: {} steps in {} against Temporal {}",
                report.steps.len(),
                fmt_duration(total),
                report.server_version
            );
        }
        Command::Temporal { db_filename } => {
            let mut server = DevServer::start(DevServerOptions {
                db_file: db_filename,
                ..options
            })
            .await?;
            println!(
                "Temporal dev server ({}) is up.",
                server.version().map(|v| v.to_string()).unwrap_or_default()
            );
            println!("  export TEMPORAL_ADDRESS={}", server.address());
            println!("  export TEMPORAL_NAMESPACE={}", server.namespace());
            println!("Press Ctrl-C to stop.");
            tokio::signal::ctrl_c().await?;
            server.stop().await?;
        }
    }
    Ok(())
}

fn fmt_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
