//! What a chaos run recorded: every call as its client saw it, every fault as the nemesis
//! applied and healed it, and what the upstreams' ledgers and Temporal say. Plain data; the
//! checker module judges it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a fault does (R-CNF-24). Serialized kebab-case: `kill-proxy`, `relay-stall`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL a proxy worker (its stdio upstream dies with it), start it again later.
    KillProxy,
    /// SIGSTOP a proxy worker past its heartbeat timeout, then SIGCONT.
    StopProxy,
    /// SIGKILL a connector replica, start it again on its port later.
    KillConnector,
    /// SIGKILL the HTTP upstream, start it again on its port later.
    KillUpstream,
    /// SIGKILL a proxy's stdio upstream; the proxy starts another on its next call.
    KillStdioUpstream,
    /// Nothing crosses the proxy's connection to the HTTP upstream until it heals.
    RelayStall,
    /// The proxy's connections to the HTTP upstream are reset until it heals.
    RelayReset,
    /// What crosses the proxy's connection to the HTTP upstream is lost until it heals.
    RelayBlackhole,
    /// SIGKILL the Temporal dev server, start it again on its database file later.
    KillServer,
}

impl FaultKind {
    pub const ALL: [FaultKind; 9] = [
        FaultKind::KillProxy,
        FaultKind::StopProxy,
        FaultKind::KillConnector,
        FaultKind::KillUpstream,
        FaultKind::KillStdioUpstream,
        FaultKind::RelayStall,
        FaultKind::RelayReset,
        FaultKind::RelayBlackhole,
        FaultKind::KillServer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillProxy => "kill-proxy",
            FaultKind::StopProxy => "stop-proxy",
            FaultKind::KillConnector => "kill-connector",
            FaultKind::KillUpstream => "kill-upstream",
            FaultKind::KillStdioUpstream => "kill-stdio-upstream",
            FaultKind::RelayStall => "relay-stall",
            FaultKind::RelayReset => "relay-reset",
            FaultKind::RelayBlackhole => "relay-blackhole",
            FaultKind::KillServer => "kill-server",
        }
    }

    /// How many things of its kind there are to hit (two proxy workers, two connector
    /// replicas; one of everything else).
    pub fn targets(self) -> usize {
        match self {
            FaultKind::KillProxy
            | FaultKind::StopProxy
            | FaultKind::KillConnector
            | FaultKind::KillStdioUpstream => 2,
            _ => 1,
        }
    }

    /// How long after its heal a fault of this kind can still end a call (ms): a restarted
    /// connector leaves clients a stale connection for a moment; a proxy's heartbeat timeout
    /// (5 s) and a retry's back-off run out after the process came back.
    pub fn lingers_ms(self) -> u64 {
        match self {
            FaultKind::KillConnector => 2_000,
            FaultKind::KillStdioUpstream | FaultKind::KillUpstream => 5_000,
            _ => 10_000,
        }
    }

    /// Whether a fault of this kind on `target` can touch `call`: it sits on the call's path.
    pub fn touches(self, target: usize, call: &Call) -> bool {
        match self {
            // Either worker may hold the call's Activity or Nexus task; the server holds all.
            FaultKind::KillProxy | FaultKind::StopProxy | FaultKind::KillServer => true,
            FaultKind::KillConnector => call.replicas.contains(&target),
            FaultKind::KillStdioUpstream => call.service == Service::Stdio,
            FaultKind::KillUpstream
            | FaultKind::RelayStall
            | FaultKind::RelayReset
            | FaultKind::RelayBlackhole => call.service == Service::Http,
        }
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault as applied: when it began and healed, in ms since the run began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    /// Which proxy worker or connector replica (0 or 1); 0 for the rest.
    pub target: usize,
    pub started_ms: u64,
    /// When what it broke was back (a restarted process serving again); `None` if never.
    pub healed_ms: Option<u64>,
}

impl FaultRecord {
    /// Whether it can explain something that happened to `call`: it touches the call's path,
    /// began before the call ended and healed (give or take what it leaves behind for a
    /// moment, [`FaultKind::lingers_ms`]) after the call began.
    pub fn explains(&self, call: &Call) -> bool {
        let ended = call.ended_ms.unwrap_or(u64::MAX);
        let healed = self.healed_ms.unwrap_or(u64::MAX);
        self.kind.touches(self.target, call)
            && self.started_ms <= ended
            && healed.saturating_add(self.kind.lingers_ms()) >= call.started_ms
    }

    /// Whether it was in force at `ms`.
    pub fn active_at(&self, ms: u64) -> bool {
        self.started_ms <= ms && self.healed_ms.is_none_or(|h| ms < h)
    }
}

/// Which upstream a call reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// The mock over Streamable HTTP, through the relay.
    Http,
    /// The mock over stdio, a child of each proxy worker.
    Stdio,
}

/// What a call of the workload does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// A read-only tool: its result must equal a direct call's.
    Read,
    /// An idempotent tool: retried freely.
    Idempotent,
    /// A destructive, non-idempotent tool without an idempotency key: at most one run.
    Destructive,
    /// The same with an idempotency key, re-issued on the other replica after a lost answer:
    /// at most one run, and every answer is the first execution's.
    DestructiveKeyed,
    /// A long call that becomes a task, followed from alternating replicas.
    Long,
    /// A task that asks for input, answered on the replica that did not read the question.
    Ask,
    /// A long task cancelled on the other replica.
    Cancel,
    /// A call from a Workflow through the in-Workflow client.
    Workflow,
}

impl CallKind {
    pub const ALL: [CallKind; 8] = [
        CallKind::Read,
        CallKind::Idempotent,
        CallKind::Destructive,
        CallKind::DestructiveKeyed,
        CallKind::Long,
        CallKind::Ask,
        CallKind::Cancel,
        CallKind::Workflow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CallKind::Read => "read",
            CallKind::Idempotent => "idempotent",
            CallKind::Destructive => "destructive",
            CallKind::DestructiveKeyed => "destructive-keyed",
            CallKind::Long => "long",
            CallKind::Ask => "ask",
            CallKind::Cancel => "cancel",
            CallKind::Workflow => "workflow",
        }
    }
}

/// How a call ended for its client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "end", rename_all = "kebab-case")]
pub enum End {
    /// Its own result, not an error.
    Ok,
    /// A tool error with the durable layer's type (`UpstreamTimeout`, ...), not unknown.
    ToolError {
        error_type: Option<String>,
        text: String,
    },
    /// A JSON-RPC error (or a `failed` task).
    Error { code: Option<i32>, message: String },
    /// A task that ended cancelled.
    Cancelled,
    /// The outcome is unknown: `ToolCallOutcomeUnknown`, or the request was lost with no way
    /// to ask again (no idempotency key).
    Unknown { why: String },
    /// No final answer by the end of the run.
    Unanswered,
}

impl End {
    /// The outcome's name in the report's table.
    pub fn label(&self) -> &'static str {
        match self {
            End::Ok => "ok",
            End::ToolError { .. } => "tool error",
            End::Error { .. } => "error",
            End::Cancelled => "cancelled",
            End::Unknown { .. } => "unknown",
            End::Unanswered => "unanswered",
        }
    }
}

/// One call as its client saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub id: usize,
    pub kind: CallKind,
    pub service: Service,
    pub tool: String,
    /// Its `key` argument: unique to the call, so the ledger tells its runs apart.
    pub key: String,
    /// The arguments it was sent with.
    pub arguments: Value,
    /// Sent with an idempotency key.
    pub keyed: bool,
    pub started_ms: u64,
    /// When its final answer came; `None`: none came.
    pub ended_ms: Option<u64>,
    pub end: End,
    /// The connector replicas its requests went to, in order.
    pub replicas: Vec<usize>,
    /// How many times the call itself was sent (a keyed call is re-issued after a loss).
    pub issues: usize,
    /// The execution its answer names (a `stamp` tool's `structuredContent.run`).
    pub run: Option<String>,
    /// Its result (`Ok` and tool errors), for the read-only comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// What the upstreams' ledgers say about one key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runs {
    /// `called` entries: how many times the tool body started.
    pub called: usize,
    /// The execution ids of its `completed` entries (`stamp` tools).
    pub completed_runs: Vec<String>,
}

/// Work Temporal still holds once the run is over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenWork {
    pub nexus_operations: usize,
    pub activities: usize,
    pub workflows: usize,
    /// A few ids of what is open, for the report.
    pub examples: Vec<String>,
}

/// One process's resident memory at the start (once warm) and at the end (once quiet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// `proxy 0`, `connector 1`, `upstream (http)`, `server`.
    pub role: String,
    pub start_mib: f64,
    pub end_mib: f64,
}

/// Everything the checker reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    pub calls: Vec<Call>,
    pub faults: Vec<FaultRecord>,
    /// The ledgers, by call key.
    pub runs: BTreeMap<String, Runs>,
    /// The tools whose body may run at most once per call (destructive, not idempotent).
    pub at_most_once: Vec<String>,
    /// A direct call's result for each read-only call that ended `Ok`, by call id (`Err`: the
    /// direct call failed, with why).
    pub direct: BTreeMap<usize, Result<Value, String>>,
    pub open: OpenWork,
    pub memory: Vec<Memory>,
    /// How long past the last heal a call may take to reach its final answer, in ms.
    pub bound_ms: u64,
    /// When the run (the workload) ended, in ms since it began.
    pub ended_ms: u64,
}
