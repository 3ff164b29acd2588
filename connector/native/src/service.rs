//! The tool-service builder: tools and plain operations in, a checked [`Service`] with a
//! generated `list_tools` out (R-NAT-1, R-NAT-2).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    features::{Prompt, Published, Resource, ResourceTemplate},
    names::name_problem,
    tool::{BuildContext, Tool},
};
use durable_mcp_contract::{
    input::PARTIAL_ROUND, listing::LIST_TOOLS, operation_name::operation_for_tool, payload,
};
use durable_mcp_runtime::nexus::{Service, StartOutcome, partial_round, start_fn};
use durable_mcp_runtime::temporal::TemporalConnection;

/// Why a tool service cannot be built; names the tool and says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool service {service:?}: {reason}")]
pub struct BuildError {
    pub service: String,
    /// The tool (or operation) at fault, when one is.
    pub tool: Option<String>,
    pub reason: String,
}

/// Builds a Nexus service whose tools MCP callers list and call (see the module doc of
/// [`native`](super) for an example).
///
/// Tools are opt-in: [`ToolService::tool`] lists one, [`ToolService::operation`] serves an
/// operation that is not listed. With [`ToolService::expose_all`], operations are listed too,
/// except those named in [`ToolService::exclude`].
pub struct ToolService {
    name: String,
    tools: Vec<Tool>,
    operations: Vec<Tool>,
    expose_all: bool,
    excluded: BTreeSet<String>,
    temporal: Option<TemporalConnection>,
    published: Published,
}

impl ToolService {
    /// A service named `name`: the `service` of the callers' routes.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            tools: Vec::new(),
            operations: Vec::new(),
            expose_all: false,
            excluded: BTreeSet::new(),
            temporal: None,
            published: Published::default(),
        }
    }
    /// Publishes a static resource (R-NAT-8).
    pub fn resource(mut self, resource: Resource) -> Self {
        self.published.resources.push(resource);
        self
    }
    /// Publishes a resource template whose matching URIs its function reads (R-NAT-8).
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.published.templates.push(template);
        self
    }
    /// Publishes a prompt (R-NAT-8).
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.published.prompts.push(prompt);
        self
    }
    /// Adds a tool: listed, and served as the operation of the same name.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }
    /// Adds an operation that is not a tool (unless [`ToolService::expose_all`]): callers who
    /// know its name can start it over Nexus, MCP hosts never see it.
    pub fn operation(mut self, operation: Tool) -> Self {
        self.operations.push(operation);
        self
    }
    /// Lists every operation as a tool, except the excluded ones.
    pub fn expose_all(mut self) -> Self {
        self.expose_all = true;
        self
    }
    /// Keeps an operation out of an [`ToolService::expose_all`] listing.
    pub fn exclude(mut self, operation: impl Into<String>) -> Self {
        self.excluded.insert(operation.into());
        self
    }
    /// The Temporal connection Workflow-backed tools start their Workflows with (in its
    /// namespace).
    pub fn temporal(mut self, temporal: TemporalConnection) -> Self {
        self.temporal = Some(temporal);
        self
    }

    fn error(&self, tool: Option<&str>, reason: impl Into<String>) -> BuildError {
        BuildError {
            service: self.name.clone(),
            tool: tool.map(str::to_owned),
            reason: reason.into(),
        }
    }

    /// Checks every definition and builds the service; the first problem found is the error.
    pub fn build(self) -> Result<Service, BuildError> {
        if self.name.trim().is_empty() {
            return Err(self.error(None, "the service name must not be empty"));
        }
        let mut seen = BTreeSet::new();
        for t in self.tools.iter().chain(&self.operations) {
            if let Some(reason) = name_problem(&t.name) {
                return Err(self.error(Some(&t.name), reason));
            }
            if !seen.insert(t.name.clone()) {
                return Err(self.error(
                    Some(&t.name),
                    format!(
                        "two tools or operations are named {:?}; names must be unique",
                        t.name
                    ),
                ));
            }
            if let Some(reason) = t.definition_problem() {
                return Err(self.error(Some(&t.name), reason));
            }
        }
        for name in &self.excluded {
            let reason = if !self.expose_all {
                format!("{name:?} is excluded, but exclusions apply only with expose_all()")
            } else if self.tools.iter().any(|t| &t.name == name) {
                format!("{name:?} is added with tool() and also excluded; use operation() for it")
            } else if !seen.contains(name) {
                format!("{name:?} is excluded, but no operation has that name")
            } else {
                continue;
            };
            return Err(self.error(Some(name), reason));
        }
        let listed = |t: &Tool, is_tool: bool| {
            is_tool || (self.expose_all && !self.excluded.contains(&t.name))
        };
        let listing: Vec<Value> = self
            .tools
            .iter()
            .map(|t| (t, true))
            .chain(self.operations.iter().map(|t| (t, false)))
            .filter(|(t, is_tool)| listed(t, *is_tool))
            .map(|(t, _)| t.listing())
            .collect();
        let list_payload = payload::to_marked_payload(&listing, payload::TOOL_LIST)
            .map_err(|e| self.error(None, format!("the listing does not encode: {e}")))?;

        let ctx = BuildContext {
            service: self.name.clone(),
            temporal: self.temporal.clone(),
        };
        let mut service = Service::new(self.name.clone())
            .operation(
                LIST_TOOLS,
                start_fn(move |_, _| {
                    let p = list_payload.clone();
                    async move { Ok(StartOutcome::Sync(p)) }
                }),
            )
            .operation(PARTIAL_ROUND, partial_round()); // Answers kept for the rest (R-CON-40).
        let (name, tools, operations) = (self.name, self.tools, self.operations);
        service = self
            .published
            .add_operations(service)
            .map_err(|reason| BuildError {
                service: name.clone(),
                tool: None,
                reason,
            })?;
        for t in tools.into_iter().chain(operations) {
            let handler = (t.handler)(&ctx, t.timeout).map_err(|reason| BuildError {
                service: name.clone(),
                tool: Some(t.name.clone()),
                reason,
            })?;
            service = service.operation(operation_for_tool(&t.name), handler);
        }
        Ok(service)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::result::{Structured, ToolFailure};
    use durable_mcp_runtime::nexus::StartContext;

    /// Counts the words of a text.
    #[derive(Deserialize, schemars::JsonSchema)]
    struct Text {
        text: String,
    }
    #[derive(Serialize, schemars::JsonSchema)]
    struct Words {
        words: usize,
    }

    async fn count(input: Text) -> Result<Structured<Words>, ToolFailure> {
        let words = input.text.split_whitespace().count();
        Ok(Structured::new(Words { words }))
    }

    fn tool(name: &str) -> Tool {
        Tool::sync(name, count)
    }

    async fn listing(service: &Service) -> Vec<Value> {
        let StartOutcome::Sync(p) = service
            .handler(LIST_TOOLS)
            .unwrap()
            .start(
                StartContext::new("e", service.name(), LIST_TOOLS, "r"),
                Default::default(),
            )
            .await
            .unwrap()
        else {
            panic!("list_tools answers sync")
        };
        assert_eq!(payload::mcp_type(&p), Some(payload::TOOL_LIST));
        serde_json::from_value(payload::to_json(&p).unwrap()).unwrap()
    }

    fn names(listing: &[Value]) -> Vec<&str> {
        listing
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn tools_are_opt_in_and_operations_are_not_listed() {
        let s = ToolService::new("s")
            .tool(tool("a").title("A"))
            .operation(tool("hidden"))
            .build()
            .unwrap();
        let l = listing(&s).await;
        assert_eq!(names(&l), ["a"]);
        assert_eq!(l[0]["title"], "A");
        assert_eq!(l[0]["description"], "Counts the words of a text.");
        assert_eq!(l[0]["inputSchema"]["properties"]["text"]["type"], "string");
        assert_eq!(
            l[0]["outputSchema"]["properties"]["words"]["type"],
            "integer"
        );
        assert!(
            s.handler("hidden").is_some(),
            "the operation is still served"
        );
    }

    #[tokio::test]
    async fn expose_all_lists_every_operation_but_the_excluded() {
        let s = ToolService::new("s")
            .expose_all()
            .tool(tool("a"))
            .operation(tool("b"))
            .operation(tool("c"))
            .exclude("c")
            .build()
            .unwrap();
        assert_eq!(names(&listing(&s).await), ["a", "b"]);
    }

    #[tokio::test]
    async fn a_sync_tool_answers_a_marked_call_tool_result() {
        let s = ToolService::new("s").tool(tool("a")).build().unwrap();
        let input = payload::to_payload(&json!({"text": "a b c"})).unwrap();
        let StartOutcome::Sync(p) = s
            .handler("a")
            .unwrap()
            .start(StartContext::new("e", "s", "a", "r"), input)
            .await
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(payload::mcp_type(&p), Some(payload::CALL_TOOL_RESULT));
        let r = payload::to_json(&p).unwrap();
        assert_eq!(r["structuredContent"], json!({"words": 3}));
        assert_eq!(r["isError"], false);
    }

    /// R-CON-40: answers to some of an asking tool's requests are kept by a round the service
    /// answers at once with them, asking the rest, and no tool runs.
    #[tokio::test]
    async fn a_partly_answered_round_is_answered_with_what_it_keeps_and_runs_no_tool() {
        use durable_mcp_contract::input::{INPUT_REQUIRED, InputRequired};
        let s = ToolService::new("s").tool(tool("a")).build().unwrap();
        let rest = InputRequired {
            result: json!({"resultType": "input_required", "inputRequests": {"second": {}}}),
            arguments: json!({"text": "x"}).as_object().unwrap().clone(),
            answered: json!({"first": {"action": "accept"}})
                .as_object()
                .unwrap()
                .clone(),
            operation: Some("a".into()),
        };
        let input = payload::to_marked_payload(&rest, INPUT_REQUIRED).unwrap();
        let StartOutcome::Sync(p) = s
            .handler(PARTIAL_ROUND)
            .unwrap()
            .start(StartContext::new("e", "s", PARTIAL_ROUND, "r"), input)
            .await
            .unwrap()
        else {
            panic!("answered at once")
        };
        assert_eq!(payload::mcp_type(&p), Some(INPUT_REQUIRED));
        assert_eq!(payload::from_payload::<InputRequired>(&p).unwrap(), rest);
    }

    fn refused(builder: ToolService) -> BuildError {
        builder.build().expect_err("the definition is refused")
    }

    #[test]
    fn bad_definitions_are_refused_naming_the_tool() {
        let e = refused(ToolService::new("s").tool(tool("word count")));
        assert_eq!(e.tool.as_deref(), Some("word count"));
        assert!(e.to_string().contains("\"word count\" contains ' '"), "{e}");

        let e = refused(ToolService::new("s").tool(tool("a")).operation(tool("a")));
        assert!(
            e.to_string()
                .contains("two tools or operations are named \"a\""),
            "{e}"
        );

        let e = refused(ToolService::new("s").tool(tool(LIST_TOOLS)));
        assert!(e.to_string().contains("reserved"), "{e}");

        let e = refused(ToolService::new("s").tool(tool("a")).exclude("a"));
        assert!(e.to_string().contains("only with expose_all"), "{e}");
        let e = refused(
            ToolService::new("s")
                .expose_all()
                .tool(tool("a"))
                .exclude("zz"),
        );
        assert!(e.to_string().contains("no operation has that name"), "{e}");
        let e = refused(
            ToolService::new("s")
                .expose_all()
                .tool(tool("a"))
                .exclude("a"),
        );
        assert!(e.to_string().contains("use operation()"), "{e}");

        async fn scalar(_: String) -> Result<String, ToolFailure> {
            Ok(String::new())
        }
        let e = refused(ToolService::new("s").tool(Tool::sync("scalar", scalar)));
        assert_eq!(e.tool.as_deref(), Some("scalar"));
        assert!(e.to_string().contains("not `\"type\": \"object\"`"), "{e}");

        let e = refused(ToolService::new(" ").tool(tool("a")));
        assert!(e.to_string().contains("service name"), "{e}");

        #[derive(Serialize, Deserialize, schemars::JsonSchema)]
        struct Seconds {
            seconds: u32,
        }
        struct Report;
        impl temporalio_common::WorkflowDefinition for Report {
            type Input = Seconds;
            type Output = String;
            fn name(&self) -> &str {
                "Report"
            }
        }
        let e = refused(ToolService::new("s").tool(Tool::workflow("report", Report, "q")));
        assert_eq!(e.tool.as_deref(), Some("report"));
        assert!(e.to_string().contains("needs a Temporal connection"), "{e}");
    }
}
