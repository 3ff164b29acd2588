//! What a tool definition is: a name (as in the Temporal MCP server the set mirrors), input and
//! output JSON Schemas, and annotations that tell the truth about each tool (R-OPS-3), with the
//! schema helpers the family modules (workflows, batch, schedules) declare their tools with.

use std::sync::Arc;

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

/// Who may call a tool, for inbound OAuth scopes (R-OPS-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolFamily {
    /// Reads Temporal state; changes nothing.
    Read,
    /// Starts, signals, cancels, creates or pauses: changes state, never destroys it.
    Write,
    /// Terminates or deletes: destroys work or configuration.
    Admin,
}

impl ToolFamily {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

/// One tool of the set.
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub family: ToolFamily,
    /// Repeating the call with the same arguments has no further effect.
    pub idempotent: bool,
    /// Each input besides `namespace`.
    pub inputs: Vec<Input>,
    /// Each output field; all are always present.
    pub outputs: Vec<Output>,
}

impl ToolSpec {
    /// Read-only tools are exactly the read family; destructive ones exactly the admin family.
    pub fn annotations(&self) -> ToolAnnotations {
        let mut a = ToolAnnotations::with_title(self.title)
            .read_only(self.family == ToolFamily::Read)
            .open_world(false);
        if self.family != ToolFamily::Read {
            a = a
                .destructive(self.family == ToolFamily::Admin)
                .idempotent(self.idempotent);
        }
        a
    }

    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        properties.insert(
            "namespace".into(),
            json!({"type": "string", "description": "Temporal namespace; omit for the connector's own. Must be allowed by --allowed-namespaces."}),
        );
        let mut required = Vec::new();
        for (name, schema, req) in &self.inputs {
            properties.insert((*name).into(), schema.clone());
            if *req {
                required.push(json!(name));
            }
        }
        object_schema(properties, required)
    }

    pub fn output_schema(&self) -> Map<String, Value> {
        let properties: Map<String, Value> = self
            .outputs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect();
        let required = self.outputs.iter().map(|(n, _)| json!(n)).collect();
        object_schema(properties, required)
    }

    pub fn tool(&self) -> Tool {
        Tool::new(self.name, self.description, Arc::new(self.input_schema()))
            .with_title(self.title)
            .with_raw_output_schema(Arc::new(self.output_schema()))
            .with_annotations(self.annotations())
    }
}

fn object_schema(properties: Map<String, Value>, required: Vec<Value>) -> Map<String, Value> {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    schema
}

/// (name, JSON Schema, required) of one input.
pub type Input = (&'static str, Value, bool);
/// (name, JSON Schema) of one output field.
pub type Output = (&'static str, Value);

/// A string input.
pub fn s(description: &str) -> Value {
    json!({"type": "string", "description": description})
}
/// An integer input with its bounds and default.
pub fn int(description: &str, min: u64, max: u64, default: u64) -> Value {
    json!({"type": "integer", "description": description, "minimum": min, "maximum": max, "default": default})
}
/// A list of JSON arguments.
pub fn args(description: &str) -> Value {
    json!({"type": "array", "description": description, "items": {}})
}
/// A field of this JSON type.
pub fn t(ty: &str) -> Value {
    json!({"type": ty})
}
/// A field of this JSON type, or null.
pub fn nullable(ty: &str) -> Value {
    json!({"type": [ty, "null"]})
}
/// A field that is a list of objects.
pub fn objects() -> Value {
    json!({"type": "array", "items": {"type": "object"}})
}

/// `base`, then `more`.
pub fn with<T>(mut base: Vec<T>, more: Vec<T>) -> Vec<T> {
    base.extend(more);
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal_tools::specs;
    use std::collections::BTreeSet;

    const SEED_NAMES: [&str; 21] = [
        "start_workflow",
        "get_workflow_result",
        "describe_workflow",
        "list_workflows",
        "get_workflow_history",
        "get_workflow_event",
        "query_workflow",
        "signal_workflow",
        "cancel_workflow",
        "terminate_workflow",
        "continue_as_new",
        "batch_signal",
        "batch_cancel",
        "batch_terminate",
        "create_schedule",
        "list_schedules",
        "describe_schedule",
        "pause_schedule",
        "unpause_schedule",
        "delete_schedule",
        "trigger_schedule",
    ];

    #[test]
    fn names_are_the_seed_tools_exactly_once() {
        let names: Vec<_> = specs().iter().map(|s| s.name).collect();
        assert_eq!(names, SEED_NAMES);
    }

    #[test]
    fn annotations_tell_the_truth() {
        let destructive: BTreeSet<_> = specs()
            .iter()
            .filter(|s| s.annotations().destructive_hint == Some(true))
            .map(|s| s.name)
            .collect();
        assert_eq!(
            destructive,
            BTreeSet::from(["terminate_workflow", "batch_terminate", "delete_schedule"])
        );
        for spec in specs() {
            let a = spec.annotations();
            let read = spec.family == ToolFamily::Read;
            assert_eq!(a.read_only_hint, Some(read), "{}", spec.name);
            assert_eq!(a.open_world_hint, Some(false), "{}", spec.name);
            if read {
                assert!(
                    spec.name.starts_with("get_")
                        || spec.name.starts_with("list_")
                        || spec.name.starts_with("describe_")
                        || spec.name == "query_workflow",
                    "{}",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn every_tool_takes_a_namespace_and_has_object_schemas() {
        for spec in specs() {
            let tool = spec.tool();
            assert_eq!(tool.input_schema["type"], "object");
            assert!(
                tool.input_schema["properties"].get("namespace").is_some(),
                "{}",
                spec.name
            );
            let out = tool.output_schema.expect("output schema");
            assert_eq!(out["type"], "object");
            assert!(
                !out["required"].as_array().unwrap().is_empty(),
                "{}",
                spec.name
            );
            let required: Vec<_> = tool.input_schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .collect();
            for r in required {
                assert!(
                    tool.input_schema["properties"]
                        .get(r.as_str().unwrap())
                        .is_some(),
                    "{}: {r}",
                    spec.name
                );
            }
        }
    }
}
