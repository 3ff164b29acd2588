//! `durable-mcp-connector`: an MCP server whose tools are Temporal Nexus operations.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use durable_mcp::{
    inbound::{
        route::{Route, check_routes, parse_route},
        server::{Connector, ConnectorOptions},
    },
    nexus::OperationClient,
    temporal,
};
use rmcp::ServiceExt;

/// An MCP server whose tools are Temporal Nexus operations. `tools/list` asks each route's
/// Nexus service (its `list_tools` operation); `tools/call` starts a standalone Nexus operation
/// named by the tool and waits for it.
///
/// The Temporal connection comes from Temporal's environment configuration: TEMPORAL_ADDRESS,
/// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS variables, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE.
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// One Nexus service/endpoint route, as a YAML flow map or JSON object:
    /// '{service: my-tools, endpoint: my-tools-endpoint}'. Required; repeat for more routes.
    #[arg(long = "route", value_name = "ROUTE", required = true, value_parser = parse_route_arg)]
    routes: Vec<Route>,
    /// How MCP clients reach the connector.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    transport: Transport,
    /// Logical deployment name, shared by replicas and included in operation ids.
    #[arg(long, default_value = "durable-mcp")]
    connector_name: String,
    /// Override the operation-id part after the connector name (naming and visibility only).
    #[arg(long)]
    operation_id_prefix: Option<String>,
    /// Timeout for tools whose listing carries none, e.g. "5m".
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    default_timeout: Duration,
}

#[derive(Clone, Copy, ValueEnum)]
enum Transport {
    /// MCP over stdin/stdout (for an MCP host's `mcpServers` entry).
    Stdio,
}

fn parse_route_arg(s: &str) -> Result<Route, String> {
    parse_route(s).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout is the MCP channel: logs go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    check_routes(&cli.routes)?;
    let identity = durable_mcp::nexus::worker::default_identity();
    let temporal::TemporalConnection { connection, namespace } = temporal::connect_from_env(&identity).await?;
    let mut options = ConnectorOptions::new(cli.routes);
    options.connector_name = cli.connector_name;
    if let Some(prefix) = cli.operation_id_prefix {
        options.operation_id_prefix = prefix;
    }
    options.default_timeout = cli.default_timeout;
    let connector = Connector::new(OperationClient::new(connection, namespace), options);
    match cli.transport {
        Transport::Stdio => {
            let running = connector.serve(rmcp::transport::stdio()).await?;
            running.waiting().await?;
        }
    }
    Ok(())
}
