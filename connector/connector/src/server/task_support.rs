//! What a call may become, by the upstream tool's own `execution.taskSupport` (R-CON-39): a
//! `forbidden` tool never becomes a task, a `required` one always does (and a caller that cannot
//! follow a task gets -32021 before anything runs), and for an `optional` one (or one that says
//! nothing) the connector's `--task-after` rule decides.

use std::time::Duration;

use serde_json::Value;

/// A tool's `execution.taskSupport`, as MCP names its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskSupport {
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    /// The listed tool's `execution.taskSupport`; `optional` when it says nothing (or something
    /// MCP does not define), so such a tool keeps the `--task-after` rule.
    pub(crate) fn of(tool: &Value) -> Self {
        match tool
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str)
        {
            Some("forbidden") => Self::Forbidden,
            Some("required") => Self::Required,
            _ => Self::Optional,
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
    fn the_upstream_tools_task_support_decides_what_a_call_becomes() {
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
    fn task_support_is_read_from_the_listing_and_defaults_to_optional() {
        let cases = [
            (
                json!({"execution": {"taskSupport": "forbidden"}}),
                TaskSupport::Forbidden,
            ),
            (
                json!({"execution": {"taskSupport": "required"}}),
                TaskSupport::Required,
            ),
            (
                json!({"execution": {"taskSupport": "optional"}}),
                TaskSupport::Optional,
            ),
            (
                json!({"execution": {"taskSupport": "sometimes"}}),
                TaskSupport::Optional,
            ),
            (json!({"execution": {}}), TaskSupport::Optional),
            (json!({"name": "t"}), TaskSupport::Optional),
        ];
        for (tool, expected) in cases {
            assert_eq!(TaskSupport::of(&tool), expected, "{tool}");
        }
        assert_eq!(TaskSupport::Required.as_str(), "required");
    }
}
