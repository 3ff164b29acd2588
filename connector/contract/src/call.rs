//! What travels with a running tool call, between the tool service and its callers.
//!
//! A tool service answers a long call asynchronously with an operation token ([`CallToken`])
//! naming the standalone Activity that runs it; the Activity's heartbeat details
//! ([`CallHeartbeat`]) carry the upstream's latest progress ([`ToolProgress`]). Callers read
//! both to forward progress (R-CON-10) and to find the Activity again (R-PRX-3, R-PRX-9).

use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::Payload;

/// The Nexus header naming the caller a tool call is for: the connector's opaque, keyed name of
/// it (its share's caller key, an anonymous address as its own; else its scope's hash), never
/// the identity itself. The proxy gives a log message that names no request to the one call in
/// flight only when no other caller's call just ended (R-PRX-10).
pub const CALLER_HEADER: &str = "x-durable-mcp-caller";

/// The Nexus header naming the caller key of the caller a tool call is for (R-PRX-36: an IPv6
/// site as one caller, so its /64s cannot each take a turn): the call Activity's fairness key
/// (R-PRX-40). Without it (a connector from before), the proxy takes [`CALLER_HEADER`].
pub const CALLER_KEY_HEADER: &str = "x-durable-mcp-caller-key";

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

/// A JSON object of two strings, as serde writes a struct of them (serializing cannot fail).
fn two_strings(first: (&str, &str), second: (&str, &str)) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "{{{}:{},{}:{}}}",
        text(first.0),
        text(first.1),
        text(second.0),
        text(second.1)
    )
}

impl CallToken {
    /// The operation token: this, as JSON.
    pub fn to_token(&self) -> String {
        two_strings(("activity_id", &self.activity_id), ("run_id", &self.run_id))
    }

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
    /// The `seq` the next log message was to get when `progress` came: the log messages before
    /// it are those with a lower `seq`, so a reader keeps their order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_before_log: Option<u64>,
    /// The call's latest log messages, oldest first, numbered ([`ToolLog::seq`]): at most
    /// [`LIVE_LOGS`] of them and [`LIVE_LOG_BYTES`] of JSON (R-PRX-10, R-CON-13).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<ToolLog>,
    /// The upstream's own task the call continues as, once the upstream answered with one
    /// (R-PRX-28): a retried attempt follows this task instead of calling the tool again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_task: Option<String>,
    /// Which upstream connection made `upstream_task` (a stdio child's own random id, or an
    /// HTTP upstream's service): a task ID is only the upstream's own counter or name, so an
    /// attempt on another replica or after a child restart must not follow it (R-PRX-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_task_origin: Option<String>,
}

/// At most this many log messages ride in a heartbeat (the latest ones).
pub const LIVE_LOGS: usize = 32;
/// ... and at most this much of their JSON: a larger message is left to travel with the result.
pub const LIVE_LOG_BYTES: usize = 32 * 1024;

impl CallHeartbeat {
    /// Records the upstream's latest progress, after the log messages numbered below `next_log`.
    pub fn set_progress(&mut self, progress: ToolProgress, next_log: u64) {
        self.progress = Some(progress);
        self.progress_before_log = Some(next_log);
    }

    /// Adds a numbered log message, dropping the oldest beyond [`LIVE_LOGS`] and
    /// [`LIVE_LOG_BYTES`].
    pub fn push_log(&mut self, log: ToolLog) {
        self.logs.push(log);
        let size = |l: &ToolLog| serde_json::to_vec(l).map_or(usize::MAX, |j| j.len());
        let mut total: usize = self.logs.iter().map(size).fold(0, usize::saturating_add);
        while !self.logs.is_empty() && (self.logs.len() > LIVE_LOGS || total > LIVE_LOG_BYTES) {
            total = total.saturating_sub(size(&self.logs.remove(0)));
        }
    }

    /// Forgets what an earlier try reported (a retry within the attempt starts over), but not
    /// the upstream task the call follows. Whether anything changed.
    pub fn reset(&mut self) -> bool {
        let changed = self.progress.is_some() || !self.logs.is_empty();
        let upstream_task = self.upstream_task.take();
        *self = Self::default();
        self.upstream_task = upstream_task;
        changed
    }
}

/// The number of a call's `n`-th log message in attempt `attempt`: numbers only grow, across
/// attempts too, so a reader that got messages of one attempt takes the next attempt's from
/// its start.
pub fn log_seq(attempt: u32, n: u32) -> u64 {
    (u64::from(attempt) << 32) | u64::from(n)
}

/// Whether `seq` comes right after the messages a reader got, when it expects `next`: the next
/// number, or the first message of a later attempt.
fn follows(next: u64, seq: u64) -> bool {
    seq == next || (seq & 0xffff_ffff == 0 && seq >> 32 > next >> 32)
}

/// What a waiting caller has been sent of a call's notifications, so each reaches it once and in
/// order: live from heartbeats ([`LiveNotifications::from_heartbeat`]), the rest from the result
/// ([`LiveNotifications::replay`]). Log messages go live only while none is missed: when a
/// heartbeat no longer holds the next one (more than [`LIVE_LOGS`] came between two reads, or
/// one was too large), live log messages stop and the rest come, in order, with the result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveNotifications {
    /// The last progress the caller got.
    pub progress: Option<ToolProgress>,
    /// The `seq` of the next log message the caller is to get (`None`: none got yet).
    pub next_log: Option<u64>,
    /// Set once a log message was missed: no more live log messages.
    pub logs_stopped: bool,
}

impl LiveNotifications {
    /// What the caller gets from this heartbeat, in order: log messages it has not had (all of
    /// them counted; those at or above `min_level` sent), and the progress if it changed, placed
    /// among them where it came.
    pub fn from_heartbeat(
        &mut self,
        heartbeat: &CallHeartbeat,
        min_level: Option<usize>,
    ) -> Vec<CallNotification> {
        let mut out = Vec::new();
        let mut logs: Vec<&ToolLog> = Vec::new();
        if !self.logs_stopped {
            let fresh: Vec<&ToolLog> = heartbeat
                .logs
                .iter()
                .filter(|l| l.seq.is_some_and(|s| self.next_log.is_none_or(|n| s >= n)))
                .collect();
            if let Some(first) = fresh.first().and_then(|l| l.seq) {
                let in_order = match self.next_log {
                    Some(next) => follows(next, first),
                    None => first & 0xffff_ffff == 0,
                };
                if in_order {
                    logs = fresh;
                } else {
                    self.logs_stopped = true;
                }
            }
        }
        let changed = heartbeat.progress.is_some() && heartbeat.progress != self.progress;
        let progress_at = heartbeat.progress_before_log.unwrap_or(0);
        // The progress to send, until it is sent: only a changed one.
        let mut progress = heartbeat.progress.clone().filter(|_| changed);
        for log in logs {
            let seq = log.seq.unwrap_or_default();
            if seq >= progress_at
                && let Some(progress) = progress.take()
            {
                out.push(CallNotification::Progress(progress));
            }
            self.next_log = Some(seq + 1);
            if min_level.is_some_and(|min| log_rank(&log.level) >= min) {
                out.push(CallNotification::Log(log.clone()));
            }
        }
        if let Some(progress) = progress {
            out.push(CallNotification::Progress(progress));
        }
        if changed {
            self.progress = heartbeat.progress.clone();
        }
        out
    }

    /// What the caller gets replayed from the notifications that travelled with the result, in
    /// order: progress later than what it got live, log messages it has not had at or above
    /// `min_level` (`None`: no log messages).
    pub fn replay<'a>(
        &self,
        carried: &'a CallNotifications,
        min_level: Option<usize>,
    ) -> impl Iterator<Item = &'a CallNotification> {
        let seen = self.progress.as_ref().map(|p| p.progress);
        let next = self.next_log;
        carried
            .replay(seen, min_level)
            .filter(move |item| match item {
                CallNotification::Log(l) => next.is_none_or(|n| l.seq.is_none_or(|s| s >= n)),
                CallNotification::Progress(_) => true,
            })
    }
}

/// The async operation token of a Workflow-backed tool call (a native tool service, R-NAT-4):
/// finds the Workflow again on cancel, and tells callers where the call's progress is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowCallToken {
    pub workflow_id: String,
    pub run_id: String,
}

impl WorkflowCallToken {
    /// The operation token: this, as JSON.
    pub fn to_token(&self) -> String {
        two_strings(("workflow_id", &self.workflow_id), ("run_id", &self.run_id))
    }

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
    /// Its number among the call's log messages ([`log_seq`]), given by the proxy so a caller
    /// that got it live from a heartbeat is not sent it again with the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
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

    proptest::proptest! {
        /// Tokens are written as serde writes the structs, and read back, whatever the ids.
        #[test]
        fn tokens_are_serdes_json_and_read_back(a in ".*", b in ".*") {
            let call = CallToken { activity_id: a.clone(), run_id: b.clone() };
            proptest::prop_assert_eq!(call.to_token(), serde_json::to_string(&call).unwrap());
            proptest::prop_assert_eq!(CallToken::parse(&call.to_token()), Some(call));
            let workflow = WorkflowCallToken { workflow_id: a, run_id: b };
            proptest::prop_assert_eq!(workflow.to_token(), serde_json::to_string(&workflow).unwrap());
            proptest::prop_assert_eq!(WorkflowCallToken::parse(&workflow.to_token()), Some(workflow));
        }
    }

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
            seq: None,
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

    fn numbered(level: &str, seq: u64) -> ToolLog {
        ToolLog {
            level: level.into(),
            logger: None,
            data: serde_json::json!(seq),
            seq: Some(seq),
        }
    }

    fn progress(p: f64) -> ToolProgress {
        ToolProgress {
            progress: p,
            total: None,
            message: None,
        }
    }

    #[test]
    fn live_log_messages_go_once_in_order_with_progress_and_the_result_sends_the_rest() {
        let info = Some(log_rank("info"));
        let mut hb = CallHeartbeat::default();
        hb.push_log(numbered("info", log_seq(1, 0)));
        hb.set_progress(progress(10.0), log_seq(1, 1));
        hb.push_log(numbered("debug", log_seq(1, 1)));
        hb.push_log(numbered("warning", log_seq(1, 2)));
        let mut live = LiveNotifications::default();
        let sent = live.from_heartbeat(&hb, info);
        assert_eq!(
            kinds(sent.iter()),
            ["info", "10", "warning"],
            "in order, progress where it came, debug below the level"
        );
        assert!(live.from_heartbeat(&hb, info).is_empty(), "nothing twice");
        hb.push_log(numbered("error", log_seq(1, 3)));
        assert_eq!(kinds(live.from_heartbeat(&hb, info).iter()), ["error"]);

        // The result carries everything; the caller gets only what it has not had.
        let mut carried = CallNotifications::default();
        carried.push(CallNotification::Log(numbered("info", log_seq(1, 0))));
        carried.push(CallNotification::Progress(progress(10.0)));
        for (n, level) in [(1, "debug"), (2, "warning"), (3, "error"), (4, "critical")] {
            carried.push(CallNotification::Log(numbered(level, log_seq(1, n))));
        }
        carried.push(CallNotification::Progress(progress(20.0)));
        assert_eq!(kinds(live.replay(&carried, info)), ["critical", "20"]);
    }

    #[test]
    fn a_missed_log_message_stops_live_logs_and_the_result_sends_the_rest_in_order() {
        let all = Some(log_rank("debug"));
        let mut hb = CallHeartbeat::default();
        for n in 0..(LIVE_LOGS as u32 + 5) {
            hb.push_log(numbered("info", log_seq(1, n)));
        }
        assert_eq!(hb.logs.len(), LIVE_LOGS, "the heartbeat keeps the latest");
        let mut live = LiveNotifications::default();
        assert!(
            live.from_heartbeat(&hb, all).is_empty(),
            "the first five fell out"
        );
        assert!(live.logs_stopped);
        let mut carried = CallNotifications::default();
        for n in 0..(LIVE_LOGS as u32 + 5) {
            carried.push(CallNotification::Log(numbered("info", log_seq(1, n))));
        }
        assert_eq!(live.replay(&carried, all).count(), LIVE_LOGS + 5);

        // A later attempt's messages follow the earlier attempt's.
        let mut live = LiveNotifications::default();
        let mut first = CallHeartbeat::default();
        first.push_log(numbered("info", log_seq(1, 0)));
        assert_eq!(live.from_heartbeat(&first, all).len(), 1);
        let mut retry = CallHeartbeat::default();
        retry.push_log(numbered("info", log_seq(2, 0)));
        assert_eq!(live.from_heartbeat(&retry, all).len(), 1);
        assert!(!live.logs_stopped);

        // Too large to ride in a heartbeat: it falls out at once.
        let mut hb = CallHeartbeat::default();
        hb.push_log(ToolLog {
            data: serde_json::json!("x".repeat(LIVE_LOG_BYTES)),
            ..numbered("info", 0)
        });
        assert!(hb.logs.is_empty());
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
