//! The proxy's config file, `proxy.toml`.
//!
//! ```toml
//! [worker]
//! task_queue = "mcp-proxy"          # required
//! max_concurrent_calls = 100        # optional
//! max_watched_resources = 1000      # optional: resource URIs watched per upstream (R-PRX-36)
//!
//! [temporal]                        # optional; keys left out come from Temporal's environment
//! address = "localhost:7233"        # configuration (TEMPORAL_ADDRESS, temporal.toml profiles, ...)
//! namespace = "default"             # and the binary's flags (--address, ...) win over the table
//! # profile = "prod"                 # the temporal.toml profile to start from
//! # tls = true                       # on with any tls_* key (the API key: TEMPORAL_API_KEY)
//! # tls_ca = "/etc/temporal/ca.pem"
//! # tls_cert = "/etc/temporal/client.pem"
//! # tls_key = "/etc/temporal/client.key"
//! # tls_server_name = "temporal.internal"
//! # grpc_compression = "none"       # or "gzip" (the default; R-RUN-7)
//!
//! [codec]                           # optional: a remote codec server (R-PRX-20)
//! endpoint = "https://codec.example.com"   # https, or http to a loopback address
//! headers = { Authorization = "Bearer ${CODEC_TOKEN}" }
//! timeout = "10s"
//!
//! [traces]                         # optional: export spans over OTLP/gRPC (R-RUN-9)
//! otlp_endpoint = "http://localhost:4317"   # --otlp-endpoint wins; else OTEL_EXPORTER_OTLP_*
//!
//! [[upstream]]
//! service = "weather-tools"         # Nexus service name: required, unique, [A-Za-z0-9_.-]+
//! transport = "http"
//! url = "https://mcp.example.com/mcp"
//! headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
//! # allow_insecure_http = true      # only to send credentials over plain http off loopback
//! # unavailable_means_not_run = true # 503/429 prove a call never ran (no gateway in between)
//! # [upstream.oauth]                 # a bearer token from OAuth client credentials instead
//! # token_url = "https://auth.example.com/oauth/token"
//! # client_id = "durable-mcp"
//! # client_secret_env = "WEATHER_CLIENT_SECRET"   # the variable that holds the secret
//! # auth_method = "client_secret_post"  # or private_key_jwt with private_key_file
//! # scopes = ["tools:call"]
//! # audience = "https://mcp.example.com"
//! [upstream.activity_options]       # see `options::ActivityOptions`
//! start_to_close_timeout = "30s"
//! [upstream.overrides.get_forecast_report]   # per tool; only the keys given change
//! start_to_close_timeout = "48h"
//! retry_policy = { maximum_attempts = 3 }
//!
//! [[upstream]]
//! service = "files"
//! transport = "stdio"
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything", "stdio"]
//! env = { LOG_LEVEL = "warn" }     # the child's environment: these plus PATH, HOME, USER, ...
//! cwd = "/tmp"
//! # inherit_env = true              # pass the proxy's whole environment (and its secrets) too
//! # discover_wait = "3s"            # a legacy child that ignores server/discover: initialize after
//! ```
//!
//! ## Environment variables
//!
//! Keep secrets out of the file: `url`, `headers` values, `command`, `args`, `env` values and
//! `cwd` (and the `[codec]` and `[traces]` values) expand `${NAME}`, and `${NAME:-default}` (the default when `NAME` is unset or empty).
//! `$$` is a literal `$`; any other `$` is an error, so a forgotten brace is not sent as text.
//! A variable that is unset, with no default, is an error naming the field. Errors never show
//! an expanded value, and the `Debug` output of a transport shows `***` for header and `env`
//! values and for a URL's password and query. Command-line `args` are shown: they are visible
//! to every user of the machine in its process list anyway, so pass secrets through `env`.

mod codec;
mod expand;
mod oauth;
#[cfg(test)]
mod props;
mod redact;
#[cfg(test)]
mod tests;
mod traces;
mod upstream;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use url::Url;

use super::options::ActivityOptions;
pub use codec::CodecConfig;
use codec::{RawCodec, codec};
pub use oauth::{ClientAuth, ClientCredentials, ISSUER_REQUIRED, canonical_resource};
pub use redact::{UrlSecrets, redacted_url};
pub use traces::{OTLP_ENDPOINT_KEY, TracesSection};
use traces::{RawTraces, traces};
use upstream::{RawUpstream, upstream};

/// A loaded and validated `proxy.toml`, with environment variables expanded.
///
/// It has no `Deserialize`: [`parse`] is the only way in, so expansion and validation cannot be
/// skipped, and no `Serialize`, so the expanded secrets are not written anywhere.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub worker: WorkerSection,
    /// `None` when the file has no `[temporal]` table: Temporal's environment config is used.
    pub temporal: Option<TemporalSection>,
    /// `None` when the file has no `[codec]` table: payloads are stored as they are.
    pub codec: Option<CodecConfig>,
    /// The `[[upstream]]` tables, in file order; at least one.
    pub upstreams: Vec<UpstreamConfig>,
    /// `None` when the file has no `[health]` table: no health listener (R-RUN-5).
    pub health: Option<HealthSection>,
    /// `None` when the file has no `[metrics]` table: no metrics listener (R-RUN-6).
    pub metrics: Option<MetricsSection>,
    /// `None` when the file has no `[traces]` table: the flag or the environment say (R-RUN-9).
    pub traces: Option<TracesSection>,
}

/// `[metrics]`: where `durable-mcp-proxy` serves `/metrics` (R-RUN-6); `--metrics-addr`
/// overrides it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub addr: std::net::SocketAddr,
}

/// `[health]`: where `durable-mcp-proxy` serves `/healthz` and `/readyz` (R-RUN-5);
/// `--health-addr` overrides it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    pub addr: std::net::SocketAddr,
}

/// The largest `[worker] max_watched_resources`: the table's memory stays bounded.
pub const MAX_WATCHED_RESOURCES: usize = 100_000;

/// `[worker]`: the worker that hosts every upstream's Nexus service.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    pub task_queue: String,
    /// How many tool calls may run at once; the worker's default when absent.
    pub max_concurrent_calls: Option<usize>,
    /// How many resource URIs the proxy watches per upstream (R-PRX-34), a fifth of them per
    /// caller (R-PRX-36); [`crate::resource_versions::MAX_WATCHED_URIS`] when absent.
    #[serde(default)]
    pub max_watched_resources: Option<usize>,
}

/// `[temporal]`: each key given overrides Temporal's environment configuration, and the
/// binary's connection flags override the keys (R-RUN-1). No API key: it is a secret, so it
/// comes from TEMPORAL_API_KEY (or `--api-key`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporalSection {
    pub address: Option<String>,
    pub namespace: Option<String>,
    pub profile: Option<String>,
    pub tls: Option<bool>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_server_name: Option<String>,
    /// `gzip` (the Temporal client's default) or `none` (R-RUN-7).
    pub grpc_compression: Option<durable_mcp_runtime::temporal::GrpcCompression>,
}

/// One `[[upstream]]`: an MCP server fronted as the Nexus service `service`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub service: String,
    pub transport: TransportConfig,
    /// Options for every tool of this upstream.
    pub activity_options: ActivityOptions,
    /// Per tool name: options laid over `activity_options`.
    pub overrides: BTreeMap<String, ActivityOptions>,
}

/// How to reach an upstream; in the file, chosen by `transport = "stdio" | "http"`.
/// `Debug` redacts header and `env` values: they are where credentials live.
// Built once per upstream and kept: the size of the http variant (its OAuth client) costs
// nothing worth a box, which would change how programs build it.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq)]
pub enum TransportConfig {
    /// A child process speaking MCP on stdin/stdout. It gets a minimal environment (the
    /// variables in [`crate::child::PASSED_THROUGH`]) plus `env`, or the proxy's
    /// whole environment plus `env` when `inherit_env` is set (R-PRX-11).
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        inherit_env: bool,
        /// How long the `server/discover` probe waits before the `initialize` fallback
        /// (R-PRX-33); `None`: [`DEFAULT_DISCOVER_WAIT`].
        discover_wait: Option<std::time::Duration>,
    },
    /// MCP Streamable HTTP.
    Http {
        url: Url,
        headers: BTreeMap<String, String>,
        /// HTTP 503 and 429 answers prove the tool did not run, so even a tool that must run
        /// at most once is sent again (R-PRX-14). Set it only when nothing between the proxy
        /// and the server (a gateway, a load balancer) answers so after forwarding a request.
        unavailable_means_not_run: bool,
        /// Its bearer token comes from OAuth 2.0 client credentials (R-PRX-15).
        oauth: Option<ClientCredentials>,
    },
    /// Reached through a program's own client factory (R-PRX-27); never in a config file.
    Custom(super::factory::CustomTransport),
}

impl TransportConfig {
    /// An upstream reached through `factory` (a closure returning an
    /// [`UpstreamTransport`](super::factory::UpstreamTransport) is one).
    pub fn custom(factory: impl super::factory::UpstreamFactory) -> Self {
        Self::Custom(super::factory::CustomTransport::new(factory))
    }
}

impl TransportConfig {
    /// A stdio child with no `env` of its own, the minimal environment and the worker's
    /// working directory.
    pub fn stdio(command: impl Into<String>, args: Vec<String>) -> Self {
        Self::Stdio {
            command: command.into(),
            args,
            env: BTreeMap::new(),
            cwd: None,
            inherit_env: false,
            discover_wait: None,
        }
    }
}

/// How long a stdio upstream's `server/discover` probe waits by default (`discover_wait`,
/// R-PRX-33).
pub const DEFAULT_DISCOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The most a probe can wait: rmcp gives up there itself.
pub const MAX_DISCOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the config could not be loaded. Its `Display` is the message for the user: it names the
/// field and says what is wrong, and never contains an environment variable's value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not valid TOML, or a key or value of the wrong shape (unknown key, bad duration, ...);
    /// the message gives the line and column and quotes that line of the file (as written,
    /// before any expansion).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// `field` is a path such as `upstream[0].headers.Authorization`.
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Reads and parses `path`, expanding variables from the process environment.
pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, &|name| std::env::var(name).ok())
}

/// Parses and validates a config, expanding variables with `env` (a name to its value).
pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyConfig, ConfigError> {
    let raw: RawConfig = toml::from_str(text)?;
    if raw.worker.task_queue.trim().is_empty() {
        return Err(invalid("worker.task_queue", "must not be empty"));
    }
    if raw.worker.max_concurrent_calls == Some(0) {
        return Err(invalid("worker.max_concurrent_calls", "must be at least 1"));
    }
    if raw
        .worker
        .max_watched_resources
        .is_some_and(|n| !(1..=MAX_WATCHED_RESOURCES).contains(&n))
    {
        let why = format!("must be between 1 and {MAX_WATCHED_RESOURCES}");
        return Err(invalid("worker.max_watched_resources", why));
    }
    if let Some(t) = &raw.temporal {
        let paths = [
            ("tls_ca", &t.tls_ca),
            ("tls_cert", &t.tls_cert),
            ("tls_key", &t.tls_key),
        ]
        .map(|(key, path)| (key, path.as_ref().map(|p| p.to_string_lossy().into_owned())));
        let strings = [
            ("address", &t.address),
            ("namespace", &t.namespace),
            ("profile", &t.profile),
            ("tls_server_name", &t.tls_server_name),
        ]
        .map(|(key, value)| (key, value.clone()));
        for (key, value) in strings.iter().chain(&paths) {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                return Err(invalid(
                    format!("temporal.{key}"),
                    "must not be empty (leave it out to use the environment)",
                ));
            }
        }
    }
    if raw.upstream.is_empty() {
        return Err(invalid(
            "upstream",
            "no upstreams: add at least one [[upstream]] table",
        ));
    }
    let mut seen = BTreeMap::new();
    let mut upstreams = Vec::with_capacity(raw.upstream.len());
    for (i, raw) in raw.upstream.into_iter().enumerate() {
        let upstream = upstream(i, raw, env)?;
        if let Some(first) = seen.insert(upstream.service.clone(), i) {
            return Err(invalid(
                format!("upstream[{i}].service"),
                format!(
                    "duplicate service name {:?}, already used by upstream[{first}]",
                    upstream.service
                ),
            ));
        }
        upstreams.push(upstream);
    }
    let codec = raw.codec.map(|c| codec(c, env)).transpose()?;
    Ok(ProxyConfig {
        worker: raw.worker,
        temporal: raw.temporal,
        codec,
        upstreams,
        health: raw.health,
        metrics: raw.metrics,
        traces: raw.traces.map(|t| traces(t, env)).transpose()?,
    })
}

/// The file's shape. Transport keys are flat and optional here, and strings unexpanded, so
/// that serde rejects unknown keys and every later error can name its field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    worker: WorkerSection,
    temporal: Option<TemporalSection>,
    codec: Option<RawCodec>,
    #[serde(default)]
    upstream: Vec<RawUpstream>,
    health: Option<HealthSection>,
    metrics: Option<MetricsSection>,
    traces: Option<RawTraces>,
}
