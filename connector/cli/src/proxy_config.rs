//! `durable-mcp-proxy`'s flags and what they and its config file mean for the start-up: the
//! file read with its name on every error, the `--check` report, the `[temporal]` table as
//! environment for Temporal's own configuration, and the proxy's options.

use std::path::{Path, PathBuf};

use clap::Parser;
use durable_mcp_proxy::{ProxyOptions, config::ProxyConfig};
use durable_mcp_runtime::temporal::codec::{CodecConfigError, RemoteCodec};

/// Fronts the upstream MCP servers listed in a config file as Temporal Nexus services, one
/// service per upstream, on one task queue. Every tool call runs in a standalone Activity with
/// a retry policy inferred from the tool's annotations.
///
/// The Temporal connection comes from the config's [temporal] table, else from Temporal's
/// environment configuration (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS
/// variables, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE). Point a Nexus endpoint at the task
/// queue, e.g. `temporal operator nexus endpoint create --name mcp-proxy
/// --target-namespace default --target-task-queue mcp-proxy`.
///
/// With a [codec] table (endpoint, headers, timeout), tool arguments and results pass through
/// that remote codec server (Temporal's /encode and /decode protocol) before Temporal stores
/// them; connectors calling this proxy need the same codec (--codec-endpoint).
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

/// The environment the `[temporal]` table sets for Temporal's own configuration, which reads
/// it when connecting: `address` as TEMPORAL_ADDRESS, `namespace` as TEMPORAL_NAMESPACE.
pub fn temporal_env(config: &ProxyConfig) -> Vec<(&'static str, String)> {
    let Some(section) = &config.temporal else {
        return Vec::new();
    };
    [
        ("TEMPORAL_ADDRESS", &section.address),
        ("TEMPORAL_NAMESPACE", &section.namespace),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, value.clone()?)))
    .collect()
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
    }
}

#[cfg(test)]
mod tests {
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
    fn the_temporal_table_becomes_temporal_environment() {
        let worker = "[worker]\ntask_queue = \"q\"\n";
        // ([temporal] table, the environment it sets)
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("", &[]),
            ("[temporal]\n", &[]),
            (
                "[temporal]\naddress = \"t:7233\"\n",
                &[("TEMPORAL_ADDRESS", "t:7233")],
            ),
            (
                "[temporal]\nnamespace = \"ns\"\n",
                &[("TEMPORAL_NAMESPACE", "ns")],
            ),
            (
                "[temporal]\naddress = \"t:7233\"\nnamespace = \"ns\"\n",
                &[("TEMPORAL_ADDRESS", "t:7233"), ("TEMPORAL_NAMESPACE", "ns")],
            ),
        ];
        for (table, want) in cases {
            let got = temporal_env(&config(&format!("{worker}{table}{UPSTREAM}")));
            let got: Vec<(&str, &str)> = got.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(got, *want, "{table}");
        }
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
