//! What the connector's and the proxy's Prometheus metrics share (R-RUN-6): tool calls counted
//! by service, tool and outcome and timed by service and tool, registration helpers and the
//! text encoding. The label values are the callers' to bound.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Metric, Registry},
};

/// The `Content-Type` of [`encode`]'s text (OpenMetrics, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The tool calls' label set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: String,
    tool: String,
    outcome: String,
}

/// The latency histogram's label set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    service: String,
    tool: String,
}

/// A refusal's label set: why, from a fixed set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// The label set of one upstream service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub service: String,
}

type LatencyFamily = Family<ToolLabels, Histogram, fn() -> Histogram>;

/// Latency buckets from 5 ms to about 5.5 minutes.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 17))
}

/// Tool calls by service, tool and outcome, and their latency by service and tool.
#[derive(Clone, Debug)]
pub struct CallMetrics {
    calls: Family<CallLabels, Counter>,
    latency: LatencyFamily,
}

impl CallMetrics {
    /// Registers `{calls}` (a counter) and `{latency}` (a histogram in seconds) in `registry`.
    pub fn register(registry: &mut Registry, calls: [&str; 2], latency: [&str; 2]) -> Self {
        let this = Self {
            calls: Family::default(),
            latency: LatencyFamily::new_with_constructor(latency_histogram),
        };
        registry.register(calls[0], calls[1], this.calls.clone());
        registry.register(latency[0], latency[1], this.latency.clone());
        this
    }

    /// One call of `tool` on `service` ended with `outcome` after `seconds`.
    pub fn record(&self, service: &str, tool: &str, outcome: &str, seconds: f64) {
        let timed = ToolLabels {
            service: service.to_owned(),
            tool: tool.to_owned(),
        };
        self.latency.get_or_create(&timed).observe(seconds);
        let counted = CallLabels {
            service: timed.service,
            tool: timed.tool,
            outcome: outcome.to_owned(),
        };
        self.calls.get_or_create(&counted).inc();
    }
}

/// `metric`, registered in `registry` as `name` with `help`.
pub fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The registry's metrics as OpenMetrics text, served with [`CONTENT_TYPE`].
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("writing to a String cannot fail");
    text
}
