//! The tool listing (R-NXC-2): the reserved `list_tools` operation and the per-tool timeout that
//! every caller uses as the call's schedule-to-close.

use std::time::Duration;

use serde_json::Value;

/// The reserved operation that lists a tool service's tools.
pub const LIST_TOOLS: &str = "list_tools";
/// Key in each listed tool's `_meta`: the per-call timeout in milliseconds, which callers use
/// as the Nexus operation's schedule-to-close timeout.
pub const TIMEOUT_META_KEY: &str = "io.durable-mcp/timeoutMs";

/// Key in a listed tool's `_meta`, `true` when the tool service gives the tool one attempt (it
/// must not run twice): a call of it that timed out may or may not have run, and callers say so
/// (R-NXC-4). Absent means the service retries it.
pub const ONE_ATTEMPT_META_KEY: &str = "io.durable-mcp/oneAttempt";

/// Whether a listed tool says it gets one attempt.
pub fn advertised_one_attempt(tool: &Value) -> bool {
    tool.get("_meta")
        .and_then(|m| m.get(ONE_ATTEMPT_META_KEY))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Marks a tool as one that gets one attempt (see [`ONE_ATTEMPT_META_KEY`]); other tools are
/// left unmarked.
pub fn advertise_one_attempt(tool: &mut serde_json::Map<String, Value>, one_attempt: bool) {
    if !one_attempt {
        return;
    }
    if let Value::Object(meta) = tool
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()))
    {
        meta.insert(ONE_ATTEMPT_META_KEY.into(), Value::Bool(true));
    }
}

/// The timeout a listed tool advertises, if it names one.
pub fn advertised_timeout(tool: &Value) -> Option<Duration> {
    tool.get("_meta")?
        .get(TIMEOUT_META_KEY)?
        .as_u64()
        .map(Duration::from_millis)
}

/// Writes `timeout` into a tool's `_meta`, keeping the keys already there (a `_meta` that is not
/// an object is left as the tool service wrote it).
pub fn advertise_timeout(tool: &mut serde_json::Map<String, Value>, timeout: Duration) {
    let meta = tool
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(meta) = meta {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        meta.insert(TIMEOUT_META_KEY.into(), Value::from(ms));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_timeout_is_written_beside_other_meta_and_read_back() {
        let mut tool = json!({"name": "t", "_meta": {"other": 1}});
        advertise_timeout(tool.as_object_mut().unwrap(), Duration::from_secs(45));
        assert_eq!(tool["_meta"]["other"], 1);
        assert_eq!(tool["_meta"][TIMEOUT_META_KEY], 45_000);
        assert_eq!(advertised_timeout(&tool), Some(Duration::from_secs(45)));
    }

    #[test]
    fn one_attempt_tools_are_marked_and_others_are_not() {
        let mut tool = json!({"name": "t", "_meta": {"other": 1}});
        advertise_one_attempt(tool.as_object_mut().unwrap(), true);
        assert_eq!(tool["_meta"]["other"], 1);
        assert!(advertised_one_attempt(&tool));
        let mut plain = json!({"name": "t"});
        advertise_one_attempt(plain.as_object_mut().unwrap(), false);
        assert_eq!(plain, json!({"name": "t"}));
        assert!(!advertised_one_attempt(&plain));
    }

    #[test]
    fn a_tool_without_a_timeout_advertises_none() {
        assert_eq!(advertised_timeout(&json!({"name": "t"})), None);
        assert_eq!(
            advertised_timeout(&json!({"_meta": {TIMEOUT_META_KEY: "x"}})),
            None
        );
    }
}
