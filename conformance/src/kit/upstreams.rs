//! What the proxy fronts in tests, benches, the load run and the runner: the mock upstream as
//! a stdio child recording into a ledger, or an upstream over Streamable HTTP.

use std::path::Path;

use durable_mcp::proxy::{TransportConfig, UpstreamConfig};

use crate::{
    fixtures::Ledger,
    harness::{mock_upstream_bin, upstream},
};

/// An upstream over Streamable HTTP at `url`, with no headers and no OAuth.
pub fn http_transport(url: url::Url, unavailable_means_not_run: bool) -> TransportConfig {
    TransportConfig::Http {
        url,
        headers: Default::default(),
        unavailable_means_not_run,
        oauth: None,
    }
}

/// The upstream served over HTTP at `url`, fronted as `service`.
pub fn http_upstream(service: &str, url: &str) -> anyhow::Result<UpstreamConfig> {
    Ok(upstream(service, http_transport(url.parse()?, false)))
}

/// The mock upstream binary `bin` as a stdio child, with `args` (e.g. `--spec FILE`), recording
/// into `ledger`.
pub fn mock_stdio_transport(bin: &Path, mut args: Vec<String>, ledger: &Ledger) -> TransportConfig {
    args.extend([
        "--ledger".into(),
        ledger.path().to_string_lossy().into_owned(),
    ]);
    TransportConfig::stdio(bin.to_string_lossy(), args)
}

/// The mock upstream (standard tools) as a stdio child of the proxy, fronted as `service`,
/// recording into `ledger`.
pub fn mock_stdio_upstream(service: &str, ledger: &Ledger) -> anyhow::Result<UpstreamConfig> {
    mock_stdio_upstream_with_args(service, vec![], ledger)
}

/// Like [`mock_stdio_upstream`], with extra arguments for the mock (e.g. `--spec FILE`).
pub fn mock_stdio_upstream_with_args(
    service: &str,
    args: Vec<String>,
    ledger: &Ledger,
) -> anyhow::Result<UpstreamConfig> {
    let transport = mock_stdio_transport(&mock_upstream_bin()?, args, ledger);
    Ok(upstream(service, transport))
}
