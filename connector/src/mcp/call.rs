//! What travels with a running tool call, between the tool service and its callers.
//!
//! A tool service answers a long call asynchronously with an operation token ([`CallToken`])
//! naming the standalone Activity that runs it; the Activity's heartbeat details
//! ([`CallHeartbeat`]) carry the upstream's latest progress ([`ToolProgress`]). Callers read
//! both to forward progress (R-CON-10) and to find the Activity again (R-PRX-3, R-PRX-9).

use serde::{Deserialize, Serialize};

/// The async operation token of a tool call: finds the activity again on cancel, and tells
/// tools (such as the conformance runner) which activity runs a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallToken {
    pub activity_id: String,
    pub run_id: String,
}

impl CallToken {
    /// The call named by an operation token; `None` for operations that are not
    /// Activity-backed tool calls (or have not started yet).
    pub fn parse(operation_token: &str) -> Option<Self> {
        serde_json::from_str(operation_token).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn heartbeat_without_progress_is_an_empty_object() {
        assert_eq!(
            serde_json::to_value(CallHeartbeat::default()).unwrap(),
            serde_json::json!({})
        );
    }
}
