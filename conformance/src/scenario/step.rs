//! Scenario steps: what each step does and what must follow. Plain data; the runner
//! gives it meaning.

use std::fmt;

use anyhow::bail;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::feature_steps::{AddTool, FEATURE_METHODS, ListChanged, Listen, RequestStep};
use crate::fixtures::LedgerEvent;

/// One step. Exactly one action key is set: `call`, `mcp`, `tasks_get`, `tasks_cancel`,
/// `restart_connector`, `set_annotations`, `wait_for`, `pause_ms`, `kill_proxy`,
/// `restart_proxy`, `restart_server`, `list_tools`, `connections`, `proxy_memory`,
/// `plant_ciphertext`, `request`, `add_tool`, `more_resources`, `list_changed`, `listen` or
/// `answer_of`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A tool call straight to the proxy's Nexus service (`OperationClient`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallStep>,
    /// A `tools/call` from an MCP client through a connector replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpCallStep>,
    /// `tasks/get` through a connector replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_get: Option<TaskStep>,
    /// `tasks/cancel` through a connector replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_cancel: Option<TaskStep>,
    /// `tasks/update` with `input_responses` through a connector replica (R-CON-40).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_update: Option<TaskStep>,
    /// Replace the named connector replica (and its client) with a fresh one, same options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_connector: Option<String>,
    /// Change a tool's annotations in the upstream's spec file (read by the stdio mock on its
    /// next request); the proxy sees them on its next discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_annotations: Option<SetAnnotations>,
    /// Wait until the upstream's ledger shows an event (e.g. a first attempt failing), so the
    /// next step lands between two moments of a running call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<WaitFor>,
    /// Let this much time pass (for what has no ledger event, e.g. the proxy re-listing tools
    /// after the upstream's `notifications/tools/list_changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<u64>,
    /// SIGKILL the proxy (`[proxy] mode = "process"` only), waiting first until the upstream
    /// has the call of `after_called` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_proxy: Option<KillProxy>,
    /// Start the proxy again (after `kill_proxy`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_proxy: bool,
    /// Restart the Temporal server on its db file (the scenario then gets a server of its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_server: bool,
    /// `tools/list` through a connector replica, over and over; every answer must list the
    /// tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_tools: Option<ListTools>,
    /// Open TCP connections to an HTTP connector from one loopback address and count how many
    /// it serves and how many it refuses; they stay open until the scenario ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Connections>,
    /// The proxy process's peak resident memory (`VmHWM`) so far is below a bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_memory: Option<ProxyMemory>,
    /// A Temporal principal without codec access copies a Workflow's stored input into a
    /// Workflow of its own, with the runner's own Temporal connection (R-OPS-7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plant_ciphertext: Option<PlantCiphertext>,
    /// A resource, prompt or completion request through a connector replica, read raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestStep>,
    /// The stdio mock gains a tool (and says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_tool: Option<AddTool>,
    /// The mock (`resources_and_prompts`) lists these resources after its own, from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_resources: Option<Vec<Value>>,
    /// Waits until a replica's session client is told a list changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<ListChanged>,
    /// A stateless caller listens for list changes (`subscriptions/listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<Listen>,
    /// Waits until a running call Activity of a tool, on the scenario's task queue, has
    /// heartbeated a field (R-PRX-28's `upstream_task`): what a proxy killed next must find.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_heartbeat: Option<WaitHeartbeat>,
    /// Waits for the own answer of the background `mcp` call with this `name` and checks it
    /// against `expect`: a step that must follow a background call's end waits for that answer,
    /// not for a ledger event (the tool finishing is not the connector answering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_of: Option<String>,
    /// A session subscribes to resources and unsubscribes again, one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn_subscriptions: Option<ChurnSubscriptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// `plant_ciphertext`: starts Workflow `into` (same type and task queue) with the input Workflow
/// `from` was started with, as stored (`{run}` and `{task_queue}` filled in).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlantCiphertext {
    pub from: String,
    pub into: String,
}

/// `churn_subscriptions`: through a raw session of the replica, `resources/subscribe` then
/// `resources/unsubscribe` for `count` URIs, `uri` with `{n}` replaced by 1, 2, ...; a refused
/// subscribe is counted, not a failure (the step says how many).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChurnSubscriptions {
    /// The connector replica; the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    pub uri: String,
    pub count: usize,
}

/// `list_tools`: `times` listings through a replica; with `refused_after`, the listings past
/// that many must be refused with an error containing `refusal_contains`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTools {
    /// The connector replica; the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    pub times: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_after: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_contains: Option<String>,
}

/// `connections`: `count` connections from `from`, of which exactly `served` are served and
/// `refused` refused (a complete HTTP 503 whose body contains `refusal_contains`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connections {
    /// The connector replica (HTTP); the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// A loopback address the connections come from (`127.0.0.2`).
    pub from: std::net::IpAddr,
    pub count: usize,
    pub served: usize,
    pub refused: usize,
    /// What every refusal's body says (e.g. the flag that raises the cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_contains: Option<String>,
    /// Each connection sends `GET /healthz` with this `X-Forwarded-For` at once: served when
    /// answered 200, refused otherwise (a trusted proxy's connections are counted at their first
    /// request, R-CON-50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_for: Option<String>,
}

/// `proxy_memory`: the proxy's peak resident memory so far is below `peak_below_mib` MiB.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyMemory {
    pub peak_below_mib: u64,
}

/// What a step does, borrowed from a [`Step`].
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    Call(&'a CallStep),
    Mcp(&'a McpCallStep),
    TasksGet(&'a TaskStep),
    TasksCancel(&'a TaskStep),
    RestartConnector(&'a str),
    SetAnnotations(&'a SetAnnotations),
    WaitFor(&'a WaitFor),
    Pause(u64),
    KillProxy(&'a KillProxy),
    RestartProxy,
    RestartServer,
    ListTools(&'a ListTools),
    Connections(&'a Connections),
    ProxyMemory(&'a ProxyMemory),
    PlantCiphertext(&'a PlantCiphertext),
    TasksUpdate(&'a TaskStep),
    Request(&'a RequestStep),
    AddTool(&'a AddTool),
    MoreResources(&'a [Value]),
    ListChanged(&'a ListChanged),
    Listen(&'a Listen),
    AnswerOf(&'a str),
    WaitHeartbeat(&'a WaitHeartbeat),
    ChurnSubscriptions(&'a ChurnSubscriptions),
}

impl Step {
    /// The step's one action; an error names the keys when there are none or several.
    pub fn action(&self) -> anyhow::Result<Action<'_>> {
        let mut found = Vec::new();
        if let Some(c) = &self.call {
            found.push(("call", Action::Call(c)));
        }
        if let Some(c) = &self.mcp {
            found.push(("mcp", Action::Mcp(c)));
        }
        if let Some(t) = &self.tasks_get {
            found.push(("tasks_get", Action::TasksGet(t)));
        }
        if let Some(t) = &self.tasks_cancel {
            found.push(("tasks_cancel", Action::TasksCancel(t)));
        }
        if let Some(t) = &self.tasks_update {
            found.push(("tasks_update", Action::TasksUpdate(t)));
        }
        if let Some(n) = &self.restart_connector {
            found.push(("restart_connector", Action::RestartConnector(n)));
        }
        if let Some(a) = &self.set_annotations {
            found.push(("set_annotations", Action::SetAnnotations(a)));
        }
        if let Some(w) = &self.wait_for {
            found.push(("wait_for", Action::WaitFor(w)));
        }
        if let Some(ms) = self.pause_ms {
            found.push(("pause_ms", Action::Pause(ms)));
        }
        if let Some(k) = &self.kill_proxy {
            found.push(("kill_proxy", Action::KillProxy(k)));
        }
        if self.restart_proxy {
            found.push(("restart_proxy", Action::RestartProxy));
        }
        if self.restart_server {
            found.push(("restart_server", Action::RestartServer));
        }
        if let Some(l) = &self.list_tools {
            found.push(("list_tools", Action::ListTools(l)));
        }
        if let Some(c) = &self.connections {
            found.push(("connections", Action::Connections(c)));
        }
        if let Some(m) = &self.proxy_memory {
            found.push(("proxy_memory", Action::ProxyMemory(m)));
        }
        if let Some(p) = &self.plant_ciphertext {
            found.push(("plant_ciphertext", Action::PlantCiphertext(p)));
        }
        if let Some(r) = &self.request {
            found.push(("request", Action::Request(r)));
        }
        if let Some(a) = &self.add_tool {
            found.push(("add_tool", Action::AddTool(a)));
        }
        if let Some(m) = &self.more_resources {
            found.push(("more_resources", Action::MoreResources(m)));
        }
        if let Some(l) = &self.list_changed {
            found.push(("list_changed", Action::ListChanged(l)));
        }
        if let Some(l) = &self.listen {
            found.push(("listen", Action::Listen(l)));
        }
        if let Some(name) = &self.answer_of {
            found.push(("answer_of", Action::AnswerOf(name)));
        }
        if let Some(w) = &self.wait_heartbeat {
            found.push(("wait_heartbeat", Action::WaitHeartbeat(w)));
        }
        if let Some(c) = &self.churn_subscriptions {
            found.push(("churn_subscriptions", Action::ChurnSubscriptions(c)));
        }
        match found.len() {
            1 => Ok(found.remove(0).1),
            0 => bail!(
                "needs one action: call, mcp, tasks_get, tasks_cancel, restart_connector, \
                 set_annotations, wait_for, pause_ms, kill_proxy, restart_proxy, \
                 restart_server, list_tools, connections, proxy_memory, plant_ciphertext, \
                 request, add_tool, more_resources, list_changed, listen, answer_of, \
                 wait_heartbeat or churn_subscriptions"
            ),
            _ => {
                let names: Vec<_> = found.iter().map(|(n, _)| *n).collect();
                bail!(
                    "has several actions ({}); use one per step",
                    names.join(", ")
                )
            }
        }
    }
}

impl Action<'_> {
    /// A short label for messages: `call write_once`, `tasks_get t1`.
    pub fn label(&self) -> String {
        match self {
            Action::Call(c) => format!("call {}", c.tool),
            Action::Mcp(c) => format!("mcp {}", c.tool),
            Action::TasksGet(t) => format!("tasks_get {}", t.target()),
            Action::TasksCancel(t) => format!("tasks_cancel {}", t.target()),
            Action::RestartConnector(n) => format!("restart_connector {n}"),
            Action::SetAnnotations(a) => format!("set_annotations {}", a.tool),
            Action::WaitFor(w) => format!("wait_for {} {}", w.tool, w.event),
            Action::Pause(ms) => format!("pause_ms {ms}"),
            Action::KillProxy(_) => "kill_proxy".into(),
            Action::RestartProxy => "restart_proxy".into(),
            Action::RestartServer => "restart_server".into(),
            Action::ListTools(l) => format!("list_tools x{}", l.times),
            Action::Connections(c) => format!("connections x{} from {}", c.count, c.from),
            Action::ProxyMemory(m) => format!("proxy_memory < {} MiB", m.peak_below_mib),
            Action::PlantCiphertext(p) => format!("plant_ciphertext {} -> {}", p.from, p.into),
            Action::TasksUpdate(t) => format!("tasks_update {}", t.target()),
            Action::Request(r) => format!("request {}", r.method),
            Action::AddTool(a) => format!("add_tool {}", a.name),
            Action::MoreResources(m) => format!("more_resources x{}", m.len()),
            Action::ListChanged(l) => format!("list_changed {}", l.kind.as_str()),
            Action::Listen(l) => format!("listen x{}", l.kinds.len()),
            Action::AnswerOf(name) => format!("answer_of {name}"),
            Action::WaitHeartbeat(w) => format!("wait_heartbeat {} {}", w.tool, w.field),
            Action::ChurnSubscriptions(c) => format!("churn_subscriptions x{}", c.count),
        }
    }

    /// The upstream tool the step calls, if any.
    pub fn tool(&self) -> Option<&str> {
        match self {
            Action::Call(c) => Some(&c.tool),
            Action::Mcp(c) => Some(&c.tool),
            Action::SetAnnotations(a) => Some(&a.tool),
            Action::WaitFor(w) => Some(&w.tool),
            Action::WaitHeartbeat(w) => Some(&w.tool),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallStep {
    pub tool: String,
    /// The tool's arguments (a JSON object); `{}` when absent.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Cancel the operation this many ms after the upstream received the call (or after the
    /// start, when the upstream has not seen it within 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after_ms: Option<u64>,
    /// The operation's schedule-to-close timeout; 60 s by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Start the operation a second time with the same operation id and request id, as a
    /// retried start does: the server must answer with the same run, not a new one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_twice: bool,
    /// Instead of a first round: a round (or the cancel marker) carrying a `requestState` the
    /// step wrote itself, as any principal allowed to start operations on the endpoint can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forged_state: Option<ForgedState>,
}

/// A `requestState` of the proxy's form that no proxy made (R-PRX-35): the JSON an earlier
/// proxy wrote unsigned, naming the upstream task `task_id` for this step's service, tool and
/// arguments on the HTTP upstream's connection (`http:<service>`). The step starts the tool's
/// next round with it and `input_responses`, or, with `cancel = true`, the operation a cancel
/// while waiting for input takes (R-CON-46).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgedState {
    pub task_id: String,
    #[serde(default)]
    pub input_responses: Map<String, Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

impl CallStep {
    /// The call's string argument `key` (the ledger records it).
    pub fn key(&self) -> Option<&str> {
        key_of(&self.arguments)
    }
}

fn key_of(arguments: &Map<String, Value>) -> Option<&str> {
    arguments.get("key").and_then(Value::as_str)
}

/// A `tools/call` through a connector.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpCallStep {
    /// The connector replica (`[[connectors]] name`); the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Sent as `_meta.idempotencyKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The client drops the request (sending `notifications/cancelled`) this many ms after the
    /// upstream received the call; the step's outcome is then `canceled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after_ms: Option<u64>,
    /// Sent as `logging/setLevel` (an MCP level name) before the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// HTTP replicas: the call goes through a fresh session client of its own connecting from
    /// this loopback address (`127.0.0.2`), another caller when the connector has no auth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<std::net::IpAddr>,
    /// With `from`: every request of that client carries this `X-Forwarded-For`, as a reverse
    /// proxy at `from` would write it (R-CON-50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_for: Option<String>,
    /// Send the call and go on without waiting: it stays in flight while the next steps run
    /// (wait for its `called` ledger event first); its answer is not checked here (no
    /// `expect`), but an `answer_of` step can wait for it and check it when it has a `name`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// With `background`: the name an `answer_of` step waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl McpCallStep {
    pub fn key(&self) -> Option<&str> {
        key_of(&self.arguments)
    }
}

/// Which task a `tasks_get`/`tasks_cancel` step names.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskStep {
    /// The connector replica asked; the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// The task an earlier `mcp` step saved (`expect.save`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// A literal task ID instead (a forged one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forged: Option<String>,
    /// Flip one character in the middle of the saved ID before sending it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alter: bool,
    /// `tasks_get` only: poll (every 200 ms, up to 60 s) until the task is no longer working.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_done: bool,
    /// `tasks_update` only: the `inputResponses` it sends (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<Map<String, Value>>,
}

impl TaskStep {
    fn target(&self) -> String {
        match (&self.task, &self.forged) {
            (Some(t), _) if self.alter => format!("{t} (altered)"),
            (Some(t), _) => t.clone(),
            (None, Some(_)) => "(forged)".into(),
            (None, None) => "?".into(),
        }
    }
}

/// New annotations for one tool of the upstream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetAnnotations {
    pub tool: String,
    /// MCP `ToolAnnotations` JSON; replaces the tool's annotations.
    pub annotations: Value,
}

/// `wait_heartbeat`: a call Activity's heartbeat field to wait for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitHeartbeat {
    pub tool: String,
    /// A field of the call's heartbeat (`upstream_task`: the upstream's own task it follows).
    pub field: String,
}

/// A ledger event to wait for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitFor {
    pub tool: String,
    /// Only calls with this `key` argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// called | completed | failed | cancelled | crashed
    pub event: LedgerEvent,
    /// How many such events (default 1).
    #[serde(default = "one")]
    pub count: usize,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillProxy {
    /// Wait until the upstream recorded a call of this tool first (key: `after_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_called: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_key: Option<String>,
}

/// What a step ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedOutcome {
    /// A result (Nexus: the operation succeeded; MCP: a `CallToolResult`).
    Result,
    /// The Nexus operation failed.
    Failed,
    /// Nexus: the operation ended canceled. MCP: the client cancelled the request.
    Canceled,
    TimedOut,
    Terminated,
    /// MCP: a task (`tools/call` answered with a task, or `tasks/get` answered).
    Task,
    /// MCP: a JSON-RPC error.
    Error,
    /// MCP: `tasks/cancel` was accepted.
    Accepted,
}

impl ExpectedOutcome {
    /// Whether a Nexus `call` step can end this way.
    pub fn is_nexus(self) -> bool {
        matches!(
            self,
            Self::Result | Self::Failed | Self::Canceled | Self::TimedOut | Self::Terminated
        )
    }
}

impl fmt::Display for ExpectedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExpectedOutcome::Result => "result",
            ExpectedOutcome::Failed => "failed",
            ExpectedOutcome::Canceled => "canceled",
            ExpectedOutcome::TimedOut => "timed_out",
            ExpectedOutcome::Terminated => "terminated",
            ExpectedOutcome::Task => "task",
            ExpectedOutcome::Error => "error",
            ExpectedOutcome::Accepted => "accepted",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: ExpectedOutcome,
    /// Nexus: the failure's type. MCP: the result's `_meta["io.durable-mcp/errorType"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// A substring of the failure message (Nexus) or the JSON-RPC error message (MCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_contains: Option<String>,
    /// MCP: the JSON-RPC error code (outcome = "error", or a `failed` task's inlined error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i32>,
    /// MCP: the JSON-RPC error's `data` (outcome = "error", or a `failed` task's inlined
    /// error) equals this JSON exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_data: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocations: Option<Invocations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_upstream: Option<bool>,
    /// `mcp`: at least this many `notifications/progress` reached the MCP caller during the
    /// call, all under the caller's own progress token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_at_least: Option<usize>,
    /// `mcp`: exactly the levels of the `notifications/message` that reached the MCP caller
    /// during the call, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// `call`: the whole `CallToolResult` equals this JSON exactly, numbers' form included (`1`
    /// is not `1.0`), unknown keys included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<serde_json::Value>,
    /// `call`: the proxy's `list_tools`, asked after the call, lists the step's tool as exactly
    /// this JSON, apart from the durable layer's own `_meta` keys (`io.durable-mcp/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed: Option<serde_json::Value>,
    /// `mcp`: the step's `tools/call` (its tool and arguments, without its idempotency key) and
    /// `tools/list`, sent again as raw JSON-RPC (no MCP SDK in between) through the step's
    /// connector replica and straight to a twin of the upstream (the same mock program and
    /// spec, writing no ledger), are answered with the same JSON values field for field (`1`
    /// is not `1.0`, nothing dropped): the result apart from the durable layer's namespaced
    /// `_meta` keys, the step's tool as listed apart from those and `execution.taskSupport`,
    /// which says what the connector offers (R-CON-12).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub matches_upstream_as_written: bool,
    /// The result's `structuredContent` includes these keys with these values (objects are
    /// compared key by key, recursively; anything else must be equal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// `tasks_get`: the task's status (`working`, `completed`, `cancelled`, `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_status: Option<String>,
    /// The Workflows on the scenario's task queue, as the server lists them (a Workflow-backed
    /// tool runs one per call, R-NAT-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<WorkflowsExpect>,
    /// Remember this step's answer (and task ID) under a name for later steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save: Option<String>,
    /// This step's answer (result, or error code and message) equals the one saved under
    /// this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
}

/// The Workflows on the scenario's task queue: exactly `count`, each in `status` when given.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowsExpect {
    pub count: usize,
    /// RUNNING | COMPLETED | FAILED | CANCELED | TERMINATED | CONTINUED_AS_NEW | TIMED_OUT
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// The Workflow statuses `workflows.status` may name.
pub const WORKFLOW_STATUSES: [&str; 7] = [
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELED",
    "TERMINATED",
    "CONTINUED_AS_NEW",
    "TIMED_OUT",
];

/// The names `{task:NAME}` placeholders in `value`'s strings refer to.
pub(crate) fn task_placeholders(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(at) = rest.find("{task:") {
                let after = &rest[at + "{task:".len()..];
                let Some(end) = after.find('}') else { return };
                names.push(after[..end].to_owned());
                rest = &after[end..];
            }
        }
        Value::Array(items) => items.iter().for_each(|v| task_placeholders(v, names)),
        Value::Object(map) => map.values().for_each(|v| task_placeholders(v, names)),
        _ => {}
    }
}

/// The hostile callers' steps: counts that add up, loopback addresses, no cancel of what runs
/// in the background.
fn validate_hostile(action: Action<'_>, field: &str) -> anyhow::Result<()> {
    match action {
        Action::ListTools(l) if l.times == 0 => bail!("{field}.list_tools.times: at least 1"),
        Action::Connections(c) if c.served + c.refused != c.count => {
            bail!("{field}.connections: served + refused must be count")
        }
        Action::Connections(c) if !c.from.is_loopback() => {
            bail!(
                "{field}.connections.from: {} is not a loopback address",
                c.from
            )
        }
        Action::Mcp(c) if c.from.is_some_and(|a| !a.is_loopback()) => {
            bail!("{field}.mcp.from: not a loopback address")
        }
        Action::Mcp(c) if c.forwarded_for.is_some() && c.from.is_none() => {
            bail!("{field}.mcp.forwarded_for: needs from (the proxy's address)")
        }
        Action::Mcp(c) if c.background && c.cancel_after_ms.is_some() => {
            bail!("{field}.mcp: background and cancel_after_ms do not go together")
        }
        _ => Ok(()),
    }
}

/// What a named background call records among the saved names, and what its `answer_of`
/// records once it waited (no `save` can name either: they have spaces).
fn background_marker(name: &str) -> String {
    format!("background call {name}")
}

fn answered_marker(name: &str) -> String {
    format!("answered call {name}")
}

/// A background call's name is new and only on a background call; `answer_of` waits, once, on
/// a name an earlier background call took.
fn validate_background(
    action: Action<'_>,
    field: &str,
    saved: &mut Vec<String>,
) -> anyhow::Result<()> {
    match action {
        Action::Mcp(c) => match (&c.name, c.background) {
            (None, _) => Ok(()),
            (Some(_), false) => bail!("{field}.mcp.name: only for a background call"),
            (Some(name), true) if saved.contains(&background_marker(name)) => {
                bail!("{field}.mcp.name: {name:?} names an earlier background call too")
            }
            (Some(name), true) => {
                saved.push(background_marker(name));
                Ok(())
            }
        },
        Action::AnswerOf(name) if !saved.contains(&background_marker(name)) => {
            bail!("{field}.answer_of: no earlier background mcp call is named {name:?}")
        }
        Action::AnswerOf(name) if saved.contains(&answered_marker(name)) => {
            bail!("{field}.answer_of: an earlier step already waited for {name:?}")
        }
        Action::AnswerOf(name) => {
            saved.push(answered_marker(name));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// How many times the upstream's tool was called (`called` ledger events).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invocations {
    /// Defaults to the step's tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Defaults to the step's `key` argument; without either, every call of the tool counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub count: usize,
}

/// What a `listen` step records among the saved names (no `save` can name it: it has a space).
const LISTENING: &str = "listen stream";

/// Checks one step against what serde cannot see; `field` is `steps[i]`, `connectors` the
/// declared replica names, `saved` the names earlier steps saved (updated here).
pub(crate) fn validate_step(
    step: &Step,
    field: &str,
    connectors: &[String],
    saved: &mut Vec<String>,
) -> anyhow::Result<()> {
    let action = step.action().map_err(|e| anyhow::anyhow!("{field}: {e}"))?;
    let connector = match action {
        Action::Mcp(c) => Some(("mcp", c.connector.as_deref())),
        Action::TasksGet(t) => Some(("tasks_get", t.connector.as_deref())),
        Action::TasksCancel(t) => Some(("tasks_cancel", t.connector.as_deref())),
        Action::TasksUpdate(t) => Some(("tasks_update", t.connector.as_deref())),
        Action::RestartConnector(n) => Some(("restart_connector", Some(n))),
        Action::ListTools(l) => Some(("list_tools", l.connector.as_deref())),
        Action::Connections(c) => Some(("connections", c.connector.as_deref())),
        Action::Request(r) => Some(("request", r.connector.as_deref())),
        Action::ListChanged(l) => Some(("list_changed", l.connector.as_deref())),
        Action::Listen(l) => Some(("listen", l.connector.as_deref())),
        _ => None,
    };
    if let Some((key, name)) = connector {
        if connectors.is_empty() {
            bail!("{field}.{key}: needs a [[connectors]] entry");
        }
        if let Some(name) = name
            && !connectors.iter().any(|c| c == name)
        {
            bail!("{field}.{key}: no connector named {name:?}");
        }
    }
    if step
        .expect
        .as_ref()
        .is_some_and(|e| e.progress_at_least.is_some())
        && !matches!(action, Action::Mcp(_))
    {
        bail!("{field}.expect.progress_at_least: only for mcp steps");
    }
    if let Action::Mcp(c) = action
        && c.cancel_after_ms.is_some()
        && step
            .expect
            .as_ref()
            .is_some_and(|e| e.progress_at_least.is_some())
    {
        bail!("{field}.expect.progress_at_least: not with cancel_after_ms");
    }
    if let Action::TasksGet(t) | Action::TasksCancel(t) | Action::TasksUpdate(t) = action {
        let key = match action {
            Action::TasksGet(_) => "tasks_get",
            Action::TasksCancel(_) => "tasks_cancel",
            _ => "tasks_update",
        };
        match (&t.task, &t.forged) {
            (Some(name), None) if saved.contains(name) => {}
            (Some(name), None) => bail!("{field}.{key}.task: no earlier step saved {name:?}"),
            (None, Some(_)) if !t.alter => {}
            _ => bail!("{field}.{key}: give either task (optionally with alter) or forged"),
        }
        if t.until_done && key != "tasks_get" {
            bail!("{field}.{key}.until_done: only for tasks_get");
        }
        if t.input_responses.is_some() != (key == "tasks_update") {
            bail!("{field}.{key}.input_responses: given for tasks_update, and only there");
        }
    }
    if let Action::Mcp(c) = action {
        let mut named = Vec::new();
        task_placeholders(&Value::Object(c.arguments.clone()), &mut named);
        if let Some(name) = named.iter().find(|n| !saved.contains(n)) {
            bail!("{field}.mcp.arguments: {{task:{name}}} names no task an earlier step saved");
        }
    }
    validate_hostile(action, field)?;
    validate_background(action, field, saved)?;
    if let Action::Request(r) = action
        && !FEATURE_METHODS.contains(&r.method.as_str())
    {
        bail!(
            "{field}.request.method: {:?} is not one of {}",
            r.method,
            FEATURE_METHODS.join(", ")
        );
    }
    if let Action::Listen(l) = action {
        if l.kinds.is_empty() {
            bail!("{field}.listen.kinds: name at least one of tools, resources, prompts");
        }
        saved.push(LISTENING.into());
    }
    if let Action::ListChanged(l) = action
        && l.stateless
        && !saved.iter().any(|s| s == LISTENING)
    {
        bail!("{field}.list_changed.stateless: needs an earlier listen step");
    }
    let background = matches!(action, Action::Mcp(c) if c.background);
    let needs_expect = !background
        && matches!(
            action,
            Action::Call(_)
                | Action::Mcp(_)
                | Action::AnswerOf(_)
                | Action::Request(_)
                | Action::TasksGet(_)
                | Action::TasksCancel(_)
                | Action::TasksUpdate(_)
        );
    let Some(e) = &step.expect else {
        if needs_expect {
            bail!("{field}.expect: {} needs an expectation", action.label());
        }
        return Ok(());
    };
    if background {
        bail!(
            "{field}.expect: a background mcp call is checked by an answer_of step (give the call a name)"
        );
    }
    if !needs_expect {
        bail!("{field}.expect: {} has nothing to expect", action.label());
    }
    let allowed: &[ExpectedOutcome] = match action {
        Action::Call(_) => &[
            ExpectedOutcome::Result,
            ExpectedOutcome::Failed,
            ExpectedOutcome::Canceled,
            ExpectedOutcome::TimedOut,
            ExpectedOutcome::Terminated,
        ],
        Action::Mcp(_) => &[
            ExpectedOutcome::Result,
            ExpectedOutcome::Task,
            ExpectedOutcome::Error,
            ExpectedOutcome::Canceled,
        ],
        Action::AnswerOf(_) => &[
            ExpectedOutcome::Result,
            ExpectedOutcome::Task,
            ExpectedOutcome::Error,
        ],
        Action::TasksGet(_) => &[ExpectedOutcome::Task, ExpectedOutcome::Error],
        Action::Request(_) => &[ExpectedOutcome::Result, ExpectedOutcome::Error],
        _ => &[ExpectedOutcome::Accepted, ExpectedOutcome::Error],
    };
    if !allowed.contains(&e.outcome) {
        let names: Vec<_> = allowed.iter().map(|o| o.to_string()).collect();
        bail!(
            "{field}.expect.outcome: {} cannot end in {:?}; expected one of {}",
            action.label(),
            e.outcome.to_string(),
            names.join(", ")
        );
    }
    let is_call = matches!(action, Action::Call(_));
    if e.error_type.is_some() && is_call && e.outcome != ExpectedOutcome::Failed {
        bail!("{field}.expect.error_type: only applies to outcome = \"failed\"");
    }
    let has_result = matches!(e.outcome, ExpectedOutcome::Result | ExpectedOutcome::Task);
    if (e.snapshot.is_some() || e.is_error.is_some() || e.structured.is_some()) && !has_result {
        bail!(
            "{field}.expect: snapshot, is_error and structured only apply to a result or a finished task"
        );
    }
    if (e.written.is_some() || e.listed.is_some()) && !(is_call && has_result) {
        bail!("{field}.expect: written and listed only apply to a call step ending in a result");
    }
    if e.matches_upstream_as_written
        && !(matches!(action, Action::Mcp(_)) && e.outcome == ExpectedOutcome::Result)
        && !matches!(action, Action::Request(_))
    {
        bail!(
            "{field}.expect.matches_upstream_as_written: only applies to a request step, or an mcp step ending in a result"
        );
    }
    let failed_task =
        e.outcome == ExpectedOutcome::Task && e.task_status.as_deref() == Some("failed");
    if (e.error_code.is_some() || e.error_data.is_some())
        && !(e.outcome == ExpectedOutcome::Error || failed_task)
    {
        bail!(
            "{field}.expect: error_code and error_data only apply to outcome = \"error\" or a task with task_status = \"failed\""
        );
    }
    if e.task_status.is_some() && e.outcome != ExpectedOutcome::Task {
        bail!("{field}.expect.task_status: only applies to outcome = \"task\"");
    }
    if let Some(status) = &e.task_status
        && ![
            "working",
            "input_required",
            "completed",
            "cancelled",
            "failed",
        ]
        .contains(&status.as_str())
    {
        bail!(
            "{field}.expect.task_status: {status:?} is not working, input_required, completed, cancelled or failed"
        );
    }
    let counted_tool = e.invocations.as_ref().and_then(|i| i.tool.as_deref());
    if (e.cancelled_upstream.is_some() || e.invocations.is_some())
        && action.tool().is_none()
        && counted_tool.is_none()
    {
        bail!(
            "{field}.expect.invocations.tool: name the tool for a {}",
            action.label()
        );
    }
    if let Some(name) = &e.snapshot
        && (name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    {
        bail!("{field}.expect.snapshot: {name:?} must be [A-Za-z0-9_-]+");
    }
    if let Some(status) = e.workflows.as_ref().and_then(|w| w.status.as_deref())
        && !WORKFLOW_STATUSES.contains(&status)
    {
        bail!(
            "{field}.expect.workflows.status: {status:?} is not one of {}",
            WORKFLOW_STATUSES.join(", ")
        );
    }
    if let Some(name) = &e.same_as
        && !saved.contains(name)
    {
        bail!("{field}.expect.same_as: no earlier step saved {name:?}");
    }
    if let Some(name) = &e.save {
        if saved.contains(name) {
            bail!("{field}.expect.save: {name:?} is already saved by an earlier step");
        }
        saved.push(name.clone());
    }
    Ok(())
}
