//! Connections to upstream MCP servers (stdio children or Streamable HTTP), through rmcp.
//!
//! One [`UpstreamClient`] per upstream and process: the connection is made lazily, reused by
//! every call, and dropped after a transport failure so the next use reconnects (a dead stdio
//! child is restarted). Errors say whether the request can have reached the tool
//! ([`Phase`]), which decides whether retrying is safe.

// MCP logging is deprecated (SEP-2577) but upstreams still send it: it reaches callers (R-PRX-10).
#![allow(deprecated)]

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::{
    FutureExt as _,
    future::{BoxFuture, Shared},
};
use rmcp::{
    ClientHandler, Peer, RoleClient,
    handler::client::progress::ProgressDispatcher,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
        ClientRequest, ListToolsRequest, PaginatedRequestParams, ProgressNotificationParam,
        ProgressToken, RequestId, RequestMetaObject, ServerResult,
    },
    service::{
        ClientServiceExt as _, NotificationContext, PeerRequestOptions, RunningService,
        ServiceError,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::{mpsc::UnboundedReceiver, watch};
use tracing::{info, warn};

use super::{
    as_written::{FlightTap, TapHttpClient, TapReader, TaskFlight, WrittenResults},
    auth::{AuthError, AuthProvider, ClientCredentialsProvider},
    child,
    config::{TransportConfig, UrlSecrets, redacted_url},
    factory::CustomTransport,
    flights::ForCaller,
    progress::CallProgress,
    transport_failure::{Evidence, Failure, Phase, SendFailure, phase},
};
use durable_mcp_contract::call::{CallNotification, ToolLog};

mod era;
mod features;
mod probe;
pub mod subscriptions;
mod task;
use subscriptions::ResourceWatch;
pub use task::{CallAnswer, TaskState, next_poll_delay};

/// What a round of a call brings beside its arguments: the answers to the previous round's
/// input requests (R-PRX-29), and the caller it is for, as the connector named it (R-PRX-10).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallRound<'a> {
    pub answers: Option<&'a super::input::RoundAnswers>,
    pub caller: Option<&'a str>,
}

/// Why an upstream request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made: the request never reached the tool.
    #[error("could not connect to upstream {service:?}: {reason}")]
    Connect { service: String, reason: String },
    /// The connection failed while the request was in flight: the tool may have run.
    #[error("upstream {service:?} failed during the request: {reason}")]
    Transport {
        service: String,
        reason: String,
        phase: Phase,
    },
    /// The upstream answered with a JSON-RPC error.
    #[error("upstream {service:?} answered JSON-RPC error {code}: {message}")]
    JsonRpc {
        service: String,
        code: i32,
        message: String,
        /// The error's `data`, as the upstream wrote it (secrets of its URL taken out).
        data: Option<serde_json::Value>,
    },
    /// The upstream answered something that is not valid MCP.
    #[error("upstream {service:?} broke the protocol: {reason}")]
    Protocol { service: String, reason: String },
}

impl UpstreamError {
    /// Whether the request provably never reached the tool.
    pub fn phase(&self) -> Phase {
        match self {
            Self::Connect { .. } => phase(&Failure::NoConnection),
            Self::Transport { phase, .. } => *phase,
            Self::JsonRpc { .. } | Self::Protocol { .. } => Phase::MayHaveRun,
        }
    }
}

type Connection = Arc<RunningService<RoleClient, UpstreamHandler>>;

/// A handshake in progress, awaited by every caller that needs the connection meanwhile.
type Handshake = Shared<BoxFuture<'static, Result<Connection, UpstreamError>>>;

/// How long starting or reaching an upstream and its MCP `initialize` handshake may take
/// (an `npx` server may download its package first); then the attempt fails and a child is
/// killed. Callers wait for a handshake no longer than their own budget.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The connection of one upstream, as the lock sees it: the lock is never held across a
/// handshake.
enum Slot {
    Idle,
    Connecting { attempt: u64, handshake: Handshake },
    Connected(Connection),
}

/// What the proxy does with the upstream's own messages: `notifications/tools/list_changed`
/// bumps a counter that discovery follows, so new annotations (and so retry policies) apply
/// without waiting for the next `list_tools`; `notifications/progress` goes to the call whose
/// request carried the token. Everything else gets rmcp's defaults. It also holds what lives
/// exactly as long as the connection: the answers as the upstream wrote them, and a stdio child.
#[derive(Clone)]
struct UpstreamHandler {
    tools_changed: Arc<watch::Sender<u64>>,
    /// The watched resources, whose tokens a `notifications/resources/updated` moves (R-PRX-34).
    resources: Arc<ResourceWatch>,
    progress: ProgressDispatcher,
    written: WrittenResults,
    /// Which connection this is, for the upstream tasks it makes (R-PRX-28): a stdio child's
    /// own random id (another replica's child, or a restarted one, is another upstream), or
    /// the HTTP upstream's service (one server, whichever connection).
    origin: String,
    /// Its process group is killed when the connection is dropped.
    _child: Option<Arc<super::child::Group>>,
}

impl ClientHandler for UpstreamHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.send_modify(|n| *n += 1);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.resources.updated(&params.uri);
    }
}

/// Sends `notifications/cancelled` for a request that is dropped before its answer (as rmcp
/// does for its own typed calls), so abandoning a call cancels it upstream.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the call was cancelled".into()),
                    ))
                    .await;
            });
        }
    }
}

/// How often a broken Streamable HTTP response stream is resumed before the call fails.
const SSE_RESUME_ATTEMPTS: usize = 3;

/// A reusable, self-healing client for one upstream MCP server.
pub struct UpstreamClient {
    service: String,
    transport: TransportConfig,
    connection: Mutex<Slot>,
    /// Numbers the connection attempts, so a finished one updates only its own slot.
    attempts: AtomicU64,
    tools_changed: Arc<watch::Sender<u64>>,
    /// The resources a connector asked the versions of, and their upstream subscriptions.
    resources: Arc<ResourceWatch>,
    /// Taken out of every error's text: HTTP client errors quote the URL (R-PRX-1).
    secrets: UrlSecrets,
    /// Gives an HTTP upstream's requests their bearer token (R-PRX-15).
    auth: Option<Arc<dyn AuthProvider>>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("service", &self.service)
            .field("transport", &self.transport)
            .finish()
    }
}

impl UpstreamClient {
    pub fn new(service: impl Into<String>, transport: TransportConfig) -> Self {
        let (secrets, auth) = match &transport {
            TransportConfig::Http { url, oauth, .. } => (
                UrlSecrets::of(url),
                oauth.clone().map(|config| {
                    Arc::new(ClientCredentialsProvider::new(config).discovering_from(url))
                        as Arc<dyn AuthProvider>
                }),
            ),
            TransportConfig::Stdio { .. } | TransportConfig::Custom(_) => {
                (UrlSecrets::default(), None)
            }
        };
        Self {
            secrets,
            auth,
            service: service.into(),
            transport,
            connection: Mutex::new(Slot::Idle),
            attempts: AtomicU64::new(0),
            tools_changed: Arc::new(watch::channel(0).0),
            resources: Arc::default(),
        }
    }

    /// Watches at most `cap` resource URIs (R-PRX-34), a fifth of them per caller (R-PRX-36).
    pub fn watching_at_most(mut self, cap: usize) -> Self {
        self.resources = Arc::new(ResourceWatch::with_cap(cap));
        self
    }

    /// An HTTP upstream whose requests get their bearer token from `auth` (instead of the
    /// config's `oauth`, if any): the hook for a scheme the config does not offer. It sees
    /// every request and a 401 answer (R-PRX-15). A stdio upstream ignores it.
    pub fn with_auth(mut self, auth: Arc<dyn AuthProvider>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Changes every time the upstream says its tool list changed.
    pub fn tool_list_changes(&self) -> watch::Receiver<u64> {
        self.tools_changed.subscribe()
    }

    /// What the upstream's `notifications/tools/list_changed` does, for tests.
    #[cfg(test)]
    pub(crate) fn announce_tools_changed(&self) {
        self.tools_changed.send_modify(|n| *n += 1);
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// The open connection, or a new one. The handshake runs on a task of its own, bounded by
    /// [`CONNECT_TIMEOUT`], and callers share it: no lock is held while it runs, so a silent
    /// upstream holds back only the callers that need it, each for no longer than it waits.
    async fn connect(&self) -> Result<Connection, UpstreamError> {
        let (attempt, handshake) = {
            let mut slot = self.connection.lock().unwrap();
            match &*slot {
                Slot::Connected(conn) if !conn.is_closed() => return Ok(conn.clone()),
                Slot::Connecting { attempt, handshake } => (*attempt, handshake.clone()),
                Slot::Idle | Slot::Connected(_) => {
                    let attempt = self.attempts.fetch_add(1, Ordering::Relaxed);
                    let opening = tokio::spawn(
                        Opening {
                            service: self.service.clone(),
                            tools_changed: self.tools_changed.clone(),
                            resources: self.resources.clone(),
                            written: WrittenResults::default(),
                            secrets: self.secrets.clone(),
                            auth: self.auth.clone(),
                        }
                        .open(self.transport.clone()),
                    );
                    let service = self.service.clone();
                    let handshake = async move {
                        opening.await.unwrap_or_else(|e| {
                            Err(UpstreamError::Connect {
                                service,
                                reason: format!("the connection attempt failed: {e}"),
                            })
                        })
                    }
                    .boxed()
                    .shared();
                    *slot = Slot::Connecting {
                        attempt,
                        handshake: handshake.clone(),
                    };
                    (attempt, handshake)
                }
            }
        };
        let result = handshake.await;
        let mut slot = self.connection.lock().unwrap();
        if matches!(&*slot, Slot::Connecting { attempt: a, .. } if *a == attempt) {
            *slot = match &result {
                Ok(conn) => Slot::Connected(conn.clone()),
                Err(_) => Slot::Idle,
            };
        }
        result
    }

    /// Drops the connection if it is still `conn`, so the next use reconnects.
    fn invalidate(&self, conn: &Connection) {
        let mut slot = self.connection.lock().unwrap();
        if matches!(&*slot, Slot::Connected(c) if Arc::ptr_eq(c, conn)) {
            warn!(service = %self.service, "dropping the upstream connection after a failure");
            crate::metrics::global().restarted(&self.service);
            *slot = Slot::Idle;
        }
    }

    /// The error for a failed request on `conn`; after a transport failure the connection is
    /// dropped, so the next use reconnects (R-PRX-8).
    fn failed(&self, conn: &Connection, e: ServiceError) -> UpstreamError {
        let err = self.map_error(e);
        if matches!(err, UpstreamError::Transport { .. }) {
            self.invalidate(conn);
        }
        err
    }

    fn map_error(&self, e: ServiceError) -> UpstreamError {
        let service = self.service.clone();
        match e {
            ServiceError::McpError(err) => UpstreamError::JsonRpc {
                service,
                code: err.code.0,
                message: self.secrets.scrub(&err.message),
                data: err.data.map(|d| self.secrets.scrub_json(d)),
            },
            ServiceError::TransportSend(err) => UpstreamError::Transport {
                service,
                phase: phase(&Failure::SendFailed(self.send_failure(&err))),
                reason: self.secrets.scrub(&err.to_string()),
            },
            ServiceError::TransportClosed => UpstreamError::Transport {
                service,
                reason: "connection closed".into(),
                phase: phase(&Failure::Closed),
            },
            ServiceError::Timeout { timeout } => UpstreamError::Transport {
                service,
                reason: format!("no answer within {timeout:?}"),
                phase: phase(&Failure::NoAnswerInTime),
            },
            other => UpstreamError::Protocol {
                service,
                reason: self.secrets.scrub(&other.to_string()),
            },
        }
    }

    /// What a failed send shows, by how the upstream is reached; `transport_failure` decides
    /// whether it can have reached the tool. Over HTTP the "send" is the whole POST, so the
    /// error's chain is read for what it shows.
    fn send_failure(&self, err: &rmcp::transport::DynamicTransportError) -> SendFailure {
        match &self.transport {
            TransportConfig::Stdio { .. } => SendFailure::Stdio,
            TransportConfig::Http {
                unavailable_means_not_run,
                ..
            } => SendFailure::Http {
                chain: evidence(err),
                unavailable_means_not_run: *unavailable_means_not_run,
            },
            TransportConfig::Custom(_) => SendFailure::Factory,
        }
    }

    /// `tools/list`, all pages, each tool's MCP Tool JSON object as written.
    pub async fn list_tools(
        &self,
        timeout: Duration,
    ) -> Result<Vec<serde_json::Value>, UpstreamError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let conn = tokio::time::timeout_at(deadline, self.connect())
            .await
            .map_err(|_| UpstreamError::Connect {
                service: self.service.clone(),
                reason: format!("no MCP connection within {timeout:?} (still trying)"),
            })??;
        let listed = tokio::time::timeout_at(deadline, self.list_all_as_written(&conn)).await;
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(ListError::Service(e))) => Err(self.failed(&conn, e)),
            Ok(Err(ListError::Protocol(reason))) => Err(UpstreamError::Protocol {
                service: self.service.clone(),
                reason,
            }),
            Err(_) => Err(UpstreamError::Transport {
                service: self.service.clone(),
                reason: format!("tools/list got no answer within {timeout:?}"),
                phase: phase(&Failure::NoAnswerInTime),
            }),
        }
    }

    /// The `instructions` the upstream gave in its `initialize` answer, on the connection open
    /// now (R-PRX-31); `None` when it gave none or no connection is open.
    pub fn instructions(&self) -> Option<String> {
        match &*self.connection.lock().unwrap() {
            Slot::Connected(conn) => conn.peer().peer_info()?.instructions.clone(),
            _ => None,
        }
    }

    /// Every page of `tools/list`, each tool as the upstream wrote it (rmcp's typed `Tool`
    /// drops `execution` and unknown annotation keys; see [`super::as_written`]).
    async fn list_all_as_written(
        &self,
        conn: &Connection,
    ) -> Result<Vec<serde_json::Value>, ListError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = PaginatedRequestParams::default();
            params.cursor = cursor.take();
            let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                method: Default::default(),
                params: Some(params),
                extensions: Default::default(),
            });
            let mut options = PeerRequestOptions::no_options();
            options.meta = era::request_meta(era::Upstream::of(conn.peer()), false);
            let handle = conn
                .peer()
                .send_request_with_option(request, options)
                .await
                .map_err(ListError::Service)?;
            let id = handle.id.clone();
            let typed = match handle.await_response().await.map_err(ListError::Service)? {
                ServerResult::ListToolsResult(page) => page,
                _ => {
                    return Err(ListError::Protocol(
                        "the answer to tools/list is not a tool list".into(),
                    ));
                }
            };
            let page = match conn.service().written.take(&id) {
                Some(serde_json::Value::Object(mut page)) => {
                    let Some(serde_json::Value::Array(listed)) = page.remove("tools") else {
                        return Err(ListError::Protocol("tools/list answered no tools".into()));
                    };
                    listed
                }
                // Not seen by a tap (an HTTP answer in a plain JSON body): rmcp's view.
                _ => typed
                    .tools
                    .iter()
                    .map(to_json)
                    .collect::<Result<_, _>>()
                    .map_err(ListError::Protocol)?,
            };
            tools.extend(page);
            match typed.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
    }

    /// `tools/call`. Dropping the returned future cancels the request upstream
    /// (`notifications/cancelled`).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value, UpstreamError> {
        self.call_tool_reporting(name, arguments, |_| {}).await
    }

    /// Which upstream connection serves calls now (see `UpstreamHandler::origin`).
    pub async fn origin(&self) -> Result<String, UpstreamError> {
        Ok(self.connect().await?.service().origin.clone())
    }

    /// `tools/call`, passing the upstream's notifications for this call to `on_note`: its
    /// progress, and the log messages the upstream tied to it (R-PRX-10).
    /// Dropping the returned future cancels the request upstream.
    pub async fn call_tool_reporting(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        on_note: impl FnMut(CallNotification),
    ) -> Result<serde_json::Value, UpstreamError> {
        self.call_tool_round(name, arguments, CallRound::default(), on_note)
            .await
    }

    /// [`Self::call_tool_reporting`] for a round of a call: the round's answers go with the
    /// arguments, and an answer that asks for input again is returned as written like a result
    /// (R-PRX-29); the caller it is for decides which log messages naming no request are its
    /// (R-PRX-10).
    pub async fn call_tool_round(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        round: CallRound<'_>,
        on_note: impl FnMut(CallNotification),
    ) -> Result<serde_json::Value, UpstreamError> {
        let conn = self.connect().await?;
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(
            super::input::with_answers(params, round.answers),
        ));
        for_caller(&mut request, round.caller);
        let meta = era::request_meta(era::Upstream::of(conn.peer()), false);
        let (request_id, answered) = self.send_reporting(&conn, request, meta, on_note).await?;
        if let ServerResult::InputRequiredResult(asked) = &answered {
            return self.asked_as_written(&conn, &request_id, asked);
        }
        let result = self.call_tool_result(answered)?;
        self.as_written(&conn, &request_id, &result)
    }

    /// Sends `request` on `conn` and awaits its answer, passing the upstream's notifications
    /// for it to `on_note`. Dropping the returned future cancels the request upstream.
    async fn send_reporting(
        &self,
        conn: &Connection,
        request: ClientRequest,
        meta: Option<RequestMetaObject>,
        mut on_note: impl FnMut(CallNotification),
    ) -> Result<(RequestId, ServerResult), UpstreamError> {
        let mut options = PeerRequestOptions::no_options();
        options.meta = crate::trace::with_trace_fields(meta);
        // rmcp gives every request a progress token of its own; the handle says which.
        let handle = conn
            .peer()
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.failed(conn, e))?;
        let mut progress = follow_progress(conn, &handle.progress_token).await;
        let mut logs = conn.service().written.follow_logs(&handle.progress_token);
        let request_id = handle.id.clone();
        let mut guard = CancelOnDrop {
            peer: conn.peer().clone(),
            id: Some(handle.id.clone()),
        };
        let answered = until_answered(
            handle.await_response(),
            &mut progress,
            logs.receiver(),
            &mut on_note,
        )
        .await;
        guard.disarm();
        let answered = answered.map_err(|e| self.failed(conn, e))?;
        Ok((request_id, answered))
    }

    /// The `CallToolResult` in an answer to `tools/call`. A reply without `content` decodes as
    /// another shape; rmcp's typed call accepts these as an empty result (keeping `resultType`
    /// and `_meta`), and so does this.
    fn call_tool_result(&self, answered: ServerResult) -> Result<CallToolResult, UpstreamError> {
        match answered {
            ServerResult::CallToolResult(result) => Ok(result),
            ServerResult::EmptyResult(_) => Ok(CallToolResult::default()),
            ServerResult::TaskAckResult(ack) => {
                let mut result = CallToolResult::default();
                result.result_type = Some(ack.result_type);
                result.meta = ack.meta;
                Ok(result)
            }
            ServerResult::CustomResult(custom)
                if custom
                    .0
                    .as_object()
                    .is_some_and(|o| o.len() == 1 && o.contains_key("_meta")) =>
            {
                let mut result = CallToolResult::default();
                let meta = custom.0.get("_meta").cloned().unwrap_or_default();
                result.meta = serde_json::from_value(meta).ok();
                Ok(result)
            }
            _ => Err(UpstreamError::Protocol {
                service: self.service.clone(),
                reason: "the answer to tools/call is not a CallToolResult".into(),
            }),
        }
    }

    /// The answer to request `id` as the upstream wrote it, when a tap saw it (see
    /// `super::as_written`); else rmcp's typed view of it, `result`. Either without a
    /// 2026-07-28 upstream's `resultType: "complete"` (R-PRX-33).
    fn as_written(
        &self,
        conn: &Connection,
        id: &RequestId,
        result: &CallToolResult,
    ) -> Result<serde_json::Value, UpstreamError> {
        if let Some(written @ serde_json::Value::Object(_)) = conn.service().written.take(id) {
            return Ok(era::without_complete_marker(written));
        }
        to_json(result)
            .map(era::without_complete_marker)
            .map_err(|reason| UpstreamError::Protocol {
                service: self.service.clone(),
                reason,
            })
    }

    /// An `InputRequiredResult` as the upstream wrote it, else rmcp's typed view of it.
    fn asked_as_written(
        &self,
        conn: &Connection,
        id: &RequestId,
        asked: &rmcp::model::InputRequiredResult,
    ) -> Result<serde_json::Value, UpstreamError> {
        match conn.service().written.take(id) {
            Some(written @ serde_json::Value::Object(_)) => Ok(written),
            _ => to_json(asked).map_err(|reason| UpstreamError::Protocol {
                service: self.service.clone(),
                reason,
            }),
        }
    }

    /// Keeps upstream task `task` in flight on the connection that made it (`origin`) while the
    /// guard lives, for the log messages that name no request (R-PRX-10); none when that
    /// connection is gone.
    pub fn task_flight(
        &self,
        task: &str,
        origin: &str,
        caller: Option<&str>,
    ) -> Option<TaskFlight> {
        let conn = match &*self.connection.lock().unwrap() {
            Slot::Connected(conn) if !conn.is_closed() => conn.clone(),
            _ => return None,
        };
        let handler = conn.service();
        (handler.origin == origin)
            .then(|| handler.written.follow_task(task, caller.map(str::to_owned)))
    }

    /// Closes the connection (ends a stdio child).
    pub async fn close(&self) {
        let slot = std::mem::replace(&mut *self.connection.lock().unwrap(), Slot::Idle);
        if let Slot::Connected(conn) = slot
            && let Ok(running) = Arc::try_unwrap(conn)
        {
            let _ = running.cancel().await;
        }
    }
}

/// Names the caller a `tools/call` is for in its extensions, which rmcp hands to the transport
/// but never writes (see [`FlightTap`]).
pub(crate) fn for_caller(request: &mut ClientRequest, caller: Option<&str>) {
    use rmcp::model::GetExtensions as _;
    if let Some(caller) = caller {
        request
            .extensions_mut()
            .insert(ForCaller(caller.to_owned()));
    }
}

/// The progress the upstream reports under a call's `token`, from the tap and from rmcp's
/// dispatcher. rmcp picks the token inside the send: the tap keeps what arrives before this.
async fn follow_progress(conn: &Connection, token: &ProgressToken) -> CallProgress {
    CallProgress::new(
        conn.service().written.follow_progress(token),
        conn.service().progress.subscribe(token.clone()).await,
    )
}

/// Awaits a call's answer, passing its notifications on as they come. Notifications first:
/// the answer is taken only when none is ready; and the taps saw everything written before
/// the answer, so what is still queued then is passed on too (R-PRX-9, R-PRX-10).
async fn until_answered<T>(
    response: impl Future<Output = T>,
    progress: &mut CallProgress,
    logs: &mut UnboundedReceiver<ToolLog>,
    on_note: &mut impl FnMut(CallNotification),
) -> T {
    tokio::pin!(response);
    let answered = loop {
        tokio::select! {
            biased;
            p = progress.next() => on_note(CallNotification::Progress(p)),
            Some(log) = logs.recv() => on_note(CallNotification::Log(log)),
            answered = &mut response => break answered,
        }
    };
    for p in progress.drain() {
        on_note(CallNotification::Progress(p));
    }
    while let Ok(log) = logs.try_recv() {
        on_note(CallNotification::Log(log));
    }
    answered
}

type Running = RunningService<RoleClient, UpstreamHandler>;

/// What a new connection to the upstream is made with. Each connection keeps its own answers
/// as written, and its own progress dispatcher: progress tokens are numbered per connection,
/// so a call still running on an old connection can never receive a new connection's
/// progress, nor the other way round.
struct Opening {
    service: String,
    tools_changed: Arc<watch::Sender<u64>>,
    resources: Arc<ResourceWatch>,
    written: WrittenResults,
    /// Taken out of every connect error's text (R-PRX-1).
    secrets: UrlSecrets,
    auth: Option<Arc<dyn AuthProvider>>,
}

impl Opening {
    /// Starts (stdio) or reaches (HTTP, a factory) the upstream and runs the MCP `initialize`
    /// handshake, within [`CONNECT_TIMEOUT`]; a child that does not answer in time is killed.
    async fn open(self, transport: TransportConfig) -> Result<Connection, UpstreamError> {
        let handshake = async {
            let running = match &transport {
                TransportConfig::Stdio {
                    command,
                    args,
                    env,
                    cwd,
                    inherit_env,
                    discover_wait,
                } => {
                    let child = child::command(command, args, env, *inherit_env, cwd.as_deref());
                    let wait = discover_wait.unwrap_or(crate::config::DEFAULT_DISCOVER_WAIT);
                    self.stdio(command, child, wait).await
                }
                TransportConfig::Http { url, headers, .. } => self.http(url, headers).await,
                TransportConfig::Custom(custom) => self.factory(custom).await,
            }
            .map_err(|reason| self.connect_error(reason))?;
            self.ask_for_every_log_message(&running).await;
            Ok(running)
        };
        let running = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
            .await
            .map_err(|_| {
                self.connect_error(format!(
                    "no answer to the MCP initialize handshake within {CONNECT_TIMEOUT:?}"
                ))
            })??;
        info!(service = %self.service, "connected to upstream MCP server");
        crate::metrics::global().connected(&self.service);
        Ok(Arc::new(running))
    }

    fn connect_error(&self, reason: String) -> UpstreamError {
        UpstreamError::Connect {
            service: self.service.clone(),
            reason: self.secrets.scrub(&reason),
        }
    }

    /// The handler of the new connection, holding its stdio child if it has one. `server`
    /// says whether every connection reaches one server (an HTTP URL): then the connections
    /// share an origin; a stdio child or a program's own factory's connection (which may be a
    /// fresh server each time) is an origin of its own (R-PRX-28).
    fn handler(&self, child: Option<child::Group>, server: bool) -> UpstreamHandler {
        let origin = match (&child, server) {
            (None, true) => format!("http:{}", self.service),
            (Some(_), _) => format!("stdio:{}", uuid::Uuid::new_v4()),
            (None, false) => format!("custom:{}", uuid::Uuid::new_v4()),
        };
        UpstreamHandler {
            tools_changed: self.tools_changed.clone(),
            resources: self.resources.clone(),
            progress: ProgressDispatcher::new(),
            written: self.written.clone(),
            origin,
            _child: child.map(Arc::new),
        }
    }

    /// Spawns the child (its stderr goes to the log); rmcp reads its stdout through a tap that
    /// keeps answers as written.
    /// The `server/discover` probe waits `discover_wait` at most (R-PRX-33).
    async fn stdio(
        &self,
        program: &str,
        mut command: tokio::process::Command,
        discover_wait: Duration,
    ) -> Result<Running, String> {
        let spawned = command
            .spawn()
            .map_err(|e| format!("cannot start {program:?}: {e}"))?;
        let mut group = child::Group::new(spawned);
        let process = group.child_mut();
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            return Err("the child's stdio could not be piped".into());
        };
        if let Some(stderr) = process.stderr.take() {
            forward_stderr(self.service.clone(), stderr);
        }
        let transport = rmcp::transport::async_rw::AsyncRwTransport::<RoleClient, _, _>::new(
            TapReader::new(stdout, self.written.clone()),
            stdin,
        );
        let transport = FlightTap::new(transport, self.written.clone());
        let transport = probe::BoundedProbe::new(transport, discover_wait, &self.service);
        let running = self
            .handler(Some(group), false)
            .serve_with_lifecycle(transport, era::lifecycle())
            .await;
        running.map_err(|e| e.to_string())
    }

    /// Reaches a Streamable HTTP upstream with its headers, through a tapped HTTP client.
    async fn http(
        &self,
        url: &url::Url,
        headers: &BTreeMap<String, String>,
    ) -> Result<Running, String> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
            .custom_headers(header_map(headers)?);
        // rmcp's default resumes an aborted response stream forever, so a call whose upstream
        // died mid-response would hang: bound it, and let the failure surface.
        let mut backoff = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
        backoff.max_times = Some(SSE_RESUME_ATTEMPTS);
        backoff.base_duration = Duration::from_millis(200);
        backoff.max_delay = Some(Duration::from_secs(2));
        config.retry_config = Arc::new(backoff);
        let client = TapHttpClient::new(
            url,
            self.written.clone(),
            self.secrets.clone(),
            self.auth.clone(),
        )
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let running = self
            .handler(None, true)
            .serve_with_lifecycle(transport, era::lifecycle())
            .await;
        // Where it failed, with the secrets shown as `***`.
        running.map_err(|e| format!("{}: {e}", redacted_url(url)))
    }

    /// The program's own factory (R-PRX-27), asked anew for every connection; a byte stream
    /// it gives is read through a tap.
    async fn factory(&self, custom: &CustomTransport) -> Result<Running, String> {
        let opened = custom.0.connect().await.map_err(|e| e.to_string())?;
        let reads = self.written.clone();
        let transport = opened.into_tapped(
            |read| TapReader::new(read, reads),
            |transport| crate::as_written::FlightTap::new(transport, self.written.clone()),
        );
        let running = self
            .handler(None, false)
            .serve_with_lifecycle(transport, era::lifecycle())
            .await;
        running.map_err(|e| e.to_string())
    }

    /// Log messages are filtered per caller by the connector: ask a legacy upstream for all
    /// of them, when it declares `logging` (R-PRX-10).
    async fn ask_for_every_log_message(&self, running: &Running) {
        let peer = running.peer();
        let upstream = era::Upstream::of(peer);
        // A modern upstream is asked per request instead (R-PRX-33).
        if upstream.logs && !upstream.modern {
            let all = rmcp::model::SetLevelRequestParams::new(rmcp::model::LoggingLevel::Debug);
            if let Err(e) = peer.set_level(all).await {
                warn!(service = %self.service, error = %e, "the upstream refused logging/setLevel");
            }
        }
    }
}

/// An HTTP upstream's configured headers. A value is a secret: never echoed in errors.
fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header name {name:?}: {e}"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("header {name} has an invalid value"))?;
        custom.insert(name, value);
    }
    Ok(custom)
}

/// What each error in an HTTP failure's chain shows (see `transport_failure::Evidence`),
/// outermost first: an HTTP status, a connection never made, no bearer token to send, an I/O
/// error's kind. Errors that show none of these are left out.
fn evidence(err: &(dyn std::error::Error + 'static)) -> Vec<Evidence> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut chain = Vec::new();
    let mut current = Some(err);
    while let Some(e) = current {
        match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::HttpStatus(status)) => {
                chain.push(Evidence::Status(status.status));
            }
            // rmcp's client error does not expose its cause as a `source`: step in by hand.
            Some(StreamableHttpError::Client(inner)) => {
                current = Some(inner);
                continue;
            }
            _ => {}
        }
        if let Some(r) = e.downcast_ref::<reqwest::Error>()
            && r.is_connect()
        {
            chain.push(Evidence::ConnectFailed);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            chain.push(
                if io.get_ref().is_some_and(|inner| inner.is::<AuthError>()) {
                    Evidence::NoToken
                } else {
                    Evidence::Io(io.kind())
                },
            );
        }
        current = e.source();
    }
    chain
}

/// Why listing tools failed.
enum ListError {
    Service(ServiceError),
    Protocol(String),
}

/// rmcp's model as JSON, through text: `serde_json::to_value` widens `f32` fields (annotation
/// `priority`) to imprecise `f64`s (0.7 becomes 0.699999988079071); printing then parsing
/// keeps the number the upstream sent.
fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, String> {
    let text = serde_json::to_string(value).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// A stdio child's stderr goes to our log, line by line, each line and the rate bounded
/// (R-PRX-11, see [`super::stderr`]).
fn forward_stderr(service: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(super::stderr::forward(stderr, move |line| {
        info!(target: "durable_mcp::upstream_stderr", service = %service, "{line}");
    }));
}
