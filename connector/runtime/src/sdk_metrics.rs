//! The Temporal SDK workers' own metrics (pollers, task slots, Activity and Nexus task
//! latencies, RPCs) in a `prometheus_client` registry (R-RUN-6), through the SDK's telemetry
//! hook ([`CoreMeter`]): [`SdkMeter::core_meter`] goes into the SDK runtime's telemetry options,
//! [`SdkMeter::register`] puts the same instruments in the binary's registry, encoded at every
//! scrape. The SDK names its instruments (`temporal_...`) and labels them (namespace, task
//! queue, Activity type, Nexus service and operation, ...): no argument, task ID or caller.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use temporalio_common::telemetry::TelemetryOptions;
use temporalio_common::telemetry::metrics::{
    self as sdk, CoreMeter, MetricAttributable, MetricAttributes, MetricParameters, NewAttributes,
};
use temporalio_sdk_core::RuntimeOptions;

use crate::metrics::latency_histogram;

/// The SDK core runtime's options with `meter` as its metrics (the defaults otherwise).
pub fn runtime_options(meter: Option<&SdkMeter>) -> Result<RuntimeOptions, String> {
    let telemetry = TelemetryOptions::builder()
        .maybe_metrics(meter.map(SdkMeter::core_meter))
        .build();
    RuntimeOptions::builder()
        .telemetry_options(telemetry)
        .build()
        .map_err(|e| e.to_string())
}

/// One recording's labels, sorted by key.
type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// One SDK instrument as a `prometheus_client` family.
#[derive(Clone, Debug)]
enum Instrument {
    Counter(Family<Labels, Counter>),
    Gauge(Family<Labels, FloatGauge>),
    Histogram(Family<Labels, Histogram, fn() -> Histogram>),
}

/// Buckets for the SDK's `u64` histograms (counts and sizes): 1 to 32768.
fn count_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// The SDK's instruments by name; cheap to clone, clones share them.
#[derive(Clone, Debug, Default)]
pub struct SdkMeter {
    instruments: Arc<Mutex<BTreeMap<String, (String, Instrument)>>>,
}

impl SdkMeter {
    /// The meter to give the SDK runtime (`TelemetryOptions::metrics`).
    pub fn core_meter(&self) -> Arc<dyn CoreMeter> {
        Arc::new(self.clone())
    }

    /// Shows the SDK's instruments in `registry`, under its prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }

    /// The instrument `params` names, made by `make` the first time.
    fn instrument(&self, params: &MetricParameters, make: fn() -> Instrument) -> Bound {
        let mut all = self.instruments.lock().unwrap();
        let (_, instrument) = all
            .entry(params.name.to_string())
            .or_insert_with(|| (params.description.to_string(), make()));
        Bound(instrument.clone())
    }
}

impl Collector for SdkMeter {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let all = self.instruments.lock().unwrap().clone();
        for (name, (help, instrument)) in &all {
            let metric: &dyn EncodeMetric = match instrument {
                Instrument::Counter(f) => f,
                Instrument::Gauge(f) => f,
                Instrument::Histogram(f) => f,
            };
            let described = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
            metric.encode(described)?;
        }
        Ok(())
    }
}

/// The labels `attributes` carry (this meter's attributes are label maps).
fn labels_of(attributes: &MetricAttributes) -> Labels {
    let mut labels: Labels = match attributes {
        MetricAttributes::NoOp(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    };
    labels.sort();
    labels
}

/// An instrument not yet bound to labels.
struct Bound(Instrument);

/// An instrument bound to one label set.
struct Recorder(Instrument, Labels);

impl Recorder {
    fn add(&self, value: f64) {
        match &self.0 {
            Instrument::Counter(f) => {
                f.get_or_create(&self.1).inc_by(value as u64);
            }
            Instrument::Gauge(f) => {
                f.get_or_create(&self.1).inc_by(value);
            }
            Instrument::Histogram(f) => f.get_or_create(&self.1).observe(value),
        }
    }

    fn set(&self, value: f64) {
        match &self.0 {
            Instrument::Gauge(f) => {
                f.get_or_create(&self.1).set(value);
            }
            _ => self.add(value),
        }
    }
}

macro_rules! bind_to {
    ($base:ident, $method:ident, $value:ty, $to_f64:expr) => {
        impl MetricAttributable<Box<dyn sdk::$base>> for Bound {
            fn with_attributes(
                &self,
                attributes: &MetricAttributes,
            ) -> Result<Box<dyn sdk::$base>, Box<dyn std::error::Error>> {
                Ok(Box::new(Recorder(self.0.clone(), labels_of(attributes))))
            }
        }
        impl sdk::$base for Recorder {
            fn $method(&self, value: $value) {
                let to_f64: fn($value) -> f64 = $to_f64;
                self.set(to_f64(value));
            }
        }
    };
}

bind_to!(CounterBase, adds, u64, |v| v as f64);
bind_to!(HistogramBase, records, u64, |v| v as f64);
bind_to!(HistogramF64Base, records, f64, |v| v);
bind_to!(HistogramDurationBase, records, Duration, |v| v
    .as_secs_f64());
bind_to!(GaugeBase, records, u64, |v| v as f64);
bind_to!(GaugeF64Base, records, f64, |v| v);

impl MetricAttributable<Box<dyn sdk::UpDownCounterBase>> for Bound {
    fn with_attributes(
        &self,
        attributes: &MetricAttributes,
    ) -> Result<Box<dyn sdk::UpDownCounterBase>, Box<dyn std::error::Error>> {
        Ok(Box::new(Recorder(self.0.clone(), labels_of(attributes))))
    }
}

impl sdk::UpDownCounterBase for Recorder {
    fn adds(&self, value: i64) {
        self.add(value as f64);
    }
}

fn counter() -> Instrument {
    Instrument::Counter(Family::default())
}
fn gauge() -> Instrument {
    Instrument::Gauge(Family::default())
}
fn counts() -> Instrument {
    Instrument::Histogram(Family::new_with_constructor(count_histogram))
}
fn seconds() -> Instrument {
    Instrument::Histogram(Family::new_with_constructor(latency_histogram))
}

impl CoreMeter for SdkMeter {
    fn new_attributes(&self, attribs: NewAttributes) -> MetricAttributes {
        MetricAttributes::NoOp(Arc::new(attribs.into()))
    }

    fn extend_attributes(
        &self,
        existing: MetricAttributes,
        attribs: NewAttributes,
    ) -> MetricAttributes {
        let mut labels: HashMap<String, String> = match existing {
            MetricAttributes::NoOp(map) => (*map).clone(),
            _ => HashMap::new(),
        };
        labels.extend::<HashMap<String, String>>(attribs.into());
        MetricAttributes::NoOp(Arc::new(labels))
    }

    fn counter(&self, params: MetricParameters) -> sdk::Counter {
        sdk::Counter::new(Arc::new(self.instrument(&params, counter)))
    }

    fn histogram(&self, params: MetricParameters) -> sdk::Histogram {
        sdk::Histogram::new(Arc::new(self.instrument(&params, counts)))
    }

    fn histogram_f64(&self, params: MetricParameters) -> sdk::HistogramF64 {
        sdk::HistogramF64::new(Arc::new(self.instrument(&params, counts)))
    }

    /// Recorded in seconds (the Prometheus base unit).
    fn histogram_duration(&self, params: MetricParameters) -> sdk::HistogramDuration {
        sdk::HistogramDuration::new(Arc::new(self.instrument(&params, seconds)))
    }

    fn gauge(&self, params: MetricParameters) -> sdk::Gauge {
        sdk::Gauge::new(Arc::new(self.instrument(&params, gauge)))
    }

    fn gauge_f64(&self, params: MetricParameters) -> sdk::GaugeF64 {
        sdk::GaugeF64::new(Arc::new(self.instrument(&params, gauge)))
    }

    fn up_down_counter(&self, params: MetricParameters) -> sdk::UpDownCounter {
        sdk::UpDownCounter::new(Arc::new(self.instrument(&params, gauge)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_common::telemetry::metrics::MetricKeyValue;

    #[test]
    fn sdk_instruments_show_in_the_registry_with_their_labels() {
        let meter = SdkMeter::default();
        let mut registry = Registry::with_prefix("p");
        meter.register(&mut registry);
        let core = meter.core_meter();
        let base = core.new_attributes(NewAttributes::from([MetricKeyValue::new("ns", "a")]));
        let attrs = core.extend_attributes(base, [MetricKeyValue::new("tq", "q")].into());
        core.counter("temporal_polls".into()).add(2, &attrs);
        core.gauge("temporal_slots".into()).record(5, &attrs);
        let latency = core.histogram_duration("temporal_latency".into());
        latency.record(Duration::from_millis(20), &attrs);
        let text = crate::metrics::encode(&registry);
        for line in [
            r#"p_temporal_polls_total{ns="a",tq="q"} 2"#,
            r#"p_temporal_slots{ns="a",tq="q"} 5"#,
            r#"p_temporal_latency_count{ns="a",tq="q"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}
