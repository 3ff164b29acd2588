//! `durable-mcp-connector`: an MCP server whose tools are Temporal Nexus operations.

use std::{net::SocketAddr, time::Duration};

use clap::{Parser, ValueEnum};
use durable_mcp_connector::temporal_tools::{FamilyScopes, NamespacePolicy, TemporalToolset};
use durable_mcp_connector::{
    auth::{AuthConfig, Authenticator},
    http::{HttpOptions, serve_http},
    route::{Route, check_routes, parse_route},
    server::{Connector, ConnectorOptions},
    task_ref::CallerScope,
};
use durable_mcp_runtime::nexus::OperationClient;
use durable_mcp_runtime::temporal;
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
    /// '{service: my-tools, endpoint: my-tools-endpoint}'. Repeat for more routes. Required
    /// unless --temporal-tools is given.
    #[arg(long = "route", value_name = "ROUTE", required_unless_present = "temporal_tools", value_parser = parse_route_arg)]
    routes: Vec<Route>,
    /// Also serve the Temporal operations tools (start_workflow, list_workflows, signal, cancel,
    /// batch operations, schedules, ...): management tools that call Temporal directly with
    /// the connector's connection, not durable operations. A routed tool with one of their
    /// names is refused at start.
    #[arg(long)]
    temporal_tools: bool,
    /// With --temporal-tools: the namespaces the tools may use besides the connection's own,
    /// as a comma list (it must include the connection's namespace) or `*` for any
    /// [default: only the connection's namespace].
    #[arg(long, value_name = "LIST", requires = "temporal_tools")]
    allowed_namespaces: Option<String>,
    /// With --temporal-tools and --auth-config (then required, all three families): the OAuth
    /// scope a token must carry for each family of those tools, e.g.
    /// `read=temporal.read,write=temporal.write,admin=temporal.admin` (admin: terminate, batch
    /// terminate, delete schedule; write: the other changes; the batch tools also need read).
    /// A caller without the scope gets an `InsufficientScope` tool error and nothing is sent to
    /// Temporal.
    #[arg(long, value_name = "FAMILY=SCOPE,...", requires_all = ["temporal_tools", "auth_config"], value_parser = FamilyScopes::parse)]
    temporal_tools_scopes: Option<FamilyScopes>,
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
    #[arg(long, default_value = "5m", value_parser = |s: &str| duration_within(s, Duration::from_secs(1), MAX_TOOL_TIMEOUT))]
    default_timeout: Duration,
    /// How long a route's tool listing is reused before `tools/list`, or a call of a tool the
    /// connector does not know, asks the route again, e.g. "5s" ("0s" asks every time). Each
    /// ask is one persisted Nexus operation per route.
    #[arg(long, default_value = "5s", value_parser = |s: &str| duration_within(s, Duration::ZERO, HOUR))]
    list_cache: Duration,
    /// How many Temporal operations (tool calls being waited for, listings) the connector
    /// holds at once. Past it, a call is refused with an error naming this limit and nothing
    /// is started; a call that became a task no longer counts.
    #[arg(long, default_value_t = durable_mcp_connector::server::DEFAULT_MAX_IN_FLIGHT, value_parser = parse_positive)]
    max_in_flight: usize,
    /// URL of a remote codec server (`/encode`, `/decode`, `X-Namespace`), when the Nexus
    /// handlers encode payloads (for example to encrypt them). Must match their codec (the
    /// proxy's [codec] table). https, or plain http to a loopback address only.
    #[arg(long, value_name = "URL")]
    codec_endpoint: Option<String>,
    /// Authorization header value for the codec server (e.g. "Bearer ..."); read it from the
    /// environment rather than the command line, which other users can see.
    #[arg(
        long,
        value_name = "VALUE",
        env = "TEMPORAL_CODEC_AUTH",
        hide_env_values = true,
        requires = "codec_endpoint"
    )]
    codec_auth: Option<String>,
    /// YAML file with inbound OAuth resource-server settings (needs --transport http): the
    /// public resource URL (its path is the MCP path), the trusted issuer, the audience and
    /// required scopes. Every MCP request then needs a bearer token from that issuer, and
    /// tasks are scoped to the token's issuer and subject. See examples/inbound_auth.yaml.
    #[arg(long, value_name = "FILE")]
    auth_config: Option<std::path::PathBuf>,
    /// How long a task-capable client waits before a call becomes an MCP task, e.g. "2s".
    /// Clients without the tasks extension wait until the call completes.
    #[arg(long, default_value = "2s", value_parser = |s: &str| duration_within(s, Duration::ZERO, HOUR))]
    task_after: Duration,
    /// Add three tools, task_status, task_result and task_cancel, for MCP hosts without the
    /// tasks extension (many give up on a call after about a minute): such a host's call still
    /// running at --task-after answers with a text result carrying a signed task ID, which the
    /// three tools follow. Same signing and caller scoping as MCP tasks.
    #[arg(long)]
    companion_tools: bool,
    /// With `--transport http`: the address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// With `--transport http`: a `Host` header value to accept beyond loopback (`name` or
    /// `name:port`), for deployments behind a real hostname. Repeatable. Browser `Origin`s
    /// naming these hosts are accepted too.
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// With `--transport http`: the MCP endpoint's path [default: /mcp, or with --auth-config
    /// the path of auth.resource].
    #[arg(long)]
    http_path: Option<String>,
    /// With `--transport http` and no `--auth-config`: serve on an address that is not
    /// loopback anyway. Only for deployments where something in front of the connector
    /// authenticates every caller; without it such an address is refused at startup.
    #[arg(long)]
    allow_unauthenticated: bool,
    /// With --auth-config: the most MCP sessions one caller (token subject) may hold at once;
    /// opening one more closes that caller's longest idle session, so one token cannot fill
    /// the connector's memory with sessions.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::auth::MAX_SESSIONS_PER_CALLER, value_parser = parse_positive)]
    max_sessions_per_caller: usize,
    /// Without authentication, callers share one task and idempotency scope per name: this
    /// name [default: the transport, "stdio" or "http"]. Deployments that must not see each
    /// other's tasks (and share a signing key and connector name) need different names.
    #[arg(long, value_name = "NAME")]
    anonymous_scope: Option<String>,
    /// With `--transport http`: how long a shutdown (SIGINT/SIGTERM) waits for in-flight
    /// requests; operations still running afterwards keep running in Temporal.
    #[arg(long, default_value = "5s", value_parser = |s: &str| duration_within(s, Duration::ZERO, HOUR))]
    shutdown_grace: Duration,
    /// With `--transport http`: how long a connection may take to send a request's headers,
    /// and how long a keep-alive connection may sit idle between requests, before it is closed
    /// (stalled and slowloris clients cannot hold connections). Response streams are not cut.
    #[arg(long, default_value = "30s", value_parser = |s: &str| duration_within(s, Duration::from_secs(1), HOUR))]
    http_header_timeout: Duration,
    /// With `--transport http`: how many connections are served at once; more wait until one
    /// closes.
    #[arg(long, default_value_t = durable_mcp_connector::listener::DEFAULT_MAX_CONNECTIONS, value_parser = parse_positive)]
    http_max_connections: usize,
    /// With `--transport http`: how many of those connections one IP address may hold, so one
    /// client cannot take them all; more get a 503 and are closed. 0 for no such cap, e.g.
    /// behind a reverse proxy that brings every client from one address.
    #[arg(long, default_value_t = durable_mcp_connector::listener::DEFAULT_MAX_PER_ADDRESS, value_parser = parse_count_or_zero)]
    http_max_connections_per_address: usize,
}

/// The longest `--default-timeout`: a year (Temporal's own limits are far above any tool's).
const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);

/// A duration (`30s`, `5m`, `2h`) between `min` and `max`; clap names the flag in its error.
fn duration_within(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{e}; write it like 30s, 5m or 2h"))?;
    if d < min || d > max {
        return Err(format!(
            "must be between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

#[derive(Clone, Copy, ValueEnum)]
enum Transport {
    /// MCP over stdin/stdout (for an MCP host's `mcpServers` entry).
    Stdio,
    /// MCP over Streamable HTTP at `--addr` (sessions for older clients, stateless 2026-07-28).
    Http,
}

/// The largest count a flag takes: far above any deployment, and below what a semaphore holds
/// (a larger `--max-in-flight` or `--http-max-connections` made the connector panic).
const MAX_COUNT: usize = 1_000_000_000;

/// A count of at least 1, at most [`MAX_COUNT`].
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > MAX_COUNT => Err(format!("must be at most {MAX_COUNT}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

/// A count that may be 0 (no cap), at most the same bound as [`parse_positive`].
fn parse_count_or_zero(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Ok(0),
        _ => parse_positive(s),
    }
}

fn parse_route_arg(s: &str) -> Result<Route, String> {
    parse_route(s).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout is the MCP channel: logs go to stderr, without MCP message contents (R-CON-33).
    durable_mcp_cli::logs::init_stderr_logging("warn");
    let cli = Cli::parse();
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
    cli: &Cli,
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
            Cli::try_parse_from(
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
