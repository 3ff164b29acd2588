//! What travels with a running tool call, between the tool service and its callers.
//!
//! A tool service answers a long call asynchronously with an operation token ([`CallToken`])
//! naming the standalone Activity that runs it; the Activity's heartbeat details
//! ([`CallHeartbeat`]) carry the upstream's latest progress ([`ToolProgress`]). Callers read
//! both to forward progress (R-CON-10) and to find the Activity again (R-PRX-3, R-PRX-9).

use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::Payload;

/// The async operation token of a tool call: finds the activity again on cancel, and tells
/// tools (such as the conformance runner) which activity runs a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallToken {
    pub activity_id: String,
    pub run_id: String,
}

/// The id of the standalone Activity that runs one call of `tool` on `service` (R-PRX-3): derived
/// from the Nexus request id, so a retried start finds the same Activity.
pub fn call_activity_id(service: &str, tool: &str, request_id: &str) -> String {
    format!("mcp/{service}/{tool}/{request_id}")
}

impl CallToken {
    /// The call named by an operation token; `None` for operations that are not
    /// Activity-backed tool calls (or have not started yet).
    pub fn parse(operation_token: &str) -> Option<Self> {
        serde_json::from_str(operation_token).ok()
    }

    /// Whether this token names a call of `tool` on `service`; `None` when its Activity id is
    /// not one of [`call_activity_id`]'s, so nothing can be said.
    pub fn is_call_of(&self, service: &str, tool: &str) -> Option<bool> {
        if !self.activity_id.starts_with("mcp/") {
            return None;
        }
        Some(
            self.activity_id
                .starts_with(&call_activity_id(service, tool, "")),
        )
    }
}

/// A tool's progress as the upstream reported it (`notifications/progress`), without the
/// upstream's token: what the proxy records in the call's heartbeat details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a tool-call activity's heartbeat details hold (one `json/plain` payload).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallHeartbeat {
    /// The upstream's latest `notifications/progress` for this call, if it sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ToolProgress>,
}

/// The async operation token of a Workflow-backed tool call (a native tool service, R-NAT-4):
/// finds the Workflow again on cancel, and tells callers where the call's progress is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowCallToken {
    pub workflow_id: String,
    pub run_id: String,
}

impl WorkflowCallToken {
    /// The Workflow named by an operation token; `None` for any other token.
    pub fn parse(operation_token: &str) -> Option<Self> {
        serde_json::from_str(operation_token).ok()
    }
}

/// Memo key under which a Workflow-backed tool's Workflow keeps its latest [`ToolProgress`]
/// (one `json/plain` payload): the Workflow's counterpart of a call Activity's heartbeat.
pub const PROGRESS_MEMO_KEY: &str = "io.durable-mcp/progress";

/// Payload metadata key on a tool call's result: the upstream's notifications for the call
/// ([`CallNotifications`], JSON), so a caller can replay what it could not read from heartbeats
/// (a call that ended before its first heartbeat was read) before the result (R-CON-10). In the
/// payload's metadata, not in the `CallToolResult`, so the result stays as the upstream wrote it.
pub const NOTIFICATIONS_METADATA_KEY: &str = "mcp-notifications";

/// At most this many notifications travel with a result; beyond it the latest one replaces
/// the last kept, so the caller still sees where the call ended.
pub const MAX_CARRIED_NOTIFICATIONS: usize = 200;

/// A log message the upstream sent while serving a call (`notifications/message`), as the proxy
/// attributed it to the call (R-PRX-10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLog {
    /// The MCP level name (`debug` .. `emergency`).
    pub level: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    pub data: serde_json::Value,
}

/// MCP's log levels, least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of an MCP log level in [`LOG_LEVELS`]; an unknown name ranks as `info`.
pub fn log_rank(level: &str) -> usize {
    LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(1)
}

/// One notification the upstream sent for a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallNotification {
    Progress(ToolProgress),
    Log(ToolLog),
}

/// The notifications the upstream sent while serving one call, in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallNotifications {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<CallNotification>,
}

impl CallNotifications {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Records one notification (see [`MAX_CARRIED_NOTIFICATIONS`]).
    pub fn push(&mut self, item: CallNotification) {
        if self.items.len() >= MAX_CARRIED_NOTIFICATIONS {
            self.items.pop();
        }
        self.items.push(item);
    }

    /// Writes these notifications into a result payload's metadata (nothing when empty).
    pub fn attach(&self, payload: &mut Payload) {
        if self.is_empty() {
            return;
        }
        if let Ok(json) = serde_json::to_vec(self) {
            payload
                .metadata
                .insert(NOTIFICATIONS_METADATA_KEY.to_owned(), json);
        }
    }

    /// The notifications a result payload carries (none when it carries none, or garbage).
    pub fn from_payload(payload: &Payload) -> Self {
        payload
            .metadata
            .get(NOTIFICATIONS_METADATA_KEY)
            .and_then(|json| serde_json::from_slice(json).ok())
            .unwrap_or_default()
    }

    /// What a caller gets replayed, in order: the progress it has not seen (`seen`: the last
    /// progress value it got live; MCP progress only increases) and the log messages at or
    /// above `min_level` (a rank in [`LOG_LEVELS`]; `None`: no log messages).
    pub fn replay(
        &self,
        seen: Option<f64>,
        min_level: Option<usize>,
    ) -> impl Iterator<Item = &CallNotification> {
        self.items.iter().filter(move |item| match item {
            CallNotification::Progress(p) => seen.is_none_or(|seen| p.progress > seen),
            CallNotification::Log(l) => min_level.is_some_and(|min| log_rank(&l.level) >= min),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(progress: f64) -> CallNotification {
        CallNotification::Progress(ToolProgress {
            progress,
            total: Some(100.0),
            message: None,
        })
    }

    fn log(level: &str) -> CallNotification {
        CallNotification::Log(ToolLog {
            level: level.into(),
            logger: None,
            data: serde_json::json!(level),
        })
    }

    fn kinds<'a>(items: impl Iterator<Item = &'a CallNotification>) -> Vec<String> {
        items
            .map(|i| match i {
                CallNotification::Progress(p) => p.progress.to_string(),
                CallNotification::Log(l) => l.level.clone(),
            })
            .collect()
    }

    #[test]
    fn notifications_travel_in_payload_metadata_and_replay_what_was_not_seen() {
        let mut carried = CallNotifications::default();
        let mut payload = Payload::default();
        carried.attach(&mut payload);
        assert!(
            payload.metadata.is_empty(),
            "nothing to carry, nothing added"
        );
        for item in [
            step(0.0),
            log("debug"),
            step(50.0),
            log("error"),
            step(100.0),
        ] {
            carried.push(item);
        }
        carried.attach(&mut payload);
        let back = CallNotifications::from_payload(&payload);
        assert_eq!(back, carried);
        assert_eq!(kinds(back.replay(None, None)), ["0", "50", "100"]);
        assert_eq!(
            kinds(back.replay(Some(50.0), Some(log_rank("warning")))),
            ["error", "100"]
        );
        assert_eq!(
            kinds(back.replay(None, Some(log_rank("debug")))),
            ["0", "debug", "50", "error", "100"]
        );
        assert_eq!(back.replay(Some(100.0), None).count(), 0);
        assert_eq!(
            CallNotifications::from_payload(&Payload::default()),
            CallNotifications::default()
        );
    }

    #[test]
    fn carried_notifications_are_capped_and_keep_the_latest() {
        let mut carried = CallNotifications::default();
        for p in 0..(MAX_CARRIED_NOTIFICATIONS + 20) {
            carried.push(step(p as f64));
        }
        assert_eq!(carried.items.len(), MAX_CARRIED_NOTIFICATIONS);
        assert_eq!(
            carried.items.last(),
            Some(&step((MAX_CARRIED_NOTIFICATIONS + 19) as f64))
        );
    }

    #[test]
    fn log_levels_rank_in_mcp_order() {
        assert!(log_rank("debug") < log_rank("info"));
        assert!(log_rank("warning") < log_rank("error"));
        assert_eq!(log_rank("emergency"), 7);
        assert_eq!(log_rank("whatever"), log_rank("info"));
    }
    #[test]
    fn tokens_round_trip_and_other_tokens_are_not_calls() {
        let token = CallToken {
            activity_id: "mcp/s/t/r".into(),
            run_id: "run".into(),
        };
        let text = serde_json::to_string(&token).unwrap();
        assert_eq!(CallToken::parse(&text), Some(token));
        assert_eq!(CallToken::parse("wf-123"), None);
        assert_eq!(CallToken::parse(""), None);
    }

    #[test]
    fn tokens_say_which_tool_they_call() {
        let token = CallToken {
            activity_id: call_activity_id("svc", "echo", "req-1"),
            run_id: "run".into(),
        };
        assert_eq!(token.activity_id, "mcp/svc/echo/req-1");
        assert_eq!(token.is_call_of("svc", "echo"), Some(true));
        assert_eq!(token.is_call_of("svc", "ech"), Some(false));
        assert_eq!(token.is_call_of("other", "echo"), Some(false));
        let foreign = CallToken {
            activity_id: "wf-123".into(),
            run_id: "run".into(),
        };
        assert_eq!(foreign.is_call_of("svc", "echo"), None);
    }

    #[test]
    fn workflow_tokens_and_activity_tokens_never_pass_for_each_other() {
        let wf = WorkflowCallToken {
            workflow_id: "mcp/s/t/r".into(),
            run_id: "run".into(),
        };
        let text = serde_json::to_string(&wf).unwrap();
        assert_eq!(WorkflowCallToken::parse(&text), Some(wf));
        assert_eq!(CallToken::parse(&text), None);
        let activity = serde_json::to_string(&CallToken {
            activity_id: "a".into(),
            run_id: "r".into(),
        })
        .unwrap();
        assert_eq!(WorkflowCallToken::parse(&activity), None);
    }

    #[test]
    fn heartbeat_without_progress_is_an_empty_object() {
        assert_eq!(
            serde_json::to_value(CallHeartbeat::default()).unwrap(),
            serde_json::json!({})
        );
    }
}
