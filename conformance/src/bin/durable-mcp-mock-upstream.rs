//! `durable-mcp-mock-upstream`: a spec-driven MCP server for testing the durable-mcp proxy.
//!
//! stdio mode: stdout is the MCP channel, logs go to stderr. HTTP mode: prints
//! `LISTENING http://127.0.0.1:PORT/mcp` on stdout once it accepts connections, then serves until
//! Ctrl-C or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use durable_mcp_conformance::fixtures::{
    SpecSource, UpstreamSpec, serve_mock_upstream_http_with, serve_stdio,
    server::features::Features,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    Stdio,
    Http,
}

/// A mock upstream MCP server whose tools echo, fail N times, return isError, sleep, crash,
/// return every content type or send progress, as a spec file says, and which appends every
/// invocation to a ledger file.
#[derive(Debug, Parser)]
#[command(version, long_about = None)]
struct Cli {
    /// Spec file (JSON or TOML), re-read whenever it changes. Default: the built-in standard
    /// spec (echo, flaky, refuse, slow, crash, everything, write_once, progress, large).
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// How to serve MCP.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    transport: Transport,
    /// Address to listen on in http mode (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Append one JSON line per invocation event to this file.
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,
    /// Serve the hostile upstream instead (no spec, no ledger): tools that answer malformed
    /// JSON, wrong types, bad UTF-8, another id, 16 MiB, half an answer or nothing, and `echo`,
    /// for checking that the proxy gives every call a clear error (R-PRX-39).
    #[arg(long, conflicts_with_all = ["spec", "ledger", "resources_and_prompts"])]
    hostile: bool,
    /// Print the standard spec as JSON and exit (a starting point for spec files).
    #[arg(long)]
    print_standard_spec: bool,
    /// Also serve a few resources (text and blob), a resource template, a prompt with
    /// arguments and completions.
    #[arg(long)]
    resources_and_prompts: bool,
    /// With --resources-and-prompts: also list the resources in this file (a JSON array),
    /// re-read at each listing, so a test can change the mock's resources while it runs.
    #[arg(long, value_name = "FILE")]
    more_resources: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let cli = Cli::parse();
    let features = cli.resources_and_prompts.then(|| Features {
        more_resources: cli.more_resources.clone(),
    });
    if cli.print_standard_spec {
        println!(
            "{}",
            serde_json::to_string_pretty(&UpstreamSpec::standard())?
        );
        return Ok(());
    }
    if cli.hostile {
        return serve_hostile(cli.transport, cli.addr).await;
    }
    let spec = match cli.spec {
        Some(path) => SpecSource::File(path),
        None => SpecSource::Inline(UpstreamSpec::standard()),
    };
    match cli.transport {
        Transport::Stdio => serve_stdio(spec, cli.ledger, features).await,
        Transport::Http => {
            let server =
                serve_mock_upstream_http_with(spec, cli.ledger, cli.addr, features).await?;
            {
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "LISTENING {}", server.url)?;
                stdout.flush()?;
            }
            wait_for_shutdown().await;
            tracing::info!("shutting down");
            server.shutdown().await;
            Ok(())
        }
    }
}

async fn serve_hostile(transport: Transport, addr: SocketAddr) -> anyhow::Result<()> {
    use durable_mcp_conformance::fixtures::hostile_upstream;
    match transport {
        Transport::Stdio => hostile_upstream::serve_stdio().await,
        Transport::Http => {
            let server = hostile_upstream::serve_http(addr).await?;
            {
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "LISTENING {}", server.url)?;
                stdout.flush()?;
            }
            wait_for_shutdown().await;
            Ok(())
        }
    }
}

async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
