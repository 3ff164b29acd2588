//! Sync tools (R-NAT-3): a plain async Rust function that answers within the Nexus request
//! deadline (about 8 s; anything longer belongs in a Workflow-backed tool).

use std::{
    collections::VecDeque,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use temporalio_protos::temporal::api::common::v1::Payload;

use super::{
    input::{Answer, Round, decode_round},
    result::{IntoToolResult, ToolFailure, decode_arguments, schema_of},
    tool::Tool,
};
use durable_mcp_contract::errors::ToolCallErrorType;
use durable_mcp_runtime::nexus::{
    HandlerError, OperationHandler, StartContext, StartError, StartOutcome,
};

/// The timeout a sync tool advertises unless it sets one: the server retries a start whose
/// handler overran its request deadline, so this bounds those retries too.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

impl Tool {
    /// A sync tool from `async fn(Input) -> Result<Output, ToolFailure>`. The input schema is
    /// `Input`'s, the output schema `Output`'s ([`Structured`](super::result::Structured) has
    /// one; text and [`ToolResult`](super::result::ToolResult) have none).
    pub fn sync<I, R, F, Fut>(name: impl Into<String>, f: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        R: IntoToolResult,
        F: Fn(I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolFailure>> + Send + 'static,
    {
        Self::sync_with_context(name, move |_, input| f(input))
    }

    /// Like [`Tool::sync`], for handlers that need the request: its id (stable across the
    /// server's retries, for idempotency), headers, deadline and cancellation token.
    pub fn sync_with_context<I, R, F, Fut>(name: impl Into<String>, f: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        R: IntoToolResult,
        F: Fn(StartContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolFailure>> + Send + 'static,
    {
        let handler: Arc<dyn OperationHandler> = Arc::new(SyncTool {
            f,
            cut_off: Arc::default(),
            _types: std::marker::PhantomData::<fn(I) -> R>,
        });
        sync_tool::<I, R>(name.into(), handler)
    }
}

impl Tool {
    /// A sync tool that may ask its caller for input (R-NAT-7): `f` gets a [`Round`] (the
    /// arguments, and the answers after a round that asked) and answers [`Answer::Done`] with a
    /// result or [`Answer::Ask`] with input requests, which end this round; the caller's
    /// answers start the next one. Keep what the next round needs in the arguments or the
    /// [`AskInput::state`](super::input::AskInput::state): nothing is held in between.
    pub fn sync_asking<I, R, F, Fut>(name: impl Into<String>, f: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        R: IntoToolResult,
        F: Fn(Round<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<R>, ToolFailure>> + Send + 'static,
    {
        let handler: Arc<dyn OperationHandler> = Arc::new(AskingTool {
            f,
            _types: std::marker::PhantomData::<fn(I) -> R>,
        });
        sync_tool::<I, R>(name.into(), handler)
    }
}

/// A sync tool's definition: `I`'s input schema, `R`'s output schema, the sync timeout.
fn sync_tool<I: JsonSchema, R: IntoToolResult>(
    name: String,
    handler: Arc<dyn OperationHandler>,
) -> Tool {
    Tool::new(
        name,
        schema_of::<I>(),
        R::output_schema(),
        DEFAULT_SYNC_TIMEOUT,
        Box::new(move |_, _| Ok(handler)),
    )
}

/// A sync tool that may ask for input: each round is one start, answered at once.
struct AskingTool<F, I, R> {
    f: F,
    _types: std::marker::PhantomData<fn(I) -> R>,
}

impl<I, R, F, Fut> OperationHandler for AskingTool<F, I, R>
where
    I: DeserializeOwned + Send + 'static,
    R: IntoToolResult,
    F: Fn(Round<I>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Answer<R>, ToolFailure>> + Send + 'static,
{
    fn start(
        &self,
        _ctx: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
        let call = decode_round::<I>(&input).map(|(round, args)| ((self.f)(round), args));
        Box::pin(async move {
            let (call, arguments) = call?;
            let payload = match call.await? {
                Answer::Done(r) => r.into_tool_result()?.to_payload()?,
                Answer::Ask(ask) => ask.to_payload(&arguments)?,
            };
            Ok(StartOutcome::Sync(payload))
        })
    }
}

struct SyncTool<F, I, R> {
    f: F,
    /// Calls cut off at the request deadline, whose retried starts are not run again.
    cut_off: Arc<CutOff>,
    _types: std::marker::PhantomData<fn(I) -> R>,
}

/// The request ids of calls that were cut off at the Nexus request deadline (or by shutdown)
/// while they ran, the latest [`MAX_CUT_OFF`] of them (R-NAT-3). The server sends such a start
/// again under the same request id; the call may have done its work already, so the retry is
/// answered with a non-retryable `ToolCallOutcomeUnknown` instead of a second run.
#[derive(Default)]
struct CutOff(Mutex<VecDeque<String>>);

/// How many cut-off calls a sync tool remembers (a request id is at most a few hundred bytes).
const MAX_CUT_OFF: usize = 4096;

impl CutOff {
    fn record(&self, request_id: &str) {
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ids.len() >= MAX_CUT_OFF {
            ids.pop_front();
        }
        ids.push_back(request_id.to_owned());
    }

    fn contains(&self, request_id: &str) -> bool {
        let ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter().any(|id| id == request_id)
    }
}

/// The answer to a retried start of a call that was cut off while it ran.
fn cut_off_failure() -> ToolFailure {
    ToolFailure::non_retryable(
        ToolCallErrorType::ToolCallOutcomeUnknown,
        "the sync tool was still running when the Nexus request deadline (about 8 s) passed, \
         and may have done its work: it is not run again. A tool that can take longer must be \
         Workflow-backed (Tool::workflow)",
    )
}

impl<I, R, F, Fut> OperationHandler for SyncTool<F, I, R>
where
    I: DeserializeOwned + Send + 'static,
    R: IntoToolResult,
    F: Fn(StartContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolFailure>> + Send + 'static,
{
    fn start(
        &self,
        ctx: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
        if self.cut_off.contains(&ctx.request_id) {
            return Box::pin(async { Err(cut_off_failure().into()) });
        }
        let args = decode_arguments::<I>(&input);
        let (cancelled, request_id) = (ctx.cancelled.clone(), ctx.request_id.clone());
        let cut_off = self.cut_off.clone();
        let call = args.map(|args| (self.f)(ctx, args));
        Box::pin(async move {
            let call = call?;
            let answer = tokio::select! {
                answer = call => answer,
                _ = cancelled.cancelled() => {
                    // The server gave up on this request and will send it again (this answer
                    // is discarded either way); the call may have done its work, so the retry
                    // is not run (R-NAT-3).
                    cut_off.record(&request_id);
                    return Err(HandlerError::internal("the request deadline passed").into());
                }
            };
            let result = answer?.into_tool_result()?;
            Ok(StartOutcome::Sync(result.to_payload()?))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use durable_mcp_contract::payload;
    use durable_mcp_runtime::nexus::StartError;
    use serde_json::json;

    use super::*;

    /// A sync tool cut off at the request deadline while it ran is not run again when the
    /// server sends the start again: the retry fails with `ToolCallOutcomeUnknown`, final.
    #[tokio::test]
    async fn a_call_cut_off_at_the_deadline_is_not_run_again() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let tool = Tool::sync(
            "delete",
            move |_: serde_json::Map<String, serde_json::Value>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { std::future::pending::<Result<String, ToolFailure>>().await }
            },
        );
        let handler = (tool.handler)(
            &crate::tool::BuildContext {
                service: "s".into(),
                temporal: None,
            },
            tool.timeout,
        )
        .unwrap();
        let input = || payload::to_payload(&json!({})).unwrap();
        let ctx = StartContext::new("e", "s", "delete", "req-1");
        ctx.cancelled.cancel();
        let first = handler.start(ctx, input()).await;
        assert!(first.is_err());
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        let retry = tokio::time::timeout(
            Duration::from_secs(5),
            handler.start(StartContext::new("e", "s", "delete", "req-1"), input()),
        )
        .await
        .expect("answered at once, not run again");
        let Err(StartError::Operation(failure)) = retry else {
            panic!("a final failure, not a second run: {retry:?}");
        };
        let text = format!("{failure:?}");
        assert!(text.contains("ToolCallOutcomeUnknown"), "{text}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "not run again");

        // Another call still runs.
        let other = StartContext::new("e", "s", "delete", "req-2");
        other.cancelled.cancel();
        let _ = handler.start(other, input()).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_cut_off_record_keeps_the_latest_calls() {
        let cut = CutOff::default();
        for i in 0..=MAX_CUT_OFF {
            cut.record(&format!("r{i}"));
        }
        assert!(!cut.contains("r0"));
        assert!(cut.contains("r1") && cut.contains(&format!("r{MAX_CUT_OFF}")));
    }
}
