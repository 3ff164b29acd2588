//! What the connector's and the proxy's Prometheus metrics share (R-RUN-6): tool calls counted
//! by service, tool and outcome and timed by service and tool, registration helpers and the
//! text encoding. The label values are the callers' to bound.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

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
    tools: std::sync::Arc<ToolNames>,
}

impl CallMetrics {
    /// Registers `{calls}` (a counter) and `{latency}` (a histogram in seconds) in `registry`.
    pub fn register(registry: &mut Registry, calls: [&str; 2], latency: [&str; 2]) -> Self {
        let this = Self {
            calls: Family::default(),
            latency: LatencyFamily::new_with_constructor(latency_histogram),
            tools: Default::default(),
        };
        registry.register(calls[0], calls[1], this.calls.clone());
        registry.register(latency[0], latency[1], this.latency.clone());
        this
    }

    /// One call of `tool` on `service` ended with `outcome` after `seconds`. A service's
    /// tool label takes at most [`MAX_TOOLS_PER_SERVICE`] names, later ones [`OTHER_TOOL`]:
    /// an upstream that lists new names at every change cannot grow the series for ever.
    pub fn record(&self, service: &str, tool: &str, outcome: &str, seconds: f64) {
        let timed = ToolLabels {
            service: service.to_owned(),
            tool: self.tools.label(service, tool),
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

/// How many tool names one service's labels take at most.
pub const MAX_TOOLS_PER_SERVICE: usize = 256;

/// The tool label past [`MAX_TOOLS_PER_SERVICE`].
pub const OTHER_TOOL: &str = "_other";

/// The tool names each service's labels took so far, at most [`MAX_TOOLS_PER_SERVICE`] each.
#[derive(Debug, Default)]
struct ToolNames(Mutex<HashMap<String, HashSet<String>>>);

impl ToolNames {
    /// `tool`'s label on `service`: its name while the service has room, else [`OTHER_TOOL`].
    fn label(&self, service: &str, tool: &str) -> String {
        let mut seen = self.0.lock().unwrap();
        let names = seen.entry(service.to_owned()).or_default();
        if names.contains(tool) || names.len() < MAX_TOOLS_PER_SERVICE {
            names.insert(tool.to_owned());
            tool.to_owned()
        } else {
            OTHER_TOOL.to_owned()
        }
    }
}

/// A codec call's label set: `/encode` or `/decode`, and whether it answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodecLabels {
    op: &'static str,
    outcome: &'static str,
}

type CodecCalls = Family<CodecLabels, Counter>;

/// The process's remote codec calls (R-RUN-6): every codec in the process counts here, and
/// both the connector's and the proxy's registries show them ([`register_codec_calls`]).
fn codec_calls() -> &'static CodecCalls {
    static CALLS: std::sync::OnceLock<CodecCalls> = std::sync::OnceLock::new();
    CALLS.get_or_init(CodecCalls::default)
}

/// Counts one call of a remote codec's `op` (`encode` or `decode`): `ok`, or `error` when it
/// failed (unreachable, refused, timed out, or an answer that is not valid codec JSON).
pub fn count_codec_call(op: &str, ok: bool) {
    let op = if op == "encode" { "encode" } else { "decode" };
    let outcome = if ok { "ok" } else { "error" };
    codec_calls()
        .get_or_create(&CodecLabels { op, outcome })
        .inc();
}

/// Registers the process's codec calls in `registry` as `codec_calls` (`{prefix}_codec_calls_total`).
pub fn register_codec_calls(registry: &mut Registry) {
    let help = "Remote codec calls, by operation (encode, decode) and outcome (ok, error)";
    registry.register("codec_calls", help, codec_calls().clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_calls_show_in_every_registry_that_registers_them() {
        let (mut a, mut b) = (Registry::with_prefix("a"), Registry::with_prefix("b"));
        register_codec_calls(&mut a);
        register_codec_calls(&mut b);
        count_codec_call("decode", false);
        for (registry, prefix) in [(&a, "a"), (&b, "b")] {
            let line = format!("{prefix}_codec_calls_total{{op=\"decode\",outcome=\"error\"}} ");
            let text = encode(registry);
            assert!(text.contains(&line), "{line} missing from {text}");
        }
    }

    #[test]
    fn a_service_labels_at_most_so_many_tools() {
        let names = ToolNames::default();
        for i in 0..MAX_TOOLS_PER_SERVICE {
            assert_eq!(names.label("svc", &format!("t{i}")), format!("t{i}"));
        }
        assert_eq!(names.label("svc", "one-more"), OTHER_TOOL);
        assert_eq!(names.label("svc", "t0"), "t0");
        assert_eq!(names.label("other", "one-more"), "one-more");
    }
}
