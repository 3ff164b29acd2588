//! `durable-mcp-connector`: an MCP server whose tools are Temporal Nexus operations.
//!
//! Its flags are [`durable_mcp_cli::connector_config::ConnectorFlags`].

use clap::Parser;
use durable_mcp_cli::connector_config::{ConnectorFlags, Transport};
use durable_mcp_connector::temporal_tools::{FamilyScopes, NamespacePolicy, TemporalToolset};
use durable_mcp_connector::{
    auth::{AuthConfig, Authenticator},
    http::{HttpOptions, serve_http},
    route::check_routes,
    server::{Connector, ConnectorOptions},
    task_ref::CallerScope,
};
use durable_mcp_runtime::nexus::OperationClient;
use durable_mcp_runtime::temporal;
use rmcp::ServiceExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout is the MCP channel: logs go to stderr, without MCP message contents (R-CON-33).
    durable_mcp_cli::logs::init_stderr_logging("warn");
    let cli = ConnectorFlags::parse();
    let auth = match &cli.auth_config {
        Some(path) => Some(load_auth_config(
            path,
            matches!(cli.transport, Transport::Http),
        )?),
        None => None,
    };
    let http_path = match (&auth, &cli.http_path) {
        (Some(a), Some(p)) if p != a.mcp_path() => anyhow::bail!(
            "--http-path {p:?} differs from the path of auth.resource ({:?}); drop --http-path \
             or make them agree",
            a.mcp_path()
        ),
        (Some(a), _) => a.mcp_path().to_owned(),
        (None, Some(p)) => p.clone(),
        (None, None) => "/mcp".to_owned(),
    };
    if let Err(e) = durable_mcp_connector::http::check_mcp_path(&http_path) {
        match cli.http_path {
            Some(_) => anyhow::bail!("--http-path: {e}"),
            None => anyhow::bail!("the path of auth.resource in --auth-config: {e}"),
        }
    }
    // Fail on a bad codec URL before connecting to anything; the namespace is set below.
    let codec = remote_codec(&cli)?;
    if !cli.routes.is_empty() {
        check_routes(&cli.routes)?;
    }
    if matches!(cli.transport, Transport::Http) {
        durable_mcp_connector::http::check_exposure(
            &cli.addr,
            auth.is_some(),
            cli.allow_unauthenticated,
        )
        .map_err(anyhow::Error::msg)?;
    }
    if cli.temporal_tools && auth.is_some() {
        missing_family_scopes(cli.temporal_tools_scopes.as_ref()).map_err(anyhow::Error::msg)?;
    }
    // Task IDs are signed with MCP_TASK_SIGNING_KEY (checked before connecting to anything).
    // HTTP needs it (replicas and restarts must verify each other's task IDs); stdio without
    // it gets a process-local key. Previous keys (R-CON-18) only make sense beside it.
    use durable_mcp_connector::task_ref::{PREVIOUS_KEYS_ENV, SIGNING_KEY_ENV, SigningKey};
    let previous = SigningKey::previous_from_env()?;
    let signing = match (SigningKey::from_env()?, cli.transport) {
        (Some(key), _) => Some((key, previous)),
        (None, Transport::Http) => anyhow::bail!(
            "--transport http needs {SIGNING_KEY_ENV}: at least 32 random bytes, base64 (for example `openssl rand -base64 32`)"
        ),
        (None, Transport::Stdio) if !previous.is_empty() => anyhow::bail!(
            "{PREVIOUS_KEYS_ENV} is set but {SIGNING_KEY_ENV} is not: previous keys only verify task IDs beside a current key; set {SIGNING_KEY_ENV} too"
        ),
        (None, Transport::Stdio) => None,
    };
    let identity = durable_mcp_runtime::nexus::worker::default_identity();
    let temporal::TemporalConnection {
        connection,
        namespace,
    } = temporal::connect_from_env(&identity).await?;
    if let (Some(list), true) = (&cli.allowed_namespaces, cli.temporal_tools) {
        // Refuse a bad list before serving anything.
        NamespacePolicy::parse(list, &namespace)?;
    }
    let mut options = ConnectorOptions::new(cli.routes);
    options.connector_name = cli.connector_name;
    if let Some(prefix) = cli.operation_id_prefix {
        options.operation_id_prefix = prefix;
    }
    options.default_timeout = cli.default_timeout;
    options.list_cache = cli.list_cache;
    options.max_in_flight = cli.max_in_flight;
    options.task_after = cli.task_after;
    options.companion_tools = cli.companion_tools;
    options.require_verified_caller = auth.is_some();
    options.caller_scope = CallerScope::Unauthenticated(cli.anonymous_scope.unwrap_or_else(|| {
        match cli.transport {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
        .to_owned()
    }));
    if let Some((key, previous)) = signing {
        options.signing_key = key;
        options.previous_signing_keys = previous;
    }
    let mut client = OperationClient::new(connection.clone(), namespace.clone());
    let codec = codec.map(|c| c.with_namespace(namespace.clone()));
    if let Some(codec) = &codec {
        client = client.with_codec(std::sync::Arc::new(codec.clone()));
    }
    let local = match cli.temporal_tools {
        true => Some(temporal_toolset(
            &connection,
            &namespace,
            cli.allowed_namespaces.as_deref(),
            codec,
            cli.temporal_tools_scopes.unwrap_or_default(),
        )?),
        false => None,
    };
    let has_routes = !options.routes.is_empty();
    let connector = Connector::with_local_tools(client, options, local);
    if cli.temporal_tools && has_routes {
        // A routed tool named like a Temporal tool is logged (by the merge) and left out
        // (R-CON-2); the connector starts either way, so one upstream cannot keep it down.
        if let Err(why) = connector.check_tool_names().await {
            tracing::warn!(
                "could not list the routed tools yet ({why}); tool names are checked at every tools/list"
            );
        }
    }
    match cli.transport {
        Transport::Stdio => {
            let running = connector.serve(rmcp::transport::stdio()).await?;
            running.waiting().await?;
        }
        Transport::Http => {
            let shutdown = tokio_util::sync::CancellationToken::new();
            let mut options = HttpOptions::new(cli.addr);
            options.allowed_hosts = cli.allowed_hosts;
            options.path = http_path;
            options.shutdown_grace = cli.shutdown_grace;
            options.limits = durable_mcp_connector::listener::ConnectionLimits {
                header_read: cli.http_header_timeout,
                max_connections: cli.http_max_connections,
                max_per_address: cli.http_max_connections_per_address,
            };
            match auth {
                Some(config) => {
                    // The public host reaches us through a reverse proxy under its own name.
                    if let Some(host) = config.resource.host_str() {
                        options.allowed_hosts.push(match config.resource.port() {
                            Some(port) => format!("{host}:{port}"),
                            None => host.to_owned(),
                        });
                    }
                    let authenticator = Authenticator::new(config)
                        .with_sessions_per_caller(cli.max_sessions_per_caller);
                    if let Err(e) = authenticator.preload().await {
                        tracing::warn!(
                            error = %e,
                            "could not fetch the issuer's signing keys yet; requests get 503 until they can be fetched"
                        );
                    }
                    options.auth = Some(std::sync::Arc::new(authenticator));
                }
                None => tracing::warn!(
                    "the HTTP transport has no authentication: all HTTP callers share one task scope \
                     (any caller can see and cancel any other caller's tasks); use --auth-config"
                ),
            }
            let server = serve_http(connector, options, shutdown.clone()).await?;
            // One line on stderr that scripts (and tests) can read the bound address from.
            eprintln!("durable-mcp-connector listening on {}", server.url);
            shutdown_signal().await?;
            tracing::info!("shutting down");
            shutdown.cancel();
            server.wait().await?;
        }
    }
    Ok(())
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

/// Reads `--auth-config`; inbound auth exists only for HTTP.
fn load_auth_config(path: &std::path::Path, http: bool) -> anyhow::Result<AuthConfig> {
    anyhow::ensure!(
        http,
        "--auth-config needs --transport http (stdio has no inbound authentication)"
    );
    Ok(AuthConfig::load(path)?)
}

/// With inbound OAuth, every tool family needs its scope: a family left out would be open to
/// every token the issuer signs (R-OPS-5).
fn missing_family_scopes(scopes: Option<&FamilyScopes>) -> Result<(), String> {
    let missing = scopes.cloned().unwrap_or_default().missing();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--temporal-tools with --auth-config needs an OAuth scope for every tool family; \
         --temporal-tools-scopes does not name {}. Give all three, e.g. \
         --temporal-tools-scopes read=temporal.read,write=temporal.write,admin=temporal.admin",
        missing.join(", ")
    ))
}

/// The codec client of `--codec-endpoint` and `--codec-auth`, if any (R-CON-8).
fn remote_codec(
    cli: &ConnectorFlags,
) -> anyhow::Result<Option<durable_mcp_runtime::temporal::codec::RemoteCodec>> {
    use durable_mcp_runtime::temporal::codec::{CodecOptions, RemoteCodec};
    let Some(endpoint) = &cli.codec_endpoint else {
        return Ok(None);
    };
    let options = CodecOptions {
        headers: cli
            .codec_auth
            .iter()
            .map(|v| ("Authorization".to_owned(), v.clone()))
            .collect(),
        ..Default::default()
    };
    Ok(Some(RemoteCodec::with_options(endpoint, "", options)?))
}

/// The Temporal operations toolset (R-OPS-1..5) on the connector's connection and codec.
fn temporal_toolset(
    connection: &temporalio_client::Connection,
    namespace: &str,
    allowed: Option<&str>,
    codec: Option<durable_mcp_runtime::temporal::codec::RemoteCodec>,
    scopes: FamilyScopes,
) -> anyhow::Result<std::sync::Arc<dyn durable_mcp_connector::local::LocalTools>> {
    let policy = match allowed {
        Some(list) => NamespacePolicy::parse(list, namespace)?,
        None => NamespacePolicy::default_only(namespace),
    };
    Ok(std::sync::Arc::new(
        TemporalToolset::new(connection.clone(), namespace, policy, codec).with_scopes(scopes),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_durations_and_counts_are_startup_errors_naming_the_flag() {
        let parse = |args: &[&str]| {
            ConnectorFlags::try_parse_from(
                [
                    "durable-mcp-connector",
                    "--route",
                    "{service: s, endpoint: e}",
                ]
                .iter()
                .chain(args),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse(&["--default-timeout", "10m"]), Ok(()));
        for (flag, value) in [
            ("--default-timeout", "1000000years"),
            ("--default-timeout", "0s"),
            ("--task-after", "2days"),
            ("--list-cache", "5years"),
            ("--shutdown-grace", "99999h"),
            ("--http-header-timeout", "0s"),
            ("--default-timeout", "soon"),
        ] {
            let err = parse(&[flag, value]).unwrap_err();
            assert!(err.contains(flag), "{flag} {value}: {err}");
        }
        for flag in [
            "--max-in-flight",
            "--max-sessions-per-caller",
            "--http-max-connections",
        ] {
            let err = parse(&[flag, "0"]).unwrap_err();
            assert!(err.contains(flag) && err.contains("at least 1"), "{err}");
            let err = parse(&[flag, &usize::MAX.to_string()]).unwrap_err();
            assert!(err.contains(flag) && err.contains("at most"), "{err}");
        }
    }
}
