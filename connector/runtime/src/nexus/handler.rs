//! What a Nexus operation handler sees and answers: plain types, no I/O.
//!
//! The Nexus worker runtime turns polled tasks into these contexts, calls the registered
//! [`OperationHandler`], and turns the answer back into a task completion.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use futures::future::BoxFuture;
use temporalio_protos::temporal::api::common::v1::Payload;
use tokio_util::sync::CancellationToken;

pub use durable_mcp_contract::operation::HandlerErrorKind;

/// A Nexus link (for example to the caller's operation), as the server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NexusLink {
    pub url: String,
    pub r#type: String,
}

/// Everything a start handler knows about the request it serves.
#[derive(Debug, Clone)]
pub struct StartContext {
    /// The endpoint the caller addressed.
    pub endpoint: String,
    pub service: String,
    pub operation: String,
    /// Stable across the server's retries of this start: derive idempotent ids from it.
    pub request_id: String,
    /// Where an async operation reports its completion (`temporal://system` for standalone
    /// operations); pass it with [`StartContext::callback_headers`] to a completion callback.
    pub callback: String,
    pub callback_headers: HashMap<String, String>,
    /// Request headers, lower-cased: the caller's Nexus headers plus `request-timeout` and
    /// `operation-timeout`.
    pub headers: HashMap<String, String>,
    pub links: Vec<NexusLink>,
    /// When the server stops waiting for this answer. A handler still running then is cancelled
    /// through [`StartContext::cancelled`] and its answer is discarded.
    pub deadline: Option<SystemTime>,
    /// Fires when the request deadline passes or the worker shuts down.
    pub cancelled: CancellationToken,
}

impl StartContext {
    /// A start delivered by hand rather than by the server (tests, the conformance runner
    /// replaying a retried start): no completion callback, no headers, no deadline.
    pub fn new(
        endpoint: impl Into<String>,
        service: impl Into<String>,
        operation: impl Into<String>,
        request_id: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            service: service.into(),
            operation: operation.into(),
            request_id: request_id.into(),
            callback: String::new(),
            callback_headers: HashMap::new(),
            headers: HashMap::new(),
            links: Vec::new(),
            deadline: None,
            cancelled: CancellationToken::new(),
        }
    }
}

/// Everything a cancel handler knows about the operation to cancel.
#[derive(Debug, Clone)]
pub struct CancelContext {
    pub endpoint: String,
    pub service: String,
    pub operation: String,
    /// The token the start handler returned in [`StartOutcome::Async`].
    pub token: String,
    pub headers: HashMap<String, String>,
    pub deadline: Option<SystemTime>,
    pub cancelled: CancellationToken,
}

/// A successful start.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    /// The operation finished within the request: here is its result.
    Sync(Payload),
    /// The operation runs on; its completion arrives through the callback. The token comes
    /// back in cancel requests, so it must identify the work.
    Async { token: String },
}

/// The operation itself ended unsuccessfully: final, never retried by the server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OperationError {
    #[error("operation failed: {message}")]
    Failed {
        message: String,
        /// Application error type, for callers that branch on it.
        error_type: String,
        details: Option<Payload>,
    },
    #[error("operation canceled: {message}")]
    Canceled { message: String },
}

/// Whether the server should retry a request that failed with a handler error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryBehavior {
    /// Follow [`HandlerErrorKind::retryable_by_default`].
    Default,
    Retryable,
    NonRetryable,
}

/// The handler could not process the request (as opposed to the operation failing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct HandlerError {
    pub kind: HandlerErrorKind,
    pub message: String,
    pub retry: RetryBehavior,
}

impl HandlerError {
    pub fn new(kind: HandlerErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry: RetryBehavior::Default,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(HandlerErrorKind::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(HandlerErrorKind::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(HandlerErrorKind::Internal, message)
    }
    pub fn with_retry(mut self, retry: RetryBehavior) -> Self {
        self.retry = retry;
        self
    }
    /// Whether the server will retry the request.
    pub fn is_retryable(&self) -> bool {
        match self.retry {
            RetryBehavior::Default => self.kind.retryable_by_default(),
            RetryBehavior::Retryable => true,
            RetryBehavior::NonRetryable => false,
        }
    }
}

/// Why a start did not succeed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Operation(#[from] OperationError),
    #[error(transparent)]
    Handler(#[from] HandlerError),
}

/// One Nexus operation's behaviour. Implementations are shared across concurrent tasks.
pub trait OperationHandler: Send + Sync + 'static {
    /// Starts the operation. Must answer before [`StartContext::deadline`] (about 8 s after the
    /// request): anything longer has to answer [`StartOutcome::Async`].
    fn start(
        &self,
        ctx: StartContext,
        input: Payload,
    ) -> BoxFuture<'static, Result<StartOutcome, StartError>>;

    /// Cancels an async operation started by this handler. The default refuses, so that a
    /// caller never believes a cancel landed where nothing was cancelled.
    fn cancel(&self, ctx: CancelContext) -> BoxFuture<'static, Result<(), HandlerError>> {
        let message = format!(
            "operation {}/{} does not support cancellation",
            ctx.service, ctx.operation
        );
        Box::pin(async move { Err(HandlerError::new(HandlerErrorKind::NotImplemented, message)) })
    }
}

/// Adapts an async closure into a start-only [`OperationHandler`].
pub fn start_fn<F, Fut>(f: F) -> Arc<dyn OperationHandler>
where
    F: Fn(StartContext, Payload) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<StartOutcome, StartError>> + Send + 'static,
{
    struct StartFn<F>(F);
    impl<F, Fut> OperationHandler for StartFn<F>
    where
        F: Fn(StartContext, Payload) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<StartOutcome, StartError>> + Send + 'static,
    {
        fn start(
            &self,
            ctx: StartContext,
            input: Payload,
        ) -> BoxFuture<'static, Result<StartOutcome, StartError>> {
            Box::pin((self.0)(ctx, input))
        }
    }
    Arc::new(StartFn(f))
}

/// The handler of the reserved operation [`PARTIAL_ROUND`], which every tool service registers
/// (the proxy's, native ones): a round keeping answers to some of the previous round's input
/// requests is answered at once with its checked input, and runs nothing (R-CON-40).
///
/// [`PARTIAL_ROUND`]: durable_mcp_contract::input::PARTIAL_ROUND
pub fn partial_round() -> Arc<dyn OperationHandler> {
    start_fn(|_, input| async move {
        durable_mcp_contract::input::partial_round_outcome(&input)
            .map(StartOutcome::Sync)
            .map_err(|reason| HandlerError::bad_request(reason).into())
    })
}

/// A named Nexus service: named operations plus an optional catch-all that receives every
/// operation name not registered (the proxy serves each upstream tool this way).
#[derive(Clone)]
pub struct Service {
    name: String,
    operations: HashMap<String, Arc<dyn OperationHandler>>,
    catch_all: Option<Arc<dyn OperationHandler>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ops: Vec<_> = self.operations.keys().collect();
        ops.sort();
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("operations", &ops)
            .field("catch_all", &self.catch_all.is_some())
            .finish()
    }
}

impl Service {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            operations: HashMap::new(),
            catch_all: None,
        }
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Registers a named operation (replacing one of the same name).
    pub fn operation(
        mut self,
        name: impl Into<String>,
        handler: Arc<dyn OperationHandler>,
    ) -> Self {
        self.operations.insert(name.into(), handler);
        self
    }
    /// Registers the handler for every operation name not registered by name.
    pub fn catch_all(mut self, handler: Arc<dyn OperationHandler>) -> Self {
        self.catch_all = Some(handler);
        self
    }
    /// The handler for an operation name: the named one, else the catch-all.
    pub fn handler(&self, operation: &str) -> Option<&Arc<dyn OperationHandler>> {
        self.operations.get(operation).or(self.catch_all.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for kind in HandlerErrorKind::ALL {
            assert_eq!(HandlerErrorKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(HandlerErrorKind::parse("TEAPOT"), None);
    }

    #[test]
    fn explicit_retry_behaviour_overrides_the_kind_default() {
        let e = HandlerError::bad_request("x");
        assert!(!e.is_retryable());
        assert!(
            e.clone()
                .with_retry(RetryBehavior::Retryable)
                .is_retryable()
        );
        let e = HandlerError::internal("x");
        assert!(e.is_retryable());
        assert!(!e.with_retry(RetryBehavior::NonRetryable).is_retryable());
    }

    #[test]
    fn named_operations_win_over_the_catch_all() {
        let named = start_fn(|_, p| async move { Ok(StartOutcome::Sync(p)) });
        let any = start_fn(|_, _| async move { Ok(StartOutcome::Async { token: "t".into() }) });
        let svc = Service::new("s")
            .operation("list_tools", named.clone())
            .catch_all(any.clone());
        assert!(Arc::ptr_eq(svc.handler("list_tools").unwrap(), &named));
        assert!(Arc::ptr_eq(svc.handler("other").unwrap(), &any));
        assert!(Service::new("s").handler("x").is_none());
    }
}
