//! The connector's flags, as clap reads them: names, defaults, environment variables, help text
//! and the rules clap itself enforces (which flag needs which). What the values mean together is
//! decided in [`super`].

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Parser, ValueEnum};
use durable_mcp_connector::route::Route;
use durable_mcp_connector::temporal_tools::FamilyScopes;

use super::values;

/// An MCP server whose tools are Temporal Nexus operations. `tools/list` asks each route's
/// Nexus service (its `list_tools` operation); `tools/call` starts a standalone Nexus operation
/// named by the tool and waits for it.
///
/// The Temporal connection comes from the connection flags below, then Temporal's environment
/// configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS variables,
/// TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE (a temporal.toml).
// The doc comments are the help text: clap prints them as written, so `[codec]` and
// `[default: ...]` are not links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Parser)]
#[command(name = "durable-mcp-connector", version)]
pub struct ConnectorFlags {
    #[command(flatten)]
    pub temporal: crate::temporal_flags::TemporalFlags,
    /// How log lines (on stderr) are written: text, or json (one object a line).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: crate::logs::LogFormat,
    /// Serve Prometheus metrics at /metrics on this address (R-RUN-6); off when not given.
    /// No token: listen where only the scraper reaches.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Export spans over OTLP/gRPC to this collector URL (e.g. http://localhost:4317,
    /// R-RUN-9); else OTEL_EXPORTER_OTLP_ENDPOINT; no spans are exported when neither is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// One Nexus service/endpoint route, as a YAML flow map or JSON object:
    /// '{service: my-tools, endpoint: my-tools-endpoint}'. Repeat for more routes. Required
    /// unless --temporal-tools is given. Any of its tools may become a task after
    /// --task-after, whatever its upstream lists; `synchronous: true` (every tool) or
    /// `synchronous: [TOOL, ...]` keeps tools synchronous, and `task_support: mirror` lets the
    /// upstream's own execution.taskSupport decide (absent means forbidden) instead of the
    /// default `task_support: connector`.
    #[arg(long = "route", value_name = "ROUTE", required_unless_present = "temporal_tools", value_parser = values::parse_route_arg)]
    pub routes: Vec<Route>,
    /// Also serve the Temporal operations tools (start_workflow, list_workflows, signal, cancel,
    /// batch operations, schedules, ...): management tools that call Temporal directly with
    /// the connector's connection, not durable operations. A routed tool with one of their
    /// names is refused at start.
    #[arg(long)]
    pub temporal_tools: bool,
    /// With --temporal-tools: the namespaces the tools may use besides the connection's own,
    /// as a comma list (it must include the connection's namespace) or `*` for any
    /// [default: only the connection's namespace].
    #[arg(long, value_name = "LIST", requires = "temporal_tools")]
    pub allowed_namespaces: Option<String>,
    /// With --temporal-tools and --auth-config (then required, all three families): the OAuth
    /// scope a token must carry for each family of those tools, e.g.
    /// `read=temporal.read,write=temporal.write,admin=temporal.admin` (admin: terminate, batch
    /// terminate, delete schedule; write: the other changes; the batch tools also need read).
    /// A caller without the scope gets an `InsufficientScope` tool error and nothing is sent to
    /// Temporal.
    /// With --temporal-tools-decode, `decode=SCOPE` names the scope the tools that show
    /// decoded values need besides read.
    #[arg(long, value_name = "FAMILY=SCOPE,...", requires_all = ["temporal_tools", "auth_config"], value_parser = FamilyScopes::parse)]
    pub temporal_tools_scopes: Option<FamilyScopes>,
    /// With --temporal-tools and --codec-endpoint: also decode the values the tools show
    /// (results, inputs, query answers, failures) through the codec. Off by default: whoever
    /// can call those tools then reads every value of the namespace in plaintext, including
    /// ciphertext a Temporal user without codec access copied into a Workflow of their own.
    /// With --auth-config it needs a `decode=SCOPE` in --temporal-tools-scopes.
    #[arg(long, requires_all = ["temporal_tools", "codec_endpoint"])]
    pub temporal_tools_decode: bool,
    /// With --temporal-tools over --transport http without --auth-config: also serve the tools
    /// that change or destroy Temporal state (start, signal, cancel, terminate, batch,
    /// schedules) to every process that can reach the address. Without it only the read tools
    /// are served there.
    #[arg(long, requires = "temporal_tools", conflicts_with = "auth_config")]
    pub temporal_tools_unauthenticated_writes: bool,
    /// With --temporal-tools-decode over --transport http without --auth-config: decode anyway,
    /// so every process that can reach the address reads the namespace's values in plaintext.
    /// Without it the connector refuses to start there.
    #[arg(
        long,
        requires = "temporal_tools_decode",
        conflicts_with = "auth_config"
    )]
    pub temporal_tools_unauthenticated_decode: bool,
    /// How MCP clients reach the connector.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    pub transport: Transport,
    /// Logical deployment name, shared by replicas and included in operation ids.
    #[arg(long, default_value = "durable-mcp")]
    pub connector_name: String,
    /// Override the operation-id part after the connector name (naming and visibility only;
    /// at most 32 bytes, since task IDs carry it).
    #[arg(long, value_parser = values::operation_id_prefix)]
    pub operation_id_prefix: Option<String>,
    /// Timeout for tools whose listing carries none, e.g. "5m".
    #[arg(long, default_value = "5m", value_parser = values::tool_timeout)]
    pub default_timeout: Duration,
    /// How long a route's tool listing is reused before `tools/list`, or a call of a tool the
    /// connector does not know, asks the route again, e.g. "5s" ("0s" asks every time). Each
    /// ask is one persisted Nexus operation per route.
    #[arg(long, default_value = "5s", value_parser = values::up_to_an_hour)]
    pub list_cache: Duration,
    /// How often, while a caller listens for list changes (a session, or a
    /// `subscriptions/listen` stream), the connector re-lists every route's tools, resources and
    /// prompts on its own to notice changes, e.g. "60s" (at least 1 s). Each re-listing is one
    /// persisted Nexus operation per route and list on every replica. "0s" turns it off:
    /// changes then reach callers only when a listing happens for another reason.
    #[arg(long, default_value = "60s", value_parser = values::up_to_an_hour)]
    pub list_changed_poll: Duration,
    /// How often, while a caller subscribes to a resource (`resources/subscribe`, or a
    /// `subscriptions/listen` stream's `resourceSubscriptions`), the connector asks each route
    /// the versions of its subscribed resources, e.g. "5s" (at least 1 s). Each ask is one
    /// persisted Nexus operation per route on every replica. "0s" serves no subscriptions.
    #[arg(long, default_value = "5s", value_parser = values::up_to_an_hour)]
    pub resource_poll: Duration,
    /// How many Temporal operations (tool calls being waited for, listings) the connector
    /// holds at once. Past it, a call is refused with an error naming this limit and nothing
    /// is started; a call that became a task no longer counts.
    #[arg(long, default_value_t = durable_mcp_connector::server::DEFAULT_MAX_IN_FLIGHT, value_parser = values::parse_positive)]
    pub max_in_flight: usize,
    /// How many of those, together with calls of the Temporal tools and companion tools and
    /// `tasks/get`/`tasks/cancel` look-ups, one caller holds at once (with --auth-config a
    /// token subject, else one address, an IPv6 one by its /64), so one caller cannot take
    /// every slot. Past it, that caller's request is refused with an error naming this limit;
    /// other callers are served. 0 for no such cap.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::server::DEFAULT_MAX_IN_FLIGHT_PER_CALLER, value_parser = values::parse_count_or_zero)]
    pub max_in_flight_per_caller: usize,
    /// With `--transport http`: how many tool calls one caller (token subject, else address)
    /// may start a minute, a minute's worth at once (in memory, per connector replica). A call
    /// that becomes a task no longer counts in flight, so this bounds what one caller can
    /// leave running in Temporal. Past it, that caller's call is refused with an error naming
    /// this limit and nothing is started. 0 for no such cap.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::server::DEFAULT_MAX_CALL_STARTS_PER_CALLER_MINUTE, value_parser = values::parse_count_or_zero)]
    pub max_call_starts_per_caller_minute: usize,
    /// With `--transport http`: how many MiB of answers (the memory they hold) the connector keeps for one
    /// caller (token subject, else address) so that a session's lost event stream can be
    /// resumed with the answers as the tool service wrote them. Past it, that caller's oldest
    /// kept answers are dropped (a resumed stream then carries the typed copy); nothing is
    /// refused.
    #[arg(long, value_name = "MIB", default_value_t = durable_mcp_connector::as_written_http::DEFAULT_ANSWER_BYTES_PER_CALLER >> 20, value_parser = values::parse_positive)]
    pub max_answer_mib_per_caller: usize,
    /// URL of a remote codec server (`/encode`, `/decode`, `X-Namespace`), when the Nexus
    /// handlers encode payloads (for example to encrypt them). Must match their codec (the
    /// proxy's [codec] table). https, or plain http to a loopback address only.
    #[arg(long, value_name = "URL")]
    pub codec_endpoint: Option<String>,
    /// Authorization header value for the codec server (e.g. "Bearer ..."); read it from the
    /// environment rather than the command line, which other users can see.
    #[arg(
        long,
        value_name = "VALUE",
        env = "TEMPORAL_CODEC_AUTH",
        hide_env_values = true,
        requires = "codec_endpoint"
    )]
    pub codec_auth: Option<String>,
    /// YAML file with inbound OAuth resource-server settings (needs --transport http): the
    /// public resource URL (its path is the MCP path), the trusted issuer, the audience and
    /// required scopes. Every MCP request then needs a bearer token from that issuer, and
    /// tasks are scoped to the token's issuer and subject. See examples/inbound_auth.yaml.
    #[arg(long, value_name = "FILE")]
    pub auth_config: Option<PathBuf>,
    /// How long a task-capable client waits before a call becomes an MCP task, e.g. "2s"
    /// (a tool its route keeps synchronous never does). Clients without the tasks extension
    /// wait until the call completes.
    #[arg(long, default_value = "2s", value_parser = values::up_to_an_hour)]
    pub task_after: Duration,
    /// Add four tools, task_status, task_result, task_cancel and task_input, for MCP hosts
    /// without the tasks extension (many give up on a call after about a minute): such a host's
    /// call still running at --task-after answers with a text result carrying a signed task ID,
    /// which the tools follow (task_input answers what the tool asks). Same signing and caller
    /// scoping as MCP tasks.
    #[arg(long)]
    pub companion_tools: bool,
    /// How long a tool's request for input (an elicitation, a sampling or a roots request)
    /// waits for the caller's answer after the tool asked, e.g. "30m"; then the call ends
    /// with a tool error saying so. From a second to a year.
    #[arg(long, default_value = "24h", value_parser = values::tool_timeout)]
    pub input_timeout: Duration,
    /// With `--transport http`: the address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// With `--transport http`: a `Host` header value to accept beyond loopback (`name` or
    /// `name:port`), for deployments behind a real hostname. Repeatable. Browser `Origin`s
    /// naming these hosts are accepted too.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// With `--transport http`: the MCP endpoint's path [default: /mcp, or with --auth-config
    /// the path of auth.resource].
    #[arg(long)]
    pub http_path: Option<String>,
    /// With `--transport http` and no `--auth-config`: serve on an address that is not
    /// loopback anyway. Only for deployments where something in front of the connector
    /// authenticates every caller; without it such an address is refused at startup.
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// With `--transport http`: the most MCP sessions one caller (with --auth-config a token
    /// subject, else one address) may hold at once; opening one more closes that caller's
    /// longest idle session (none with a request or stream open), else is refused with 503,
    /// so one caller cannot fill the connector's memory with sessions or close another's.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::auth::MAX_SESSIONS_PER_CALLER, value_parser = values::parse_positive)]
    pub max_sessions_per_caller: usize,
    /// With `--transport http`: how many requests one MCP session may send in a minute. Over
    /// it the session's request is answered with an error naming this flag and nothing is
    /// started; the session stays open. rmcp keeps every session request's events for a minute
    /// after it ends (for resumed streams), so this bounds that memory. 0 for no such cap.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::session_requests::DEFAULT_REQUESTS_PER_SESSION_MINUTE, value_parser = values::parse_count_or_zero)]
    pub max_requests_per_session_minute: usize,
    /// Without authentication, callers share one task and idempotency scope per name: this
    /// name [default: the transport, "stdio" or "http"]. Deployments that must not see each
    /// other's tasks (and share a signing key and connector name) need different names.
    #[arg(long, value_name = "NAME")]
    pub anonymous_scope: Option<String>,
    /// With `--transport http`: how long a shutdown (SIGINT/SIGTERM) waits for in-flight
    /// requests; operations still running afterwards keep running in Temporal.
    #[arg(long, default_value = "5s", value_parser = values::up_to_an_hour)]
    pub shutdown_grace: Duration,
    /// With `--transport http`: how long a connection may take to send a request's headers,
    /// and how long a keep-alive connection may sit idle between requests, before it is closed
    /// (stalled and slowloris clients cannot hold connections). Response streams are not cut.
    #[arg(long, default_value = "30s", value_parser = values::second_to_hour)]
    pub http_header_timeout: Duration,
    /// With `--transport http`: how long a new connection may take to send its first request's
    /// headers before it is closed (at most --http-header-timeout). Connections that have not
    /// yet carried a request (with --auth-config: a verified caller's) hold at most half of
    /// --http-max-connections; one more closes the oldest of them.
    #[arg(long, default_value = "5s", value_parser = values::second_to_hour)]
    pub http_first_request_timeout: Duration,
    /// With `--transport http`: how many connections are served at once; more wait until one
    /// closes.
    #[arg(long, default_value_t = durable_mcp_connector::listener::DEFAULT_MAX_CONNECTIONS, value_parser = values::parse_positive)]
    pub http_max_connections: usize,
    /// With `--transport http`: how many of those connections one IP address (an IPv6 one by
    /// its /64) may hold, so one client cannot take them all; more get a 503 and are closed.
    /// 0 for no such cap, e.g. behind a reverse proxy that brings every client from one
    /// address [default: a sixteenth of --http-max-connections, 64 of 1024].
    #[arg(long, value_name = "N", value_parser = values::parse_count_or_zero)]
    pub http_max_connections_per_address: Option<usize>,
    /// With `--transport http`: a reverse proxy (load balancer) in front of the connector, as
    /// a CIDR range or one address (10.0.0.0/8, 192.0.2.7, fd00::/8). Repeatable. A request
    /// from one of them counts, in every per-address share (connections, in-flight calls, call
    /// starts, sessions, kept answers), under the client address the proxy's
    /// --trusted-proxy-header names (its right-most address that is not a trusted proxy), and
    /// the proxy's own address holds no share; with --auth-config the shares are the token
    /// subject's, as always. A header from any other peer is ignored. Name only proxies that
    /// append the client's address: whoever connects from these ranges can name any client.
    #[arg(long = "trusted-proxy", value_name = "CIDR", value_parser = values::trusted_proxy)]
    pub trusted_proxies: Vec<durable_mcp_connector::forwarded::IpNet>,
    /// With --trusted-proxy: the header those proxies write the client's address into,
    /// x-forwarded-for or forwarded (RFC 7239). Only that header is read: a client can send
    /// the other through a proxy that does not rewrite it. A trusted proxy's request whose
    /// header names no IP address at the client's hop is answered 400.
    #[arg(long, value_name = "HEADER", default_value = "x-forwarded-for", value_parser = values::forwarded_header, requires = "trusted_proxies")]
    pub trusted_proxy_header: durable_mcp_connector::forwarded::ForwardedHeader,
    /// With --auth-config: how many connections may serve one caller (token subject) at once,
    /// whatever addresses they come from; a request on one more gets a 503 naming this flag
    /// and its connection is closed. 0 for no such cap.
    #[arg(long, value_name = "N", default_value_t = durable_mcp_connector::auth::DEFAULT_CONNECTIONS_PER_CALLER, value_parser = values::parse_count_or_zero)]
    pub http_max_connections_per_caller: usize,
}

/// How MCP clients reach the connector (`--transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// MCP over stdin/stdout (for an MCP host's `mcpServers` entry).
    Stdio,
    /// MCP over Streamable HTTP at `--addr` (sessions for older clients, stateless 2026-07-28).
    Http,
}
