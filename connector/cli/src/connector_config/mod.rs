//! What `durable-mcp-connector`'s flags mean together: each rule a function of the flags (and,
//! once connected, of the namespace), its error worded for the operator and naming the flag.
//!
//! [`ConnectorFlags`] are the flags as clap reads them ([`flags`], with the value parsers in
//! [`values`]). The binary parses them, runs [`check_flags`] and [`signing_keys_from_env`]
//! before it reaches Temporal, then builds the connector from [`connector_options`],
//! [`namespace_policy`] and [`temporal_toolset`], and the HTTP listener from [`http_options`].

pub mod flags;
pub mod values;

use std::{path::Path, sync::Arc};

use durable_mcp_connector::{
    auth::AuthConfig,
    http::HttpOptions,
    listener::{ConnectionLimits, default_per_address},
    local::LocalTools,
    route::check_routes,
    server::ConnectorOptions,
    task_ref::{CallerScope, PREVIOUS_KEYS_ENV, SIGNING_KEY_ENV, SigningKey},
    temporal_tools::{FamilyScopes, NamespacePolicy, PolicyError, TemporalToolset},
};
use durable_mcp_runtime::temporal::codec::{CodecConfigError, CodecOptions, RemoteCodec};

pub use flags::{ConnectorFlags, Transport};

/// The key that signs task IDs, and the earlier keys that still verify them (R-CON-18).
pub type SigningKeys = (SigningKey, Vec<SigningKey>);

/// The flags once every check that needs no connection has passed.
pub struct CheckedFlags {
    pub flags: ConnectorFlags,
    /// `--auth-config`, read and checked.
    pub auth: Option<AuthConfig>,
    /// The MCP endpoint's path over HTTP: `--http-path`, the path of auth.resource, or `/mcp`.
    pub http_path: String,
    /// The client of `--codec-endpoint`, for no namespace yet (R-CON-8).
    pub codec: Option<RemoteCodec>,
}

/// Every check that needs no connection, in the order an operator meets them: the auth file,
/// the MCP path, the codec URL, the routes, the listening address, the Temporal tools' scopes.
pub fn check_flags(flags: ConnectorFlags) -> anyhow::Result<CheckedFlags> {
    let auth = match &flags.auth_config {
        Some(path) => Some(load_auth_config(path, flags.transport)?),
        None => None,
    };
    let http_path = http_path(
        auth.as_ref().map(AuthConfig::mcp_path),
        flags.http_path.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    // Fail on a bad codec URL before connecting to anything; the namespace is set later.
    let codec = remote_codec(flags.codec_endpoint.as_deref(), flags.codec_auth.as_deref())?;
    if !flags.routes.is_empty() {
        check_routes(&flags.routes)?;
    }
    check_exposure(&flags, auth.is_some()).map_err(anyhow::Error::msg)?;
    check_family_scopes(&flags, auth.is_some()).map_err(anyhow::Error::msg)?;
    check_unauthenticated_decode(&flags, auth.is_some()).map_err(anyhow::Error::msg)?;
    Ok(CheckedFlags {
        flags,
        auth,
        http_path,
        codec,
    })
}

/// Inbound auth exists only for HTTP.
pub fn auth_needs_http(transport: Transport) -> Result<(), String> {
    match transport {
        Transport::Http => Ok(()),
        Transport::Stdio => {
            Err("--auth-config needs --transport http (stdio has no inbound authentication)".into())
        }
    }
}

/// Reads `--auth-config`; inbound auth exists only for HTTP.
pub fn load_auth_config(path: &Path, transport: Transport) -> anyhow::Result<AuthConfig> {
    auth_needs_http(transport).map_err(anyhow::Error::msg)?;
    Ok(AuthConfig::load(path)?)
}

/// The MCP endpoint's path: with `--auth-config` the path of its `resource` (`--http-path`
/// may only repeat it), else `--http-path`, else `/mcp`. A path the router cannot serve is
/// refused, naming where it came from.
pub fn http_path(auth_path: Option<&str>, flag: Option<&str>) -> Result<String, String> {
    let path = match (auth_path, flag) {
        (Some(a), Some(p)) if p != a => {
            return Err(format!(
                "--http-path {p:?} differs from the path of auth.resource ({a:?}); drop \
                 --http-path or make them agree"
            ));
        }
        (Some(a), _) => a.to_owned(),
        (None, Some(p)) => p.to_owned(),
        (None, None) => "/mcp".to_owned(),
    };
    match durable_mcp_connector::http::check_mcp_path(&path) {
        Ok(()) => Ok(path),
        Err(e) if flag.is_some() => Err(format!("--http-path: {e}")),
        Err(e) => Err(format!("the path of auth.resource in --auth-config: {e}")),
    }
}

/// The codec client of `--codec-endpoint` and `--codec-auth`, if any (R-CON-8).
pub fn remote_codec(
    endpoint: Option<&str>,
    auth: Option<&str>,
) -> Result<Option<RemoteCodec>, CodecConfigError> {
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let options = CodecOptions {
        headers: auth
            .iter()
            .map(|v| ("Authorization".to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };
    Ok(Some(RemoteCodec::with_options(endpoint, "", options)?))
}

/// Over HTTP without authentication, only a loopback address, unless
/// `--allow-unauthenticated` (R-CON-14). Stdio listens nowhere.
pub fn check_exposure(flags: &ConnectorFlags, authenticated: bool) -> Result<(), String> {
    match flags.transport {
        Transport::Http => durable_mcp_connector::http::check_exposure(
            &flags.addr,
            authenticated,
            flags.allow_unauthenticated,
        ),
        Transport::Stdio => Ok(()),
    }
}

/// With inbound OAuth, every Temporal tool family needs its scope (R-OPS-5), and decoding
/// needs the decode scope (R-OPS-7).
pub fn check_family_scopes(flags: &ConnectorFlags, authenticated: bool) -> Result<(), String> {
    if flags.temporal_tools && authenticated {
        missing_family_scopes(flags.temporal_tools_scopes.as_ref())?;
        let decode = flags
            .temporal_tools_scopes
            .as_ref()
            .and_then(|s| s.decode.as_ref());
        if flags.temporal_tools_decode && decode.is_none() {
            return Err(
                "--temporal-tools-decode with --auth-config needs the OAuth scope that \
                        may read decoded values: add decode=SCOPE to --temporal-tools-scopes, \
                        e.g. decode=temporal.decode"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Decoding over HTTP without auth hands every local process the namespace's plaintext, so it
/// needs `--temporal-tools-unauthenticated-decode` too (R-OPS-9); over stdio only the host
/// that started the connector calls it, and with `--auth-config` the decode scope guards it.
pub fn check_unauthenticated_decode(
    flags: &ConnectorFlags,
    authenticated: bool,
) -> Result<(), String> {
    let open = flags.transport == Transport::Http && !authenticated;
    if open && flags.temporal_tools_decode && !flags.temporal_tools_unauthenticated_decode {
        return Err(
            "--temporal-tools-decode over --transport http without --auth-config shows every \
             value of the namespace in plaintext to every process that can reach the address: \
             add --auth-config (with decode=SCOPE in --temporal-tools-scopes), or \
             --temporal-tools-unauthenticated-decode to decode for them anyway"
                .into(),
        );
    }
    Ok(())
}

/// Whether the Temporal tools that change state are served (R-OPS-9): always with
/// `--auth-config` (scopes guard them) and over stdio (only the host that started the
/// connector speaks to it); over HTTP without auth, where every local process can call, only
/// with `--temporal-tools-unauthenticated-writes`.
pub fn serves_temporal_writes(flags: &ConnectorFlags, authenticated: bool) -> bool {
    authenticated
        || flags.transport == Transport::Stdio
        || flags.temporal_tools_unauthenticated_writes
}

/// With inbound OAuth, every tool family needs its scope: a family left out would be open to
/// every token the issuer signs (R-OPS-5).
pub fn missing_family_scopes(scopes: Option<&FamilyScopes>) -> Result<(), String> {
    let missing = scopes.cloned().unwrap_or_else(FamilyScopes::none).missing();
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

/// Task IDs are signed with MCP_TASK_SIGNING_KEY, read before connecting to anything (see
/// [`signing_keys`]).
pub fn signing_keys_from_env(transport: Transport) -> anyhow::Result<Option<SigningKeys>> {
    let previous = SigningKey::previous_from_env()?;
    let current = SigningKey::from_env()?;
    signing_keys(current, previous, transport).map_err(anyhow::Error::msg)
}

/// HTTP needs a signing key (replicas and restarts must verify each other's task IDs); stdio
/// without one gets a process-local key (`None`). Previous keys (R-CON-18) only make sense
/// beside a current one.
pub fn signing_keys(
    current: Option<SigningKey>,
    previous: Vec<SigningKey>,
    transport: Transport,
) -> Result<Option<SigningKeys>, String> {
    match (current, transport) {
        (Some(key), _) => Ok(Some((key, previous))),
        (None, Transport::Http) => Err(format!(
            "--transport http needs {SIGNING_KEY_ENV}: at least 32 random bytes, base64 (for example `openssl rand -base64 32`)"
        )),
        (None, Transport::Stdio) if !previous.is_empty() => Err(format!(
            "{PREVIOUS_KEYS_ENV} is set but {SIGNING_KEY_ENV} is not: previous keys only verify task IDs beside a current key; set {SIGNING_KEY_ENV} too"
        )),
        (None, Transport::Stdio) => Ok(None),
    }
}

/// The namespaces the Temporal tools may use (R-OPS-2), when `--temporal-tools` serves them:
/// `--allowed-namespaces`, else only the connection's `namespace`.
pub fn namespace_policy(
    flags: &ConnectorFlags,
    namespace: &str,
) -> Result<Option<NamespacePolicy>, PolicyError> {
    if !flags.temporal_tools {
        return Ok(None);
    }
    match &flags.allowed_namespaces {
        Some(list) => NamespacePolicy::parse(list, namespace).map(Some),
        None => Ok(Some(NamespacePolicy::default_only(namespace))),
    }
}

/// How the connector names, times and signs its operations, and whose tasks they are.
pub fn connector_options(
    flags: &ConnectorFlags,
    verified_callers: bool,
    signing: Option<SigningKeys>,
) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(flags.routes.clone());
    options.connector_name = flags.connector_name.clone();
    if let Some(prefix) = &flags.operation_id_prefix {
        options.operation_id_prefix = prefix.clone();
    }
    options.default_timeout = flags.default_timeout;
    options.list_cache = flags.list_cache;
    options.list_changed_poll = flags.list_changed_poll;
    options.resource_poll = flags.resource_poll;
    options.max_in_flight = flags.max_in_flight;
    // One stdio client is one caller: its share is the whole connector.
    options.max_in_flight_per_caller = match flags.transport {
        Transport::Stdio => 0,
        Transport::Http => flags.max_in_flight_per_caller,
    };
    options.max_call_starts_per_caller_minute = match flags.transport {
        Transport::Stdio => 0,
        Transport::Http => flags.max_call_starts_per_caller_minute,
    };
    options.task_after = flags.task_after;
    options.input_timeout = flags.input_timeout;
    options.companion_tools = flags.companion_tools;
    options.require_verified_caller = verified_callers;
    options.caller_scope = anonymous_scope(flags.anonymous_scope.as_deref(), flags.transport);
    if let Some((key, previous)) = signing {
        options.signing_key = key;
        options.previous_signing_keys = previous;
    }
    options
}

/// The scope callers without authentication share: `--anonymous-scope`, else the transport.
pub fn anonymous_scope(name: Option<&str>, transport: Transport) -> CallerScope {
    let default = match transport {
        Transport::Stdio => "stdio",
        Transport::Http => "http",
    };
    CallerScope::Unauthenticated(name.unwrap_or(default).to_owned())
}

/// The Temporal operations toolset (R-OPS-1..5) on the connector's connection and codec, when
/// [`namespace_policy`] gave a policy (`--temporal-tools`).
pub fn temporal_toolset(
    flags: &ConnectorFlags,
    policy: Option<NamespacePolicy>,
    connection: &temporalio_client::Connection,
    namespace: &str,
    codec: Option<RemoteCodec>,
) -> Option<Arc<dyn LocalTools>> {
    let policy = policy?;
    let mut tools = TemporalToolset::new(connection.clone(), namespace, policy, codec);
    if let Some(scopes) = flags.temporal_tools_scopes.clone() {
        tools = tools.with_scopes(scopes);
    }
    if flags.temporal_tools_decode {
        tools = tools.with_decoding();
    }
    if !serves_temporal_writes(flags, flags.auth_config.is_some()) {
        tracing::warn!(
            "--temporal-tools over HTTP without --auth-config: serving only the read tools \
             (--temporal-tools-unauthenticated-writes serves the others to every local process)"
        );
        tools = tools.read_only();
    }
    Some(Arc::new(tools) as Arc<dyn LocalTools>)
}

/// Whether to list the routed tools at start to report names taken by the Temporal tools:
/// only when both are served.
pub fn checks_routed_tool_names(flags: &ConnectorFlags) -> bool {
    flags.temporal_tools && !flags.routes.is_empty()
}

/// Where and how the HTTP transport listens; the authenticator of `auth` is the caller's to
/// add (it fetches keys).
pub fn http_options(
    flags: &ConnectorFlags,
    http_path: String,
    auth: Option<&AuthConfig>,
) -> HttpOptions {
    let mut options = HttpOptions::new(flags.addr);
    options.allowed_hosts = flags.allowed_hosts.clone();
    options.allowed_hosts.extend(auth.and_then(public_host));
    options.path = http_path;
    options.shutdown_grace = flags.shutdown_grace;
    options.limits = ConnectionLimits {
        header_read: flags.http_header_timeout,
        max_connections: flags.http_max_connections,
        max_per_address: flags
            .http_max_connections_per_address
            .unwrap_or(default_per_address(flags.http_max_connections)),
        first_request: flags.http_first_request_timeout,
        proven_by_verified_caller: auth.is_some(),
    };
    options.sessions_per_address = flags.max_sessions_per_caller;
    options.requests_per_session_minute = flags.max_requests_per_session_minute;
    options.replays.per_caller_bytes = flags.max_answer_mib_per_caller << 20;
    options.trusted_proxies = durable_mcp_connector::forwarded::TrustedProxies::new(
        flags.trusted_proxies.clone(),
        flags.trusted_proxy_header,
    );
    options
}

/// The public host of auth.resource (`name` or `name:port`): it reaches the connector through a
/// reverse proxy under its own name.
pub fn public_host(auth: &AuthConfig) -> Option<String> {
    let host = auth.resource.host_str()?;
    Some(match auth.resource.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

#[cfg(test)]
mod tests;
