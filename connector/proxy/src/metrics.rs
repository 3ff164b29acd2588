//! The proxy's Prometheus metrics (R-RUN-6): upstream calls (one per Activity attempt) by
//! service, tool and outcome, their latency, upstream connects, restarts (connections dropped
//! after a failure: the next call reconnects, a stdio child starts again) and discovery
//! failures.
//!
//! One registry per process ([`global`]): the binary serves it on `--metrics-addr` (or
//! `[metrics] addr`), a library host mounts [`ProxyMetrics::encode`] wherever it serves HTTP.
//! Every label value is bounded: services are the configured upstreams, a service's tool
//! labels at most `MAX_TOOLS_PER_SERVICE` names (later ones count as `_other`, R-RUN-6),
//! outcomes one of a fixed set; no argument, task ID or caller identity is a label.

use std::sync::OnceLock;

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use temporalio_common::data_converters::RawValue;
use temporalio_sdk::activities::ActivityError;

use durable_mcp_contract::{errors::ToolCallErrorType, jsonrpc_error::JSONRPC_ERROR, payload};
use durable_mcp_runtime::metrics::{
    CallMetrics, ServiceLabels, encode, register_codec_calls, registered,
};
use durable_mcp_runtime::sdk_metrics::SdkMeter;

type ServiceCounters = Family<ServiceLabels, Counter>;

/// The proxy's instruments and their registry.
pub struct ProxyMetrics {
    registry: Registry,
    calls: CallMetrics,
    connects: ServiceCounters,
    restarts: ServiceCounters,
    discovery_failures: ServiceCounters,
    sdk: SdkMeter,
}

/// The process's proxy metrics.
pub fn global() -> &'static ProxyMetrics {
    static METRICS: OnceLock<ProxyMetrics> = OnceLock::new();
    METRICS.get_or_init(ProxyMetrics::new)
}

impl ProxyMetrics {
    fn new() -> Self {
        let mut r = Registry::with_prefix("durable_mcp_proxy");
        let calls = CallMetrics::register(
            &mut r,
            [
                "upstream_calls",
                "Upstream tools/call attempts (one per Activity attempt), by service, tool and outcome",
            ],
            [
                "upstream_call_duration_seconds",
                "Time one Activity attempt took to call the upstream",
            ],
        );
        let connects = "MCP connections made to an upstream";
        let connects = registered(&mut r, "upstream_connects", connects, Family::default());
        let restarts = "Upstream connections dropped after a failure (the next call reconnects)";
        let restarts = registered(&mut r, "upstream_restarts", restarts, Family::default());
        let failures = "Failed tools/list discoveries of an upstream";
        let discovery_failures =
            registered(&mut r, "discovery_failures", failures, Family::default());
        register_codec_calls(&mut r);
        durable_mcp_runtime::panics::register_panics(&mut r);
        let sdk = SdkMeter::default();
        sdk.register(&mut r);
        Self {
            registry: r,
            calls,
            connects,
            restarts,
            discovery_failures,
            sdk,
        }
    }

    /// Where the proxy's SDK workers put their own metrics (`durable_mcp_proxy_temporal_*`).
    pub fn sdk_meter(&self) -> &SdkMeter {
        &self.sdk
    }

    /// The metrics as Prometheus (OpenMetrics) text.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }

    /// One attempt of `tool` on `service` ended with `ended` after `elapsed`.
    pub fn call_ended(
        &self,
        service: &str,
        tool: &str,
        ended: &Result<RawValue, ActivityError>,
        elapsed: std::time::Duration,
    ) {
        let seconds = elapsed.as_secs_f64();
        self.calls.record(service, tool, outcome_of(ended), seconds);
    }

    /// A connection to `service` was made.
    pub fn connected(&self, service: &str) {
        self.connects.get_or_create(&service_labels(service)).inc();
    }

    /// `service`'s connection was dropped after a failure.
    pub fn restarted(&self, service: &str) {
        self.restarts.get_or_create(&service_labels(service)).inc();
    }

    /// A discovery of `service` failed.
    pub fn discovery_failed(&self, service: &str) {
        let labels = service_labels(service);
        self.discovery_failures.get_or_create(&labels).inc();
    }
}

/// The service label of an Activity for `service`: the service itself when an upstream of this
/// worker has that name, else `_other`. The Activity's input names the service, and anyone who
/// may schedule Activities on the proxy's task queue writes it, so only configured names
/// become labels (R-RUN-6).
pub fn service_label(service: &str, configured: bool) -> &str {
    if configured { service } else { OTHER_SERVICE }
}

/// The service label of an Activity for a service no upstream of this worker has.
pub const OTHER_SERVICE: &str = "_other";

fn service_labels(service: &str) -> ServiceLabels {
    ServiceLabels {
        service: service.to_owned(),
    }
}

/// An attempt's outcome label: `success`, `tool_error`, `jsonrpc_error` (the call ends with
/// the upstream's JSON-RPC error), `cancelled`, a stable error type of R-NXC-4, or `failed`.
pub fn outcome_of(ended: &Result<RawValue, ActivityError>) -> &'static str {
    match ended {
        Ok(raw) => match raw.payloads.first() {
            Some(p) if payload::mcp_type(p) == Some(JSONRPC_ERROR) => "jsonrpc_error",
            Some(p) if is_error(&p.data) => "tool_error",
            _ => "success",
        },
        Err(ActivityError::Cancelled { .. }) => "cancelled",
        Err(ActivityError::Application(failure)) => failure
            .type_name()
            .and_then(ToolCallErrorType::parse)
            .map_or("failed", ToolCallErrorType::as_str),
        Err(_) => "failed",
    }
}

/// Whether a `CallToolResult`'s JSON says `isError: true` (read without keeping the rest).
fn is_error(json: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_slice::<Peek>(json).is_ok_and(|p| p.is_error == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_one_of_a_fixed_set() {
        let ok = |json: &str| {
            Ok(RawValue::new(vec![
                payload::to_payload(&serde_json::from_str::<serde_json::Value>(json).unwrap())
                    .unwrap(),
            ]))
        };
        assert_eq!(outcome_of(&ok(r#"{"content":[]}"#)), "success");
        assert_eq!(
            outcome_of(&ok(r#"{"content":[],"isError":true}"#)),
            "tool_error"
        );
        let e = durable_mcp_contract::jsonrpc_error::JsonRpcError {
            code: -32042,
            message: "secret".into(),
            data: None,
        };
        let rpc = Ok(RawValue::new(vec![e.to_payload().unwrap()]));
        assert_eq!(outcome_of(&rpc), "jsonrpc_error");
        assert_eq!(outcome_of(&Err(ActivityError::cancelled())), "cancelled");
    }

    #[test]
    fn only_configured_services_become_labels() {
        assert_eq!(service_label("weather", true), "weather");
        assert_eq!(service_label("made-up-by-a-caller-1", false), "_other");
    }

    #[tokio::test]
    async fn counts_show_in_the_text() {
        let metrics = ProxyMetrics::new();
        let panicked = durable_mcp_runtime::panics::catching("nexus_cancel", async { panic!() });
        assert!(panicked.await.is_err());
        metrics.connected("svc");
        metrics.discovery_failed("svc");
        let ended = Err(ActivityError::cancelled());
        metrics.call_ended("svc", "echo", &ended, std::time::Duration::from_millis(3));
        let text = metrics.encode();
        for line in [
            r#"durable_mcp_proxy_upstream_connects_total{service="svc"} 1"#,
            r#"durable_mcp_proxy_discovery_failures_total{service="svc"} 1"#,
            r#"durable_mcp_proxy_upstream_calls_total{service="svc",tool="echo",outcome="cancelled"} 1"#,
            r#"durable_mcp_proxy_upstream_call_duration_seconds_count{service="svc",tool="echo"} 1"#,
            r#"durable_mcp_proxy_panics_total{method="nexus_cancel"} "#,
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}
