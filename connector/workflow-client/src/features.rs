//! Resources, resource templates, prompts and completions of a tool service, listed, read and
//! asked from Workflow code (R-WFC-9): each is the reserved Nexus operation of R-NXC-8 scheduled through the
//! Workflow context like a tool call, so its answer is recorded in history and a replay gets it
//! again. Answers are the MCP results as the service wrote them; an upstream's JSON-RPC error
//! (an unknown URI or prompt) is a failed [`ToolCallError`] of its code's type.

use serde_json::{Map, Value, json};

use super::{
    options::{CallOptions, LIST_TIMEOUT},
    result::{ToolCallError, feature_result},
    tools::McpTools,
};
use durable_mcp_contract::{
    errors::ToolCallErrorType,
    features::{
        COMPLETE, GET_PROMPT, LIST_PROMPTS, LIST_RESOURCE_TEMPLATES, LIST_RESOURCES, READ_RESOURCE,
        UPSTREAM_CAPABILITIES,
    },
    payload,
};

impl<W> McpTools<W> {
    /// The service's declared `resources`, `prompts` and `completions` capabilities (an empty
    /// object when it has none).
    pub async fn capabilities(&self) -> Result<Map<String, Value>, ToolCallError> {
        match self.feature(UPSTREAM_CAPABILITIES, json!({})).await? {
            Value::Object(declared) => Ok(declared),
            other => Err(ToolCallError::local(
                UPSTREAM_CAPABILITIES,
                ToolCallErrorType::UpstreamProtocolError,
                format!("the capabilities are not an object: {other}"),
            )),
        }
    }

    /// The service's `resources/list` result (every page's resources in one array).
    pub async fn list_resources_json(&self) -> Result<Value, ToolCallError> {
        self.feature(LIST_RESOURCES.operation, json!({})).await
    }

    /// The service's `resources/templates/list` result.
    pub async fn list_resource_templates_json(&self) -> Result<Value, ToolCallError> {
        self.feature(LIST_RESOURCE_TEMPLATES.operation, json!({}))
            .await
    }

    /// The `resources/read` result of `uri`.
    pub async fn read_resource_json(&self, uri: &str) -> Result<Value, ToolCallError> {
        self.feature(READ_RESOURCE.operation, json!({"uri": uri}))
            .await
    }

    /// The service's `prompts/list` result.
    pub async fn list_prompts_json(&self) -> Result<Value, ToolCallError> {
        self.feature(LIST_PROMPTS.operation, json!({})).await
    }

    /// The `prompts/get` result of prompt `name` with `arguments` (MCP prompt arguments are
    /// strings).
    pub async fn get_prompt_json(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, ToolCallError> {
        let params = json!({"name": name, "arguments": arguments});
        self.feature(GET_PROMPT.operation, params).await
    }

    /// The `completion/complete` result for `argument`, of which `value` is typed so far, of
    /// `reference` (`{"type": "ref/prompt", "name": ..}` or `{"type": "ref/resource", "uri": ..}`).
    pub async fn complete_json(
        &self,
        reference: Value,
        argument: &str,
        value: &str,
    ) -> Result<Value, ToolCallError> {
        let params = json!({"ref": reference, "argument": {"name": argument, "value": value}});
        self.feature(COMPLETE.operation, params).await
    }

    /// Schedules the reserved `operation` with `params` and answers its result as written. A
    /// recorded tool list or tool result in its place is R-WFC-4's unexpected answer.
    async fn feature(&self, operation: &str, params: Value) -> Result<Value, ToolCallError> {
        let input = payload::to_payload(&params).map_err(|e| {
            ToolCallError::local(
                operation,
                ToolCallErrorType::UpstreamProtocolError,
                e.to_string(),
            )
        })?;
        let options = CallOptions::default();
        let outcome = self
            .run(operation, operation, input, LIST_TIMEOUT, &options)
            .await?;
        self.check_kind(operation, &outcome, payload::TOOL_LIST)?;
        self.check_kind(operation, &outcome, payload::CALL_TOOL_RESULT)?;
        feature_result(operation, outcome)
    }
}
