//! `resultType` on every answer to a 2026-07-28 request (R-CON-48): the 2026-07-28 schema's
//! `Result` requires it (`complete`, `input_required`, or the tasks extension's `task`), and
//! earlier versions do not know it. rmcp writes it from the typed answer: its constructors set
//! `complete`, and its handler strips `complete` for a peer of an earlier version. A feature
//! answer (R-CON-45) is read from the JSON a route wrote, which an upstream of an earlier version
//! (or one that leaves it out) writes without one, so the typed answer is read as `complete`
//! there, which is what an absent `resultType` means.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A result as rmcp's typed answer, read from the JSON `written` as a route wrote it: without a
/// `resultType` it is a complete one (the schema's reading of an absent field), so rmcp writes
/// `resultType: "complete"` for a 2026-07-28 peer and nothing for an earlier one.
pub fn typed_result<T: DeserializeOwned>(written: &Value) -> serde_json::Result<T> {
    let mut typed = written.clone();
    if let Value::Object(fields) = &mut typed {
        fields
            .entry("resultType")
            .or_insert_with(|| Value::from("complete"));
    }
    serde_json::from_value(typed)
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        CallToolResult, CompleteResult, CreateTaskResult, DetailedTask, DiscoverResult,
        GetPromptResult, GetTaskResult, InputRequiredResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, ServerCapabilities,
        ServerResult, SubscriptionsListenResult, Task, TaskPayload, TaskStatus,
    };
    use serde_json::json;

    use super::*;
    use crate::server::as_written::{feature_written, written_result};

    /// The answer rmcp writes for `typed` to a peer of 2026-07-28 (`current`) or an earlier
    /// version, as its handler prepares it.
    fn as_rmcp_writes(mut typed: ServerResult, current: bool) -> Value {
        if current {
            typed.fill_missing_cache_hints();
        } else {
            typed.strip_result_type_for_legacy_peer();
        }
        serde_json::to_value(typed).unwrap()
    }

    /// What a route writes for each feature method, without `resultType`, and the typed answer
    /// the connector reads from it.
    #[allow(clippy::type_complexity)]
    fn feature_answers() -> Vec<(&'static str, Value, fn(&Value) -> ServerResult)> {
        vec![
            (
                "resources/list",
                json!({"resources": [{"uri": "u", "name": "n"}]}),
                |w| {
                    ServerResult::ListResourcesResult(
                        typed_result::<ListResourcesResult>(w).unwrap(),
                    )
                },
            ),
            (
                "resources/templates/list",
                json!({"resourceTemplates": []}),
                |w| {
                    let typed = typed_result::<ListResourceTemplatesResult>(w).unwrap();
                    ServerResult::ListResourceTemplatesResult(typed)
                },
            ),
            (
                "resources/read",
                json!({"contents": [{"uri": "u", "text": "t"}]}),
                |w| {
                    ServerResult::ReadResourceResult(typed_result::<ReadResourceResult>(w).unwrap())
                },
            ),
            ("prompts/list", json!({"prompts": [{"name": "p"}]}), |w| {
                ServerResult::ListPromptsResult(typed_result::<ListPromptsResult>(w).unwrap())
            }),
            ("prompts/get", json!({"messages": []}), |w| {
                ServerResult::GetPromptResult(typed_result::<GetPromptResult>(w).unwrap())
            }),
            (
                "completion/complete",
                json!({"completion": {"values": ["a"]}}),
                |w| ServerResult::CompleteResult(typed_result::<CompleteResult>(w).unwrap()),
            ),
        ]
    }

    #[test]
    fn a_feature_answer_written_without_a_result_type_is_complete_to_a_current_peer_only() {
        for (method, written, typed) in feature_answers() {
            for current in [true, false] {
                let rmcp = as_rmcp_writes(typed(&written), current);
                let answer = written_result(&rmcp, feature_written(written.clone())).unwrap();
                let expected = current.then(|| json!("complete"));
                assert_eq!(answer.get("resultType"), expected.as_ref(), "{method}");
                let mut without = answer.clone();
                without.as_object_mut().unwrap().remove("resultType");
                for key in ["ttlMs", "cacheScope"] {
                    without.as_object_mut().unwrap().remove(key);
                }
                assert_eq!(without, written, "{method}: otherwise as written");
            }
        }
    }

    #[test]
    fn a_result_type_a_route_wrote_is_read_as_written() {
        let written = json!({"resultType": "complete", "prompts": []});
        let typed: ListPromptsResult = typed_result(&written).unwrap();
        assert_eq!(typed.result_type.unwrap().as_str(), "complete");
        let other = json!({"resultType": "something-new", "prompts": []});
        let typed: ListPromptsResult = typed_result(&other).unwrap();
        assert_eq!(typed.result_type.unwrap().as_str(), "something-new");
    }

    /// The answers the connector builds with rmcp's constructors, each with the `resultType` a
    /// 2026-07-28 peer must read: `server/discover`, a tool's result, an input request, a task
    /// created, read, updated or cancelled, and a `subscriptions/listen` stream's last answer.
    #[test]
    fn every_answer_built_for_a_current_peer_says_its_result_type() {
        let task = Task::new(
            "t",
            TaskStatus::Working,
            "2026-07-28T00:00:00Z",
            "2026-07-28T00:00:00Z",
        );
        let input: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required", "requestState": "s",
            "inputRequests": {"k": {"method": "roots/list"}}}))
        .unwrap();
        let answers = [
            (
                "server/discover",
                ServerResult::DiscoverResult(DiscoverResult::new(
                    vec![],
                    ServerCapabilities::default(),
                )),
                "complete",
            ),
            (
                "tools/call",
                ServerResult::CallToolResult(CallToolResult::success(vec![])),
                "complete",
            ),
            (
                "tools/call asking",
                ServerResult::InputRequiredResult(input),
                "input_required",
            ),
            (
                "tools/call as a task",
                ServerResult::CreateTaskResult(CreateTaskResult::new(task.clone())),
                "task",
            ),
            (
                "tasks/get",
                ServerResult::GetTaskResult(GetTaskResult::new(DetailedTask::new(
                    task,
                    TaskPayload::Working,
                ))),
                "complete",
            ),
            (
                "tasks/update, tasks/cancel",
                ServerResult::task_ack(()),
                "complete",
            ),
            (
                "subscriptions/listen",
                ServerResult::SubscriptionsListenResult(SubscriptionsListenResult::complete(
                    rmcp::model::RequestId::Number(1),
                )),
                "complete",
            ),
        ];
        for (method, typed, expected) in answers {
            let written = as_rmcp_writes(typed, true);
            assert_eq!(written["resultType"], expected, "{method}: {written}");
        }
    }
}
