//! How a host's answer through durable-mcp is compared with its answer from the upstream: the
//! same JSON once the durable layer's own namespaced `_meta` keys, `resultType` (a 2026-07-28
//! field an older upstream leaves out) and server-everything's clock readings are set aside,
//! numbers compared by value.

use serde_json::Value;

use crate::fixtures::{
    as_written::first_difference,
    everything::{mask_timestamps, numbers_as_f64},
};

/// `_meta` key prefixes the durable path adds (its own, and the protocol's task association).
const DURABLE_META: [&str; 2] = ["io.durable-mcp/", "io.modelcontextprotocol/related-task"];

/// `value` as compared: `resultType` removed, durable `_meta` keys removed (an emptied `_meta`
/// too), resource timestamps masked, numbers as f64.
pub fn normalise(value: &Value) -> Value {
    numbers_as_f64(&strip(&mask_timestamps(value)))
}

fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (key, item) in map {
                if key == "resultType" {
                    continue;
                }
                if key == "_meta"
                    && let Value::Object(meta) = item
                {
                    let kept: serde_json::Map<_, _> = meta
                        .iter()
                        .filter(|(k, _)| !DURABLE_META.iter().any(|p| k.starts_with(p)))
                        .map(|(k, v)| (k.clone(), strip(v)))
                        .collect();
                    if !kept.is_empty() {
                        out.insert(key.clone(), Value::Object(kept));
                    }
                    continue;
                }
                out.insert(key.clone(), strip(item));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

/// `None` when `durable` and `direct` compare equal, else where they first differ.
pub fn difference(durable: &Value, direct: &Value) -> Option<String> {
    differ(&normalise(durable), &normalise(direct))
}

/// Where two normalised values first differ, with both (cut short), or `None`.
fn differ(durable: &Value, direct: &Value) -> Option<String> {
    if durable == direct {
        return None;
    }
    let at = first_difference(durable, direct, String::new());
    Some(format!(
        "they differ at {at}: durably {}, directly {}",
        short(durable),
        short(direct)
    ))
}

/// `value` as JSON, at most 300 characters.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// A tool as listed, for comparing listings: what the connector says of task support
/// (`execution`, which is its own offer, R-CON-39) is set aside.
pub fn listed_tool(tool: &Value) -> Value {
    let mut tool = normalise(tool);
    if let Some(map) = tool.as_object_mut() {
        map.remove("execution");
    }
    tool
}

/// The first difference between two tool listings (by name; each tool as [`listed_tool`]).
pub fn listing_difference(durable: &[Value], direct: &[Value]) -> Option<String> {
    let by_name = |tools: &[Value]| {
        let mut tools: Vec<Value> = tools.iter().map(listed_tool).collect();
        tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Value::Array(tools)
    };
    differ(&by_name(durable), &by_name(direct))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_durable_layers_own_keys_are_set_aside_and_nothing_else() {
        let durable = json!({"resultType": "complete", "content": [{"type": "text", "text": "a"}],
            "_meta": {"io.durable-mcp/taskId": "t", "example.com/x": 1}});
        let direct =
            json!({"content": [{"type": "text", "text": "a"}], "_meta": {"example.com/x": 1.0}});
        assert_eq!(difference(&durable, &direct), None);
        let changed =
            json!({"content": [{"type": "text", "text": "b"}], "_meta": {"example.com/x": 1}});
        assert!(difference(&durable, &changed).is_some());
        let only_durable = json!({"_meta": {"io.durable-mcp/operationId": "o"}, "isError": false});
        assert_eq!(difference(&only_durable, &json!({"isError": false})), None);
    }

    #[test]
    fn listings_compare_by_name_without_the_connectors_task_offer() {
        let durable = [
            json!({"name": "b", "execution": {"taskSupport": "optional"}}),
            json!({"name": "a", "description": "A"}),
        ];
        let direct = [
            json!({"name": "a", "description": "A"}),
            json!({"name": "b", "execution": {"taskSupport": "forbidden"}}),
        ];
        assert_eq!(listing_difference(&durable, &direct), None);
        let renamed = [
            json!({"name": "a", "description": "other"}),
            json!({"name": "b"}),
        ];
        assert!(listing_difference(&durable, &renamed).is_some());
    }
}
