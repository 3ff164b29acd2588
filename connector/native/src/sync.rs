//! Sync tools (R-NAT-3): a plain async Rust function that answers within the Nexus request
//! deadline (about 8 s; anything longer belongs in a Workflow-backed tool).

use std::{future::Future, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use temporalio_protos::temporal::api::common::v1::Payload;

use super::{
    result::{IntoToolResult, ToolFailure, decode_arguments, schema_of},
    tool::Tool,
};
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
            _types: std::marker::PhantomData::<fn(I) -> R>,
        });
        Tool::new(
            name,
            schema_of::<I>(),
            R::output_schema(),
            DEFAULT_SYNC_TIMEOUT,
            Box::new(move |_, _| Ok(handler)),
        )
    }
}

struct SyncTool<F, I, R> {
    f: F,
    _types: std::marker::PhantomData<fn(I) -> R>,
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
        let args = decode_arguments::<I>(&input);
        let cancelled = ctx.cancelled.clone();
        let call = args.map(|args| (self.f)(ctx, args));
        Box::pin(async move {
            let call = call?;
            let answer = tokio::select! {
                answer = call => answer,
                _ = cancelled.cancelled() => {
                    // The server gave up on this request and will send it again; this answer
                    // is discarded either way.
                    return Err(HandlerError::internal("the request deadline passed").into());
                }
            };
            let result = answer?.into_tool_result()?;
            Ok(StartOutcome::Sync(result.to_payload()?))
        })
    }
}
