//! What a call may become, by what the connector offers for its tool (R-CON-39). The task is
//! the connector's, kept in Temporal: any routed tool may become one, whatever its upstream
//! lists, unless the operator keeps it synchronous (the route's `synchronous` key) or mirrors
//! the upstream's declarations (`task_support: mirror`). Only the upstream's `required` always
//! stands: the upstream runs that tool as its own task, which the proxy follows (R-PRX-28).
//! A `forbidden` offer never becomes a task, a `required` one always does (a caller that cannot
//! follow a task gets -32021 before anything runs), and for an `optional` one the connector's
//! `--task-after` rule decides.

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use serde_json::{Map, Value};

use crate::route::{RouteTasks, TaskSupportSource};

/// A tool's task support, as MCP 2025-11-25 names its values (`execution.taskSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskSupport {
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    /// What the connector offers for the listed `tool` of a route with `tasks`: `required` when
    /// the upstream requires it; else `forbidden` when the route keeps it synchronous; else, with
    /// `task_support: mirror`, the upstream's own word read as 2025-11-25 reads it (absent or
    /// unknown means `forbidden`); else `optional`.
    pub(crate) fn offered(tool: &Value, tasks: &RouteTasks) -> Self {
        let declared = tool
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str);
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        match (declared, tasks.support) {
            (Some("required"), _) => Self::Required,
            _ if tasks.synchronous.includes(name) => Self::Forbidden,
            (_, TaskSupportSource::Connector) | (Some("optional"), TaskSupportSource::Mirror) => {
                Self::Optional
            }
            (_, TaskSupportSource::Mirror) => Self::Forbidden,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Forbidden => "forbidden",
            Self::Optional => "optional",
            Self::Required => "required",
        }
    }
}

/// Whether a caller speaking `version` reads a tool's `execution.taskSupport`: only MCP
/// 2025-11-25 defines it (earlier versions have no `execution`, and 2026-07-28 with the tasks
/// extension has no per-tool task support: the server decides per call). A caller whose
/// version is not known is taken for a 2025-11-25 one.
pub(crate) fn reads_task_support(version: Option<&ProtocolVersion>) -> bool {
    version.is_none_or(|v| *v == ProtocolVersion::V_2025_11_25)
}

/// A routed tool as the connector lists it (R-CON-39, R-CON-12): as the tool service wrote it,
/// with `execution.taskSupport` = `offer` for a caller that reads it, and without it (and
/// without `execution` when nothing else was in it) for one that does not; other `execution`
/// keys kept.
pub(crate) fn as_listed(mut tool: Value, offer: TaskSupport, reads: bool) -> Value {
    let Value::Object(object) = &mut tool else {
        return tool;
    };
    if reads {
        let execution = object
            .entry("execution")
            .or_insert_with(|| Value::Object(Map::new()));
        if !execution.is_object() {
            *execution = Value::Object(Map::new());
        }
        if let Value::Object(execution) = execution {
            execution.insert("taskSupport".into(), Value::from(offer.as_str()));
        }
    } else if let Some(Value::Object(execution)) = object.get_mut("execution") {
        execution.remove("taskSupport");
        if execution.is_empty() {
            object.remove("execution");
        }
    }
    tool
}

/// Who is calling, as far as tasks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Caller {
    /// Declared the tasks extension.
    Tasks,
    /// No tasks extension, but the connector serves the companion tools (R-CON-11).
    Companion,
    /// Neither: it can only wait.
    Waits,
}

/// How a call is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// The caller waits for the result, however long the call runs.
    Wait,
    /// A task at once, without waiting for the result.
    TaskNow,
    /// The result if the call ends within `after`, else a task.
    TaskAfter(Duration),
    /// The result if the call ends within `after`, else a companion task ID (R-CON-11).
    CompanionAfter(Duration),
    /// Refused before anything starts: the tool runs only as a task, and this caller cannot
    /// follow one (-32021).
    NeedsTasks,
}

/// The plan for a call of a tool with `support` by `caller`, under `--task-after`.
pub(super) fn plan(support: TaskSupport, caller: Caller, task_after: Duration) -> Plan {
    match (support, caller) {
        (TaskSupport::Forbidden, _) => Plan::Wait,
        (TaskSupport::Required, Caller::Tasks) => Plan::TaskNow,
        (TaskSupport::Required, _) => Plan::NeedsTasks,
        (TaskSupport::Optional, Caller::Tasks) => Plan::TaskAfter(task_after),
        (TaskSupport::Optional, Caller::Companion) => Plan::CompanionAfter(task_after),
        (TaskSupport::Optional, Caller::Waits) => Plan::Wait,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_the_connector_offers_decides_what_a_call_becomes() {
        use Caller::*;
        use TaskSupport::*;
        let after = Duration::from_secs(2);
        let table = [
            (Forbidden, Tasks, Plan::Wait),
            (Forbidden, Companion, Plan::Wait),
            (Forbidden, Waits, Plan::Wait),
            (Required, Tasks, Plan::TaskNow),
            (Required, Companion, Plan::NeedsTasks),
            (Required, Waits, Plan::NeedsTasks),
            (Optional, Tasks, Plan::TaskAfter(after)),
            (Optional, Companion, Plan::CompanionAfter(after)),
            (Optional, Waits, Plan::Wait),
        ];
        for (support, caller, expected) in table {
            assert_eq!(
                plan(support, caller, after),
                expected,
                "{support:?} {caller:?}"
            );
        }
    }

    #[test]
    fn the_connector_offers_tasks_unless_the_route_says_otherwise() {
        use crate::route::Synchronous;
        let tool = |support: Option<&str>| match support {
            Some(s) => json!({"name": "t", "execution": {"taskSupport": s}}),
            None => json!({"name": "t"}),
        };
        let declared = [
            None,
            Some("forbidden"),
            Some("optional"),
            Some("required"),
            Some("sometimes"),
        ];
        let connector = RouteTasks::default();
        let mirror = RouteTasks {
            support: TaskSupportSource::Mirror,
            ..RouteTasks::default()
        };
        let kept = |synchronous| RouteTasks {
            synchronous,
            ..RouteTasks::default()
        };
        let named = kept(Synchronous::Tools(["t".to_owned()].into()));
        let other = kept(Synchronous::Tools(["u".to_owned()].into()));
        use TaskSupport::*;
        // (route, what the connector offers for each declaration above, in order)
        let table = [
            (
                &connector,
                [Optional, Optional, Optional, Required, Optional],
            ),
            (
                &mirror,
                [Forbidden, Forbidden, Optional, Required, Forbidden],
            ),
            (
                &kept(Synchronous::All),
                [Forbidden, Forbidden, Forbidden, Required, Forbidden],
            ),
            (
                &named,
                [Forbidden, Forbidden, Forbidden, Required, Forbidden],
            ),
            (&other, [Optional, Optional, Optional, Required, Optional]),
        ];
        for (tasks, offers) in table {
            for (support, offer) in declared.into_iter().zip(offers) {
                assert_eq!(
                    TaskSupport::offered(&tool(support), tasks),
                    offer,
                    "{support:?} {tasks:?}"
                );
            }
        }
    }

    #[test]
    fn only_a_2025_11_25_caller_reads_task_support() {
        assert!(reads_task_support(Some(&ProtocolVersion::V_2025_11_25)));
        assert!(reads_task_support(None));
        for v in [
            ProtocolVersion::V_2024_11_05,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2026_07_28,
        ] {
            assert!(!reads_task_support(Some(&v)), "{v}");
        }
    }

    #[test]
    fn listed_tools_say_what_the_connector_offers() {
        let offers = [
            TaskSupport::Forbidden,
            TaskSupport::Optional,
            TaskSupport::Required,
        ];
        for offer in offers {
            for upstream in ["forbidden", "required", "optional", "sometimes"] {
                let tool = json!({"name": "t", "execution": {"taskSupport": upstream, "other": 1}});
                assert_eq!(
                    as_listed(tool.clone(), offer, true),
                    json!({"name": "t", "execution": {"taskSupport": offer.as_str(), "other": 1}})
                );
                assert_eq!(
                    as_listed(tool, offer, false),
                    json!({"name": "t", "execution": {"other": 1}})
                );
            }
            assert_eq!(
                as_listed(json!({"name": "t"}), offer, true)["execution"],
                json!({"taskSupport": offer.as_str()})
            );
            assert_eq!(
                as_listed(json!({"name": "t", "execution": 3}), offer, true)["execution"],
                json!({"taskSupport": offer.as_str()})
            );
            let bare = json!({"name": "t", "execution": {"taskSupport": "forbidden"}});
            assert_eq!(as_listed(bare, offer, false), json!({"name": "t"}));
            assert_eq!(
                as_listed(json!({"name": "t"}), offer, false),
                json!({"name": "t"})
            );
        }
    }
}
