//! Conformance scenarios: the TOML format and its loader.
//!
//! One scenario per file, `scenarios/<family>/<name>.toml`:
//!
//! ```toml
//! id = "reattach/same-key-same-arguments-runs-once"   # <family>/<name>, unique
//! family = "reattach"          # reattach | owner-scope | retry-inference | cancellation | fidelity | faults | operations
//!                              # | security (a hostile upstream, caller or principal)
//!                              # | tasks (task states, upstream tasks, JSON-RPC errors as failed tasks, input rounds)
//! rules = ["R-CON-7"]          # SPEC.md `### R-...` headings; named in failure messages
//! description = "..."
//!
//! [upstream]                   # the mock upstream (see `fixtures::UpstreamSpec`)
//! transport = "stdio"          # stdio: the mock binary as the proxy's child | http: in-process
//! standard = false             # true: start from the standard mock tools (echo, slow, write_once, ...)
//! [[upstream.tools]]           # a `fixtures::ToolSpec`; replaces a standard tool of that name
//! name = "t"
//! annotations = { readOnlyHint = true }
//! behavior = { kind = "fail_times", times = 2, error = { kind = "json_rpc", code = -32603, message = "x" } }
//! # also: title, description, input_schema, output_schema, _meta, execution, icons (listed as
//! # written, unknown keys and integers kept); behavior kinds: echo | fail_times | is_error | sleep
//! # (`ms`, or the argument `sleep_ms`, or `seconds` times 1000)
//! # | crash | all_content | large | progress | log | written (a CallToolResult JSON answered as written,
//! # after `ms` or the argument `sleep_ms`) | json_rpc_error (code, message, data: always a JSON-RPC
//! # error, each replaced by the call's argument of that name)
//! # | task (a task of its own: `ms` in four steps, for a caller declaring the tasks extension, or
//! # ending failed with `error = { code, message }`; list it with execution = { taskSupport = "required" };
//! # counted_ids = true: its task IDs are task-1, task-2, ...)
//! # | ask_input (message: answers an InputRequiredResult asking to confirm, after the argument
//! # `sleep_ms` if given, then, given the answer and its requestState, echoes it: `confirmed: ...`;
//! # SEP-2322) | ask_sampling (message:
//! # the same with one sampling/createMessage request under "sample") | ask_roots (the same with
//! # one roots/list request under "roots") | ask_written (requests: key -> a whole input request as
//! # written; a round answering some keys is asked the others again) | untied_log (messages, every_ms:
//! # info log lines tied to no request, as SDK servers write them over stdio)
//! # | stamp (echoes with structuredContent.run, an id of this execution its completed ledger entry
//! # carries too) | log_after (log lines after the call ended) | read_ancestors (what the parent's and
//! # grandparent's /proc environ give away) | stderr (bytes, line_bytes: floods stderr)
//! # resources_and_prompts = true  # not with a fault: the mock also serves resources (text, blob; two
//! #                            # pages), a template, a prompt and completions (--resources-and-prompts)
//! #                            # and lists what `more_resources` steps write (--more-resources FILE)
//! # fault = { kind = "status", code = 503, times = 2 }  # http only: a wiremock upstream that echoes
//! #                            # and injects status | reset | stall (ms) into the first `times` calls
//!
//! # Or, instead of [upstream] and [proxy], a native tool service (R-NAT-*):
//! # [tool_service]
//! # kind = "example_tools"     # durable-mcp-example-tools as a child process: Nexus service
//! #                            # "examples" (word_count, slow_report, delete_files, server_info) on the task queue
//!
//! [proxy]                      # optional
//! mode = "in_process"          # in_process (a thread of the runner) | process (durable-mcp-proxy child)
//! activity_options = { execution = "inline" }  # optional: proxy.toml's activity_options (every tool)
//! [proxy.overrides.t]          # optional: proxy.toml activity options for one tool
//! start_to_close_timeout = "2s"
//! # max_watched_resources = 20  # optional, in [proxy]: [worker] max_watched_resources (R-PRX-36)
//!
//! [[connectors]]               # optional: in-process connector replicas, each with its own rmcp client;
//! name = "a"                   # they share one signing key and route to the scenario's proxy
//! caller = "alice"             # CallerScope::Process(caller); default "alice"
//! task_after_ms = 300          # a task-capable call becomes a task after this long (default 300)
//! tasks = true                 # the client declares the tasks extension (default true)
//! transport = "pipe"           # pipe (in memory, as stdio) | http (session) | http_stateless (2026-07-28)
//! own_key = false              # true: sign task IDs with a key of its own (another deployment)
//! temporal_tools = false       # true: also serve the Temporal operations tools (R-OPS), run's namespace only
//! companion_tools = false      # true: also serve task_status, task_result, task_cancel and task_input (R-CON-11)
//! codec = false                # true: the Temporal tools encode through the runner's encrypting
//!                              # codec server (--codec-endpoint, R-PAY-6); needs temporal_tools
//! temporal_tools_decode = false  # true: they also decode what they show (--temporal-tools-decode,
//!                              # R-OPS-7); needs codec
//! limits = { max_in_flight_per_caller = 1, http_max_connections_per_address = 3 }  # optional: flags
//!                              # also trusted_proxies = ["127.0.0.5/32"] (--trusted-proxy)
//! list_cache_ms = 1000         # optional: --list-cache (how old a listing may be, R-CON-17)
//! list_changed_poll_ms = 1000  # optional: --list-changed-poll (how often it re-lists for listeners, R-CON-42)
//! route = { task_support = "mirror", synchronous = ["t"] }  # optional: more --route keys (R-CON-39)
//! elicitation = { action = "accept", content = { confirm = true } }  # optional: the client declares
//!                              # elicitation and answers every elicitation/create with this (R-CON-43)
//! sampling = { role = "assistant", content = { type = "text", text = "ok" }, model = "m" }
//!                              # optional: declares sampling, answers sampling/createMessage (R-CON-43)
//! roots = { roots = [{ uri = "file:///work" }] }  # optional: declares roots, answers roots/list
//!
//! # Each step has exactly one action and, for calls and task methods, an `[steps.expect]`.
//! [[steps]]
//! call = { tool = "t", arguments = { key = "k" } }    # straight to the proxy's Nexus service;
//!                              # optional: cancel_after_ms, timeout_ms, start_twice,
//!                              # forged_state = { task_id = "task-1", input_responses = {...} }:
//!                              # instead, the tool's next round with a requestState of the proxy's
//!                              # form that no proxy signed, naming that upstream task on the HTTP
//!                              # upstream (cancel = true: the cancel marker operation with it)
//! [[steps]]
//! mcp = { connector = "a", tool = "t", arguments = { key = "k" }, idempotency_key = "order-1" }
//!                              # optional: cancel_after_ms (the client drops the request);
//!                              # "{run}" (unique per run), "{task_queue}" and "{task:NAME}" (the
//!                              # task ID an earlier step saved) in argument strings are filled in
//!                              # from = "127.0.0.2" (http: a fresh client from that address, another caller
//!                              # without auth); forwarded_for = "198.51.100.1" (with from: every request
//!                              # carries it as X-Forwarded-For); background = true (left in flight; no expect),
//!                              # with name = "hog" an answer_of step waits for its answer
//! [[steps]]
//! tasks_get = { connector = "b", task = "t1", until_done = true }   # or forged = "ID"; alter = true
//! [[steps]]
//! tasks_cancel = { connector = "b", task = "t1" }
//! [[steps]]
//! tasks_update = { connector = "b", task = "t1", input_responses = { confirm = { action = "accept" } } }
//! [[steps]]
//! restart_connector = "a"      # a fresh replica with the same options
//! [[steps]]
//! set_annotations = { tool = "t", annotations = { destructiveHint = true } }  # stdio upstream
//! [[steps]]
//! wait_for = { tool = "t", key = "k", event = "failed", count = 1 }  # a ledger event
//! [[steps]]
//! wait_heartbeat = { tool = "research", field = "upstream_task" }  # until a running call Activity
//!                              # of the tool on the scenario's task queue heartbeated the field
//! [[steps]]
//! answer_of = "hog"            # waits for the named background call's own answer; checked by
//!                              # expect (result | task | error), as an mcp step's answer is
//! [[steps]]
//! pause_ms = 1500               # only for what has no answer or ledger event to wait for
//! [[steps]]
//! kill_proxy = { after_called = "slow", after_key = "k" }   # SIGKILL (proxy mode = "process")
//! [[steps]]
//! restart_proxy = true
//! [[steps]]
//! restart_server = true        # the scenario then gets a dev server of its own on a db file
//! [[steps]]
//! list_tools = { connector = "a", times = 1000 }   # tools/list over and over; each must list tools
//!                              # optional: refused_after = 600, refusal_contains = "--max-..." (later ones refused)
//! [[steps]]
//! connections = { connector = "a", from = "127.0.0.2", count = 5, served = 3, refused = 2 }
//!                              # raw TCP to an http connector, held open; optional refusal_contains = "--http-..."
//!                              # forwarded_for = "198.51.100.1": each sends GET /healthz with that
//!                              # X-Forwarded-For (served: 200; refused: any other answer)
//! [[steps]]
//! proxy_memory = { peak_below_mib = 96 }   # the proxy's VmHWM (proxy mode = "process")
//! [[steps]]
//! plant_ciphertext = { from = "victim-{run}", into = "planted-{run}" }  # a Temporal principal without
//!                              # codec access starts `into` (same type and task queue) with the input
//!                              # `from` was started with, as stored; needs a connector with codec = true
//!
//! [[steps]]
//! request = { connector = "a", method = "resources/read", params = { uri = "mock://text/readme" } }
//!                              # raw JSON-RPC (no MCP SDK) through a replica: resources/list,
//!                              # resources/templates/list, resources/read, prompts/list, prompts/get or
//!                              # completion/complete; a list's pages are folded (expect: result | error)
//! [[steps]]
//! add_tool = { name = "added", like = "echo" }   # the stdio mock gains a copy of a tool, and says so
//! [[steps]]
//! more_resources = [{ uri = "mock://more/1", name = "more" }]  # the mock lists these too from now on
//! [[steps]]
//! list_changed = { connector = "a", kind = "tools", then_lists = "added" }  # waits (within_ms, 30 s)
//!                              # until the replica's session client got `count` (1)
//!                              # notifications/<tools|resources|prompts>/list_changed; then its
//!                              # listing holds that name (a resource: its URI)
//!                              # stateless = true: counts what reached the `listen` stream instead
//! [[steps]]
//! churn_subscriptions = { connector = "a", uri = "mock://items/{n}", count = 40 }  # a raw session
//!                              # subscribes to each URI and unsubscribes again; refusals counted
//! [[steps]]
//! listen = { connector = "a", kinds = ["tools", "resources"] }  # a pipe replica: a 2026-07-28 caller
//!                              # without a session opens subscriptions/listen (raw, a pipe of its
//!                              # own), acknowledged; it stays open until the scenario ends
//!
//! [steps.expect]
//! outcome = "result"           # call: result | failed | canceled | timed_out | terminated
//!                              # mcp: result | task | error | canceled; tasks_get: task | error;
//!                              # tasks_cancel, tasks_update: accepted | error
//! error_type = "..."           # call: the failure's type (R-NXC-4); mcp: _meta["io.durable-mcp/errorType"]
//! error_code = -32021          # optional: the JSON-RPC error code (outcome = "error", or task_status = "failed")
//! error_data = { n = 1 }       # optional: the JSON-RPC error's data, exactly (as error_code)
//! message_contains = "..."     # optional: failure, JSON-RPC error or result text
//! is_error = false             # optional: the result's (or finished task's) `isError`
//! task_status = "completed"    # optional (outcome = "task"): working | input_required | completed | cancelled | failed
//! invocations = { tool = "t", key = "k", count = 3 }  # upstream `called` events (tool and key default to the step's)
//! cancelled_upstream = true    # optional: the upstream saw `notifications/cancelled` for the call
//! progress_at_least = 1        # optional (mcp): notifications/progress the caller got, under its own token
//! logs = ["warning"]           # optional (mcp): the levels of the log messages the caller got ([]: none)
//! structured = { status = "RUNNING" }  # optional: the result's structuredContent includes these
//! workflows = { count = 1, status = "CANCELED" }  # optional: the Workflows on the scenario's task
//!                              # queue, read from the server (visibility; waits up to 60 s)
//! snapshot = "name"            # optional: the result (times, ids redacted) == fixtures/snapshots/<name>.snap (insta)
//! written = { content = [] }    # optional (call): the result is exactly this JSON (1 is not 1.0)
//! listed = { name = "t" }       # optional (call): list_tools lists the tool as exactly this (durable _meta aside)
//! matches_upstream_as_written = true  # optional (mcp, result): the same call and listing read raw (no MCP SDK)
//!                              # through the connector equal a direct call to a twin of the mock upstream
//!                              # field for field (namespaced _meta and execution.taskSupport aside)
//!                              # (request: its answer, pages folded, equals the twin's to the same request)
//! save = "first"               # remember this answer (and task ID) for later steps
//! same_as = "first"            # this answer (result, task ID or error) equals the saved one
//! ```
//!
//! Every table rejects unknown keys; errors name the file and the field.

use std::{
    collections::HashSet,
    fmt,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::fixtures::{Behavior, ToolSpec, UpstreamSpec, faults::HttpFault};

mod feature_steps;
pub mod rules;
mod step;
pub use feature_steps::{AddTool, FEATURE_METHODS, ListChanged, ListKind, Listen, RequestStep};
pub(crate) use step::task_placeholders;
pub use step::{
    Action, CallStep, ChurnSubscriptions, Connections, Expect, ExpectedOutcome, ForgedState,
    Invocations, KillProxy, ListTools, McpCallStep, PlantCiphertext, ProxyMemory, SetAnnotations,
    Step, TaskStep, WaitFor, WaitHeartbeat, WorkflowsExpect,
};

/// A check family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    Reattach,
    RetryInference,
    Cancellation,
    Fidelity,
    Faults,
    OwnerScope,
    /// The Temporal operations toolset through a connector (R-OPS).
    Operations,
    /// A hostile upstream, caller or principal: what each must not get (R-PRX-11, R-CON-38, ...).
    Security,
    /// MCP tasks end to end: task states, upstream tasks, JSON-RPC errors as failed tasks and
    /// input rounds (R-CON-6, R-CON-39, R-CON-40, R-PRX-28, R-PRX-29, R-NAT-7).
    Tasks,
    /// Real MCP clients (Claude Code, the TypeScript and Python SDKs, the Inspector CLI)
    /// through the durable path, compared with the same client on the upstream (R-CNF-22,
    /// R-CNF-23); built into the runner, with no scenario files.
    Hosts,
}

impl Family {
    pub const ALL: [Family; 10] = [
        Family::Reattach,
        Family::RetryInference,
        Family::Cancellation,
        Family::Fidelity,
        Family::Faults,
        Family::OwnerScope,
        Family::Operations,
        Family::Security,
        Family::Tasks,
        Family::Hosts,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Reattach => "reattach",
            Family::RetryInference => "retry-inference",
            Family::Cancellation => "cancellation",
            Family::Fidelity => "fidelity",
            Family::Faults => "faults",
            Family::OwnerScope => "owner-scope",
            Family::Operations => "operations",
            Family::Security => "security",
            Family::Tasks => "tasks",
            Family::Hosts => "hosts",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Family {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Family::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Family::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown family {s:?}; expected one of {}", names.join(", "))
            })
    }
}

/// One scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// `<family>/<name>`, unique across the suite.
    pub id: String,
    pub family: Family,
    /// SPEC.md rule ids (`R-PRX-4`) this scenario checks; named in failure messages.
    pub rules: Vec<String>,
    #[serde(default)]
    pub description: String,
    /// The mock upstream the proxy fronts; absent with `tool_service`.
    #[serde(default)]
    pub upstream: UpstreamDef,
    /// A native tool service instead of a proxied mock upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_service: Option<ToolServiceDef>,
    /// How the proxy runs.
    #[serde(default)]
    pub proxy: ProxyDef,
    /// In-process connector replicas, for `mcp`, `tasks_get` and `tasks_cancel` steps. All
    /// share one signing key and route to the scenario's proxy.
    #[serde(default)]
    pub connectors: Vec<ConnectorDef>,
    pub steps: Vec<Step>,
    /// The file it was loaded from.
    #[serde(skip)]
    pub path: PathBuf,
}

/// A native tool service a scenario runs instead of the proxy (R-NAT-*).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolServiceDef {
    pub kind: ToolServiceKind,
}

/// Which native tool service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolServiceKind {
    /// `durable-mcp-example-tools` as a child process on the scenario's task queue.
    ExampleTools,
}

impl ToolServiceKind {
    /// The Nexus service it serves.
    pub fn service(self) -> &'static str {
        match self {
            ToolServiceKind::ExampleTools => "examples",
        }
    }

    /// Its operations (tools and the hidden one).
    pub fn operations(self) -> &'static [&'static str] {
        match self {
            ToolServiceKind::ExampleTools => {
                &["word_count", "slow_report", "delete_files", "server_info"]
            }
        }
    }
}

/// How the scenario's proxy runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyDef {
    #[serde(default)]
    pub mode: ProxyMode,
    /// The upstream's call options (`proxy.toml`'s `activity_options`): where calls run, how
    /// missing hints are read, timeouts.
    #[serde(default)]
    pub activity_options: durable_mcp::proxy::options::ActivityOptions,
    /// Per-tool activity options (`proxy.toml`'s `overrides.<tool>`): timeouts, retry policy.
    #[serde(default)]
    pub overrides: std::collections::BTreeMap<String, durable_mcp::proxy::options::ActivityOptions>,
    /// `[worker] max_watched_resources`: resource URIs watched per upstream (R-PRX-36).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_watched_resources: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyMode {
    /// On a thread of the runner (fast; cannot be killed).
    #[default]
    InProcess,
    /// The `durable-mcp-proxy` binary as a child process with a generated config, so
    /// `kill_proxy` can SIGKILL it.
    Process,
}

/// One in-process connector replica and the MCP client that talks to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorDef {
    pub name: String,
    /// The caller scope (`CallerScope::Process`): replicas with the same caller share tasks
    /// and idempotency keys.
    #[serde(default = "default_caller")]
    pub caller: String,
    /// How long a task-capable call waits before it becomes a task.
    #[serde(default = "default_task_after_ms")]
    pub task_after_ms: u64,
    /// The client declares the tasks extension.
    #[serde(default = "yes")]
    pub tasks: bool,
    /// How its MCP client reaches it.
    #[serde(default)]
    pub transport: ConnectorTransport,
    /// Sign task IDs with a key of its own instead of the scenario's shared one (a foreign
    /// deployment); kept across `restart_connector`.
    #[serde(default)]
    pub own_key: bool,
    /// Also serve the Temporal operations toolset (R-OPS), limited to the run's namespace.
    #[serde(default)]
    pub temporal_tools: bool,
    /// Also serve the companion tools `task_status`, `task_result`, `task_cancel` and
    /// `task_input`, and
    /// answer a call still running at `task_after_ms` with its task ID when the client lacks
    /// the tasks extension (R-CON-11).
    #[serde(default)]
    pub companion_tools: bool,
    /// The connector's limits, as its flags set them; unset ones keep their defaults.
    #[serde(default)]
    pub limits: ConnectorLimits,
    /// The Temporal tools encode through the runner's encrypting codec server
    /// (`--codec-endpoint`, R-PAY-6); needs `temporal_tools`.
    #[serde(default)]
    pub codec: bool,
    /// The Temporal tools also decode what they show (`--temporal-tools-decode`, R-OPS-7);
    /// needs `codec`.
    #[serde(default)]
    pub temporal_tools_decode: bool,
    /// The client declares the elicitation capability and answers every `elicitation/create`
    /// with this `ElicitResult` (R-CON-43); absent: it declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<serde_json::Value>,
    /// The client declares the sampling capability and answers every
    /// `sampling/createMessage` with this `CreateMessageResult` (R-CON-43); absent: it declares
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<serde_json::Value>,
    /// The client declares the roots capability and answers every `roots/list` with this
    /// `ListRootsResult` (R-CON-43); absent: it declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<serde_json::Value>,
    /// `--list-cache` in ms: how old a route's listing may be (R-CON-17); the default when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_cache_ms: Option<u64>,
    /// `--list-changed-poll` in ms: how often the replica re-lists its routes while a caller
    /// listens for changes (R-CON-42); the default (60 s) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed_poll_ms: Option<u64>,
    /// More keys of its `--route` (`task_support`, `synchronous`: how the route's tools may
    /// become tasks, R-CON-39), read by the connector's own route parser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ConnectorDef {
    /// Its route to `service` on `endpoint`, with its [`Self::route`] keys, as `--route` reads
    /// them.
    pub fn route_to(
        &self,
        service: &str,
        endpoint: &str,
    ) -> Result<durable_mcp::connector::route::Route, durable_mcp::connector::route::RouteError>
    {
        let mut keys = self.route.clone().unwrap_or_default();
        keys.insert("service".into(), service.into());
        keys.insert("endpoint".into(), endpoint.into());
        durable_mcp::connector::route::parse_route(&serde_json::Value::Object(keys).to_string())
    }
}

/// A connector replica's limits (R-CON-17, R-CON-19, R-CON-38), named after their flags.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorLimits {
    /// `--max-in-flight-per-caller`: calls one caller (without auth: one address) waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_per_caller: Option<usize>,
    /// `--http-max-connections-per-address` (HTTP transports only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_max_connections_per_address: Option<usize>,
    /// `--trusted-proxy` (HTTP transports only): the ranges whose `X-Forwarded-For` names the
    /// client (R-CON-50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

/// How a connector replica's client reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectorTransport {
    /// An in-memory pipe, as over stdio.
    #[default]
    Pipe,
    /// Streamable HTTP (`serve_connector_http` on a loopback port) with a session client.
    Http,
    /// Streamable HTTP with a stateless 2026-07-28 client (`server/discover`, no session).
    HttpStateless,
}

fn default_caller() -> String {
    "alice".into()
}
fn default_task_after_ms() -> u64 {
    300
}
fn yes() -> bool {
    true
}

/// How the upstream is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamTransport {
    /// The mock binary as the proxy's stdio child, reading a spec file.
    #[default]
    Stdio,
    /// The mock served over Streamable HTTP inside the runner.
    Http,
}

/// The mock upstream of a scenario.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamDef {
    #[serde(default)]
    pub transport: UpstreamTransport,
    /// Start from the standard mock tools (`fixtures::UpstreamSpec::standard`).
    #[serde(default)]
    pub standard: bool,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// HTTP only: serve the tools from a wiremock MCP server that answers calls like `echo`
    /// and injects this fault into the first calls (`fixtures::faults::HttpFault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<HttpFault>,
    /// HTTP only: the proxy's `unavailable_means_not_run` for this upstream (R-PRX-14).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unavailable_means_not_run: bool,
    /// The mock also serves its resources, resource template, prompt and completions
    /// (`--resources-and-prompts`), and lists what `more_resources` steps write
    /// (`--more-resources FILE`). Stdio only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resources_and_prompts: bool,
}

impl UpstreamDef {
    /// The spec the mock serves: the standard tools (when asked for) with `tools` replacing or
    /// adding to them.
    pub fn spec(&self) -> UpstreamSpec {
        let mut spec = if self.standard {
            UpstreamSpec::standard()
        } else {
            UpstreamSpec {
                name: "durable-mcp-conformance-upstream".into(),
                tools: Vec::new(),
                instructions: None,
            }
        };
        for tool in &self.tools {
            match spec.tool_mut(&tool.name) {
                Some(existing) => *existing = tool.clone(),
                None => spec.tools.push(tool.clone()),
            }
        }
        spec
    }
}

impl Scenario {
    /// Parses one scenario; `path` is used in errors and recorded.
    pub fn parse(text: &str, path: &Path) -> anyhow::Result<Scenario> {
        let mut scenario: Scenario = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        scenario.path = path.to_owned();
        scenario
            .validate()
            .with_context(|| format!("{}", path.display()))?;
        Ok(scenario)
    }

    /// Reads and parses one scenario file.
    pub fn from_file(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading scenario {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Checks what serde cannot: the id's family prefix, rules, steps and the upstream spec.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.family == Family::Hosts {
            bail!("family: the hosts family is built into the runner and has no scenario files");
        }
        let prefix = format!("{}/", self.family);
        if !self.id.starts_with(&prefix) || self.id.len() == prefix.len() {
            bail!("id: {:?} must be \"{prefix}<name>\"", self.id);
        }
        if self.rules.is_empty() {
            bail!("rules: a scenario must name at least one SPEC.md rule");
        }
        for rule in &self.rules {
            if !rule.starts_with("R-") {
                bail!("rules: {rule:?} is not a rule id like \"R-PRX-4\"");
            }
        }
        if self.steps.is_empty() {
            bail!("steps: a scenario needs at least one step");
        }
        let spec = self.upstream.spec();
        spec.validate().context("upstream")?;
        if self.tool_service.is_some()
            && (self.upstream.standard
                || !self.upstream.tools.is_empty()
                || self.upstream.fault.is_some()
                || self.proxy.mode != ProxyMode::InProcess
                || self.proxy.activity_options != Default::default()
                || !self.proxy.overrides.is_empty())
        {
            bail!(
                "tool_service: a scenario with a native tool service has no [upstream] or [proxy]"
            );
        }
        if self.upstream.resources_and_prompts
            && (self.upstream.fault.is_some() || self.tool_service.is_some())
        {
            bail!("upstream.resources_and_prompts: needs a mock upstream without a fault");
        }
        if self.upstream.fault.is_some() {
            if self.upstream.transport != UpstreamTransport::Http {
                bail!("upstream.fault: needs transport = \"http\"");
            }
            if let Some(t) = spec.tools.iter().find(|t| t.behavior != Behavior::Echo) {
                bail!(
                    "upstream.tools: {:?} must behave like echo: a faulty upstream only echoes",
                    t.name
                );
            }
        }
        for tool in self.proxy.overrides.keys() {
            if spec.tool(tool).is_none() {
                bail!("proxy.overrides.{tool}: not a tool of the upstream");
            }
        }
        let mut names: Vec<String> = Vec::new();
        for (i, c) in self.connectors.iter().enumerate() {
            if c.name.is_empty() || names.contains(&c.name) {
                bail!("connectors[{i}].name: {:?} is empty or used twice", c.name);
            }
            names.push(c.name.clone());
            if c.codec && !c.temporal_tools {
                bail!(
                    "connectors[{i}].codec: needs temporal_tools = true (only the Temporal tools use a codec)"
                );
            }
            if c.temporal_tools_decode && !c.codec {
                bail!("connectors[{i}].temporal_tools_decode: needs codec = true");
            }
            let keys = c.route.iter().flat_map(|r| r.keys());
            if let Some(key) = keys
                .into_iter()
                .find(|k| ["service", "endpoint"].contains(&k.as_str()))
            {
                bail!(
                    "connectors[{i}].route.{key}: the runner routes to the scenario's own service"
                );
            }
            if let Err(e) = c.route_to("service", "endpoint") {
                bail!("connectors[{i}].route: {e}");
            }
        }
        let temporal_tools = self
            .connectors
            .iter()
            .any(|c| c.temporal_tools)
            .then(durable_mcp::temporal_tools::TemporalToolset::names)
            .unwrap_or_default();
        let companion: &[&str] = if self.connectors.iter().any(|c| c.companion_tools) {
            &["task_status", "task_result", "task_cancel", "task_input"]
        } else {
            &[]
        };
        let native = self.tool_service.as_ref().map(|t| t.kind.operations());
        let mut saved = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let field = format!("steps[{i}]");
            step::validate_step(step, &field, &names, &mut saved)?;
            let action = step.action()?;
            if let Some(tool) = action.tool()
                && tool != "list_tools"
                && !temporal_tools.contains(&tool)
                && !companion.contains(&tool)
                && !native.map_or(spec.tool(tool).is_some(), |ops| ops.contains(&tool))
            {
                let key = action.label();
                let key = key.split(' ').next().unwrap_or_default();
                let of = if native.is_some() {
                    "tool service"
                } else {
                    "upstream"
                };
                bail!("{field}.{key}.tool: {tool:?} is not a tool of the {of}");
            }
            match action {
                Action::KillProxy(_) | Action::RestartProxy
                    if self.proxy.mode != ProxyMode::Process =>
                {
                    bail!("{field}: kill_proxy and restart_proxy need [proxy] mode = \"process\"")
                }
                Action::SetAnnotations(_)
                    if self.upstream.transport != UpstreamTransport::Stdio =>
                {
                    bail!("{field}.set_annotations: needs upstream.transport = \"stdio\"")
                }
                Action::AddTool(a) if self.upstream.transport != UpstreamTransport::Stdio => {
                    bail!(
                        "{field}.add_tool: needs upstream.transport = \"stdio\" ({})",
                        a.name
                    )
                }
                Action::AddTool(a) if spec.tool(&a.like).is_none() => {
                    bail!(
                        "{field}.add_tool.like: {:?} is not a tool of the upstream",
                        a.like
                    )
                }
                Action::MoreResources(_) if !self.upstream.resources_and_prompts => {
                    bail!("{field}.more_resources: needs upstream.resources_and_prompts = true")
                }
                Action::ProxyMemory(_) if self.proxy.mode != ProxyMode::Process => {
                    bail!("{field}: proxy_memory needs [proxy] mode = \"process\"")
                }
                Action::PlantCiphertext(_) if !self.connectors.iter().any(|c| c.codec) => {
                    bail!(
                        "{field}.plant_ciphertext: needs a connector with codec = true (what it plants is the codec's ciphertext)"
                    )
                }
                _ => {}
            }
            self.validate_http_step(action, &field)?;
            if step
                .expect
                .as_ref()
                .is_some_and(|e| e.matches_upstream_as_written)
                && (self.tool_service.is_some() || self.upstream.fault.is_some())
            {
                bail!(
                    "{field}.expect.matches_upstream_as_written: needs a mock upstream without a fault \
                     (it calls a twin of the upstream directly)"
                );
            }
        }
        Ok(())
    }

    /// Steps that need a connector served over HTTP: `connections`, and `mcp` with `from`; and
    /// `listen`, which needs one on a pipe.
    fn validate_http_step(&self, action: Action<'_>, field: &str) -> anyhow::Result<()> {
        let (key, connector) = match action {
            Action::Connections(c) => ("connections", c.connector.as_deref()),
            Action::Mcp(c) if c.from.is_some() => ("mcp.from", c.connector.as_deref()),
            Action::Listen(l) => ("listen", l.connector.as_deref()),
            _ => return Ok(()),
        };
        let def = match connector {
            Some(name) => self.connectors.iter().find(|c| c.name == name),
            None => self.connectors.first(),
        };
        if matches!(action, Action::Listen(_)) {
            if def.is_some_and(|d| d.transport != ConnectorTransport::Pipe) {
                bail!("{field}.listen: needs a connector with transport = \"pipe\"");
            }
            return Ok(());
        }
        if def.is_some_and(|d| d.transport == ConnectorTransport::Pipe) {
            bail!(
                "{field}.{key}: needs a connector with transport = \"http\" or \"http_stateless\""
            );
        }
        Ok(())
    }

    /// Whether a step restarts the Temporal server (the scenario then needs a server of its
    /// own, on a db file).
    pub fn restarts_server(&self) -> bool {
        self.steps.iter().any(|s| s.restart_server)
    }

    /// The call's description for messages: `step 2 (call write_once)`.
    pub fn step_label(&self, index: usize) -> String {
        let what = self.steps[index]
            .action()
            .map(|a| a.label())
            .unwrap_or_else(|_| "?".into());
        format!("step {} ({what})", index + 1)
    }
}

/// Every `*.toml` under `dir` (recursively), sorted by id; ids must be unique.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<Scenario>> {
    let mut files = Vec::new();
    collect(dir, &mut files).with_context(|| format!("listing scenarios in {}", dir.display()))?;
    files.sort();
    let mut scenarios = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match Scenario::from_file(&file) {
            Ok(s) => scenarios.push(s),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} invalid scenario file(s):\n  {}",
            errors.len(),
            errors.join("\n  ")
        );
    }
    let mut seen = HashSet::new();
    for s in &scenarios {
        if !seen.insert(s.id.clone()) {
            bail!(
                "{}: id {:?} is used by another scenario",
                s.path.display(),
                s.id
            );
        }
    }
    scenarios.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(scenarios)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
    Ok(())
}

/// Which scenarios to run.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub family: Option<Family>,
    /// Exact id, or a prefix ending in `/`.
    pub scenario: Option<String>,
    pub rule: Option<String>,
}

impl Filter {
    pub fn matches(&self, s: &Scenario) -> bool {
        self.family.is_none_or(|f| s.family == f)
            && self
                .scenario
                .as_deref()
                .is_none_or(|id| s.id == id || (id.ends_with('/') && s.id.starts_with(id)))
            && self
                .rule
                .as_deref()
                .is_none_or(|r| s.rules.iter().any(|x| x.eq_ignore_ascii_case(r)))
    }
}

/// Rule ids defined in SPEC.md text: every `### R-XXX-N:` heading.
pub fn spec_rules(spec_md: &str) -> Vec<String> {
    spec_md
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter(|l| l.starts_with("R-"))
        .map(|l| l.split([':', ' ']).next().unwrap_or_default().to_owned())
        .collect()
}

/// For every SPEC.md rule, the scenario ids its `Checked by:` line names after `; scenarios`
/// (comma-separated, unquoted, so the workspace's test-name check ignores them).
pub fn spec_rule_scenarios(spec_md: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut rule = None;
    for line in spec_md.lines() {
        if let Some(heading) = line.strip_prefix("### ")
            && heading.starts_with("R-")
        {
            let id = heading
                .split([':', ' '])
                .next()
                .unwrap_or_default()
                .to_owned();
            out.insert(id.clone(), Vec::new());
            rule = Some(id);
        } else if let (Some(checks), Some(id)) = (line.strip_prefix("Checked by:"), &rule) {
            let names = checks
                .split_once("; scenarios ")
                .map(|(_, list)| list.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default();
            out.insert(id.clone(), names);
        }
    }
    out
}

/// The workspace root (holding `scenarios/` and `fixtures/`): the current directory when it has
/// `scenarios/`, else the directory this crate was built from.
pub fn default_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir()
        && cwd.join("scenarios").is_dir()
        && cwd.join("fixtures").is_dir()
    {
        return cwd;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
        id = "retry-inference/x"
        family = "retry-inference"
        rules = ["R-PRX-4"]
        [upstream]
        [[upstream.tools]]
        name = "t"
        annotations = { readOnlyHint = true }
        behavior = { kind = "fail_times", times = 2, error = { kind = "json_rpc", code = -32603, message = "x" } }
        [[steps]]
        call = { tool = "t", arguments = { key = "k" } }
        [steps.expect]
        outcome = "result"
        invocations = { count = 3 }
    "#;

    #[test]
    fn parses() {
        let s = Scenario::parse(OK, Path::new("x.toml")).unwrap();
        assert_eq!(s.family, Family::RetryInference);
        assert_eq!(s.steps[0].call.as_ref().unwrap().key(), Some("k"));
        assert_eq!(s.upstream.spec().tools.len(), 1);
    }

    #[test]
    fn unknown_fields_name_file_and_field() {
        let bad = OK.replace("outcome = \"result\"", "outcome = \"result\"\nbogus = 1");
        let err = format!(
            "{:#}",
            Scenario::parse(&bad, Path::new("dir/bad.toml")).unwrap_err()
        );
        assert!(
            err.contains("dir/bad.toml") && err.contains("bogus"),
            "{err}"
        );
        let bad = OK.replace("tool = \"t\"", "tool = \"nope\"");
        let err = format!(
            "{:#}",
            Scenario::parse(&bad, Path::new("b.toml")).unwrap_err()
        );
        assert!(err.contains("steps[0].call.tool"), "{err}");
        let bad = OK.replace("[steps.expect]", "restart_proxy = true\n[steps.expect]");
        let err = format!(
            "{:#}",
            Scenario::parse(&bad, Path::new("c.toml")).unwrap_err()
        );
        assert!(
            err.contains("steps[0]") && err.contains("several actions"),
            "{err}"
        );
    }

    const CONNECTED: &str = r#"
        id = "reattach/x"
        family = "reattach"
        rules = ["R-CON-7"]
        [upstream]
        standard = true
        [[connectors]]
        name = "a"
        [[steps]]
        mcp = { tool = "slow", arguments = { key = "k" } }
        [steps.expect]
        outcome = "task"
        save = "t"
        [[steps]]
        tasks_get = { task = "t", until_done = true }
        [steps.expect]
        outcome = "task"
        task_status = "completed"
        invocations = { tool = "slow", count = 1 }
    "#;

    fn parse_err(text: &str) -> String {
        format!(
            "{:#}",
            Scenario::parse(text, Path::new("s/x.toml")).unwrap_err()
        )
    }

    #[test]
    fn connector_steps_parse_and_refer_only_to_what_exists() {
        let s = Scenario::parse(CONNECTED, Path::new("x.toml")).unwrap();
        assert_eq!(s.connectors[0].caller, "alice");
        assert_eq!(s.connectors[0].task_after_ms, 300);
        let err = parse_err(&CONNECTED.replace("mcp = { tool", "mcp = { connector = \"b\", tool"));
        assert!(
            err.contains("s/x.toml") && err.contains("steps[0].mcp: no connector named \"b\""),
            "{err}"
        );
        let err = parse_err(&CONNECTED.replace("task = \"t\"", "task = \"u\""));
        assert!(err.contains("steps[1].tasks_get.task"), "{err}");
        let err =
            parse_err(&CONNECTED.replace("task_status = \"completed\"", "task_status = \"done\""));
        assert!(err.contains("steps[1].expect.task_status"), "{err}");
        let err = parse_err(&CONNECTED.replace(
            "outcome = \"task\"\n        save",
            "outcome = \"failed\"\n        save",
        ));
        assert!(err.contains("steps[0].expect.outcome"), "{err}");
        let err = parse_err(&CONNECTED.replace("[[connectors]]\n        name = \"a\"", ""));
        assert!(err.contains("needs a [[connectors]] entry"), "{err}");
        let err = parse_err(&CONNECTED.replace("name = \"a\"", "name = \"a\"\n        colour = 1"));
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn fault_steps_need_what_they_act_on() {
        let kill = CONNECTED.replace(
            "[[steps]]\n        tasks_get",
            "[[steps]]\n        kill_proxy = {}\n        [[steps]]\n        tasks_get",
        );
        let err = parse_err(&kill);
        assert!(
            err.contains("steps[1]") && err.contains("mode = \"process\""),
            "{err}"
        );
        let ok = kill.replace(
            "[[connectors]]",
            "[proxy]\n        mode = \"process\"\n        [[connectors]]",
        );
        Scenario::parse(&ok, Path::new("x.toml")).unwrap();
        let http = CONNECTED.replace(
            "standard = true",
            "transport = \"http\"\n        standard = true\n        fault = { kind = \"reset\", times = 1 }",
        );
        let err = parse_err(&http);
        assert!(
            err.contains("upstream.tools") && err.contains("echo"),
            "{err}"
        );
    }

    const AS_WRITTEN: &str = r#"
        id = "fidelity/x"
        family = "fidelity"
        rules = ["R-CON-12"]
        [upstream]
        [[upstream.tools]]
        name = "echo"
        [[connectors]]
        name = "a"
        [[steps]]
        mcp = { tool = "echo" }
        [steps.expect]
        outcome = "result"
        matches_upstream_as_written = true
    "#;

    #[test]
    fn as_written_checks_need_an_mcp_result_and_a_mock_upstream() {
        Scenario::parse(AS_WRITTEN, Path::new("x.toml")).unwrap();
        let field = "steps[0].expect.matches_upstream_as_written";
        let call = AS_WRITTEN.replace("mcp = { tool", "call = { tool");
        assert!(parse_err(&call).contains(field), "{}", parse_err(&call));
        let task = AS_WRITTEN.replace("outcome = \"result\"", "outcome = \"task\"");
        assert!(parse_err(&task).contains(field), "{}", parse_err(&task));
        let faulty = AS_WRITTEN.replace(
            "[upstream]",
            "[upstream]\n        transport = \"http\"\n        fault = { kind = \"reset\", times = 1 }",
        );
        let err = parse_err(&faulty);
        assert!(err.contains(field) && err.contains("fault"), "{err}");
    }

    const HOSTILE: &str = r#"
        id = "security/x"
        family = "security"
        rules = ["R-CON-38"]
        [upstream]
        standard = true
        [[connectors]]
        name = "a"
        transport = "http"
        limits = { max_in_flight_per_caller = 1, http_max_connections_per_address = 3 }
        [[steps]]
        mcp = { tool = "slow", from = "127.0.0.2", background = true }
        [[steps]]
        connections = { from = "127.0.0.2", count = 4, served = 3, refused = 1 }
        [[steps]]
        list_tools = { times = 10 }
    "#;

    const AWAITED: &str = r#"
        id = "security/x"
        family = "security"
        rules = ["R-CON-38"]
        [upstream]
        standard = true
        [[connectors]]
        name = "a"
        [[steps]]
        mcp = { tool = "slow", background = true, name = "hog" }
        [[steps]]
        answer_of = "hog"
        [steps.expect]
        outcome = "result"
    "#;

    #[test]
    fn a_background_call_is_awaited_by_its_name_once() {
        let s = Scenario::parse(AWAITED, Path::new("x.toml")).unwrap();
        assert_eq!(s.steps[1].answer_of.as_deref(), Some("hog"));
        assert_eq!(s.step_label(1), "step 2 (answer_of hog)");
        // (what is changed, into what, what the error names)
        let cases = [
            (
                "answer_of = \"hog\"",
                "answer_of = \"cat\"",
                "no earlier background",
            ),
            ("background = true, ", "", "only for a background call"),
            (
                "outcome = \"result\"",
                "outcome = \"accepted\"",
                "steps[1].expect.outcome",
            ),
            (
                "[steps.expect]\n        outcome = \"result\"",
                "",
                "needs an expectation",
            ),
            (
                "outcome = \"result\"",
                "outcome = \"result\"\n[[steps]]\nanswer_of = \"hog\"\n[steps.expect]\noutcome = \"error\"",
                "already waited",
            ),
            (
                "[[steps]]\n        answer_of",
                "[[steps]]\nmcp = { tool = \"slow\", background = true, name = \"hog\" }\n[[steps]]\nanswer_of",
                "earlier background call too",
            ),
        ];
        for (from, to, named) in cases {
            let changed = AWAITED.replace(from, to);
            assert_ne!(changed, AWAITED, "{from:?} is not in the scenario");
            let err = parse_err(&changed);
            assert!(err.contains(named), "{from:?} -> {to:?}: {err}");
        }
    }

    #[test]
    fn a_heartbeat_wait_names_a_tool_and_a_field() {
        let text = AWAITED.replace(
            "answer_of = \"hog\"\n        [steps.expect]\n        outcome = \"result\"",
            "wait_heartbeat = { tool = \"slow\", field = \"upstream_task\" }",
        );
        let s = Scenario::parse(&text, Path::new("x.toml")).unwrap();
        let wait = s.steps[1].wait_heartbeat.as_ref().unwrap();
        assert_eq!(
            (wait.tool.as_str(), wait.field.as_str()),
            ("slow", "upstream_task")
        );
        assert_eq!(
            s.step_label(1),
            "step 2 (wait_heartbeat slow upstream_task)"
        );
        let err = parse_err(&text.replace(", field = \"upstream_task\"", ""));
        assert!(err.contains("field"), "{err}");
    }

    #[test]
    fn hostile_steps_parse_and_need_what_they_act_on() {
        let s = Scenario::parse(HOSTILE, Path::new("x.toml")).unwrap();
        assert_eq!(s.family, Family::Security);
        assert_eq!(s.connectors[0].limits.max_in_flight_per_caller, Some(1));
        // (what is changed, into what, what the error names)
        let cases = [
            ("transport = \"http\"", "", "steps[0].mcp.from"),
            (
                "background = true }",
                "background = true }\n[steps.expect]\noutcome = \"result\"",
                "steps[0].expect",
            ),
            ("served = 3", "served = 2", "served + refused"),
            ("\"127.0.0.2\", count", "\"10.0.0.2\", count", "loopback"),
            (
                "list_tools = { times = 10 }",
                "proxy_memory = { peak_below_mib = 9 }",
                "mode = \"process\"",
            ),
            (
                "list_tools = { times = 10 }",
                "plant_ciphertext = { from = \"a\", into = \"b\" }",
                "codec = true",
            ),
            (
                "transport = \"http\"",
                "transport = \"http\"\ncodec = true",
                "temporal_tools",
            ),
            (
                "transport = \"http\"",
                "transport = \"http\"\ntemporal_tools = true\ntemporal_tools_decode = true",
                "needs codec",
            ),
            (
                "transport = \"http\"",
                "transport = \"http\"\nroute = { task_support = \"never\" }",
                "connectors[0].route: invalid route",
            ),
            (
                "transport = \"http\"",
                "transport = \"http\"\nroute = { service = \"other\" }",
                "connectors[0].route.service",
            ),
        ];
        for (from, to, named) in cases {
            let err = parse_err(&HOSTILE.replace(from, to));
            assert!(err.contains(named), "{from:?} -> {to:?}: {err}");
        }
    }

    /// The format documented here and in `scenarios/README.md` is the same text.
    #[test]
    fn readme_and_module_doc_show_the_same_format() {
        let readme = include_str!("../../../scenarios/README.md");
        let ours = include_str!("mod.rs");
        let block = |text: &str| -> String {
            let start = text.find("```toml").expect("a toml block") + "```toml".len();
            let end = start + text[start..].find("```").expect("a closed block");
            text[start..end]
                .lines()
                .map(|l| l.trim_start_matches("//!").trim())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(block(readme), block(ours));
    }

    #[test]
    fn scenario_lists_are_read_from_checked_by_lines() {
        let md = "### R-PRX-4: Retry\nChecked by: `t`; scenarios a/x, b/y\n### R-NXC-1: x\nChecked by: `u`";
        let map = spec_rule_scenarios(md);
        assert_eq!(map["R-PRX-4"], ["a/x", "b/y"]);
        assert!(map["R-NXC-1"].is_empty());
    }

    #[test]
    fn spec_rules_are_read_from_headings() {
        let md = "### R-PRX-4: Retry\ntext\n### R-NXC-1: x\n## other";
        assert_eq!(spec_rules(md), ["R-PRX-4", "R-NXC-1"]);
    }

    const FEATURES: &str = r#"
        id = "fidelity/x"
        family = "fidelity"
        rules = ["R-CON-45"]
        [upstream]
        standard = true
        resources_and_prompts = true
        [[connectors]]
        name = "a"
        list_cache_ms = 1000
        [[steps]]
        request = { method = "resources/read", params = { uri = "mock://text/readme" } }
        [steps.expect]
        outcome = "result"
        matches_upstream_as_written = true
        [[steps]]
        add_tool = { name = "added", like = "echo" }
        [[steps]]
        more_resources = [{ uri = "mock://more/1", name = "more" }]
        [[steps]]
        list_changed = { kind = "tools", then_lists = "added" }
    "#;

    #[test]
    fn feature_steps_parse_and_say_what_they_need() {
        let s = Scenario::parse(FEATURES, Path::new("x.toml")).unwrap();
        assert_eq!(s.connectors[0].list_cache_ms, Some(1000));
        let err = parse_err(&FEATURES.replace("resources/read", "tools/call"));
        assert!(err.contains("steps[0].request.method"), "{err}");
        let err = parse_err(&FEATURES.replace("outcome = \"result\"", "outcome = \"task\""));
        assert!(err.contains("steps[0].expect.outcome"), "{err}");
        let err = parse_err(&FEATURES.replace("like = \"echo\"", "like = \"nope\""));
        assert!(err.contains("steps[1].add_tool.like"), "{err}");
        let err = parse_err(&FEATURES.replace("resources_and_prompts = true", ""));
        assert!(err.contains("steps[2].more_resources"), "{err}");
        let err = parse_err(&FEATURES.replace(
            "standard = true",
            "standard = true\ntransport = \"http\"\nfault = { kind = \"reset\", times = 1 }",
        ));
        assert!(err.contains("upstream.resources_and_prompts"), "{err}");
        let err = parse_err(&FEATURES.replace("kind = \"tools\"", "kind = \"roots\""));
        assert!(err.contains("kind"), "{err}");
        let err = parse_err(&FEATURES.replace(
            "[[connectors]]\n        name = \"a\"\n        list_cache_ms = 1000",
            "",
        ));
        assert!(err.contains("needs a [[connectors]] entry"), "{err}");
        let err =
            parse_err(&FEATURES.replace("kind = \"tools\"", "kind = \"tools\", stateless = true"));
        assert!(err.contains("needs an earlier listen step"), "{err}");
        let listening = FEATURES.replace(
            "[[steps]]\n        add_tool",
            "[[steps]]\n        listen = { kinds = [\"tools\"] }\n        [[steps]]\n        add_tool",
        );
        Scenario::parse(
            &listening.replace("kind = \"tools\"", "kind = \"tools\", stateless = true"),
            Path::new("x.toml"),
        )
        .unwrap();
        let err = parse_err(&listening.replace("list_cache_ms = 1000", "transport = \"http\""));
        assert!(
            err.contains("listen: needs a connector with transport = \"pipe\""),
            "{err}"
        );
    }
}
