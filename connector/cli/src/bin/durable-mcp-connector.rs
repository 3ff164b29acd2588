//! `durable-mcp-connector`: an MCP server whose tools are Temporal Nexus operations.
//!
//! The flags and the rules they follow are [`durable_mcp_cli::connector_config`]; this file
//! parses them and starts the connector.

use std::sync::Arc;

use clap::Parser;
use durable_mcp_cli::connector_config::{
    self, CheckedFlags, ConnectorFlags, SigningKeys, Transport,
};
use durable_mcp_cli::metrics_server::{METRICS_LISTENING, serve_metrics};
use durable_mcp_cli::traces::install_if_asked;
use durable_mcp_connector::{
    auth::{AuthConfig, Authenticator},
    http::serve_connector_http,
    server::Connector,
};
use durable_mcp_runtime::nexus::OperationClient;
use durable_mcp_runtime::temporal::{self, TemporalConnection};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = ConnectorFlags::parse();
    // The command line is readable by every local process (R-RUN-2): TEMPORAL_API_KEY or the
    // temporal.toml profile keep the key off it; a key given as --api-key is hidden there.
    if let Some(key) = &flags.temporal.api_key {
        durable_mcp_proxy::child::hide_in_own_command_line(key);
    }
    // stdout is the MCP channel: logs go to stderr, without MCP message contents (R-CON-33).
    durable_mcp_cli::logs::init_stderr_logging("warn", flags.log_format);
    let checked = connector_config::check_flags(flags)?;
    let traces = install_if_asked(checked.flags.otlp_endpoint.as_deref(), CONNECTOR)?;
    // Task IDs are signed with MCP_TASK_SIGNING_KEY (checked before connecting to anything).
    let signing = connector_config::signing_keys_from_env(checked.flags.transport)?;
    let temporal = connect_temporal(&checked.flags).await?;
    let connector = build_connector(&checked, signing, temporal)?;
    let _metrics_stop = serve_metrics_if_asked(&checked.flags, &connector).await?;
    check_routed_tool_names(&checked.flags, &connector).await;
    let served = match checked.flags.transport {
        Transport::Stdio => serve_stdio(connector).await,
        Transport::Http => serve_over_http(connector, checked).await,
    };
    durable_mcp_cli::traces::flush(traces).await;
    served
}

const CONNECTOR: &str = "durable-mcp-connector";

/// Connects to Temporal as the connection flags, then its environment configuration, say
/// (R-RUN-1).
async fn connect_temporal(flags: &ConnectorFlags) -> anyhow::Result<TemporalConnection> {
    let identity = durable_mcp_runtime::nexus::worker::default_identity();
    Ok(temporal::connect(&flags.temporal.settings(), &identity).await?)
}

/// The connector on the Temporal connection: its routes' operations (through the codec, if
/// any) and, with `--temporal-tools`, the Temporal operations tools.
fn build_connector(
    checked: &CheckedFlags,
    signing: Option<SigningKeys>,
    temporal: TemporalConnection,
) -> anyhow::Result<Connector> {
    let TemporalConnection {
        connection,
        namespace,
    } = temporal;
    let flags = &checked.flags;
    // Refuse a bad --allowed-namespaces before serving anything.
    let policy = connector_config::namespace_policy(flags, &namespace)?;
    let options = connector_config::connector_options(flags, checked.auth.is_some(), signing);
    let codec = checked
        .codec
        .as_ref()
        .map(|c| c.with_namespace(namespace.clone()));
    let mut client = OperationClient::new(connection.clone(), namespace.clone());
    if let Some(codec) = &codec {
        client = client.with_codec(Arc::new(codec.clone()));
    }
    let local = connector_config::temporal_toolset(flags, policy, &connection, &namespace, codec);
    Ok(Connector::with_local_tools(client, options, local))
}

/// Serves the connector's metrics on `--metrics-addr`, if given (R-RUN-6), until the
/// returned guard drops.
async fn serve_metrics_if_asked(
    flags: &ConnectorFlags,
    connector: &Connector,
) -> anyhow::Result<Option<tokio_util::sync::DropGuard>> {
    let Some(addr) = flags.metrics_addr else {
        return Ok(None);
    };
    let metrics = connector.metrics();
    let stop = CancellationToken::new();
    let encode = Arc::new(move || metrics.encode());
    let bound = serve_metrics(addr, "--metrics-addr", encode, stop.clone()).await?;
    // One line on stderr that scripts (and tests) can read the address from.
    eprintln!("durable-mcp-connector {METRICS_LISTENING}http://{bound}");
    Ok(Some(stop.drop_guard()))
}

/// With routes beside the Temporal tools: a routed tool named like a Temporal tool is logged
/// (by the merge) and left out (R-CON-2); the connector starts either way, so one upstream
/// cannot keep it down.
async fn check_routed_tool_names(flags: &ConnectorFlags, connector: &Connector) {
    if !connector_config::checks_routed_tool_names(flags) {
        return;
    }
    if let Err(why) = connector.check_tool_names().await {
        tracing::warn!(
            "could not list the routed tools yet ({why}); tool names are checked at every tools/list"
        );
    }
}

/// Serves MCP on stdin/stdout until the client goes away.
async fn serve_stdio(connector: Connector) -> anyhow::Result<()> {
    // The connector's own line transport: requests it cannot read are refused under their id
    // (R-CON-30).
    let running = connector
        .serve(durable_mcp_connector::stdio::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}

/// Serves MCP over HTTP until SIGINT or SIGTERM, then lets in-flight requests finish.
async fn serve_over_http(connector: Connector, checked: CheckedFlags) -> anyhow::Result<()> {
    let CheckedFlags {
        flags,
        auth,
        http_path,
        ..
    } = checked;
    let mut options = connector_config::http_options(&flags, http_path, auth.as_ref());
    match auth {
        Some(config) => {
            let authenticator = authenticator(config, &flags)
                .await
                .with_metrics(connector.metrics());
            options.auth = Some(Arc::new(authenticator));
        }
        None => tracing::warn!(
            "the HTTP transport has no authentication: all HTTP callers share one task scope \
             (any caller can see and cancel any other caller's tasks); use --auth-config"
        ),
    }
    let shutdown = CancellationToken::new();
    let server = serve_connector_http(connector, options, shutdown.clone()).await?;
    // One line on stderr that scripts (and tests) can read the bound address from.
    eprintln!("durable-mcp-connector listening on {}", server.url);
    shutdown_signal().await?;
    tracing::info!("shutting down");
    shutdown.cancel();
    server.wait().await?;
    Ok(())
}

/// The inbound OAuth checker of `--auth-config`, its issuer's signing keys fetched if they can
/// be yet.
async fn authenticator(config: AuthConfig, flags: &ConnectorFlags) -> Authenticator {
    let authenticator = Authenticator::new(config)
        .with_sessions_per_caller(flags.max_sessions_per_caller)
        .with_connections_per_caller(flags.http_max_connections_per_caller);
    if let Err(e) = authenticator.preload().await {
        tracing::warn!(
            error = %e,
            "could not fetch the issuer's signing keys yet; requests get 503 until they can be fetched"
        );
    }
    authenticator
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}
