//! The chaos run's clients (R-CNF-24): `concurrency` of them in a closed loop, each drawing its
//! next call from the seeded mix, over stateless 2026-07-28 clients declaring the tasks
//! extension, to either connector replica. Each call is followed to its final answer, through
//! faults, and recorded as its client saw it ([`Call`]).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use durable_mcp::workflow_client::sequence::PlannedCall;
use proptest::{prelude::RngExt as _, test_runner::TestRng};
use rmcp::{
    RoleClient,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientConfig, GetTaskParams,
        TaskPayload, UpdateTaskParams,
    },
    service::{RunningService, ServiceError},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    history::{Call, CallKind, End, Service},
    topology::{HTTP_SERVICE, STDIO_SERVICE},
    workflows::WorkflowDriver,
};
use crate::kit::mcp::{elicitation_client_config, stateless_http_client};

/// `_meta` key of the failure's type in the connector's error results (R-CON-4).
const ERROR_TYPE_META: &str = "io.durable-mcp/errorType";
/// The type of an answer whose outcome nobody knows (R-NXC-4).
const OUTCOME_UNKNOWN: &str = "ToolCallOutcomeUnknown";
/// One request's limit: past it the request counts as lost.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two reads of a task, and before trying a replica again.
const POLL: Duration = Duration::from_millis(300);

/// How often each kind of call is drawn: reads most, Workflows and cancels least.
pub const MIX: [(CallKind, u32); 8] = [
    (CallKind::Read, 25),
    (CallKind::Idempotent, 12),
    (CallKind::Destructive, 15),
    (CallKind::DestructiveKeyed, 15),
    (CallKind::Long, 10),
    (CallKind::Ask, 8),
    (CallKind::Cancel, 6),
    (CallKind::Workflow, 9),
];

/// A kind drawn from [`MIX`].
pub fn draw_kind(rng: &mut TestRng) -> CallKind {
    let total: u32 = MIX.iter().map(|(_, w)| w).sum();
    let mut at = rng.random_range(0..total);
    for (kind, w) in MIX {
        if at < w {
            return kind;
        }
        at -= w;
    }
    CallKind::Read
}

/// How a result ends a call: `Ok`, a typed tool error, or unknown (`ToolCallOutcomeUnknown`);
/// and the execution it names (a `stamp` tool's `structuredContent.run`).
pub fn end_of(result: &Value) -> (End, Option<String>) {
    let run = result["structuredContent"]["run"]
        .as_str()
        .map(str::to_owned);
    if result["isError"] != json!(true) {
        return (End::Ok, run);
    }
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect::<String>();
    match result["_meta"][ERROR_TYPE_META].as_str() {
        Some(OUTCOME_UNKNOWN) => (
            End::Unknown {
                why: format!("{OUTCOME_UNKNOWN}: {text}"),
            },
            None,
        ),
        error_type => (
            End::ToolError {
                error_type: error_type.map(str::to_owned),
                text,
            },
            run,
        ),
    }
}

type Mcp = RunningService<RoleClient, ClientConfig>;

/// One client's connections to the two replicas, opened when first needed and dropped when
/// a request on them fails (a restarted replica needs a new one).
struct Replicas {
    urls: Vec<String>,
    open: Vec<Option<Mcp>>,
}

impl Replicas {
    fn new(urls: &[String]) -> Self {
        Self {
            urls: urls.to_vec(),
            open: urls.iter().map(|_| None).collect(),
        }
    }

    /// A client of replica `r`, or why there is none (it is down). A client whose transport
    /// closed (its replica went away) is replaced first: nothing was sent on it.
    async fn get(&mut self, r: usize) -> Result<&Mcp, String> {
        if self.open[r]
            .as_ref()
            .is_some_and(|c| c.is_closed() || c.peer().is_transport_closed())
        {
            self.drop_client(r);
        }
        if self.open[r].is_none() {
            let connect = stateless_http_client(&self.urls[r], elicitation_client_config(true));
            match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
                Ok(Ok(client)) => self.open[r] = Some(client),
                Ok(Err(e)) => return Err(format!("{e:#}")),
                Err(_) => return Err("no answer to server/discover".into()),
            }
        }
        self.open[r].as_ref().ok_or_else(|| "closed".to_owned())
    }

    fn drop_client(&mut self, r: usize) {
        if let Some(client) = self.open[r].take() {
            tokio::spawn(async move {
                let _ = client.cancel().await;
            });
        }
    }

    async fn close(mut self) {
        for client in self.open.iter_mut().filter_map(Option::take) {
            let _ = client.cancel().await;
        }
    }
}

/// A request's end: an answer, a JSON-RPC error (the server said so), never sent (the
/// replica refused the connection), or lost on the way (sent, and no answer came).
enum Sent<T> {
    Answer(T),
    JsonRpc { code: i32, message: String },
    Refused(String),
    Lost(String),
}

fn sent<T>(answer: Result<Result<T, ServiceError>, tokio::time::error::Elapsed>) -> Sent<T> {
    match answer {
        Ok(Ok(t)) => Sent::Answer(t),
        Ok(Err(ServiceError::McpError(e))) => Sent::JsonRpc {
            code: e.code.0,
            message: e.message.to_string(),
        },
        Ok(Err(e)) if refused(&e) => Sent::Refused(e.to_string()),
        Ok(Err(e)) => Sent::Lost(e.to_string()),
        Err(_) => Sent::Lost(format!("no answer in {} s", REQUEST_TIMEOUT.as_secs())),
    }
}

/// Whether the request never left: its TCP connection could not be made (the replica was
/// down). rmcp's HTTP transport error holds reqwest's without naming it as its source, so
/// where the chain ends early the connect error is read from the error's debug form
/// (hyper's `ConnectError`).
fn refused(e: &ServiceError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error
            .downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect)
        {
            return true;
        }
        source = error.source();
    }
    format!("{e:?}").contains("ConnectError(")
}

/// Waits (up to 60 s) until every tool service answers through every replica: the workers
/// poll and the connectors have listed the tools.
pub async fn warm_up(urls: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (r, url) in urls.iter().enumerate() {
        for tool in ["h_echo", "s_echo"] {
            loop {
                let answer = async {
                    let client =
                        stateless_http_client(url, elicitation_client_config(true)).await?;
                    let params = CallToolRequestParams::new(tool).with_arguments(
                        json!({"key": "warm-up"})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    );
                    let result = client.call_tool(params).await;
                    let _ = client.cancel().await;
                    anyhow::Ok(result?)
                };
                match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
                    Ok(Ok(result)) if result.is_error != Some(true) => break,
                    other if Instant::now() > deadline => {
                        anyhow::bail!(
                            "{tool} through connector {r} did not answer in 60 s: {other:?}"
                        )
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            }
        }
    }
    Ok(())
}

/// A request about a task the client follows.
enum TaskRequest<'a> {
    /// Answer its questions (`tasks/update`).
    Answer(&'a str, &'a rmcp::model::InputRequests),
    Cancel(&'a str),
}

/// The run's clients and what they recorded.
pub struct Workload {
    pub urls: Vec<String>,
    pub driver: WorkflowDriver,
    pub seed: u64,
    /// The run's zero: every time in the history counts from it.
    pub zero: Instant,
    pub calls: Arc<Mutex<Vec<Call>>>,
    next: AtomicUsize,
    /// Fires when the run stops waiting for answers.
    pub give_up: CancellationToken,
}

impl Workload {
    pub fn new(urls: Vec<String>, driver: WorkflowDriver, seed: u64, zero: Instant) -> Self {
        Self {
            urls,
            driver,
            seed,
            zero,
            calls: Arc::default(),
            next: AtomicUsize::new(0),
            give_up: CancellationToken::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.zero.elapsed().as_millis() as u64
    }

    /// Runs `concurrency` clients until `until`; each finishes the call it is in.
    pub async fn run(self: &Arc<Self>, concurrency: usize, until: Instant) {
        let mut clients = tokio::task::JoinSet::new();
        for i in 0..concurrency {
            let this = self.clone();
            clients.spawn(async move {
                let mut rng = super::schedule::rng(this.seed, 1 + i as u64);
                let mut replicas = Replicas::new(&this.urls);
                while Instant::now() < until && !this.give_up.is_cancelled() {
                    let kind = draw_kind(&mut rng);
                    let calls = this.one(kind, &mut rng, &mut replicas).await;
                    this.calls.lock().unwrap().extend(calls);
                }
                replicas.close().await;
            });
        }
        while clients.join_next().await.is_some() {}
    }

    /// One call of `kind` (a Workflow makes two), followed to its end.
    async fn one(&self, kind: CallKind, rng: &mut TestRng, replicas: &mut Replicas) -> Vec<Call> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let service = if rng.random_bool(0.5) {
            Service::Http
        } else {
            Service::Stdio
        };
        if kind == CallKind::Workflow {
            return self.workflow(id, service).await;
        }
        let prefix = match service {
            Service::Http => "h_",
            Service::Stdio => "s_",
        };
        let key = format!("k{id}");
        let (tool, arguments) = match kind {
            CallKind::Read => (
                "echo",
                json!({"key": key, "n": rng.random_range(0..1_000_000u32)}),
            ),
            CallKind::Idempotent => ("bump", json!({"key": key})),
            CallKind::Destructive | CallKind::DestructiveKeyed => ("stamp", json!({"key": key})),
            CallKind::Long => (
                "slow",
                json!({"key": key, "sleep_ms": rng.random_range(1_500..4_000u64)}),
            ),
            CallKind::Cancel => ("slow", json!({"key": key, "sleep_ms": 20_000})),
            CallKind::Ask | CallKind::Workflow => ("ask", json!({"key": key})),
        };
        let mut call = Call {
            id,
            kind,
            service,
            tool: format!("{prefix}{tool}"),
            key,
            arguments: arguments.clone(),
            keyed: kind == CallKind::DestructiveKeyed,
            started_ms: self.now_ms(),
            ended_ms: None,
            end: End::Unanswered,
            replicas: Vec::new(),
            issues: 0,
            run: None,
            result: None,
        };
        let first = rng.random_range(0..self.urls.len());
        let cancel_after = Duration::from_millis(rng.random_range(200..1_500));
        let arguments = arguments.as_object().cloned().unwrap_or_default();
        self.send(&mut call, arguments, first, replicas, cancel_after)
            .await;
        if call.end != End::Unanswered {
            call.ended_ms = Some(self.now_ms());
        }
        vec![call]
    }

    /// Sends the call (a keyed one again, to the other replica, after a lost answer) and
    /// follows its task, if it became one, to its end.
    async fn send(
        &self,
        call: &mut Call,
        arguments: serde_json::Map<String, Value>,
        mut r: usize,
        replicas: &mut Replicas,
        cancel_after: Duration,
    ) {
        let mut params = CallToolRequestParams::new(call.tool.clone()).with_arguments(arguments);
        if call.keyed {
            params.meta =
                serde_json::from_value(json!({"idempotencyKey": format!("ik-{}", call.key)})).ok();
        }
        while !self.give_up.is_cancelled() {
            let Ok(client) = replicas.get(r).await else {
                // Down: nothing was sent. Try the other one.
                r = (r + 1) % self.urls.len();
                tokio::time::sleep(POLL).await;
                continue;
            };
            call.issues += 1;
            call.replicas.push(r);
            let answer =
                tokio::time::timeout(REQUEST_TIMEOUT, client.call_tool_once(params.clone())).await;
            match sent(answer) {
                Sent::Answer(CallToolResponse::Complete(result)) => {
                    let result = serde_json::to_value(result).unwrap_or_default();
                    return self.ended(call, &result);
                }
                Sent::Answer(CallToolResponse::Task(created)) => {
                    let id = created.task.task_id;
                    return self.follow(call, &id, r, replicas, cancel_after).await;
                }
                Sent::Answer(other) => {
                    call.end = End::Error {
                        code: None,
                        message: format!("an unexpected answer: {other:?}"),
                    };
                    return;
                }
                Sent::JsonRpc { code, message } => {
                    call.end = End::Error {
                        code: Some(code),
                        message,
                    };
                    return;
                }
                Sent::Refused(why) => {
                    // Nothing left: not an issue of the call. Try the other one.
                    tracing::debug!(key = call.key, "not sent to connector {r}: {why}");
                    call.issues -= 1;
                    call.replicas.pop();
                    replicas.drop_client(r);
                    r = (r + 1) % self.urls.len();
                    tokio::time::sleep(POLL).await;
                }
                Sent::Lost(why) if call.keyed => {
                    replicas.drop_client(r);
                    tracing::debug!(key = call.key, "re-issuing after {why}");
                    r = (r + 1) % self.urls.len();
                }
                Sent::Lost(why) => {
                    replicas.drop_client(r);
                    call.end = End::Unknown {
                        why: format!("the request to connector {r} was lost: {why}"),
                    };
                    return;
                }
            }
        }
    }

    fn ended(&self, call: &mut Call, result: &Value) {
        let (end, run) = end_of(result);
        call.end = end;
        call.run = run;
        call.result = Some(result.clone());
    }

    /// Follows task `id` from alternating replicas until it ends: answers the question of an
    /// `ask` call on the replica that did not read it, cancels a `cancel` call on the other.
    async fn follow(
        &self,
        call: &mut Call,
        id: &str,
        created_on: usize,
        replicas: &mut Replicas,
        cancel_after: Duration,
    ) {
        let n = self.urls.len();
        let mut r = created_on;
        let mut cancelled = call.kind != CallKind::Cancel;
        let cancel_at = Instant::now() + cancel_after;
        let mut answered_at: Option<Instant> = None;
        while !self.give_up.is_cancelled() {
            r = (r + 1) % n;
            if !cancelled && Instant::now() >= cancel_at {
                let cancel = TaskRequest::Cancel(id);
                cancelled = self.task_request(call, cancel, r, replicas).await;
                if !cancelled {
                    tokio::time::sleep(POLL).await;
                }
                continue;
            }
            let Ok(client) = replicas.get(r).await else {
                tokio::time::sleep(POLL).await;
                continue;
            };
            if !call.replicas.contains(&r) {
                call.replicas.push(r);
            }
            let got =
                tokio::time::timeout(REQUEST_TIMEOUT, client.get_task(GetTaskParams::new(id)))
                    .await;
            match sent(got) {
                Sent::Answer(got) => match got.task.payload {
                    TaskPayload::Working => {}
                    TaskPayload::InputRequired { input_requests } => {
                        // Answered once; again only if the answer seems lost.
                        if answered_at.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                            let other = (r + 1) % n;
                            let answer = TaskRequest::Answer(id, &input_requests);
                            if self.task_request(call, answer, other, replicas).await {
                                answered_at = Some(Instant::now());
                            }
                        }
                    }
                    TaskPayload::Completed { result } => {
                        return self.ended(call, &Value::Object(result));
                    }
                    TaskPayload::Failed { error } => {
                        call.end = End::Error {
                            code: error.get("code").and_then(Value::as_i64).map(|c| c as i32),
                            message: error
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        };
                        return;
                    }
                    TaskPayload::Cancelled => {
                        call.end = End::Cancelled;
                        return;
                    }
                    other => {
                        call.end = End::Error {
                            code: None,
                            message: format!("a task status this client does not know: {other:?}"),
                        };
                        return;
                    }
                },
                // An unknown task is final; anything else (an outage) is asked again.
                Sent::JsonRpc {
                    code: -32602,
                    message,
                } => {
                    call.end = End::Error {
                        code: Some(-32602),
                        message,
                    };
                    return;
                }
                Sent::JsonRpc { .. } => {}
                Sent::Refused(_) | Sent::Lost(_) => replicas.drop_client(r),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `tasks/update` (with an answer to every question) or `tasks/cancel` on replica `r`;
    /// whether it was acknowledged.
    async fn task_request(
        &self,
        call: &mut Call,
        request: TaskRequest<'_>,
        r: usize,
        replicas: &mut Replicas,
    ) -> bool {
        let Ok(client) = replicas.get(r).await else {
            return false;
        };
        if !call.replicas.contains(&r) {
            call.replicas.push(r);
        }
        let answer = match request {
            TaskRequest::Answer(id, questions) => {
                let accept = json!({"action": "accept", "content": {"confirm": true}});
                let responses: BTreeMap<String, Value> = questions
                    .keys()
                    .map(|k| (k.clone(), accept.clone()))
                    .collect();
                let update = client.update_task(UpdateTaskParams::new(id, responses));
                tokio::time::timeout(REQUEST_TIMEOUT, update).await
            }
            TaskRequest::Cancel(id) => {
                let cancel = client.cancel_task(CancelTaskParams::new(id));
                tokio::time::timeout(REQUEST_TIMEOUT, cancel).await
            }
        };
        match sent(answer) {
            Sent::Answer(()) => true,
            Sent::JsonRpc { .. } => false,
            Sent::Refused(_) | Sent::Lost(_) => {
                replicas.drop_client(r);
                false
            }
        }
    }

    /// A Workflow calling `echo` then `stamp` on `service` through the in-Workflow client:
    /// two calls, each ending as its record says.
    async fn workflow(&self, id: usize, service: Service) -> Vec<Call> {
        let (name, prefix) = match service {
            Service::Http => (HTTP_SERVICE, "h_"),
            Service::Stdio => (STDIO_SERVICE, "s_"),
        };
        let started_ms = self.now_ms();
        let planned = [("echo", format!("k{id}a")), ("stamp", format!("k{id}b"))];
        let mut calls: Vec<Call> = planned
            .iter()
            .map(|(tool, key)| Call {
                id,
                kind: CallKind::Workflow,
                service,
                tool: format!("{prefix}{tool}"),
                key: key.clone(),
                arguments: json!({"key": key}),
                keyed: false,
                started_ms,
                ended_ms: None,
                end: End::Unanswered,
                replicas: Vec::new(),
                issues: 1,
                run: None,
                result: None,
            })
            .collect();
        let plan = calls
            .iter()
            .map(|c| PlannedCall {
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        let workflow_id = format!("chaos-{}-{id}", self.seed);
        let records = self
            .driver
            .run(&workflow_id, name, plan, &self.give_up)
            .await;
        let ended = self.now_ms();
        match records {
            Ok(records) => {
                for (call, record) in calls.iter_mut().zip(records) {
                    self.ended(call, &record.result);
                    call.ended_ms = Some(ended);
                }
            }
            Err(why) if !self.give_up.is_cancelled() => {
                for call in &mut calls {
                    call.end = End::Error {
                        code: None,
                        message: why.clone(),
                    };
                    call.ended_ms = Some(ended);
                }
            }
            Err(_) => {}
        }
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_ends_ok_typed_or_unknown() {
        let ok = json!({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"key": "k", "run": "9-1"}});
        assert_eq!(end_of(&ok), (End::Ok, Some("9-1".into())));
        let unknown = json!({"isError": true, "content": [{"type": "text", "text": "the outcome is unknown"}],
            "_meta": {"io.durable-mcp/errorType": "ToolCallOutcomeUnknown"}});
        assert!(
            matches!(end_of(&unknown).0, End::Unknown { why } if why.contains("outcome is unknown"))
        );
        let typed = json!({"isError": true, "content": [{"type": "text", "text": "timed out"}],
            "_meta": {"io.durable-mcp/errorType": "UpstreamTimeout"}});
        assert_eq!(
            end_of(&typed).0,
            End::ToolError {
                error_type: Some("UpstreamTimeout".into()),
                text: "timed out".into()
            }
        );
    }

    #[test]
    fn the_mix_draws_every_kind_from_a_seed() {
        let mut rng = super::super::schedule::rng(5, 1);
        let drawn: Vec<CallKind> = (0..2_000).map(|_| draw_kind(&mut rng)).collect();
        for kind in CallKind::ALL {
            assert!(drawn.contains(&kind), "{kind:?} never drawn");
        }
        let mut again = super::super::schedule::rng(5, 1);
        assert!(drawn.iter().all(|k| *k == draw_kind(&mut again)));
    }
}
