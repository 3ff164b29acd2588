//! A ready Workflow: list the tools of one service, then call a given sequence of them in order
//! (R-WFC-5). The example agent (`durable-mcp-example-agent`) runs it; the replay tests record
//! and replay it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use temporalio_workflow::{
    WorkflowContext, WorkflowResult, WorkflowTermination, common::error::ApplicationFailure,
};
use temporalio_workflow::{workflow, workflow_methods};

use super::{
    options::CallOptions,
    result::{ToolCallError, ToolCallErrorKind},
    tools::McpTools,
};

/// The Workflow type name [`ListThenCall`] registers under (the `#[run(name)]` below).
pub const WORKFLOW_TYPE: &str = "durable-mcp.list-then-call";

/// What to call: the tool service and the calls, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceInput {
    pub endpoint: String,
    pub service: String,
    pub calls: Vec<PlannedCall>,
}

/// One call: a tool and its arguments object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    pub tool: String,
    pub arguments: Value,
}

/// What happened: the listed tool names, then one record per call, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceOutput {
    pub listed: Vec<String>,
    pub calls: Vec<CallRecord>,
}

/// One call's end. `result` is always a whole `CallToolResult`: the tool's own, or for a call
/// that produced none the connector's `isError` form of the error (R-CON-4), with `error` set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub tool: String,
    pub result: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallErrorRecord>,
}

/// A call that produced no result, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallErrorRecord {
    /// `failed`, `canceled`, `timed_out` or `terminated`.
    pub kind: String,
    /// The failure's type (a stable error type, another application type, or a handler kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    pub message: String,
}

impl CallRecord {
    /// The record of one call's end.
    pub fn new(tool: &str, result: Result<Value, ToolCallError>) -> Self {
        match result {
            Ok(result) => Self {
                tool: tool.to_owned(),
                result,
                error: None,
            },
            Err(e) => Self {
                tool: tool.to_owned(),
                result: e.to_call_tool_result(),
                error: Some(CallErrorRecord {
                    kind: match e.kind() {
                        ToolCallErrorKind::Failed => "failed",
                        ToolCallErrorKind::Canceled => "canceled",
                        ToolCallErrorKind::TimedOut => "timed_out",
                        ToolCallErrorKind::Terminated => "terminated",
                    }
                    .to_owned(),
                    error_type: e.failure_type().map(str::to_owned),
                    message: e.message().to_owned(),
                }),
            },
        }
    }
}

/// Lists the tools, then calls each planned call in order; a call's error is recorded and the
/// sequence goes on. A listing that fails fails the Workflow; a cancelled Workflow stops and ends
/// CANCELED.
#[workflow]
#[derive(Default)]
pub struct ListThenCall;

#[workflow_methods]
impl ListThenCall {
    #[run(name = "durable-mcp.list-then-call")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: SequenceInput,
    ) -> WorkflowResult<SequenceOutput> {
        run_sequence(ctx, input).await
    }
}

/// The body of [`ListThenCall`], for Workflows of other types that run the same sequence.
pub async fn run_sequence<W>(
    ctx: &WorkflowContext<W>,
    input: SequenceInput,
) -> WorkflowResult<SequenceOutput> {
    let tools = McpTools::new(ctx, input.endpoint, input.service);
    let listed = tools
        .list_tools_json()
        .await
        .map_err(ApplicationFailure::non_retryable)?;
    let mut calls = Vec::with_capacity(input.calls.len());
    for call in input.calls {
        stop_if_cancelled(ctx)?;
        let result = tools
            .call_tool_json(&call.tool, call.arguments, CallOptions::default())
            .await;
        calls.push(CallRecord::new(&call.tool, result));
    }
    stop_if_cancelled(ctx)?;
    Ok(SequenceOutput {
        listed: listed
            .iter()
            .filter_map(|t| durable_mcp_contract::listing::tool_name(t).map(str::to_owned))
            .collect(),
        calls,
    })
}

/// A cancelled Workflow calls nothing more and ends CANCELED (its running call was cancelled with
/// it, R-WFC-5). The cancel request is in history, so replays stop at the same place.
fn stop_if_cancelled<W>(ctx: &WorkflowContext<W>) -> WorkflowResult<()> {
    if ctx.cancellation_token().is_cancelled() {
        return Err(WorkflowTermination::cancelled());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use durable_mcp_contract::errors::ToolCallErrorType;

    #[test]
    fn errors_are_recorded_as_is_error_results_with_their_type() {
        let ok = CallRecord::new("echo", Ok(json!({"content": [], "isError": false})));
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"tool": "echo", "result": {"content": [], "isError": false}})
        );
        let err = ToolCallError::local(
            "x",
            ToolCallErrorType::InvalidArguments,
            "must be an object".into(),
        );
        let rec = CallRecord::new("x", Err(err));
        assert_eq!(rec.result["isError"], true);
        assert_eq!(
            rec.error,
            Some(CallErrorRecord {
                kind: "failed".into(),
                error_type: Some("InvalidArguments".into()),
                message: "must be an object".into(),
            })
        );
    }
}
