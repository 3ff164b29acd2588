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

/// Key in a listed tool's `_meta`, `true` when the tool service answers the tool's calls inline,
/// synchronously in its Nexus handler (R-PRX-30): such a call has no Activity and reports no
/// progress while it runs, so callers do not look its progress up (R-CON-26). Absent means the
/// call may run in an Activity. A hint, not a promise: a call the service places in an Activity
/// after all still carries its progress with its result.
pub const INLINE_META_KEY: &str = "io.durable-mcp/inline";

/// Key of the `list_tools` input asking for the listing with the tool server's `instructions`
/// (R-NXC-7): `{"withInstructions": true}` is answered `{"tools": [...], "instructions": "..."}`
/// by a service that knows the key. Any other input is answered with the bare array of tools, so
/// callers and services of either age work together.
pub const WITH_INSTRUCTIONS_KEY: &str = "withInstructions";

/// A `list_tools` answer: the tools, and the instructions the tool server gave, if any.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolListing {
    pub tools: Vec<Value>,
    pub instructions: Option<String>,
}

/// Whether a `list_tools` input asks for the object form (see [`WITH_INSTRUCTIONS_KEY`]).
pub fn asks_for_instructions(input: &Value) -> bool {
    input.get(WITH_INSTRUCTIONS_KEY).and_then(Value::as_bool) == Some(true)
}

impl ToolListing {
    /// The answer to write: the object form when `asked`, else the bare array.
    pub fn answer(self, asked: bool) -> Value {
        if !asked {
            return Value::Array(self.tools);
        }
        let mut answer = serde_json::Map::new();
        answer.insert("tools".into(), Value::Array(self.tools));
        if let Some(instructions) = self.instructions {
            answer.insert("instructions".into(), Value::String(instructions));
        }
        Value::Object(answer)
    }

    /// Reads either form of the answer: the bare array (a service that does not know
    /// [`WITH_INSTRUCTIONS_KEY`]) or the object.
    pub fn read(answer: Value) -> Result<Self, String> {
        match answer {
            Value::Array(tools) => Ok(Self {
                tools,
                instructions: None,
            }),
            Value::Object(mut answer) => {
                let Some(Value::Array(tools)) = answer.remove("tools") else {
                    return Err("list_tools answered an object without a tools array".into());
                };
                let instructions = match answer.remove("instructions") {
                    Some(Value::String(text)) => Some(text),
                    _ => None,
                };
                Ok(Self {
                    tools,
                    instructions,
                })
            }
            other => Err(format!("list_tools answered {other}, not a list of tools")),
        }
    }
}

/// A listed tool's name: its `name` when that is a string, else none (a tool service's
/// listing is input: a tool without a string name cannot be called, R-CON-51).
pub fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("name").and_then(Value::as_str)
}

/// Whether a listed tool says its calls must be tasks (`execution.taskSupport: "required"`).
pub fn requires_task(tool: &Value) -> bool {
    tool.pointer("/execution/taskSupport")
        .and_then(Value::as_str)
        == Some("required")
}

/// Whether a listed tool says it gets one attempt.
pub fn advertised_one_attempt(tool: &Value) -> bool {
    meta_flag(tool, ONE_ATTEMPT_META_KEY)
}

/// Marks a tool as one that gets one attempt (see [`ONE_ATTEMPT_META_KEY`]); other tools are
/// left unmarked.
pub fn advertise_one_attempt(tool: &mut serde_json::Map<String, Value>, one_attempt: bool) {
    if one_attempt {
        set_meta_flag(tool, ONE_ATTEMPT_META_KEY);
    }
}

/// Whether a listed tool says its calls are answered inline (see [`INLINE_META_KEY`]).
pub fn advertised_inline(tool: &Value) -> bool {
    meta_flag(tool, INLINE_META_KEY)
}

/// Marks a tool whose calls are answered inline (see [`INLINE_META_KEY`]); other tools are
/// left unmarked.
pub fn advertise_inline(tool: &mut serde_json::Map<String, Value>, inline: bool) {
    if inline {
        set_meta_flag(tool, INLINE_META_KEY);
    }
}

fn meta_flag(tool: &Value, key: &str) -> bool {
    tool.get("_meta")
        .and_then(|m| m.get(key))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Sets `_meta[key] = true`, keeping the keys already there (a `_meta` that is not an object is
/// left as it was written).
fn set_meta_flag(tool: &mut serde_json::Map<String, Value>, key: &str) {
    if let Value::Object(meta) = tool
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()))
    {
        meta.insert(key.into(), Value::Bool(true));
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
    fn inline_tools_are_marked_beside_other_meta_and_others_are_not() {
        let mut tool = json!({"name": "t", "_meta": {"other": 1}});
        advertise_inline(tool.as_object_mut().unwrap(), true);
        assert_eq!(tool["_meta"]["other"], 1);
        assert_eq!(tool["_meta"][INLINE_META_KEY], true);
        assert!(advertised_inline(&tool));
        assert!(!advertised_one_attempt(&tool));
        let mut plain = json!({"name": "t"});
        advertise_inline(plain.as_object_mut().unwrap(), false);
        assert_eq!(plain, json!({"name": "t"}));
        assert!(!advertised_inline(&plain));
        assert!(!advertised_inline(
            &json!({"_meta": {INLINE_META_KEY: "yes"}})
        ));
    }

    #[test]
    fn listings_with_instructions_are_asked_for_and_read_in_either_form() {
        assert!(asks_for_instructions(&json!({WITH_INSTRUCTIONS_KEY: true})));
        assert!(!asks_for_instructions(&json!({})));
        assert!(!asks_for_instructions(&Value::Null));
        let listing = ToolListing {
            tools: vec![json!({"name": "t"})],
            instructions: Some("Use t.".into()),
        };
        assert_eq!(listing.clone().answer(false), json!([{"name": "t"}]));
        let object = listing.clone().answer(true);
        assert_eq!(
            object,
            json!({"tools": [{"name": "t"}], "instructions": "Use t."})
        );
        assert_eq!(ToolListing::read(object).unwrap(), listing);
        let bare = ToolListing::read(json!([{"name": "t"}])).unwrap();
        assert_eq!(bare.instructions, None);
        assert!(ToolListing::read(json!({"instructions": "x"})).is_err());
        assert!(ToolListing::read(json!("x")).is_err());
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

/// Property tests of a tool service's listing as the connector and the proxy read it
/// (R-CON-51): any JSON is a listing or an error and any tool a name or none; what a service
/// advertises reads back.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn tool_json() -> impl Strategy<Value = Value> {
        const KEYS: &[&str] = &[
            "name",
            "tools",
            "instructions",
            "_meta",
            "execution",
            "taskSupport",
            ONE_ATTEMPT_META_KEY,
            INLINE_META_KEY,
            TIMEOUT_META_KEY,
            WITH_INSTRUCTIONS_KEY,
        ];
        crate::props::json_tree(KEYS, &["required", "optional"])
    }

    proptest! {
        #[test]
        fn any_listing_and_any_tool_are_read_without_a_panic(v in tool_json()) {
            let _ = asks_for_instructions(&v);
            let _ = (tool_name(&v), requires_task(&v), advertised_one_attempt(&v));
            let _ = (advertised_inline(&v), advertised_timeout(&v));
            if let Ok(listing) = ToolListing::read(v.clone()) {
                prop_assert_eq!(ToolListing::read(listing.clone().answer(true)), Ok(listing));
            }
        }

        /// What the proxy advertises on a tool reads back, and the tool keeps what it wrote.
        #[test]
        fn advertised_flags_and_timeouts_read_back(
            tool in tool_json(),
            one_attempt in any::<bool>(),
            inline in any::<bool>(),
            ms in any::<u64>(),
        ) {
            let Value::Object(mut fields) = tool else { return Ok(()) };
            let meta_is_object = fields.get("_meta").is_none_or(Value::is_object);
            advertise_timeout(&mut fields, Duration::from_millis(ms));
            advertise_one_attempt(&mut fields, one_attempt);
            advertise_inline(&mut fields, inline);
            let tool = Value::Object(fields);
            if meta_is_object {
                prop_assert_eq!(advertised_timeout(&tool), Some(Duration::from_millis(ms)));
                prop_assert!(!one_attempt || advertised_one_attempt(&tool));
                prop_assert!(!inline || advertised_inline(&tool));
            }
        }

        #[test]
        fn a_listing_reads_back_in_either_form(
            tools in prop::collection::vec(tool_json(), 0..4),
            instructions in prop::option::of("\\PC{0,20}"),
            asked in any::<bool>(),
        ) {
            let listing = ToolListing { tools, instructions };
            let expected = ToolListing { instructions: listing.instructions.clone().filter(|_| asked), ..listing.clone() };
            prop_assert_eq!(ToolListing::read(listing.answer(asked)), Ok(expected));
            prop_assert!(ToolListing::read(json!(null)).is_err());
        }
    }
}
