//! The caller side: start, await, describe and cancel *standalone* Nexus operations
//! (operations that belong to no Workflow) through the WorkflowService API.

use std::{collections::HashMap, sync::Arc, time::Duration};

use temporalio_client::{Connection, grpc::WorkflowService};
use temporalio_protos::temporal::api::{
    common::v1::Payload,
    enums::v1::{
        NexusOperationCancellationState, NexusOperationIdConflictPolicy,
        NexusOperationIdReusePolicy, NexusOperationWaitStage,
    },
    sdk::v1::UserMetadata,
    workflowservice::v1::{
        DescribeNamespaceRequest, DescribeNexusOperationExecutionRequest,
        PollNexusOperationExecutionRequest, RequestCancelNexusOperationExecutionRequest,
        StartNexusOperationExecutionRequest, TerminateNexusOperationExecutionRequest,
        describe_nexus_operation_execution_response, poll_nexus_operation_execution_response,
    },
};
use tokio_util::sync::CancellationToken;

use durable_mcp_contract::operation::{
    OperationOutcome, OperationStatus, status_from_failure, summarize,
};

use super::{
    outage::{Backoff, is_transient},
    times::OperationTimes,
};
use crate::temporal::proto_duration;
use durable_mcp_contract::payload::{self, IdentityCodec, PayloadCodec, PayloadError};

/// Whether the server refused a cancel because one is already requested (under another
/// request id: a second cancel of the same task, or one racing the first). The cancel the
/// caller wants holds, so it is no failure.
fn already_cancelling(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::FailedPrecondition
        && status.message().contains("cancellation already requested")
}

/// What to do when an operation with the same id is already running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConflictPolicy {
    /// Reject the start (the server's default).
    #[default]
    Fail,
    /// Return the running operation.
    UseExisting,
}

/// Whether an operation id may be used again after an operation with it closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReusePolicy {
    #[default]
    AllowDuplicate,
    AllowDuplicateFailedOnly,
    /// The id names one execution forever (idempotency keys need this).
    RejectDuplicate,
}

/// A request to start a standalone Nexus operation.
#[derive(Debug, Clone)]
pub struct StartOperation {
    pub operation_id: String,
    /// Same id and request id is idempotent on the server, even after the operation closed.
    pub request_id: String,
    pub endpoint: String,
    pub service: String,
    pub operation: String,
    pub input: Payload,
    pub schedule_to_close: Option<Duration>,
    pub conflict_policy: ConflictPolicy,
    pub reuse_policy: ReusePolicy,
    /// Nexus headers delivered to the handler.
    pub headers: HashMap<String, String>,
    /// A one-line summary shown in the Temporal UI. Never put secrets here.
    pub summary: Option<String>,
}

impl StartOperation {
    /// A start with a fresh request id and default policies.
    pub fn new(
        operation_id: impl Into<String>,
        endpoint: impl Into<String>,
        service: impl Into<String>,
        operation: impl Into<String>,
        input: Payload,
    ) -> Self {
        Self {
            operation_id: operation_id.into(),
            request_id: uuid::Uuid::new_v4().to_string(),
            endpoint: endpoint.into(),
            service: service.into(),
            operation: operation.into(),
            input,
            schedule_to_close: None,
            conflict_policy: ConflictPolicy::default(),
            reuse_policy: ReusePolicy::default(),
            headers: HashMap::new(),
            summary: None,
        }
    }
}

/// Names one run of a standalone operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperationRef {
    pub operation_id: String,
    pub run_id: String,
}

/// What describe tells about an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationDescription {
    pub reference: OperationRef,
    pub status: OperationStatus,
    /// The Nexus endpoint it was started on: two endpoints may serve one service name.
    pub endpoint: String,
    pub service: String,
    pub operation: String,
    /// Attempts made to deliver the start request to the handler.
    pub attempt: i32,
    pub last_attempt_failure: Option<String>,
    /// The Nexus headers the operation was started with.
    pub headers: HashMap<String, String>,
    /// The handler's token for an async operation (empty until it started, and for sync ones):
    /// what the handler uses to find its work again, e.g. the proxy's activity.
    pub operation_token: String,
    /// The request id the server gave the handler's start (not the caller's start request
    /// id): what a tool service derives its call's Activity or Workflow id from (R-CON-10).
    pub handler_request_id: String,
    /// Present once the operation closed.
    pub outcome: Option<OperationOutcome>,
    /// The input it was started with, decoded: only from
    /// [`OperationClient::describe_with_input`].
    pub input: Option<Payload>,
    /// When it was scheduled and last changed, as the server records them.
    pub times: OperationTimes,
    /// Where a requested cancel stands; `None` when none was requested.
    pub cancellation: Option<CancelState>,
}

/// Where a requested cancel stands, as the server records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelState {
    /// Queued, being delivered, or backing off before another try.
    InProgress,
    /// The handler accepted the cancel.
    Delivered,
    /// Delivery failed for good, timed out, or is blocked (e.g. by a circuit breaker).
    Failed,
    /// A state this client does not know.
    Unknown,
}

impl From<NexusOperationCancellationState> for CancelState {
    fn from(state: NexusOperationCancellationState) -> Self {
        use NexusOperationCancellationState as S;
        match state {
            S::Scheduled | S::BackingOff => CancelState::InProgress,
            S::Succeeded => CancelState::Delivered,
            S::Failed | S::TimedOut | S::Blocked => CancelState::Failed,
            S::Unspecified => CancelState::Unknown,
        }
    }
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum OperationClientError {
    #[error("operation {operation_id:?} already exists (started by another request)")]
    AlreadyExists { operation_id: String },
    #[error("operation {operation_id:?} was not found")]
    NotFound { operation_id: String },
    #[error("waiting for operation {operation_id:?} was cancelled by the caller")]
    WaitCancelled { operation_id: String },
    #[error("Temporal rejected {call}: {status}")]
    Rpc {
        call: &'static str,
        status: Box<tonic::Status>,
    },
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl OperationClientError {
    fn rpc(call: &'static str, status: tonic::Status, operation_id: &str) -> Self {
        match status.code() {
            tonic::Code::AlreadyExists => Self::AlreadyExists {
                operation_id: operation_id.into(),
            },
            tonic::Code::NotFound => Self::NotFound {
                operation_id: operation_id.into(),
            },
            _ => Self::Rpc {
                call,
                status: Box::new(status),
            },
        }
    }

    /// Whether sending the same request again may succeed: Temporal could not be reached or
    /// gave up on its side (R-CON-16), as during a restart of the server.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Rpc { status, .. } if is_transient(status.code()))
    }
}

/// How long [`OperationClient::wait`] keeps retrying through an outage when its caller names no
/// deadline.
pub const DEFAULT_OUTAGE_BUDGET: Duration = Duration::from_secs(300);

/// Runs `attempt` until it succeeds, fails for good, or `deadline` would pass before the next
/// try; transient failures (R-CON-16) are retried with [`Backoff`]. `cancel` ends the retries
/// with the last error.
async fn retrying<T, F, Fut>(
    what: &str,
    operation_id: &str,
    deadline: tokio::time::Instant,
    cancel: Option<&CancellationToken>,
    mut attempt: F,
) -> Result<T, OperationClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, OperationClientError>>,
{
    let mut backoff = Backoff::default();
    loop {
        let error = match attempt().await {
            Err(e) if e.is_transient() => e,
            done => return done,
        };
        let delay = backoff.next_delay();
        if tokio::time::Instant::now() + delay > deadline {
            return Err(error);
        }
        tracing::warn!(operation_id, error = %error, retry_in = ?delay, "Temporal unreachable while {what}; retrying");
        match cancel {
            Some(c) => tokio::select! {
                _ = c.cancelled() => return Err(error),
                _ = tokio::time::sleep(delay) => {}
            },
            None => tokio::time::sleep(delay).await,
        }
    }
}

/// How long one poll waits on the server; it answers empty after about 29 s by itself.
const POLL_RPC_TIMEOUT: Duration = Duration::from_secs(70);

/// A client for standalone Nexus operations in one namespace.
#[derive(Clone)]
pub struct OperationClient {
    connection: Connection,
    namespace: String,
    identity: String,
    codec: Arc<dyn PayloadCodec>,
    /// The namespace's retention, read once (`None` when it could not be read).
    retention: Arc<tokio::sync::OnceCell<Option<Duration>>>,
}

impl OperationClient {
    pub fn new(connection: Connection, namespace: impl Into<String>) -> Self {
        let identity = connection.identity().to_owned();
        Self {
            connection,
            namespace: namespace.into(),
            identity,
            codec: Arc::new(IdentityCodec),
            retention: Arc::default(),
        }
    }

    /// How long the namespace keeps a closed operation (its retention), read once; `None`
    /// while the server would not say (asked again next time).
    pub async fn retention(&self) -> Option<Duration> {
        let read = self.retention.get_or_try_init(|| async {
            let described = self
                .service()
                .describe_namespace(tonic::Request::new(DescribeNamespaceRequest {
                    namespace: self.namespace.clone(),
                    ..Default::default()
                }))
                .await
                .map_err(
                    |e| tracing::debug!(error = %e, "could not read the namespace's retention"),
                )?;
            Ok::<_, ()>(
                described
                    .into_inner()
                    .config
                    .and_then(|c| c.workflow_execution_retention_ttl)
                    .map(|d| crate::temporal::std_duration(&d)),
            )
        });
        read.await.ok().copied().flatten()
    }

    /// Sends every input and result payload through `codec`.
    pub fn with_codec(mut self, codec: Arc<dyn PayloadCodec>) -> Self {
        self.codec = codec;
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The codec this client sends payloads through, for payloads read outside operations
    /// (a call Activity's heartbeats, R-PRX-20).
    pub fn codec(&self) -> &Arc<dyn PayloadCodec> {
        &self.codec
    }

    /// The Temporal connection, for RPCs beyond Nexus operations.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    fn service(&self) -> Box<dyn WorkflowService> {
        self.connection.workflow_service()
    }

    /// Starts an operation. `started` in the answer is false when the server attached the
    /// request to an existing run (same request id, or `UseExisting`).
    pub async fn start(
        &self,
        req: StartOperation,
    ) -> Result<(OperationRef, bool), OperationClientError> {
        if req.operation_id.is_empty() {
            return Err(OperationClientError::Invalid(
                "operation_id must not be empty".into(),
            ));
        }
        let input = payload::encode_one(self.codec.as_ref(), req.input).await?;
        let request = StartNexusOperationExecutionRequest {
            namespace: self.namespace.clone(),
            identity: self.identity.clone(),
            request_id: req.request_id,
            operation_id: req.operation_id.clone(),
            endpoint: req.endpoint,
            service: req.service,
            operation: req.operation,
            schedule_to_close_timeout: req.schedule_to_close.map(proto_duration),
            input: Some(input),
            id_reuse_policy: match req.reuse_policy {
                ReusePolicy::AllowDuplicate => NexusOperationIdReusePolicy::AllowDuplicate,
                ReusePolicy::AllowDuplicateFailedOnly => {
                    NexusOperationIdReusePolicy::AllowDuplicateFailedOnly
                }
                ReusePolicy::RejectDuplicate => NexusOperationIdReusePolicy::RejectDuplicate,
            }
            .into(),
            id_conflict_policy: match req.conflict_policy {
                ConflictPolicy::Fail => NexusOperationIdConflictPolicy::Fail,
                ConflictPolicy::UseExisting => NexusOperationIdConflictPolicy::UseExisting,
            }
            .into(),
            nexus_header: req.headers,
            user_metadata: req.summary.map(|s| UserMetadata {
                summary: payload::to_payload(&s).ok(),
                details: None,
            }),
            ..Default::default()
        };
        let resp = self
            .service()
            .start_nexus_operation_execution(tonic::Request::new(request))
            .await
            .map_err(|s| {
                OperationClientError::rpc("StartNexusOperationExecution", s, &req.operation_id)
            })?
            .into_inner();
        Ok((
            OperationRef {
                operation_id: req.operation_id,
                run_id: resp.run_id,
            },
            resp.started,
        ))
    }

    /// Like [`OperationClient::start`], retrying through a Temporal outage (R-CON-16) until
    /// `deadline`. Safe: every try carries the same request id, which the server answers with
    /// the same run.
    pub async fn start_until(
        &self,
        req: StartOperation,
        deadline: tokio::time::Instant,
    ) -> Result<(OperationRef, bool), OperationClientError> {
        let operation_id = req.operation_id.clone();
        retrying("starting", &operation_id, deadline, None, || {
            self.start(req.clone())
        })
        .await
    }

    /// One long poll for the outcome: `None` when the server's poll window passed first.
    pub async fn poll_outcome(
        &self,
        op: &OperationRef,
    ) -> Result<Option<OperationOutcome>, OperationClientError> {
        let mut request = tonic::Request::new(PollNexusOperationExecutionRequest {
            namespace: self.namespace.clone(),
            operation_id: op.operation_id.clone(),
            run_id: op.run_id.clone(),
            wait_stage: NexusOperationWaitStage::Closed.into(),
        });
        request.set_timeout(POLL_RPC_TIMEOUT);
        let resp = match self.service().poll_nexus_operation_execution(request).await {
            Ok(r) => r.into_inner(),
            // The server (or a proxy) ended the long poll: treat like an empty answer.
            Err(s) if s.code() == tonic::Code::DeadlineExceeded => return Ok(None),
            Err(s) => {
                return Err(OperationClientError::rpc(
                    "PollNexusOperationExecution",
                    s,
                    &op.operation_id,
                ));
            }
        };
        use poll_nexus_operation_execution_response::Outcome;
        match resp.outcome {
            None => Ok(None),
            Some(Outcome::Result(p)) => Ok(Some(OperationOutcome::Succeeded(
                payload::decode_one(self.codec.as_ref(), p).await?,
            ))),
            Some(Outcome::Failure(f)) => {
                // The failure chain alone can be ambiguous (a cancel wraps its cause): the status
                // is authoritative. The failure itself tells it, except after a start that never
                // succeeded; only then is it asked for (R-CON-37).
                let status = match status_from_failure(&f, !resp.operation_token.is_empty()) {
                    Some(status) => Some(status),
                    None => self.describe(op).await.ok().map(|d| d.status),
                };
                Ok(Some(OperationOutcome::from_failure(&f, status)))
            }
        }
    }

    /// Waits until the operation closes. Survives the server's empty long-poll answers and
    /// outages of up to [`DEFAULT_OUTAGE_BUDGET`]; returns
    /// [`OperationClientError::WaitCancelled`] as soon as `cancel` fires.
    pub async fn wait(
        &self,
        op: &OperationRef,
        cancel: &CancellationToken,
    ) -> Result<OperationOutcome, OperationClientError> {
        self.wait_until(
            op,
            cancel,
            tokio::time::Instant::now() + DEFAULT_OUTAGE_BUDGET,
        )
        .await
    }

    /// Like [`OperationClient::wait`], riding out Temporal outages (R-CON-16) until `deadline`
    /// (the tool's own timeout, past which the operation is over anyway): a poll that fails
    /// because the server is unreachable is retried with backoff, and the wait goes on.
    pub async fn wait_until(
        &self,
        op: &OperationRef,
        cancel: &CancellationToken,
        deadline: tokio::time::Instant,
    ) -> Result<OperationOutcome, OperationClientError> {
        let cancelled = || OperationClientError::WaitCancelled {
            operation_id: op.operation_id.clone(),
        };
        loop {
            let polled = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(cancelled()),
                polled = retrying("waiting for the outcome", &op.operation_id, deadline, Some(cancel), || self.poll_outcome(op)) => polled,
            };
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            if let Some(outcome) = polled? {
                return Ok(outcome);
            }
        }
    }

    /// Describes an operation (with its outcome once closed).
    pub async fn describe(
        &self,
        op: &OperationRef,
    ) -> Result<OperationDescription, OperationClientError> {
        self.describe_as(op, false).await
    }

    /// [`OperationClient::describe`] with the operation's input, decoded through the codec in
    /// the same codec call as the outcome: what a caller needs to tell whose input a run of a
    /// reused operation ID carries.
    pub async fn describe_with_input(
        &self,
        op: &OperationRef,
    ) -> Result<OperationDescription, OperationClientError> {
        self.describe_as(op, true).await
    }

    /// [`OperationClient::describe_with_input`], retrying through a Temporal outage (R-CON-16)
    /// until `deadline` (one try at least).
    pub async fn describe_with_input_until(
        &self,
        op: &OperationRef,
        deadline: tokio::time::Instant,
    ) -> Result<OperationDescription, OperationClientError> {
        retrying("describing", &op.operation_id, deadline, None, || {
            self.describe_with_input(op)
        })
        .await
    }

    async fn describe_as(
        &self,
        op: &OperationRef,
        include_input: bool,
    ) -> Result<OperationDescription, OperationClientError> {
        let resp = self
            .service()
            .describe_nexus_operation_execution(tonic::Request::new(
                DescribeNexusOperationExecutionRequest {
                    namespace: self.namespace.clone(),
                    operation_id: op.operation_id.clone(),
                    run_id: op.run_id.clone(),
                    include_input,
                    include_outcome: true,
                    long_poll_token: vec![],
                },
            ))
            .await
            .map_err(|s| {
                OperationClientError::rpc("DescribeNexusOperationExecution", s, &op.operation_id)
            })?
            .into_inner();
        let info = resp.info.unwrap_or_default();
        let times = OperationTimes::of(&info);
        let cancellation = info.cancellation_info.as_ref().map(|c| c.state().into());
        let status = OperationStatus::from(info.status());
        use describe_nexus_operation_execution_response::Outcome;
        let (result, failure) = match resp.outcome {
            Some(Outcome::Result(p)) => (Some(p), None),
            Some(Outcome::Failure(f)) => (None, Some(f)),
            None => (None, None),
        };
        let (input, result) = self.decode_pair(resp.input, result).await?;
        let outcome = match (result, failure) {
            (Some(p), _) => Some(OperationOutcome::Succeeded(p)),
            (None, Some(f)) => Some(OperationOutcome::from_failure(&f, Some(status))),
            (None, None) => None,
        };
        Ok(OperationDescription {
            reference: OperationRef {
                operation_id: op.operation_id.clone(),
                run_id: resp.run_id,
            },
            status,
            endpoint: info.endpoint,
            service: info.service,
            operation: info.operation,
            attempt: info.attempt,
            last_attempt_failure: info.last_attempt_failure.map(|f| summarize(&f).message),
            headers: info.nexus_header,
            operation_token: info.operation_token,
            handler_request_id: info.request_id,
            outcome,
            input,
            times,
            cancellation,
        })
    }

    /// Decodes whichever of `input` and `result` is there in one codec call.
    async fn decode_pair(
        &self,
        input: Option<Payload>,
        result: Option<Payload>,
    ) -> Result<(Option<Payload>, Option<Payload>), OperationClientError> {
        let has_result = result.is_some();
        let encoded: Vec<Payload> = input.into_iter().chain(result).collect();
        if encoded.is_empty() {
            return Ok((None, None));
        }
        let count = encoded.len();
        let mut decoded = self.codec.decode(encoded).await?;
        if decoded.len() != count {
            let got = decoded.len();
            let e = format!("codec returned {got} payloads for {count}");
            return Err(PayloadError::Codec(e).into());
        }
        let result = if has_result { decoded.pop() } else { None };
        Ok((decoded.pop(), result))
    }

    /// Asks the handler to cancel the operation. The operation ends Canceled only when the
    /// handler's work actually stops; [`OperationClient::wait`] tells when.
    pub async fn cancel(
        &self,
        op: &OperationRef,
        reason: &str,
    ) -> Result<(), OperationClientError> {
        self.cancel_until(op, reason, tokio::time::Instant::now())
            .await
    }

    /// Like [`OperationClient::cancel`], retrying through a Temporal outage (R-CON-16) until
    /// `deadline`: a cancel requested while the server is down is delivered once it is back.
    /// Every try carries the same request id, so the server records one cancel request.
    pub async fn cancel_until(
        &self,
        op: &OperationRef,
        reason: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), OperationClientError> {
        let request_id = uuid::Uuid::new_v4().to_string();
        retrying("cancelling", &op.operation_id, deadline, None, || {
            self.request_cancel(op, reason, &request_id)
        })
        .await
    }

    async fn request_cancel(
        &self,
        op: &OperationRef,
        reason: &str,
        request_id: &str,
    ) -> Result<(), OperationClientError> {
        self.service()
            .request_cancel_nexus_operation_execution(tonic::Request::new(
                RequestCancelNexusOperationExecutionRequest {
                    namespace: self.namespace.clone(),
                    operation_id: op.operation_id.clone(),
                    run_id: op.run_id.clone(),
                    identity: self.identity.clone(),
                    request_id: request_id.to_owned(),
                    reason: reason.to_owned(),
                },
            ))
            .await
            .map(|_| ())
            .or_else(|s| match already_cancelling(&s) {
                true => Ok(()),
                false => Err(OperationClientError::rpc(
                    "RequestCancelNexusOperationExecution",
                    s,
                    &op.operation_id,
                )),
            })
    }

    /// Ends the operation record at once. The handler is NOT told: backing work keeps running.
    pub async fn terminate(
        &self,
        op: &OperationRef,
        reason: &str,
    ) -> Result<(), OperationClientError> {
        self.service()
            .terminate_nexus_operation_execution(tonic::Request::new(
                TerminateNexusOperationExecutionRequest {
                    namespace: self.namespace.clone(),
                    operation_id: op.operation_id.clone(),
                    run_id: op.run_id.clone(),
                    identity: self.identity.clone(),
                    request_id: uuid::Uuid::new_v4().to_string(),
                    reason: reason.to_owned(),
                },
            ))
            .await
            .map_err(|s| {
                OperationClientError::rpc("TerminateNexusOperationExecution", s, &op.operation_id)
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_already_requested_is_no_failure_and_other_refusals_are() {
        let already = tonic::Status::failed_precondition(
            "cancellation already requested with request ID cafdd388-310c-4a57-be40-636c490eccb4",
        );
        assert!(already_cancelling(&already));
        let closed = tonic::Status::failed_precondition("operation already completed");
        assert!(!already_cancelling(&closed));
        let other = tonic::Status::unavailable("cancellation already requested");
        assert!(!already_cancelling(&other));
    }
}
