//! Strategies the proxy's property tests share (R-CON-51): an upstream's answers are input too,
//! so arbitrary JSON trees whose keys are those the proxy reads of tool lists, results, task
//! answers and errors, and one-byte changes of the states the proxy signs.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// The keys the proxy reads of an upstream's answers.
const ANSWER_KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "_meta",
    "progressToken",
    "progress",
    "total",
    "level",
    "logger",
    "tools",
    "name",
    "annotations",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
    "execution",
    "taskSupport",
    "content",
    "structuredContent",
    "isError",
    "resultType",
    "task",
    "taskId",
    "status",
    "statusMessage",
    "pollIntervalMs",
    "pollInterval",
    "inputRequests",
    "requestState",
    "nextCursor",
];

/// Text values the proxy compares against.
const ANSWER_WORDS: &[&str] = &[
    "task",
    "complete",
    "input_required",
    "working",
    "completed",
    "failed",
    "cancelled",
    "required",
    "optional",
    "notifications/message",
    "notifications/progress",
    "2.0",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(ANSWER_WORDS).prop_map(Value::from),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(ANSWER_KEYS).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
}

/// Any JSON tree up to 5 levels deep, its keys mostly those an upstream's answers carry.
pub fn answer() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `text` with one byte replaced, removed or inserted at `at` (`op` picks which); `None` when
/// that leaves it as it was or not UTF-8.
pub fn mutate(text: &str, op: u8, at: prop::sample::Index, byte: u8) -> Option<String> {
    let mut bytes = text.as_bytes().to_vec();
    match op % 3 {
        0 if !bytes.is_empty() => {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        1 if !bytes.is_empty() => {
            bytes.remove(at.index(bytes.len()));
        }
        2 => bytes.insert(at.index(bytes.len() + 1), byte),
        _ => return None,
    }
    String::from_utf8(bytes).ok().filter(|m| m != text)
}
