//! [`McpTools`]: the tools behind one Nexus endpoint and service, called from Workflow code.
//!
//! Every listing and call is a Nexus operation scheduled through the Workflow context: its start,
//! result and cancel are Workflow commands recorded in history, so nothing here touches the
//! network and a replay gets the same answers (R-WFC-1, R-WFC-4).

use std::{cell::RefCell, collections::BTreeMap, time::Duration};

use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value};
use temporalio_workflow::WorkflowContext;

use super::{
    options::{CallOptions, LIST_TIMEOUT, call_timeout, nexus_options},
    result::{
        ToolCallError, UNEXPECTED_ANSWER_PATCH, call_result, operation_outcome, start_failed,
        token_mismatch, tool_list, unexpected_answer, wrong_kind,
    },
};
use crate::trace::{TraceContext, with_trace_context};
use durable_mcp_contract::operation::OperationOutcome;
use durable_mcp_contract::trace_context::TRACER_HEADER;
use durable_mcp_contract::{
    errors::ToolCallErrorType,
    input::{Answering, INPUT_ROUND, InputRequired},
    listing::{LIST_TOOLS, advertised_timeout, tool_name},
    operation_name::operation_for_tool,
    outcome::Outcome,
    payload,
};

/// The MCP tools of one tool service (a proxied upstream or native tools), for Workflow code.
///
/// ```ignore
/// let tools = McpTools::new(ctx, "tools-endpoint", "everything");
/// let listed = tools.list_tools().await?;
/// let sum = tools.call_tool("get-sum", json!({"a": 2, "b": 3})).await?;
/// ```
pub struct McpTools<W> {
    ctx: WorkflowContext<W>,
    endpoint: String,
    service: String,
    /// Each listed tool's advertised timeout, from the latest listing; `None` until one.
    timeouts: RefCell<Option<BTreeMap<String, Option<Duration>>>>,
    /// The trace context every operation carries in its Nexus headers (R-RUN-9).
    trace: Option<TraceContext>,
}

impl<W> McpTools<W> {
    /// The tools of `service` on the Nexus `endpoint`, called from the Workflow of `ctx`. Its
    /// operations carry the trace context of `ctx`'s headers (the Workflow's start headers in
    /// its run method), if they have one (R-RUN-9).
    pub fn new(
        ctx: &WorkflowContext<W>,
        endpoint: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            ctx: ctx.clone(),
            endpoint: endpoint.into(),
            service: service.into(),
            timeouts: RefCell::new(None),
            trace: TraceContext::from_tracer_header(ctx.headers().get(TRACER_HEADER)),
        }
    }

    /// These tools with `trace` as the trace context of their operations (e.g. one the
    /// Workflow's input carries), in place of the one its headers gave; `None` sends none.
    pub fn with_trace_context(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// The trace context the operations carry, if any.
    pub fn trace_context(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }

    /// The service's tools as MCP `Tool`s (`list_tools`, R-NXC-2).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ToolCallError> {
        self.list_tools_json()
            .await?
            .into_iter()
            .map(|t| {
                serde_json::from_value(t).map_err(|e| {
                    protocol_error(LIST_TOOLS, format!("a listed tool is not an MCP Tool: {e}"))
                })
            })
            .collect()
    }

    /// The service's tools as the service wrote them (annotation hints rmcp does not model
    /// included).
    pub async fn list_tools_json(&self) -> Result<Vec<Value>, ToolCallError> {
        let input = payload::to_payload(&Value::Object(Default::default()))
            .map_err(|e| protocol_error(LIST_TOOLS, e.to_string()))?;
        let outcome = self
            .run(
                LIST_TOOLS,
                LIST_TOOLS,
                input,
                LIST_TIMEOUT,
                &CallOptions::default(),
            )
            .await?;
        self.check_kind(LIST_TOOLS, &outcome, payload::CALL_TOOL_RESULT)?;
        let tools = tool_list(outcome)?;
        let timeouts = tools
            .iter()
            .filter_map(|t| Some((tool_name(t)?.to_owned(), advertised_timeout(t))))
            .collect();
        *self.timeouts.borrow_mut() = Some(timeouts);
        Ok(tools)
    }

    /// Calls `name` with `arguments` (a JSON object, or null for none) and returns its whole
    /// `CallToolResult`; a tool's `isError` result is a result.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ToolCallError> {
        self.call_tool_with(name, arguments, CallOptions::default())
            .await
    }

    /// [`McpTools::call_tool`] with options (timeout, cancellation, headers).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<CallToolResult, ToolCallError> {
        let json = self.call_tool_json(name, arguments, options).await?;
        serde_json::from_value(json).map_err(|e| {
            protocol_error(
                name,
                format!("the result is not an MCP CallToolResult: {e}"),
            )
        })
    }

    /// The call's `CallToolResult` exactly as the tool service returned it, as JSON.
    pub async fn call_tool_json(
        &self,
        name: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<Value, ToolCallError> {
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            object @ Value::Object(_) => object,
            other => {
                return Err(ToolCallError::local(
                    name,
                    ToolCallErrorType::InvalidArguments,
                    format!("tool arguments must be a JSON object, not {other}"),
                ));
            }
        };
        let input =
            payload::to_payload(&arguments).map_err(|e| protocol_error(name, e.to_string()))?;
        self.call_round(name, input, options).await
    }

    /// Answers the input requests a call of `name` ended its round with (R-WFC-8): the error's
    /// [`ToolCallError::input_required`], and `input_responses` by the requests' keys (for an
    /// elicitation `{"action": "accept", "content": {...}}`; keys it does not ask are ignored).
    /// Starts the tool's next round, a Nexus operation recorded like any call, with the round's
    /// arguments, these responses and the tool's `requestState`; returns its `CallToolResult`
    /// as JSON, or an error whose `input_required` asks again. Responses to only some of the
    /// requests run nothing: the error's `input_required` then asks the rest and keeps these
    /// answers, which go to the tool with the rest, all at once (R-CON-40).
    pub async fn answer_input_json(
        &self,
        name: &str,
        asked: &InputRequired,
        input_responses: Map<String, Value>,
        options: CallOptions,
    ) -> Result<Value, ToolCallError> {
        let input = next_round_input(name, asked, input_responses)?;
        self.call_round(name, input, options).await
    }

    /// Runs one round of a call of `name` with the operation input `input`.
    async fn call_round(
        &self,
        name: &str,
        input: temporalio_protos::temporal::api::common::v1::Payload,
        options: CallOptions,
    ) -> Result<Value, ToolCallError> {
        let timeout = call_timeout(
            options.timeout,
            self.advertised_timeout(name, &options).await?,
        );
        let outcome = self
            .run(name, &operation_for_tool(name), input, timeout, &options)
            .await?;
        self.check_kind(name, &outcome, payload::TOOL_LIST)?;
        call_result(name, outcome)
    }

    /// The tool's advertised timeout; lists the tools first (once) when the caller set none and
    /// nothing is listed yet. A tool missing from the listing advertises none.
    async fn advertised_timeout(
        &self,
        name: &str,
        options: &CallOptions,
    ) -> Result<Option<Duration>, ToolCallError> {
        if options.timeout.is_some() {
            return Ok(None);
        }
        if self.timeouts.borrow().is_none() {
            self.list_tools_json().await?;
        }
        Ok(self
            .timeouts
            .borrow()
            .as_ref()
            .and_then(|t| t.get(name).copied().flatten()))
    }

    /// Schedules one Nexus operation (`nexus_operation`, for the tool or listing `operation`)
    /// and waits for its end.
    pub(crate) async fn run(
        &self,
        operation: &str,
        nexus_operation: &str,
        input: temporalio_protos::temporal::api::common::v1::Payload,
        timeout: Duration,
        options: &CallOptions,
    ) -> Result<OperationOutcome, ToolCallError> {
        let started = self
            .ctx
            .start_nexus_operation(nexus_options(
                &self.endpoint,
                &self.service,
                nexus_operation,
                input,
                timeout,
                &with_trace_context(options, self.trace.as_ref()),
            ))
            .await
            .map_err(|failure| start_failed(operation, &failure))?;
        let token = started.operation_token.as_deref();
        if let Some(what) = token_mismatch(&self.service, operation, token) {
            return Err(self.unexpected(operation, &what));
        }
        Ok(operation_outcome(started.result().await))
    }

    /// An error when `outcome`, the answer to `operation`, is of `other_kind` (R-WFC-4).
    pub(crate) fn check_kind(
        &self,
        operation: &str,
        outcome: &OperationOutcome,
        other_kind: &str,
    ) -> Result<(), ToolCallError> {
        match wrong_kind(operation, outcome, other_kind) {
            Some(what) => Err(self.unexpected(operation, &what)),
            None => Ok(()),
        }
    }

    /// The error for an answer that does not fit `operation` (`what`): recorded in the
    /// Workflow's history the first time, so that its replays fail the call alike; on a replay
    /// of a history that never met one, a nondeterminism panic (R-WFC-4).
    fn unexpected(&self, operation: &str, what: &str) -> ToolCallError {
        unexpected_answer(operation, what, self.ctx.patched(UNEXPECTED_ANSWER_PATCH))
    }
}

fn protocol_error(operation: &str, message: String) -> ToolCallError {
    ToolCallError::local(operation, ToolCallErrorType::UpstreamProtocolError, message)
}

/// The input of the round of `name` that answers `asked` with `input_responses` (R-WFC-8);
/// while some request is left unanswered, the error asking the rest and keeping the answers
/// (Workflow code holds them, in its history, until the rest is given).
fn next_round_input(
    name: &str,
    asked: &InputRequired,
    input_responses: Map<String, Value>,
) -> Result<temporalio_protos::temporal::api::common::v1::Payload, ToolCallError> {
    let given = asked.asked_of(input_responses);
    match asked.answer(given, &operation_for_tool(name)) {
        Answering::Complete(round) => payload::to_marked_payload(&round, INPUT_ROUND)
            .map_err(|e| protocol_error(name, e.to_string())),
        Answering::Partial(rest) => Err(ToolCallError::from_outcome(
            name,
            Outcome::InputRequired(Box::new(rest)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use durable_mcp_contract::input::InputRound;

    /// R-WFC-8, R-CON-40: answers to some of a tool's requests run nothing; the error asks the
    /// rest, and answering it sends the tool every answer at once.
    #[test]
    fn answers_to_some_requests_wait_in_the_workflow_for_the_rest() {
        let asked = InputRequired {
            result: json!({"resultType": "input_required", "requestState": "s",
                "inputRequests": {"a": {"method": "elicitation/create"}, "b": {"method": "elicitation/create"}}}),
            arguments: json!({"x": 1}).as_object().unwrap().clone(),
            ..Default::default()
        };
        let yes = |key: &str| {
            json!({key: {"action": "accept"}})
                .as_object()
                .unwrap()
                .clone()
        };
        let waiting = next_round_input("t", &asked, yes("a")).unwrap_err();
        let rest = waiting.input_required().expect("asks the rest").clone();
        assert_eq!(
            rest.input_requests(),
            json!({"b": {"method": "elicitation/create"}})
        );
        let input = next_round_input("t", &rest, yes("b")).unwrap();
        assert_eq!(payload::mcp_type(&input), Some(INPUT_ROUND));
        let round: InputRound = payload::from_payload(&input).unwrap();
        assert_eq!(
            round.input_responses,
            json!({"a": {"action": "accept"}, "b": {"action": "accept"}})
                .as_object()
                .unwrap()
                .clone()
        );
        assert_eq!(round.request_state.as_deref(), Some("s"));
    }
}
