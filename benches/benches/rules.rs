//! Benchmarks of the pure rules on every call's hot path: payload conversion and failure
//! classification. `cargo bench -p durable-mcp-benches` runs them; under `cargo test
//! --all-targets` each runs once as a smoke test.

use criterion::{Criterion, criterion_group, criterion_main};
use durable_mcp::{nexus::failure, payload};
use serde_json::json;
use std::hint::black_box;
use temporalio_protos::temporal::api::failure::v1::{
    Failure, TimeoutFailureInfo, failure::FailureInfo,
};

fn tool_result(kib: usize) -> serde_json::Value {
    json!({
        "content": [
            {"type": "text", "text": "x".repeat(kib * 1024)},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"}
        ],
        "structuredContent": {"rows": (0..50).collect::<Vec<_>>()},
        "isError": false
    })
}

fn payload_conversion(c: &mut Criterion) {
    let mut group = c.benchmark_group("payload");
    for kib in [1usize, 64] {
        let value = tool_result(kib);
        group.bench_function(format!("encode_call_tool_result_{kib}KiB"), |b| {
            b.iter(|| {
                payload::to_marked_payload(black_box(&value), payload::CALL_TOOL_RESULT).unwrap()
            })
        });
        let encoded = payload::to_marked_payload(&value, payload::CALL_TOOL_RESULT).unwrap();
        group.bench_function(format!("decode_call_tool_result_{kib}KiB"), |b| {
            b.iter(|| payload::to_json(black_box(&encoded)).unwrap())
        });
    }
    group.finish();
}

fn failure_summary(c: &mut Criterion) {
    let nested = Failure {
        message: "nexus operation failed".into(),
        cause: Some(Box::new(Failure {
            message: "deadline exceeded".into(),
            failure_info: Some(FailureInfo::TimeoutFailureInfo(
                TimeoutFailureInfo::default(),
            )),
            ..Default::default()
        })),
        ..Default::default()
    };
    c.bench_function("failure/summarize_nested", |b| {
        b.iter(|| failure::summarize(black_box(&nested)))
    });
}

criterion_group!(benches, payload_conversion, failure_summary);
criterion_main!(benches);
