//! The `call` step: a tool call straight to the proxy's Nexus service, as a Temporal caller
//! (a Workflow or the connector) would make it.

use std::time::{Duration, Instant};

use durable_mcp::{
    contract::{jsonrpc_error::JsonRpcError, payload},
    nexus::{OperationOutcome, StartOperation},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    Failure, StepEnv,
    checks::{
        cancel_point, check_cancelled_upstream, check_invocations, check_is_error, check_snapshot,
        check_structured, short,
    },
    setup,
};
use crate::{
    fixtures::as_written::without_durable_meta,
    harness::unique_name,
    scenario::{CallStep, Expect, ExpectedOutcome, ForgedState},
};

/// `expect.written`: the result is exactly the JSON the upstream wrote.
fn check_written(expect: &Expect, result: &Value, summary: &mut String) -> Result<(), Failure> {
    let Some(want) = &expect.written else {
        return Ok(());
    };
    if result != want {
        return Err(Failure::Violated(format!(
            "the result changed on the way: the upstream wrote {want}, the caller got {result}"
        )));
    }
    summary.push_str(", result as written");
    Ok(())
}

/// The proxy's `list_tools` operation: the tools as it lists them.
async fn list_tools(env: &StepEnv<'_>) -> Result<Vec<Value>, Failure> {
    let mut start = StartOperation::new(
        unique_name("list-tools"),
        env.endpoint,
        &env.service,
        "list_tools",
        payload::to_payload(&json!({})).map_err(setup)?,
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (op, _) = env
        .client
        .start(start)
        .await
        .map_err(|e| Failure::Setup(format!("starting list_tools: {e}")))?;
    match env.client.wait(&op, &CancellationToken::new()).await {
        Ok(OperationOutcome::Succeeded(p)) => payload::to_json(&p)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .ok_or_else(|| Failure::Violated("list_tools did not answer a list".into())),
        other => Err(Failure::Violated(format!("list_tools: {other:?}"))),
    }
}

/// Runs one call step and checks its expectations; returns a one-line summary.
pub(crate) async fn run_call(
    env: &mut StepEnv<'_>,
    call: &CallStep,
    expect: &Expect,
) -> Result<String, Failure> {
    let client = &env.client;
    let (operation, input) = match &call.forged_state {
        Some(forged) => forged_round(&env.service, call, forged)?,
        None => (
            step_operation(&call.tool),
            payload::to_payload(&Value::Object(call.arguments.clone())).map_err(setup)?,
        ),
    };
    let mut start = StartOperation::new(
        unique_name(&format!("call-{}", call.tool)),
        env.endpoint,
        &env.service,
        operation,
        input,
    );
    start.schedule_to_close = Some(Duration::from_millis(call.timeout_ms.unwrap_or(60_000)));
    let retry = call.start_twice.then(|| start.clone());
    let (op, _) = client
        .start(start)
        .await
        .map_err(|e| Failure::Setup(format!("starting the operation: {e}")))?;
    let mut notes = String::new();
    if let Some(retry) = retry {
        // A retried start (same operation id and request id) must find the same run.
        let (again, started) = client
            .start(retry)
            .await
            .map_err(|e| Failure::Violated(format!("a retried start was refused: {e}")))?;
        if again != op || started {
            return Err(Failure::Violated(format!(
                "a retried start gave run {} (started: {started}) instead of reattaching to {}",
                again.run_id, op.run_id
            )));
        }
        notes.push_str(", retried start reattached");
    }

    let mut cancel_latency = None;
    if let Some(after) = call.cancel_after_ms {
        cancel_point(env.ledger, &call.tool, call.key(), after).await;
        cancel_latency = Some(Instant::now());
        client
            .cancel(&op, "conformance: cancel_after_ms")
            .await
            .map_err(|e| Failure::Setup(format!("cancelling: {e}")))?;
    }
    let outcome = client
        .wait(&op, &CancellationToken::new())
        .await
        .map_err(|e| Failure::Setup(format!("waiting for the outcome: {e}")))?;
    let cancel_latency = cancel_latency.map(|at| at.elapsed());

    // Outcome and error type.
    let (kind, result, error_type, message) = match &outcome {
        // The upstream's JSON-RPC error, the call's end once no retry is left (R-PRX-4): a
        // failure of the code's type, as every caller of the contract reads it.
        OperationOutcome::Succeeded(p) if let Some(e) = JsonRpcError::from_payload(p) => {
            let e = e.map_err(Failure::Violated)?;
            (
                ExpectedOutcome::Failed,
                None,
                Some(e.error_type().as_str().to_owned()),
                e.message,
            )
        }
        OperationOutcome::Succeeded(p) => {
            let json = payload::to_json(p)
                .map_err(|e| Failure::Violated(format!("the result is not readable JSON: {e}")))?;
            (ExpectedOutcome::Result, Some(json), None, String::new())
        }
        OperationOutcome::Failed {
            message,
            error_type,
            ..
        } => (
            ExpectedOutcome::Failed,
            None,
            error_type.clone(),
            message.clone(),
        ),
        OperationOutcome::Canceled { message } => {
            (ExpectedOutcome::Canceled, None, None, message.clone())
        }
        OperationOutcome::TimedOut { message } => {
            (ExpectedOutcome::TimedOut, None, None, message.clone())
        }
        OperationOutcome::Terminated { message } => {
            (ExpectedOutcome::Terminated, None, None, message.clone())
        }
    };
    let described = match (&error_type, message.is_empty()) {
        (Some(t), _) => format!("{kind} ({t}: {})", short(&message)),
        (None, false) => format!("{kind} ({})", short(&message)),
        (None, true) => kind.to_string(),
    };
    if kind != expect.outcome {
        return Err(Failure::Violated(format!(
            "expected outcome {}, saw {described}",
            expect.outcome
        )));
    }
    if let Some(want) = &expect.error_type
        && error_type.as_deref() != Some(want.as_str())
    {
        return Err(Failure::Violated(format!(
            "expected error type {want}, saw {}",
            error_type.as_deref().unwrap_or("none")
        )));
    }
    if let Some(want) = &expect.message_contains
        && !message.contains(want.as_str())
    {
        return Err(Failure::Violated(format!(
            "expected the message to contain {want:?}, saw {message:?}"
        )));
    }
    if let Some(result) = &result {
        check_is_error(expect, result)?;
        if let Some(want) = &expect.structured {
            check_structured(want, result)?;
        }
    }
    let mut summary = described + &notes;
    check_invocations(
        env.ledger,
        expect,
        Some(&call.tool),
        call.key(),
        &mut summary,
    )
    .await?;
    check_cancelled_upstream(env.ledger, expect, &call.tool, call.key(), &mut summary).await?;
    if let Some(latency) = cancel_latency {
        summary.push_str(&format!(", cancel landed in {} ms", latency.as_millis()));
    }
    if let Some(result) = &result {
        check_snapshot(env.options, expect, result, &mut summary)?;
        check_written(expect, result, &mut summary)?;
    }
    if let Some(want) = &expect.listed {
        let listed = list_tools(env).await?;
        let tool = listed
            .iter()
            .find(|t| t["name"] == call.tool.as_str())
            .ok_or_else(|| Failure::Violated(format!("list_tools does not list {}", call.tool)))?;
        let seen = without_durable_meta(tool);
        if seen != *want {
            return Err(Failure::Violated(format!(
                "{} listed as {seen}, the upstream wrote {want}",
                call.tool
            )));
        }
        summary.push_str(", listed as written");
    }
    super::workflows::check_workflows(env, expect, &mut summary).await?;
    let answer =
        result.unwrap_or_else(|| json!({"outcome": kind.to_string(), "error_type": error_type}));
    env.saved
        .check_and_save(expect, answer, None, &mut summary)?;
    Ok(summary)
}

/// The operation and input of a step with a [`ForgedState`]: the tool's next round, or the
/// cancel marker, carrying a state of the proxy's form that no proxy signed.
fn forged_round(
    service: &str,
    call: &CallStep,
    forged: &ForgedState,
) -> Result<
    (
        String,
        temporalio_protos::temporal::api::common::v1::Payload,
    ),
    Failure,
> {
    use durable_mcp::contract::input::{CANCELLED_ROUND, CancelledRound, INPUT_ROUND, InputRound};
    let state = forged_state(service, &call.tool, &call.arguments, &forged.task_id);
    if forged.cancel {
        let marker = CancelledRound {
            request_state: Some(state),
        };
        let input = payload::to_payload(&marker).map_err(setup)?;
        return Ok((CANCELLED_ROUND.to_owned(), input));
    }
    let round = InputRound {
        arguments: call.arguments.clone(),
        input_responses: forged.input_responses.clone(),
        request_state: Some(state),
    };
    let input = payload::to_marked_payload(&round, INPUT_ROUND).map_err(setup)?;
    Ok((step_operation(&call.tool), input))
}

/// What a proxy before signed states (R-PRX-35) wrote for an upstream task waiting for input,
/// and what anyone who read its code can write: its prefix, then JSON naming the service, the
/// tool, the FNV-1a fingerprint of the arguments' JSON, the task and the connection.
fn forged_state(
    service: &str,
    tool: &str,
    arguments: &serde_json::Map<String, Value>,
    task_id: &str,
) -> String {
    let json = serde_json::to_string(arguments).unwrap_or_default();
    let hash = json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let state = json!({
        "service": service,
        "tool": tool,
        "arguments": format!("{hash:016x}"),
        "taskId": task_id,
        "origin": format!("http:{service}"),
    });
    format!("durable-mcp-upstream-task.v1.{state}")
}

/// The Nexus operation a `call` step starts: `list_tools` is the reserved listing itself
/// (R-NXC-2), any other name the tool's operation (R-NXC-5; a tool named `list_tools` is
/// `list~5Ftools`).
fn step_operation(tool: &str) -> String {
    use durable_mcp::contract::{listing::LIST_TOOLS, operation_name::operation_for_tool};
    if tool == LIST_TOOLS {
        LIST_TOOLS.to_owned()
    } else {
        operation_for_tool(tool)
    }
}
