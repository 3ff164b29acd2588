//! Strategies the proxy's property tests share (R-CON-51): an upstream's answers are input too,
//! so JSON trees whose keys are those the proxy reads of tool lists, results, task answers and
//! errors; one-byte changes come from the contract's strategies.

use durable_mcp_contract::props::json_tree;
pub use durable_mcp_contract::props::{mutate, mutation};
use proptest::prelude::*;
use serde_json::Value;

/// The keys the proxy reads of an upstream's answers.
const ANSWER_KEYS: &[&str] = &[
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

/// Any JSON tree, its keys mostly those an upstream's answers carry.
pub fn answer() -> impl Strategy<Value = Value> + Clone {
    json_tree(ANSWER_KEYS, ANSWER_WORDS)
}
