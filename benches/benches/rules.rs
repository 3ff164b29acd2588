//! Benchmarks of the pure rules on every call's hot path: payload conversion, failure
//! classification, retry inference and option resolution, task-ID signing and verification,
//! the idempotency fingerprint of call arguments, and outcome-to-`CallToolResult` mapping. `cargo bench -p durable-mcp-benches` runs them; under `cargo test
//! --all-targets` each runs once as a smoke test.

use criterion::{Criterion, criterion_group, criterion_main};
use durable_mcp::{
    connector::{
        idempotency::arguments_fingerprint,
        task_ref::{CallerScope, Deployment, SigningKey, TaskRef, caller_hash, sign, verify},
    },
    contract::{
        operation,
        outcome::{Outcome, to_call_tool_result},
        payload,
    },
    proxy::{
        options::{ActivityOptions, RetryPolicySpec, resolve},
        retry::{ToolHints, infer},
    },
};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;
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
        b.iter(|| operation::summarize(black_box(&nested)))
    });
}

fn retry_inference(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry");
    let cases = [
        (
            "read_only",
            json!({"name": "t", "annotations": {"readOnlyHint": true}}),
        ),
        (
            "destructive_idempotent",
            json!({"name": "t", "annotations": {"destructiveHint": true, "idempotentHint": true}}),
        ),
        (
            "destructive",
            json!({"name": "t", "annotations": {"destructiveHint": true}}),
        ),
        ("no_annotations", json!({"name": "t"})),
    ];
    for (name, tool) in &cases {
        let hints = ToolHints::from_tool_json(tool);
        group.bench_function(format!("infer_{name}"), |b| {
            b.iter(|| infer(black_box(&hints)))
        });
    }
    let tool = &cases[0].1;
    group.bench_function("hints_from_tool_json", |b| {
        b.iter(|| ToolHints::from_tool_json(black_box(tool)))
    });
    let hints = ToolHints::from_tool_json(&cases[2].1);
    let defaults = ActivityOptions {
        start_to_close_timeout: Some(Duration::from_secs(30)),
        heartbeat_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    group.bench_function("resolve_inferred", |b| {
        b.iter(|| resolve(black_box(&defaults), None, black_box(&hints)))
    });
    let over = ActivityOptions {
        start_to_close_timeout: Some(Duration::from_secs(120)),
        retry_policy: Some(RetryPolicySpec {
            maximum_attempts: Some(5),
            non_retryable_error_types: vec!["Refused".into()],
            ..RetryPolicySpec::temporal_default()
        }),
        summary: Some("a tool override".into()),
        ..Default::default()
    };
    group.bench_function("resolve_with_override", |b| {
        b.iter(|| {
            resolve(
                black_box(&defaults),
                Some(black_box(&over)),
                black_box(&hints),
            )
        })
    });
    group.finish();
}

fn task_ids(c: &mut Criterion) {
    let mut group = c.benchmark_group("task_ref");
    let key = SigningKey::generate();
    let scope = CallerScope::Subject {
        issuer: "https://issuer.example".into(),
        subject: "user-1234567890".into(),
    };
    group.bench_function("caller_hash", |b| {
        b.iter(|| caller_hash(black_box(&key), black_box(&scope)))
    });
    let owner = caller_hash(&key, &scope);
    let r = TaskRef::new(
        "default",
        "mcp-0b8f6a2e-0b8f6a2e-3c41-4d0e-9f3a-5d1c2b7e8a90",
        "019a7c3e-5b2d-7f10-8e4a-6c9d0b1a2f3e",
        owner.clone(),
    );
    let d = Deployment {
        namespace: "default",
        connector_name: "mcp",
    };
    group.bench_function("sign", |b| {
        b.iter(|| sign(black_box(&key), black_box("mcp"), black_box(&r)))
    });
    let id = sign(&key, "mcp", &r);
    group.bench_function("verify_valid", |b| {
        b.iter(|| verify(black_box(&key), black_box(&id), &d, black_box(&owner)).unwrap())
    });
    let other = caller_hash(&key, &CallerScope::Anonymous);
    group.bench_function("verify_wrong_owner", |b| {
        b.iter(|| verify(black_box(&key), black_box(&id), &d, black_box(&other)).unwrap_err())
    });
    // One character of the tag changed (the last one carries padding bits, so not that one).
    let mut forged = id.clone();
    let at = id.len() - 2;
    let flipped = if id.as_bytes()[at] == b'A' { "B" } else { "A" };
    forged.replace_range(at..at + 1, flipped);
    group.bench_function("verify_forged_tag", |b| {
        b.iter(|| verify(black_box(&key), black_box(&forged), &d, black_box(&owner)).unwrap_err())
    });
    group.finish();
}

/// An arguments object of 50 keys, inserted in reverse order, with mixed value types.
fn fifty_key_arguments() -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for i in (0..50).rev() {
        let value = match i % 5 {
            0 => json!(format!("value number {i} with some text")),
            1 => json!(i * 1000),
            2 => json!(i % 2 == 0),
            3 => json!([i, i + 1, {"nested": format!("n{i}")}]),
            _ => json!({"z": i, "a": {"deep": [1.5, null, "x"]}}),
        };
        map.insert(format!("key_{i:02}"), value);
    }
    serde_json::Value::Object(map)
}

fn idempotency(c: &mut Criterion) {
    let args = fifty_key_arguments();
    let key = durable_mcp::connector::idempotency::FingerprintKey::from_bytes([7; 32]);
    c.bench_function("idempotency/arguments_fingerprint_50_keys", |b| {
        b.iter(|| arguments_fingerprint(&key, black_box(&args)))
    });
}

fn outcome_mapping(c: &mut Criterion) {
    let mut group = c.benchmark_group("outcome");
    let marked = Outcome::Result {
        payload_json: tool_result(1),
        marked_call_tool_result: true,
    };
    group.bench_function("to_call_tool_result_marked_1KiB", |b| {
        b.iter(|| to_call_tool_result(black_box(&marked)))
    });
    let plain = Outcome::Result {
        payload_json: json!({"rows": (0..50).collect::<Vec<_>>(), "ok": true}),
        marked_call_tool_result: false,
    };
    group.bench_function("to_call_tool_result_plain_value", |b| {
        b.iter(|| to_call_tool_result(black_box(&plain)))
    });
    let failed = Outcome::Failed {
        message: "upstream refused: invalid argument".into(),
        error_type: Some("UpstreamToolError".into()),
    };
    group.bench_function("to_call_tool_result_failed", |b| {
        b.iter(|| to_call_tool_result(black_box(&failed)))
    });
    group.finish();
}

criterion_group!(
    benches,
    payload_conversion,
    failure_summary,
    retry_inference,
    task_ids,
    idempotency,
    outcome_mapping
);
criterion_main!(benches);
