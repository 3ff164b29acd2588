//! The Nexus handler runtime: polls a task queue through `temporalio-sdk-core` and dispatches
//! start and cancel requests to registered [`Service`]s.
//!
//! The high-level SDK worker never polls Nexus, so this runtime drives core's
//! `poll_nexus_task` / `complete_nexus_task` loop itself. Concurrency is bounded by core's slot
//! count (`max_concurrent_tasks`): core does not poll while every slot is taken.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use temporalio_client::Connection;
use temporalio_common::worker::WorkerTaskTypes;
use temporalio_protos::{
    coresdk::nexus::{
        NexusTask, NexusTaskCancelReason, NexusTaskCompletion, nexus_task, nexus_task_completion,
    },
    temporal::api::workflowservice::v1::PollNexusTaskQueueResponse,
    temporal::api::{
        common::v1::Payload,
        nexus::v1::{
            CancelOperationRequest, CancelOperationResponse, Response, StartOperationRequest,
            StartOperationResponse, request, response, start_operation_response,
        },
    },
};
use temporalio_sdk_core::{
    CoreRuntime, PollError, PollerBehavior, Worker as CoreWorker, WorkerConfig,
    WorkerVersioningStrategy, init_worker,
};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::trace::WithTraceContext as _;

use durable_mcp_contract::operation::HandlerErrorKind;

use super::{
    failure::{handler_error_to_failure, operation_error_to_failure},
    handler::{
        CancelContext, HandlerError, NexusLink, OperationError, RetryBehavior, Service,
        StartContext, StartError, StartOutcome,
    },
};
use durable_mcp_contract::payload::{self, PayloadCodec, PayloadError};

/// How a [`NexusWorker`] polls and how much it runs at once.
#[derive(Clone)]
pub struct NexusWorkerOptions {
    pub namespace: String,
    pub task_queue: String,
    /// At most this many tasks are handled at once; core stops polling while all are busy.
    pub max_concurrent_tasks: usize,
    /// Concurrent long polls against the task queue.
    pub pollers: usize,
    /// Worker identity shown in Temporal; defaults to `durable-mcp@<host>-<pid>`.
    pub identity: Option<String>,
    /// On shutdown, tasks still running after this long are cancelled.
    pub graceful_shutdown: Duration,
    /// Decodes every start's input and encodes every sync result and failure detail (R-PAY-4),
    /// so handlers see plain payloads whatever codec their callers use.
    pub codec: Option<Arc<dyn PayloadCodec>>,
    /// Where the SDK worker's own metrics go (R-RUN-6; [`crate::sdk_metrics::SdkMeter`]).
    pub sdk_metrics: Option<crate::sdk_metrics::SdkMeter>,
}

impl NexusWorkerOptions {
    pub fn new(namespace: impl Into<String>, task_queue: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            task_queue: task_queue.into(),
            max_concurrent_tasks: 100,
            pollers: 2,
            identity: None,
            graceful_shutdown: Duration::from_secs(10),
            codec: None,
            sdk_metrics: None,
        }
    }
}

impl std::fmt::Debug for NexusWorkerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NexusWorkerOptions")
            .field("namespace", &self.namespace)
            .field("task_queue", &self.task_queue)
            .field("max_concurrent_tasks", &self.max_concurrent_tasks)
            .field("pollers", &self.pollers)
            .field("identity", &self.identity)
            .field("graceful_shutdown", &self.graceful_shutdown)
            .field("codec", &self.codec.is_some())
            .finish()
    }
}

/// Why the runtime could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum NexusWorkerError {
    #[error("invalid Nexus worker options: {0}")]
    InvalidOptions(String),
    #[error("two services are named {0:?}; service names must be unique on a worker")]
    DuplicateService(String),
    #[error("could not initialize the Nexus worker: {0}")]
    Init(String),
    #[error(
        "the Nexus worker could not reach namespace {namespace:?} (is the server up and the \
         namespace created?): {reason}"
    )]
    Validation { namespace: String, reason: String },
    #[error("polling Nexus tasks failed: {0}")]
    Poll(String),
}

/// A cloneable handle that asks a running [`NexusWorker`] to shut down.
#[derive(Clone)]
pub struct ShutdownHandle {
    core: Arc<CoreWorker>,
}

impl ShutdownHandle {
    /// Stops polling; in-flight tasks finish (or are cancelled after the graceful period).
    pub fn shutdown(&self) {
        self.core.initiate_shutdown();
    }
}

/// A Nexus worker on one task queue, serving one or more services.
pub struct NexusWorker {
    core: Arc<CoreWorker>,
    services: Arc<HashMap<String, Service>>,
    task_queue: String,
    codec: Option<Arc<dyn PayloadCodec>>,
    // Core's runtime (telemetry, worker heartbeats) must outlive the worker.
    _runtime: Arc<CoreRuntime>,
}

impl NexusWorker {
    /// Creates the worker and checks that its namespace is reachable. Must be called inside a
    /// tokio runtime.
    pub async fn new(
        connection: Connection,
        options: NexusWorkerOptions,
        services: impl IntoIterator<Item = Service>,
    ) -> Result<Self, NexusWorkerError> {
        let mut by_name = HashMap::new();
        for service in services {
            let name = service.name().to_owned();
            if by_name.insert(name.clone(), service).is_some() {
                return Err(NexusWorkerError::DuplicateService(name));
            }
        }
        if options.max_concurrent_tasks == 0 || options.pollers == 0 {
            return Err(NexusWorkerError::InvalidOptions(
                "max_concurrent_tasks and pollers must be at least 1".into(),
            ));
        }
        let runtime_options = crate::sdk_metrics::runtime_options(options.sdk_metrics.as_ref())
            .map_err(NexusWorkerError::InvalidOptions)?;
        let runtime = CoreRuntime::new_assume_tokio(runtime_options)
            .map_err(|e| NexusWorkerError::Init(e.to_string()))?;
        let identity = options.identity.clone().unwrap_or_else(default_identity);
        let config = WorkerConfig::builder()
            .namespace(options.namespace.clone())
            .task_queue(options.task_queue.clone())
            .client_identity_override(identity)
            .task_types(WorkerTaskTypes::nexus_only())
            .versioning_strategy(WorkerVersioningStrategy::None {
                build_id: String::new(),
            })
            .nexus_task_poller_behavior(PollerBehavior::SimpleMaximum(options.pollers))
            .max_outstanding_nexus_tasks(options.max_concurrent_tasks)
            .graceful_shutdown_period(options.graceful_shutdown)
            .build()
            .map_err(NexusWorkerError::InvalidOptions)?;
        let core = init_worker(&runtime, config, connection)
            .map_err(|e| NexusWorkerError::Init(e.to_string()))?;
        core.validate()
            .await
            .map_err(|e| NexusWorkerError::Validation {
                namespace: options.namespace.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            core: Arc::new(core),
            services: Arc::new(by_name),
            task_queue: options.task_queue,
            codec: options.codec,
            _runtime: Arc::new(runtime),
        })
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            core: self.core.clone(),
        }
    }

    /// Polls and dispatches until [`ShutdownHandle::shutdown`] is called, then waits for
    /// in-flight tasks and releases the worker.
    pub async fn run(self) -> Result<(), NexusWorkerError> {
        info!(task_queue = %self.task_queue, services = ?self.services.keys().collect::<Vec<_>>(),
              "Nexus worker polling");
        let in_flight: InFlight = Arc::default();
        let mut tasks = JoinSet::new();
        let result = loop {
            // Reap finished dispatches so the set does not grow without bound.
            while tasks.try_join_next().is_some() {}
            match self.core.poll_nexus_task().await {
                Ok(NexusTask {
                    variant: Some(nexus_task::Variant::Task(task)),
                    request_deadline,
                    endpoint,
                }) => {
                    let deadline = request_deadline.and_then(crate::temporal::system_time);
                    let token = CancellationToken::new();
                    in_flight
                        .lock()
                        .unwrap()
                        .insert(task.task_token.clone(), token.clone());
                    let dispatch = Dispatch {
                        core: self.core.clone(),
                        services: self.services.clone(),
                        in_flight: in_flight.clone(),
                        codec: self.codec.clone(),
                    };
                    tasks.spawn(dispatch.run(task, endpoint, deadline, token));
                }
                Ok(NexusTask {
                    variant: Some(nexus_task::Variant::CancelTask(cancel)),
                    ..
                }) => {
                    let reason = cancel.reason();
                    let entry = in_flight.lock().unwrap().remove(&cancel.task_token);
                    if let Some(token) = entry {
                        token.cancel();
                        match reason {
                            NexusTaskCancelReason::TimedOut => warn!(
                                task_queue = %self.task_queue,
                                "a Nexus handler overran its request deadline and was cancelled; \
                                 its answer is discarded and the server will retry the request \
                                 (handlers that can take longer than the deadline must answer async)"
                            ),
                            NexusTaskCancelReason::WorkerShutdown => warn!(
                                task_queue = %self.task_queue,
                                "a Nexus handler was cancelled by worker shutdown"
                            ),
                        }
                        complete(
                            &self.core,
                            cancel.task_token,
                            nexus_task_completion::Status::AckCancel(true),
                        )
                        .await;
                    }
                }
                Ok(NexusTask { variant: None, .. }) => {}
                Err(PollError::ShutDown) => break Ok(()),
                Err(e) => break Err(NexusWorkerError::Poll(e.to_string())),
            }
        };
        while tasks.join_next().await.is_some() {}
        self.core.shutdown().await;
        info!(task_queue = %self.task_queue, "Nexus worker stopped");
        result
    }
}

/// A spawned handler that is aborted when its dispatch is dropped, as the future it stands for.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a cancelled handler may take to stop on its own before it is dropped.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Task token -> the token that cancels its handler. Whoever removes an entry first (the
/// handler's answer, or core's cancel) is the one that completes the task.
type InFlight = Arc<Mutex<HashMap<Vec<u8>, CancellationToken>>>;

struct Dispatch {
    core: Arc<CoreWorker>,
    services: Arc<HashMap<String, Service>>,
    in_flight: InFlight,
    codec: Option<Arc<dyn PayloadCodec>>,
}

impl Dispatch {
    async fn run(
        self,
        task: PollNexusTaskQueueResponse,
        endpoint: String,
        deadline: Option<SystemTime>,
        cancelled: CancellationToken,
    ) {
        let task_token = task.task_token.clone();
        // A handler that ignores its cancellation is dropped a moment later: it no longer holds
        // a slot (core freed it with the cancel), so it must not keep running (R-NEX-6).
        let ignored_cancel = async {
            cancelled.cancelled().await;
            tokio::time::sleep(CANCEL_GRACE).await;
        };
        let status = tokio::select! {
            status = self.answer(task, endpoint, deadline, cancelled.clone()) => status,
            () = ignored_cancel => {
                warn!("dropping a Nexus handler still running {CANCEL_GRACE:?} after its cancellation");
                return;
            }
        };
        let still_ours = self.in_flight.lock().unwrap().remove(&task_token).is_some();
        if still_ours {
            complete(&self.core, task_token, status).await;
        } else {
            debug!("discarding a Nexus answer that arrived after its task was cancelled");
        }
    }

    async fn answer(
        &self,
        task: PollNexusTaskQueueResponse,
        endpoint: String,
        deadline: Option<SystemTime>,
        cancelled: CancellationToken,
    ) -> nexus_task_completion::Status {
        let Some(request) = task.request else {
            return handler_failure(HandlerError::bad_request("Nexus task carried no request"));
        };
        let call = Call {
            endpoint,
            headers: request.header,
            deadline,
            cancelled,
        };
        let answered = match request.variant {
            Some(request::Variant::StartOperation(start)) => self.start(start, call).await,
            Some(request::Variant::CancelOperation(cancel)) => self.cancel(cancel, call).await,
            None => Err(HandlerError::bad_request("Nexus request has no operation")),
        };
        answered.unwrap_or_else(handler_failure)
    }

    /// Runs a start request's handler: input decoded, result encoded through the codec.
    async fn start(
        &self,
        mut start: StartOperationRequest,
        call: Call,
    ) -> Result<nexus_task_completion::Status, HandlerError> {
        let span =
            info_span!("nexus_start", service = %start.service, operation = %start.operation);
        let handler = self.lookup(&start.service, &start.operation)?.clone();
        let payload = start.payload.take().unwrap_or_default();
        let ctx = start_context(start, call);
        let input = self.decode_input(payload).await?;
        let traced = super::traced::handler_span(&ctx);
        // Run the handler in its own task, a panic caught as an INTERNAL error (counted and
        // logged once, R-CON-51); the task ends when this dispatch is dropped.
        let running = handler.start(ctx, input).with_context(traced.clone());
        let running = crate::panics::catching("nexus_start", running);
        let mut outcome = match AbortOnDrop(tokio::spawn(running.instrument(span))).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(panicked)) => Err(handler_panicked(&panicked)),
            Err(_) => Err(HandlerError::internal("the handler's task was cancelled")),
        };
        super::traced::handler_ended(&traced, &outcome);
        if let Some(codec) = &self.codec {
            encode_outcome(codec.as_ref(), &mut outcome)
                .await
                .map_err(|e| codec_unavailable("encoding the result", e))?;
        }
        Ok(start_answer(outcome))
    }

    /// A start's input through the codec, when there is one.
    async fn decode_input(&self, input: Payload) -> Result<Payload, HandlerError> {
        match &self.codec {
            Some(codec) => payload::decode_one(codec.as_ref(), input)
                .await
                .map_err(|e| codec_unavailable("decoding the input", e)),
            None => Ok(input),
        }
    }

    /// Runs a cancel request's handler.
    async fn cancel(
        &self,
        cancel: CancelOperationRequest,
        call: Call,
    ) -> Result<nexus_task_completion::Status, HandlerError> {
        let handler = self.lookup(&cancel.service, &cancel.operation)?.clone();
        let ctx = CancelContext {
            endpoint: call.endpoint,
            service: cancel.service,
            operation: cancel.operation,
            token: cancel.operation_token,
            headers: call.headers,
            deadline: call.deadline,
            cancelled: call.cancelled,
        };
        let running = crate::panics::catching("nexus_cancel", handler.cancel(ctx));
        match AbortOnDrop(tokio::spawn(running)).await {
            Ok(Ok(Ok(()))) => Ok(nexus_task_completion::Status::Completed(Response {
                variant: Some(response::Variant::CancelOperation(
                    CancelOperationResponse {},
                )),
            })),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(panicked)) => Err(handler_panicked(&panicked)),
            Err(_) => Err(HandlerError::internal(
                "the cancel handler's task was cancelled",
            )),
        }
    }

    fn lookup(
        &self,
        service: &str,
        operation: &str,
    ) -> Result<&Arc<dyn super::handler::OperationHandler>, HandlerError> {
        let svc = self.services.get(service).ok_or_else(|| {
            HandlerError::not_found(format!(
                "no Nexus service {service:?} is registered on this worker"
            ))
        })?;
        svc.handler(operation).ok_or_else(|| {
            HandlerError::not_found(format!(
                "service {service:?} has no operation {operation:?}"
            ))
        })
    }
}

/// What every request of a task carries besides its operation.
struct Call {
    endpoint: String,
    headers: HashMap<String, String>,
    deadline: Option<SystemTime>,
    cancelled: CancellationToken,
}

/// A start handler's context (the request's payload already taken).
fn start_context(start: StartOperationRequest, call: Call) -> StartContext {
    StartContext {
        endpoint: call.endpoint,
        service: start.service,
        operation: start.operation,
        request_id: start.request_id,
        callback: start.callback,
        callback_headers: start.callback_header,
        headers: call.headers,
        links: start
            .links
            .into_iter()
            .map(|l| NexusLink {
                url: l.url,
                r#type: l.r#type,
            })
            .collect(),
        deadline: call.deadline,
        cancelled: call.cancelled,
    }
}

/// The answer to a start, from what its handler did.
/// The INTERNAL error of a handler that panicked: retried by the server, nothing of the panic
/// in it (its message may hold input).
fn handler_panicked(panicked: &crate::panics::Panicked) -> HandlerError {
    HandlerError::internal(format!(
        "the handler panicked: {}",
        panicked.caller_message()
    ))
}

fn start_answer(
    outcome: Result<Result<StartOutcome, StartError>, HandlerError>,
) -> nexus_task_completion::Status {
    match outcome {
        Ok(Ok(StartOutcome::Sync(payload))) => start_response(
            start_operation_response::Variant::SyncSuccess(start_operation_response::Sync {
                payload: Some(payload),
                links: vec![],
            }),
        ),
        Ok(Ok(StartOutcome::Async { token })) => {
            start_response(start_operation_response::Variant::AsyncSuccess(
                #[allow(deprecated)]
                start_operation_response::Async {
                    operation_id: String::new(),
                    links: vec![],
                    operation_token: token,
                },
            ))
        }
        Ok(Err(StartError::Operation(e))) => start_response(
            start_operation_response::Variant::Failure(operation_error_to_failure(&e)),
        ),
        Ok(Err(StartError::Handler(e))) => handler_failure(e),
        Err(e) => handler_failure(e),
    }
}

/// A codec failure: the codec server may be back soon, so the server retries the request.
fn codec_unavailable(what: &str, e: PayloadError) -> HandlerError {
    HandlerError::new(HandlerErrorKind::Unavailable, format!("{what}: {e}"))
        .with_retry(RetryBehavior::Retryable)
}

/// Encodes the payloads a start answers with: a sync result and a failure's details.
async fn encode_outcome(
    codec: &dyn PayloadCodec,
    outcome: &mut Result<Result<StartOutcome, StartError>, HandlerError>,
) -> Result<(), PayloadError> {
    let slot = match outcome {
        Ok(Ok(StartOutcome::Sync(p))) => p,
        Ok(Err(StartError::Operation(OperationError::Failed {
            details: Some(p), ..
        }))) => p,
        _ => return Ok(()),
    };
    *slot = payload::encode_one(codec, std::mem::take(slot)).await?;
    Ok(())
}

fn start_response(variant: start_operation_response::Variant) -> nexus_task_completion::Status {
    nexus_task_completion::Status::Completed(Response {
        variant: Some(response::Variant::StartOperation(StartOperationResponse {
            variant: Some(variant),
        })),
    })
}

fn handler_failure(err: HandlerError) -> nexus_task_completion::Status {
    debug!(
        kind = err.kind.as_str(),
        retryable = err.is_retryable(),
        "Nexus handler error"
    );
    nexus_task_completion::Status::Failure(handler_error_to_failure(&err))
}

async fn complete(core: &CoreWorker, task_token: Vec<u8>, status: nexus_task_completion::Status) {
    let completion = NexusTaskCompletion {
        task_token,
        status: Some(status),
    };
    if let Err(e) = core.complete_nexus_task(completion).await {
        warn!(error = %e, "could not complete a Nexus task");
    }
}

/// `durable-mcp@<host>-<pid>`: readable in the Temporal UI and unique per process.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("durable-mcp@{host}-{}", std::process::id())
}
