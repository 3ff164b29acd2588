//! `durable-mcp-proxy`'s flags and what they and its config file mean for the start-up: the
//! file read with its name on every error, the `--check` report, the Temporal connection
//! (flags over the `[temporal]` table over Temporal's own configuration), and the proxy's
//! options.

use std::path::{Path, PathBuf};

use clap::Parser;
use durable_mcp_proxy::{ProxyOptions, config::ProxyConfig};
use durable_mcp_runtime::temporal::{
    ConnectionSettings,
    codec::{CodecConfigError, RemoteCodec},
};

use crate::temporal_flags::TemporalFlags;

/// Fronts the upstream MCP servers listed in a config file as Temporal Nexus services, one
/// service per upstream, on one task queue. Every tool call runs in a standalone Activity with
/// a retry policy inferred from the tool's annotations.
///
/// The Temporal connection comes from the connection flags below, then the config's
/// [temporal] table, then Temporal's environment configuration (TEMPORAL_ADDRESS,
/// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS variables, TEMPORAL_PROFILE,
/// TEMPORAL_CONFIG_FILE). Point a Nexus endpoint at the task
/// queue, e.g. `temporal operator nexus endpoint create --name mcp-proxy
/// --target-namespace default --target-task-queue mcp-proxy`.
///
/// With a [codec] table (endpoint, headers, timeout), tool arguments and results pass through
/// that remote codec server (Temporal's /encode and /decode protocol) before Temporal stores
/// them; connectors calling this proxy need the same codec (--codec-endpoint).
///
/// MCP_PROXY_STATE_KEY (base64, at least 32 random bytes, the same on every worker of the task
/// queue) signs the state of an upstream task waiting for input; during a rotation
/// MCP_PROXY_STATE_KEYS_PREVIOUS lists the old keys. Without it, an HTTP upstream's task that
/// asks for input is cancelled, saying to set it.
// The doc comments are the help text: clap prints them as written, so `[temporal]` and
// `[codec]` are not links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Parser)]
#[command(name = "durable-mcp-proxy", version)]
pub struct ProxyFlags {
    /// The proxy config file (TOML). `${VAR}` and `${VAR:-default}` in values are read from
    /// the environment: keep secrets there, not in the file.
    #[arg(long, short, value_name = "FILE")]
    pub config: PathBuf,
    /// Check the config file and exit without connecting.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub temporal: TemporalFlags,
    /// How log lines (on stderr) are written: text, or json (one object a line).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: crate::logs::LogFormat,
    /// Serve /healthz and /readyz on this address (overrides the file's [health] addr); off
    /// when neither is given. Probes need no token: listen where only probes reach.
    #[arg(long, value_name = "HOST:PORT")]
    pub health_addr: Option<std::net::SocketAddr>,
    /// Serve Prometheus metrics at /metrics on this address (overrides the file's [metrics]
    /// addr, R-RUN-6); off when neither is given. No token: listen where only the scraper
    /// reaches.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Export spans over OTLP/gRPC to this collector URL (e.g. http://localhost:4317,
    /// R-RUN-9; overrides the file's [traces] otlp_endpoint); else OTEL_EXPORTER_OTLP_ENDPOINT;
    /// no spans are exported when none is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// Where the metrics listener goes: `--metrics-addr`, else `[metrics] addr`, else nowhere.
pub fn metrics_addr(flags: &ProxyFlags, config: &ProxyConfig) -> Option<std::net::SocketAddr> {
    flags
        .metrics_addr
        .or_else(|| config.metrics.as_ref().map(|m| m.addr))
}

/// Where spans go (R-RUN-9): `--otlp-endpoint`, else `[traces] otlp_endpoint` (checked when
/// the file was read); `None` leaves it to the standard `OTEL_EXPORTER_OTLP_*` variables.
pub fn otlp_endpoint(flags: &ProxyFlags, config: &ProxyConfig) -> Option<String> {
    let file = config.traces.as_ref().map(|t| t.otlp_endpoint.clone());
    flags.otlp_endpoint.clone().or(file)
}

/// Where the health listener goes: `--health-addr`, else `[health] addr`, else nowhere.
pub fn health_addr(flags: &ProxyFlags, config: &ProxyConfig) -> Option<std::net::SocketAddr> {
    flags
        .health_addr
        .or_else(|| config.health.as_ref().map(|h| h.addr))
}

/// Tool calls at once when `[worker]` sets no `max_concurrent_calls`.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 100;

/// Reads the config file; an error starts with the file's name.
pub fn load(path: &Path) -> anyhow::Result<ProxyConfig> {
    durable_mcp_proxy::config::load(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The line `--check` prints for a good file.
pub fn check_report(path: &Path, config: &ProxyConfig) -> String {
    format!(
        "{}: ok ({} upstreams)",
        path.display(),
        config.upstreams.len()
    )
}

/// The Temporal connection settings: the flags, then the `[temporal]` table (R-RUN-1);
/// Temporal's environment configuration fills in the rest when connecting.
pub fn temporal_settings(flags: &TemporalFlags, config: &ProxyConfig) -> ConnectionSettings {
    let table = config.temporal.clone().unwrap_or_default();
    flags.settings().or(ConnectionSettings {
        address: table.address,
        namespace: table.namespace,
        tls: table.tls,
        tls_ca: table.tls_ca,
        tls_cert: table.tls_cert,
        tls_key: table.tls_key,
        tls_server_name: table.tls_server_name,
        api_key: None,
        profile: table.profile,
        grpc_compression: table.grpc_compression,
    })
}

/// The client of the `[codec]` table for `namespace`, if any (R-PRX-20).
pub fn codec(
    config: &ProxyConfig,
    namespace: &str,
) -> Result<Option<RemoteCodec>, CodecConfigError> {
    config
        .codec
        .as_ref()
        .map(|c| c.client(namespace))
        .transpose()
}

/// The proxy's options: its namespace and codec, the `[worker]` table's task queue and
/// concurrency.
pub fn proxy_options(
    config: &ProxyConfig,
    namespace: String,
    codec: Option<RemoteCodec>,
) -> ProxyOptions {
    ProxyOptions {
        namespace,
        task_queue: config.worker.task_queue.clone(),
        max_concurrent_calls: config
            .worker
            .max_concurrent_calls
            .unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS),
        codec,
        // This process's own until the binary reads MCP_PROXY_STATE_KEY (R-PRX-35).
        state_keys: durable_mcp_proxy::state_key::StateKeys::per_process(),
        max_watched_resources: config
            .worker
            .max_watched_resources
            .unwrap_or(durable_mcp_proxy::resource_versions::MAX_WATCHED_URIS),
    }
}

#[cfg(test)]
mod tests {
    use durable_mcp_runtime::temporal::GrpcCompression;

    use super::*;

    const UPSTREAM: &str =
        "[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"true\"\n";

    fn config(text: &str) -> ProxyConfig {
        durable_mcp_proxy::config::parse(text, &|_| None).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn flags_need_a_config_file() {
        let parse = |args: &[&str]| {
            ProxyFlags::try_parse_from(std::iter::once(&"durable-mcp-proxy").chain(args))
                .map(|f| (f.config, f.check))
                .map_err(|e| e.to_string())
        };
        // (args, (config, check) or the text clap's error must contain)
        type Want = Result<(&'static str, bool), &'static str>;
        let cases: &[(&[&str], Want)] = &[
            (&["--config", "p.toml"], Ok(("p.toml", false))),
            (&["-c", "p.toml", "--check"], Ok(("p.toml", true))),
            (&[], Err("--config <FILE>")),
            (&["--check"], Err("--config <FILE>")),
        ];
        for (args, want) in cases {
            match (parse(args), want) {
                (Ok((config, check)), Ok(want)) => {
                    assert_eq!((config, check), (PathBuf::from(want.0), want.1));
                }
                (Err(got), Err(want)) => assert!(got.contains(want), "{args:?}: {got}"),
                (got, want) => panic!("{args:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_bad_file_is_named_in_the_error() {
        let err = load(Path::new("/nonexistent/proxy.toml")).unwrap_err();
        assert!(
            err.to_string().starts_with("/nonexistent/proxy.toml: "),
            "{err}"
        );
    }

    #[test]
    fn the_check_report_names_the_file_and_counts_upstreams() {
        let text = format!("[worker]\ntask_queue = \"q\"\n{UPSTREAM}");
        assert_eq!(
            check_report(Path::new("p.toml"), &config(&text)),
            "p.toml: ok (1 upstreams)"
        );
    }

    #[test]
    fn flags_win_over_the_temporal_table() {
        let worker = "[worker]\ntask_queue = \"q\"\n";
        let table = "[temporal]\naddress = \"file:7233\"\nnamespace = \"ns\"\nprofile = \"p\"\n\
                     tls_ca = \"ca.pem\"\ntls_server_name = \"t.local\"\n\
                     grpc_compression = \"none\"\n";
        let config = config(&format!("{worker}{table}{UPSTREAM}"));
        let flags = TemporalFlags {
            address: Some("flag:7233".into()),
            api_key: Some("k".into()),
            ..Default::default()
        };
        let got = temporal_settings(&flags, &config);
        assert_eq!(got.address.as_deref(), Some("flag:7233"));
        assert_eq!(got.namespace.as_deref(), Some("ns"));
        assert_eq!(got.profile.as_deref(), Some("p"));
        assert_eq!(got.tls_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(got.tls_server_name.as_deref(), Some("t.local"));
        assert_eq!(got.api_key.as_deref(), Some("k"));
        assert_eq!(got.grpc_compression, Some(GrpcCompression::None));
        let bare = config_without_table();
        assert_eq!(
            temporal_settings(&TemporalFlags::default(), &bare),
            ConnectionSettings::default()
        );
    }

    #[test]
    fn the_otlp_flag_wins_over_the_traces_table() {
        let worker = "[worker]\ntask_queue = \"q\"\n";
        let table = "[traces]\notlp_endpoint = \"http://file:4317\"\n";
        let config = config(&format!("{worker}{table}{UPSTREAM}"));
        let parse = |args: &[&str]| {
            let args = ["durable-mcp-proxy", "--config", "p.toml"]
                .iter()
                .chain(args);
            ProxyFlags::try_parse_from(args).unwrap()
        };
        let flag = parse(&["--otlp-endpoint", "http://flag:4317"]);
        assert_eq!(
            otlp_endpoint(&flag, &config).as_deref(),
            Some("http://flag:4317")
        );
        assert_eq!(
            otlp_endpoint(&parse(&[]), &config).as_deref(),
            Some("http://file:4317")
        );
        assert_eq!(otlp_endpoint(&parse(&[]), &config_without_table()), None);
    }

    fn config_without_table() -> ProxyConfig {
        config(&format!("[worker]\ntask_queue = \"q\"\n{UPSTREAM}"))
    }

    #[test]
    fn proxy_options_come_from_the_worker_table() {
        let text = format!("[worker]\ntask_queue = \"q\"\n{UPSTREAM}");
        let options = proxy_options(&config(&text), "ns".into(), None);
        assert_eq!(options.namespace, "ns");
        assert_eq!(options.task_queue, "q");
        assert_eq!(options.max_concurrent_calls, DEFAULT_MAX_CONCURRENT_CALLS);
        assert!(options.codec.is_none());
        let text = format!("[worker]\ntask_queue = \"q\"\nmax_concurrent_calls = 7\n{UPSTREAM}");
        assert_eq!(
            proxy_options(&config(&text), "ns".into(), None).max_concurrent_calls,
            7
        );
    }

    #[test]
    fn the_codec_table_gives_a_client_for_the_namespace() {
        let worker = "[worker]\ntask_queue = \"q\"\n";
        let none = config(&format!("{worker}{UPSTREAM}"));
        assert!(codec(&none, "ns").unwrap().is_none());
        let with = config(&format!(
            "{worker}[codec]\nendpoint = \"https://codec.example.com\"\n{UPSTREAM}"
        ));
        assert!(codec(&with, "ns").unwrap().is_some());
    }
}
