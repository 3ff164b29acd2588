//! One tool's definition: its listing (R-NXC-2) and how its handler is made. The listing is a
//! pure function of the definition.

use std::{sync::Arc, time::Duration};

use rmcp::model::ToolAnnotations;
use serde_json::{Map, Value};

use durable_mcp_contract::listing::advertise_timeout;
use durable_mcp_runtime::nexus::OperationHandler;
use durable_mcp_runtime::temporal::TemporalConnection;

/// What a tool's handler may need when the service is built.
pub struct BuildContext {
    pub service: String,
    /// The service's Temporal connection, if one was given (Workflow-backed tools need it).
    pub temporal: Option<TemporalConnection>,
}

/// Makes a tool's handler once the service is built, given the tool's final timeout; the error
/// says what is missing.
pub type HandlerFactory =
    Box<dyn FnOnce(&BuildContext, Duration) -> Result<Arc<dyn OperationHandler>, String> + Send>;

/// A tool: a Nexus operation of the same name plus the metadata its listing shows. Made by
/// `Tool::sync` or `Tool::workflow` (in the modules of those names), then refined with the
/// builder methods below.
pub struct Tool {
    pub(super) name: String,
    pub(super) title: Option<String>,
    pub(super) description: Option<String>,
    pub(super) input_schema: Value,
    pub(super) output_schema: Option<Value>,
    pub(super) annotations: Option<ToolAnnotations>,
    pub(super) meta: Map<String, Value>,
    pub(super) timeout: Duration,
    pub(super) handler: HandlerFactory,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool with the given schemas and handler. The description defaults to the input
    /// schema's (the input type's doc comment, through schemars).
    pub fn new(
        name: impl Into<String>,
        input_schema: Value,
        output_schema: Option<Value>,
        timeout: Duration,
        handler: HandlerFactory,
    ) -> Self {
        let description = input_schema
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            name: name.into(),
            title: None,
            description,
            input_schema,
            output_schema,
            annotations: None,
            meta: Map::new(),
            timeout,
            handler,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    /// A human-friendly name for hosts' menus.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }
    /// What the tool does, for the model (replaces the input type's doc comment).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
    /// All annotations at once (hints for hosts and for the proxy-style retry inference).
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }
    /// `readOnlyHint: true`: the tool changes nothing.
    pub fn read_only(self) -> Self {
        self.hints(|a| a.read_only_hint = Some(true))
    }
    /// `destructiveHint`: the tool may delete or overwrite.
    pub fn destructive(self, destructive: bool) -> Self {
        self.hints(|a| a.destructive_hint = Some(destructive))
    }
    /// `idempotentHint: true`: calling again with the same arguments changes nothing more.
    pub fn idempotent(self) -> Self {
        self.hints(|a| a.idempotent_hint = Some(true))
    }
    /// `openWorldHint`: the tool reaches beyond a closed domain (the web, other systems).
    pub fn open_world(self, open: bool) -> Self {
        self.hints(|a| a.open_world_hint = Some(open))
    }
    /// A `_meta` entry of the listed tool.
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta.insert(key.into(), value);
        self
    }
    /// The per-call timeout, advertised in the listing; callers use it as the operation's
    /// schedule-to-close, and a Workflow-backed tool's Workflow gets it as execution timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn hints(mut self, f: impl FnOnce(&mut ToolAnnotations)) -> Self {
        f(self
            .annotations
            .get_or_insert_with(ToolAnnotations::default));
        self
    }

    /// Why this definition cannot be served, if it cannot (the name is checked separately).
    pub(super) fn definition_problem(&self) -> Option<String> {
        if self.input_schema.get("type") != Some(&Value::from("object")) {
            return Some(format!(
                "tool {:?}: its input type's JSON Schema is not `\"type\": \"object\"`; MCP \
                 tool arguments are an object, so use a struct (or a map) as the input",
                self.name
            ));
        }
        if let Some(out) = &self.output_schema
            && out.get("type") != Some(&Value::from("object"))
        {
            return Some(format!(
                "tool {:?}: its structured output type's JSON Schema is not an object; MCP \
                 structuredContent is an object, so return a struct",
                self.name
            ));
        }
        if self.timeout.is_zero() {
            return Some(format!(
                "tool {:?}: the timeout must be positive",
                self.name
            ));
        }
        None
    }

    /// The MCP Tool JSON this tool is listed as, with its timeout in `_meta` (R-NXC-2).
    pub fn listing(&self) -> Value {
        let mut t = Map::new();
        t.insert("name".into(), Value::from(self.name.clone()));
        if let Some(title) = &self.title {
            t.insert("title".into(), Value::from(title.clone()));
        }
        if let Some(d) = &self.description {
            t.insert("description".into(), Value::from(d.clone()));
        }
        t.insert("inputSchema".into(), self.input_schema.clone());
        if let Some(out) = &self.output_schema {
            t.insert("outputSchema".into(), out.clone());
        }
        if let Some(a) = &self.annotations {
            t.insert(
                "annotations".into(),
                // Annotations (flags and a title) always serialize.
                serde_json::to_value(a).unwrap_or_default(),
            );
        }
        if !self.meta.is_empty() {
            t.insert("_meta".into(), Value::Object(self.meta.clone()));
        }
        advertise_timeout(&mut t, self.timeout);
        Value::Object(t)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use durable_mcp_contract::listing::{TIMEOUT_META_KEY, advertised_timeout};

    fn tool(input: Value, output: Option<Value>) -> Tool {
        Tool::new(
            "t",
            input,
            output,
            Duration::from_secs(30),
            Box::new(|_, _| Err("unused".into())),
        )
    }

    #[test]
    fn listing_has_every_field_set_and_the_timeout() {
        let t = tool(
            json!({"type": "object", "description": "Counts."}),
            Some(json!({"type": "object"})),
        )
        .title("Count")
        .read_only()
        .idempotent()
        .meta("x", json!(1))
        .timeout(Duration::from_secs(5));
        let l = t.listing();
        assert_eq!(l["name"], "t");
        assert_eq!(l["title"], "Count");
        assert_eq!(l["description"], "Counts.");
        assert_eq!(l["inputSchema"]["type"], "object");
        assert_eq!(l["outputSchema"]["type"], "object");
        assert_eq!(
            l["annotations"],
            json!({"readOnlyHint": true, "idempotentHint": true})
        );
        assert_eq!(l["_meta"]["x"], 1);
        assert_eq!(l["_meta"][TIMEOUT_META_KEY], 5000);
        assert_eq!(advertised_timeout(&l), Some(Duration::from_secs(5)));
    }

    #[test]
    fn minimal_listing_has_no_empty_fields() {
        let l = tool(json!({"type": "object"}), None).listing();
        let keys: Vec<_> = l.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert!(l.get("outputSchema").is_none() && l.get("annotations").is_none());
    }

    #[test]
    fn definitions_that_mcp_cannot_carry_are_named() {
        let e = tool(json!({"type": "string"}), None)
            .definition_problem()
            .unwrap();
        assert!(e.contains("\"t\"") && e.contains("input"), "{e}");
        let e = tool(json!({"type": "object"}), Some(json!({"type": "integer"})))
            .definition_problem()
            .unwrap();
        assert!(e.contains("output"), "{e}");
        let e = tool(json!({"type": "object"}), None)
            .timeout(Duration::ZERO)
            .definition_problem()
            .unwrap();
        assert!(e.contains("timeout"), "{e}");
    }
}
