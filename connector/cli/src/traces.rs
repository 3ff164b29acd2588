//! Both binaries' span export (R-RUN-9): `--otlp-endpoint`, else the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`; nothing otherwise.

use durable_mcp_runtime::trace::export::{self, Exporter};

/// The flag both binaries take.
pub const OTLP_ENDPOINT_FLAG: &str = "--otlp-endpoint";

/// Installs the OTLP exporter as `service_name` when an endpoint is given; a bad endpoint
/// stops the binary naming where it came from. Call within the Tokio runtime.
pub fn install_if_asked(
    flag: Option<&str>,
    service_name: &'static str,
) -> anyhow::Result<Option<Exporter>> {
    let endpoint = export::endpoint(flag, OTLP_ENDPOINT_FLAG, |name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let exporter = export::install(&endpoint, service_name).map_err(anyhow::Error::msg)?;
    let shown = export::shown(&endpoint);
    tracing::info!(endpoint = %shown, "exporting spans over OTLP");
    Ok(Some(exporter))
}

/// Sends the spans still waiting before the binary ends.
pub async fn flush(exporter: Option<Exporter>) {
    if let Some(exporter) = exporter {
        exporter.shutdown().await;
    }
}
