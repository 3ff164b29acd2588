//! `[traces]`: where `durable-mcp-proxy` exports its spans over OTLP/gRPC (R-RUN-9);
//! `--otlp-endpoint` wins over it, and it wins over the standard `OTEL_EXPORTER_OTLP_*`
//! variables. The endpoint expands `${NAME}` like every other value (R-PRX-1).

use serde::Deserialize;

use super::{ConfigError, expand::expand, invalid};
use durable_mcp_runtime::trace::export;

/// The key's name in errors and in the proxy's messages.
pub const OTLP_ENDPOINT_KEY: &str = "traces.otlp_endpoint";

/// A validated `[traces]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracesSection {
    /// The collector's `http://` URL (the exporter has no TLS: R-RUN-9).
    pub otlp_endpoint: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTraces {
    otlp_endpoint: String,
}

/// Expands and checks `[traces]`; the error names the key but not the (expanded) value.
pub(super) fn traces(
    raw: RawTraces,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TracesSection, ConfigError> {
    let otlp_endpoint = expand(&raw.otlp_endpoint, OTLP_ENDPOINT_KEY, env)?;
    export::endpoint(Some(&otlp_endpoint), OTLP_ENDPOINT_KEY, |_| None).map_err(|_| {
        invalid(
            OTLP_ENDPOINT_KEY,
            "must be the http:// URL of an OTLP/gRPC collector, such as http://localhost:4317 \
             (no https://: run a collector beside the proxy that forwards over TLS); fix it, \
             or leave [traces] out to export no spans",
        )
    })?;
    Ok(TracesSection { otlp_endpoint })
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    fn config(traces: &str) -> String {
        format!(
            "[worker]\ntask_queue = \"q\"\n{traces}\n[[upstream]]\nservice = \"s\"\n\
             transport = \"stdio\"\ncommand = \"server\"\n"
        )
    }

    fn env(name: &str) -> Option<String> {
        (name == "COLLECTOR").then(|| "collector.internal".to_owned())
    }

    #[test]
    fn the_traces_table_names_the_collector_and_expands_variables() {
        let text = config("[traces]\notlp_endpoint = \"http://${COLLECTOR}:4317\"");
        let traces = parse(&text, &env).unwrap().traces.unwrap();
        assert_eq!(traces.otlp_endpoint, "http://collector.internal:4317");
        assert_eq!(parse(&config(""), &env).unwrap().traces, None);
    }

    #[test]
    fn a_bad_otlp_endpoint_is_refused_naming_the_key_not_the_value() {
        let text = config("[traces]\notlp_endpoint = \"${COLLECTOR}:4317\"");
        let e = parse(&text, &env).unwrap_err().to_string();
        assert!(e.contains("traces.otlp_endpoint"), "{e}");
        assert!(e.contains("http://localhost:4317"), "{e}");
        assert!(!e.contains("collector.internal"), "{e}");
        let unknown = config("[traces]\notlp_endpoint = \"http://c:4317\"\nsampler = \"x\"");
        assert!(parse(&unknown, &env).is_err());
    }
}
