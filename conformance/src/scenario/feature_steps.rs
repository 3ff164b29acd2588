//! Steps for what an upstream offers beside its tools (R-PRX-32, R-CON-45, R-CON-47) and for
//! list changes reaching a connector's callers (R-CON-42). Plain data; `run::feature_steps`
//! gives it meaning.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The requests a `request` step may send.
pub const FEATURE_METHODS: [&str; 8] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// `request`: one resource, prompt or completion request sent as raw JSON-RPC (no MCP SDK)
/// through a connector replica. A list request's pages are all fetched and folded (the first
/// page's fields, every page's items, no `nextCursor`), on both sides of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestStep {
    /// The connector replica; the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// One of [`FEATURE_METHODS`].
    pub method: String,
    /// The request's params (a JSON object); `{}` when absent.
    #[serde(default)]
    pub params: Map<String, Value>,
}

impl RequestStep {
    /// Whether the method is a list (its pages are folded).
    pub fn items(&self) -> Option<&'static str> {
        match self.method.as_str() {
            "resources/list" => Some("resources"),
            "resources/templates/list" => Some("resourceTemplates"),
            "prompts/list" => Some("prompts"),
            _ => None,
        }
    }
}

/// `add_tool`: the stdio mock's spec file gains a copy of tool `like` named `name`; the mock
/// announces it (`notifications/tools/list_changed`), as a real server would.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddTool {
    pub name: String,
    pub like: String,
}

/// What `list_changed` waits for: `notifications/<kind>/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListKind {
    Tools,
    Resources,
    Prompts,
}

impl ListKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources => "resources",
            ListKind::Prompts => "prompts",
        }
    }
}

/// `list_changed`: waits (up to `within_ms`, 30 s by default) until the replica's session client
/// got `count` (default 1) `notifications/<kind>/list_changed`; with `then_lists`, its next
/// listing of that kind then holds an item of that name (a tool or prompt) or URI (a resource).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListChanged {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    pub kind: ListKind,
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then_lists: Option<String>,
    /// Count what the stateless listener of an earlier `listen` step got instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stateless: bool,
}

/// `listen`: a 2026-07-28 caller without a session opens a `subscriptions/listen` stream on a
/// pipe replica (a fresh pipe, raw JSON-RPC) asking for the `kinds`' list changes, and waits for
/// `notifications/subscriptions/acknowledged`; the stream stays open until the scenario ends,
/// and `list_changed` with `stateless = true` counts what reaches it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    pub kinds: Vec<ListKind>,
}

fn one() -> usize {
    1
}
