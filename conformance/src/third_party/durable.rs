//! The durable path for a third-party upstream: a proxy fronting it on a fresh task queue and
//! Nexus endpoint of a dev server, and the checks that go through it (a call, a cancelled
//! call, a retried start).

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use durable_mcp::{
    connector::server::{Connector, ConnectorOptions},
    contract::{
        call::{CallNotifications, CallToken},
        payload,
    },
    nexus::{
        OperationClient, OperationOutcome, OperationRef, StartContext, StartOperation, StartOutcome,
    },
    proxy::{
        discovery::Discovery,
        service::{ServiceContext, proxy_service},
        upstream::UpstreamClient,
    },
    temporal::activity::{ActivityExecutionStatus, describe_activity},
};
use rmcp::model::JsonObject;
use serde_json::Value;
use temporalio_client::Connection;
use tokio_util::sync::CancellationToken;

use super::{report::Status, upstream::Upstream};
use crate::{
    harness::{self, DevServer, Slice, unique_name},
    proxy_thread::ProxyThread,
};

/// The Nexus service name the third-party upstream is registered under.
pub const UPSTREAM_SERVICE: &str = "upstream";
/// Limit for one call (direct or durable).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a cancel may take to land before the check fails.
const CANCEL_LANDS_WITHIN: Duration = Duration::from_secs(30);

/// A proxy fronting the upstream, and a client for its Nexus endpoint.
pub struct DurablePath {
    client: OperationClient,
    connection: Connection,
    namespace: String,
    task_queue: String,
    endpoint: String,
    upstream: Upstream,
    proxy: ProxyThread,
}

impl DurablePath {
    /// Registers a fresh endpoint and task queue on `server` and starts a proxy there.
    pub async fn start(server: &DevServer, upstream: &Upstream) -> anyhow::Result<Self> {
        let slice = Slice::on(server, "third-party")
            .await
            .map_err(|e| anyhow::anyhow!("creating a task queue and Nexus endpoint: {e}"))?;
        let proxy = slice.start_proxy(
            vec![harness::upstream(UPSTREAM_SERVICE, upstream.transport()?)],
            10,
        );
        let Slice {
            namespace,
            task_queue,
            endpoint,
            connection,
            client,
            ..
        } = slice;
        Ok(Self {
            client,
            connection,
            namespace,
            task_queue,
            endpoint,
            upstream: upstream.clone(),
            proxy,
        })
    }

    pub async fn stop(self) {
        self.proxy.stop().await;
    }

    /// A connector with `options` and one route, to the upstream on this path's endpoint (what
    /// a host reaches the upstream through).
    pub(super) fn connector(&self, mut options: ConnectorOptions) -> Connector {
        options.routes = vec![crate::kit::mcp::route(UPSTREAM_SERVICE, &self.endpoint)];
        Connector::new(self.client.clone(), options)
    }

    async fn start_call(&self, tool: &str, args: &JsonObject) -> Result<OperationRef, String> {
        let payload =
            payload::to_payload(&Value::Object(args.clone())).map_err(|e| e.to_string())?;
        let mut start = StartOperation::new(
            unique_name(&format!("third-party-{tool}")),
            &self.endpoint,
            UPSTREAM_SERVICE,
            durable_mcp::contract::operation_name::operation_for_tool(tool),
            payload,
        );
        start.schedule_to_close = Some(CALL_TIMEOUT);
        let (op, _) = self
            .client
            .start(start)
            .await
            .map_err(|e| self.with_proxy_error(format!("starting the operation: {e}")))?;
        Ok(op)
    }

    fn with_proxy_error(&self, e: String) -> String {
        match self.proxy.error() {
            Some(p) => format!("{e} (the proxy stopped: {p})"),
            None => e,
        }
    }

    /// A resource or prompt operation (R-NXC-8, `~~list_resources`, `~~read_resource`, ...) with
    /// `params`: the upstream's result as the durable path holds it, its JSON-RPC error as
    /// `{"error": ...}`, or why the operation failed.
    pub async fn feature(&self, operation: &str, params: Value) -> Result<Value, String> {
        let payload = payload::to_payload(&params).map_err(|e| e.to_string())?;
        let mut start = StartOperation::new(
            unique_name("third-party-feature"),
            &self.endpoint,
            UPSTREAM_SERVICE,
            operation,
            payload,
        );
        start.schedule_to_close = Some(CALL_TIMEOUT);
        let (op, _) = self
            .client
            .start(start)
            .await
            .map_err(|e| self.with_proxy_error(format!("starting {operation}: {e}")))?;
        let outcome = self
            .client
            .wait(&op, &CancellationToken::new())
            .await
            .map_err(|e| self.with_proxy_error(format!("waiting for {operation}: {e}")))?;
        if let OperationOutcome::Succeeded(p) = &outcome
            && let Some(error) = durable_mcp::contract::jsonrpc_error::JsonRpcError::from_payload(p)
        {
            let error = error?;
            return Ok(serde_json::json!({ "error": error.to_object() }));
        }
        outcome_json(outcome)
    }

    /// Calls `tool` as a standalone Nexus operation: the result JSON, or why it failed.
    pub async fn call(&self, tool: &str, args: &JsonObject) -> Result<Value, String> {
        self.call_reporting(tool, args).await.0
    }

    /// [`Self::call`], and the upstream's notifications that travelled with the result (what
    /// the connector replays to a caller, R-CON-10): none when it failed.
    pub async fn call_reporting(
        &self,
        tool: &str,
        args: &JsonObject,
    ) -> (Result<Value, String>, CallNotifications) {
        let op = match self.start_call(tool, args).await {
            Ok(op) => op,
            Err(e) => return (Err(e), CallNotifications::default()),
        };
        let outcome = match self.client.wait(&op, &CancellationToken::new()).await {
            Ok(outcome) => outcome,
            Err(e) => {
                let e = self.with_proxy_error(format!("waiting for the outcome: {e}"));
                return (Err(e), CallNotifications::default());
            }
        };
        let carried = match &outcome {
            OperationOutcome::Succeeded(p) => CallNotifications::from_payload(p),
            _ => CallNotifications::default(),
        };
        (outcome_json(outcome), carried)
    }

    /// Calls `tool` and runs `cut` once a worker picked the call up (a fault of the chaos
    /// check, R-CNF-25); answers how the call ended and how many attempts its Activity made.
    pub async fn call_cut(
        &self,
        tool: &str,
        args: &JsonObject,
        cut: impl std::future::Future<Output = ()>,
    ) -> (Result<Value, String>, Option<i32>) {
        let op = match self.start_call(tool, args).await {
            Ok(op) => op,
            Err(e) => return (Err(e), None),
        };
        if let Err(e) = self.wait_until_running(&op).await {
            return (Err(e), None);
        }
        cut.await;
        let outcome = match tokio::time::timeout(
            CALL_TIMEOUT + CANCEL_LANDS_WITHIN,
            self.client.wait(&op, &CancellationToken::new()),
        )
        .await
        {
            Ok(Ok(outcome)) => outcome_json(outcome),
            Ok(Err(e)) => Err(format!("waiting for the outcome: {e}")),
            Err(_) => Err("no outcome within its timeout".into()),
        };
        let attempts = self
            .activity_of(&op)
            .await
            .ok()
            .flatten()
            .map(|(_, attempt)| attempt);
        (outcome, attempts)
    }

    /// Starts `tool`, cancels it after `after`, and checks that the operation ends Canceled
    /// and that the cancel reached the tool call (its activity ended CANCELED, which is when
    /// the proxy has sent `notifications/cancelled` upstream).
    pub async fn cancel_check(
        &self,
        tool: &str,
        args: &JsonObject,
        after: Duration,
    ) -> (Status, String) {
        let op = match self.start_call(tool, args).await {
            Ok(op) => op,
            Err(e) => return (Status::Fail(e), String::new()),
        };
        // Count `after` from when a worker runs the call: cancelling a call still waiting in the
        // queue would never reach the upstream, and prove nothing.
        if let Err(e) = self.wait_until_running(&op).await {
            return (Status::Fail(e), String::new());
        }
        tokio::time::sleep(after).await;
        match self.client.describe(&op).await {
            Ok(d) if d.outcome.is_some() => {
                return (
                    Status::Skipped(format!(
                        "it finished within {} ms, before it could be cancelled; give it arguments \
                         (--args) that make it run longer, or raise --cancel-after",
                        after.as_millis()
                    )),
                    String::new(),
                );
            }
            Ok(_) => {}
            Err(e) => {
                return (
                    Status::Fail(format!("describing the operation: {e}")),
                    String::new(),
                );
            }
        }
        let requested = Instant::now();
        if let Err(e) = self
            .client
            .cancel(&op, "third-party cancellation check")
            .await
        {
            return (
                Status::Fail(format!("the cancel request failed: {e}")),
                String::new(),
            );
        }
        let outcome = match tokio::time::timeout(
            CANCEL_LANDS_WITHIN,
            self.client.wait(&op, &CancellationToken::new()),
        )
        .await
        {
            Err(_) => {
                return (
                    Status::Fail(format!(
                        "still running {} s after the cancel request",
                        CANCEL_LANDS_WITHIN.as_secs()
                    )),
                    String::new(),
                );
            }
            Ok(Err(e)) => {
                return (
                    Status::Fail(format!("waiting for the outcome: {e}")),
                    String::new(),
                );
            }
            Ok(Ok(outcome)) => outcome,
        };
        let landed = requested.elapsed();
        if !matches!(outcome, OperationOutcome::Canceled { .. }) {
            return (
                Status::Fail(format!(
                    "the call ended {} instead of canceled after the cancel request",
                    describe_outcome(&outcome)
                )),
                String::new(),
            );
        }
        // The operation says canceled: check that the work really stopped.
        let activity = match self.activity_of(&op).await {
            Ok(a) => a,
            Err(e) => return (Status::Fail(e), String::new()),
        };
        match activity {
            Some((ActivityExecutionStatus::Canceled, attempt)) => (
                Status::Pass,
                format!(
                    "canceled {} ms after the request, while a worker was running it; its \
                     activity (attempt {attempt}) acknowledged the cancel (CANCELED), which is \
                     when the proxy sends notifications/cancelled upstream",
                    landed.as_millis()
                ),
            ),
            Some((status, _)) => (
                Status::Fail(format!(
                    "the operation reports canceled but its activity ended {}: the cancel did \
                     not reach the tool call",
                    status.as_str_name()
                )),
                String::new(),
            ),
            None => (
                Status::Fail("the operation reports canceled but no activity ran the call".into()),
                String::new(),
            ),
        }
    }

    /// Waits until a worker has picked up the operation's call (or it already ended).
    async fn wait_until_running(&self, op: &OperationRef) -> Result<(), String> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let described = self
                .client
                .describe(op)
                .await
                .map_err(|e| format!("describing the operation: {e}"))?;
            if described.outcome.is_some() {
                return Ok(());
            }
            if let Ok(call) = serde_json::from_str::<CallToken>(&described.operation_token)
                && let Ok(Some(activity)) = describe_activity(
                    &self.connection,
                    &self.namespace,
                    &call.activity_id,
                    &call.run_id,
                )
                .await
                && (activity.started || !activity.is_running())
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no worker picked the call up within {} s",
                    CALL_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The status and attempt of the activity that ran an operation's call.
    async fn activity_of(
        &self,
        op: &OperationRef,
    ) -> Result<Option<(ActivityExecutionStatus, i32)>, String> {
        let described = self
            .client
            .describe(op)
            .await
            .map_err(|e| format!("describing the operation: {e}"))?;
        if described.operation_token.is_empty() {
            return Ok(None);
        }
        let token: CallToken = serde_json::from_str(&described.operation_token)
            .map_err(|e| format!("the operation token is not the proxy's: {e}"))?;
        let activity = describe_activity(
            &self.connection,
            &self.namespace,
            &token.activity_id,
            &token.run_id,
        )
        .await
        .map_err(|e| format!("describing the activity: {e}"))?;
        Ok(activity.map(|a| (a.status, a.attempt)))
    }

    /// Delivers one start of `tool` twice with the same Nexus request id to the proxy's
    /// handler, as the server does when it retries a start, and checks that the second attaches
    /// to the first's activity run, which completes once with the direct call's result.
    pub async fn reattach_check(
        &self,
        tool: &str,
        args: &JsonObject,
        direct: &Value,
    ) -> (Status, String) {
        let upstream = Arc::new(UpstreamClient::new(
            UPSTREAM_SERVICE,
            match self.upstream.transport() {
                Ok(t) => t,
                Err(e) => return (Status::Fail(e.to_string()), String::new()),
            },
        ));
        let discovery = Arc::new(Discovery::new(upstream.clone()));
        let result = self.reattach_with(tool, args, direct, discovery).await;
        upstream.close().await;
        result
    }

    async fn reattach_with(
        &self,
        tool: &str,
        args: &JsonObject,
        direct: &Value,
        discovery: Arc<Discovery>,
    ) -> (Status, String) {
        if let Err(e) = discovery.refresh().await {
            return (
                Status::Fail(format!("discovery for the handler: {e}")),
                String::new(),
            );
        }
        let service = proxy_service(ServiceContext {
            service: UPSTREAM_SERVICE.into(),
            connection: self.connection.clone(),
            namespace: self.namespace.clone(),
            task_queue: self.task_queue.clone(),
            activity_options: Default::default(),
            overrides: BTreeMap::new(),
            discovery,
            codec: None,
            state_keys: durable_mcp::proxy::state_key::StateKeys::per_process(),
        });
        let Some(handler) = service.handler(tool).cloned() else {
            return (
                Status::Fail("the proxy has no handler for it".into()),
                String::new(),
            );
        };
        let ctx = StartContext::new(
            &self.endpoint,
            UPSTREAM_SERVICE,
            tool,
            unique_name("retried-start"),
        );
        let input = match payload::to_payload(&Value::Object(args.clone())) {
            Ok(p) => p,
            Err(e) => return (Status::Fail(e.to_string()), String::new()),
        };
        let mut tokens = Vec::new();
        for attempt in ["first", "retried"] {
            match handler.start(ctx.clone(), input.clone()).await {
                Ok(StartOutcome::Async { token }) => tokens.push(token),
                Ok(StartOutcome::Sync(_)) => {
                    return (
                        Status::Fail(format!("the {attempt} start answered synchronously")),
                        String::new(),
                    );
                }
                Err(e) => {
                    return (
                        Status::Fail(format!("the {attempt} start failed: {e:?}")),
                        String::new(),
                    );
                }
            }
        }
        let parsed: Result<Vec<CallToken>, _> =
            tokens.iter().map(|t| serde_json::from_str(t)).collect();
        let Ok(parsed) = parsed else {
            return (
                Status::Fail("the operation tokens are not the proxy's".into()),
                String::new(),
            );
        };
        if parsed[0] != parsed[1] {
            return (
                Status::Fail(format!(
                    "the retried start began another run ({} then {}): the tool may run twice",
                    parsed[0].run_id, parsed[1].run_id
                )),
                String::new(),
            );
        }
        let CallToken {
            activity_id,
            run_id,
        } = &parsed[0];
        let deadline = Instant::now() + CALL_TIMEOUT;
        let described = loop {
            match describe_activity(&self.connection, &self.namespace, activity_id, run_id).await {
                Ok(Some(a)) if !a.is_running() => break a,
                Ok(Some(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Some(_)) => {
                    return (
                        Status::Fail("the call did not finish in time".into()),
                        String::new(),
                    );
                }
                Ok(None) => return (Status::Fail("the activity vanished".into()), String::new()),
                Err(e) => {
                    return (
                        Status::Fail(format!("describing the activity: {e}")),
                        String::new(),
                    );
                }
            }
        };
        match described.outcome {
            Some(Ok(result)) if &result == direct => (
                Status::Pass,
                format!(
                    "the retried start attached to run {run_id}, which completed once (attempt {}) \
                     with the direct call's result",
                    described.attempt
                ),
            ),
            Some(Ok(result)) => (
                Status::Fail(format!(
                    "the reattached run's result differs from the direct call's at {}",
                    crate::run::first_difference(direct, &result, String::new())
                )),
                String::new(),
            ),
            Some(Err(e)) => (
                Status::Fail(format!("the reattached run failed: {e}")),
                String::new(),
            ),
            None => (
                Status::Fail(format!(
                    "the run ended {} without an outcome",
                    described.status.as_str_name()
                )),
                String::new(),
            ),
        }
    }
}

fn outcome_json(outcome: OperationOutcome) -> Result<Value, String> {
    match outcome {
        OperationOutcome::Succeeded(p) => {
            payload::to_json(&p).map_err(|e| format!("the result is not readable JSON: {e}"))
        }
        other => Err(describe_outcome(&other)),
    }
}

fn describe_outcome(outcome: &OperationOutcome) -> String {
    match outcome {
        OperationOutcome::Succeeded(_) => "succeeded".into(),
        OperationOutcome::Failed {
            message,
            error_type,
            ..
        } => format!(
            "failed ({}): {message}",
            error_type.as_deref().unwrap_or("no type")
        ),
        OperationOutcome::Canceled { message } => format!("canceled: {message}"),
        OperationOutcome::TimedOut { message } => format!("timed out: {message}"),
        OperationOutcome::Terminated { message } => format!("terminated: {message}"),
    }
}
