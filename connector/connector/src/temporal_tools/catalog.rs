//! The toolset's tool definitions: names (as in the Temporal MCP server they mirror), input and
//! output JSON Schemas, and annotations that tell the truth about each tool (R-OPS-3).

use std::sync::Arc;

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

/// Who may call a tool, for inbound OAuth scopes (R-OPS-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolFamily {
    /// Reads Temporal state; changes nothing.
    Read,
    /// Starts, signals, cancels, creates or pauses: changes state, never destroys it.
    Write,
    /// Terminates or deletes: destroys work or configuration.
    Admin,
}

impl ToolFamily {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

/// One tool of the set.
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub family: ToolFamily,
    /// Repeating the call with the same arguments has no further effect.
    pub idempotent: bool,
    /// (name, JSON Schema, required) of each input besides `namespace`.
    pub inputs: Vec<(&'static str, Value, bool)>,
    /// (name, JSON Schema) of each output field; all are always present.
    pub outputs: Vec<(&'static str, Value)>,
}

impl ToolSpec {
    /// Read-only tools are exactly the read family; destructive ones exactly the admin family.
    pub fn annotations(&self) -> ToolAnnotations {
        let mut a = ToolAnnotations::with_title(self.title)
            .read_only(self.family == ToolFamily::Read)
            .open_world(false);
        if self.family != ToolFamily::Read {
            a = a
                .destructive(self.family == ToolFamily::Admin)
                .idempotent(self.idempotent);
        }
        a
    }

    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        properties.insert(
            "namespace".into(),
            json!({"type": "string", "description": "Temporal namespace; omit for the connector's own. Must be allowed by --allowed-namespaces."}),
        );
        let mut required = Vec::new();
        for (name, schema, req) in &self.inputs {
            properties.insert((*name).into(), schema.clone());
            if *req {
                required.push(json!(name));
            }
        }
        object_schema(properties, required)
    }

    pub fn output_schema(&self) -> Map<String, Value> {
        let properties: Map<String, Value> = self
            .outputs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect();
        let required = self.outputs.iter().map(|(n, _)| json!(n)).collect();
        object_schema(properties, required)
    }

    pub fn tool(&self) -> Tool {
        Tool::new(self.name, self.description, Arc::new(self.input_schema()))
            .with_title(self.title)
            .with_raw_output_schema(Arc::new(self.output_schema()))
            .with_annotations(self.annotations())
    }
}

fn object_schema(properties: Map<String, Value>, required: Vec<Value>) -> Map<String, Value> {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    schema
}

fn s(description: &str) -> Value {
    json!({"type": "string", "description": description})
}
fn int(description: &str, min: u64, max: u64, default: u64) -> Value {
    json!({"type": "integer", "description": description, "minimum": min, "maximum": max, "default": default})
}
fn args(description: &str) -> Value {
    json!({"type": "array", "description": description, "items": {}})
}
fn t(ty: &str) -> Value {
    json!({"type": ty})
}
fn nullable(ty: &str) -> Value {
    json!({"type": [ty, "null"]})
}

const WORKFLOW_ID: &str = "Workflow Id";
const RUN_ID: &str = "Run Id; omit for the latest run";

fn wf_inputs() -> Vec<(&'static str, Value, bool)> {
    vec![
        ("workflow_id", s(WORKFLOW_ID), true),
        ("run_id", s(RUN_ID), false),
    ]
}

fn with(
    mut base: Vec<(&'static str, Value, bool)>,
    more: Vec<(&'static str, Value, bool)>,
) -> Vec<(&'static str, Value, bool)> {
    base.extend(more);
    base
}

fn batch_outputs() -> Vec<(&'static str, Value)> {
    vec![
        ("namespace", t("string")),
        ("query", t("string")),
        ("matched", t("integer")),
        ("succeeded", t("integer")),
        ("failed", t("integer")),
        (
            "failures",
            json!({"type": "array", "items": {"type": "object"}}),
        ),
        ("truncated", t("boolean")),
    ]
}

fn batch_inputs() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "query",
            s(
                "Visibility query selecting the Workflows, e.g. WorkflowType = 'Order'; only Running ones are affected",
            ),
            true,
        ),
        (
            "batch_size",
            int("How many requests are in flight at once", 1, 100, 10),
            false,
        ),
        (
            "max_workflows",
            int(
                "At most this many Workflows are affected; the answer says when more matched",
                1,
                10_000,
                1000,
            ),
            false,
        ),
    ]
}

/// Every tool of the set, in listing order.
pub fn specs() -> Vec<ToolSpec> {
    use ToolFamily::*;
    let wf_out = || {
        vec![
            ("namespace", t("string")),
            ("workflow_id", t("string")),
            ("run_id", t("string")),
        ]
    };
    let extend = |mut v: Vec<(&'static str, Value)>, more: Vec<(&'static str, Value)>| {
        v.extend(more);
        v
    };
    let sched_out = |more: Vec<(&'static str, Value)>| {
        extend(
            vec![("namespace", t("string")), ("schedule_id", t("string"))],
            more,
        )
    };
    vec![
        ToolSpec {
            name: "start_workflow",
            title: "Start a Workflow",
            description: "Start a new Workflow execution of `workflow_type` on `task_queue` with JSON `args` (encoded through the codec when one is configured). Answers the run id; a Workflow id that is already running is an AlreadyExists error.",
            family: Write,
            idempotent: false,
            inputs: vec![
                ("workflow_type", s("Workflow type name"), true),
                (
                    "task_queue",
                    s("Task queue a worker for this type polls"),
                    true,
                ),
                (
                    "workflow_id",
                    s("Workflow Id; a random one when omitted"),
                    false,
                ),
                (
                    "args",
                    args("Workflow arguments, one JSON value each"),
                    false,
                ),
                (
                    "execution_timeout_seconds",
                    int("Execution timeout in seconds; 0 for none", 0, 31_536_000, 0),
                    false,
                ),
            ],
            outputs: extend(wf_out(), vec![("started", t("boolean"))]),
        },
        ToolSpec {
            name: "get_workflow_result",
            title: "Get a Workflow's result",
            description: "Wait up to `wait_seconds` for a Workflow to close and return its result (or failure). Follows continue-as-new to the last run unless a run_id is given. A Workflow still running is reported as RUNNING, not as an error.",
            family: Read,
            idempotent: true,
            inputs: with(
                wf_inputs(),
                vec![(
                    "wait_seconds",
                    int("How long to wait for the Workflow to close", 0, 300, 30),
                    false,
                )],
            ),
            outputs: extend(
                wf_out(),
                vec![
                    ("status", t("string")),
                    ("closed", t("boolean")),
                    ("result", json!({})),
                    ("failure", nullable("object")),
                ],
            ),
        },
        ToolSpec {
            name: "describe_workflow",
            title: "Describe a Workflow",
            description: "Status, type, task queue, timing, history length, parent and pending activities of a Workflow execution.",
            family: Read,
            idempotent: true,
            inputs: wf_inputs(),
            outputs: extend(
                wf_out(),
                vec![
                    ("workflow_type", t("string")),
                    ("status", t("string")),
                    ("task_queue", t("string")),
                    ("start_time", nullable("string")),
                    ("close_time", nullable("string")),
                    ("history_length", t("integer")),
                    ("parent", nullable("object")),
                    (
                        "pending_activities",
                        json!({"type": "array", "items": {"type": "object"}}),
                    ),
                ],
            ),
        },
        ToolSpec {
            name: "list_workflows",
            title: "List Workflows",
            description: "List Workflow executions matching a visibility query (e.g. ExecutionStatus = 'Running' AND WorkflowType = 'Order'), newest first, with `limit` and `skip` for paging. `history_length` is null for running Workflows (visibility records it at close; describe_workflow has the current one).",
            family: Read,
            idempotent: true,
            inputs: vec![
                ("query", s("Visibility query; empty lists all"), false),
                ("limit", int("How many to return", 1, 100, 10), false),
                (
                    "skip",
                    int("How many matches to skip (paging)", 0, 10_000, 0),
                    false,
                ),
            ],
            outputs: vec![
                ("namespace", t("string")),
                ("query", t("string")),
                (
                    "workflows",
                    json!({"type": "array", "items": {"type": "object"}}),
                ),
                ("count", t("integer")),
                ("has_more", t("boolean")),
            ],
        },
        ToolSpec {
            name: "get_workflow_history",
            title: "Get a Workflow's history",
            description: "The event history of a Workflow run (up to `max_events`). JSON payloads are shown as values; with a codec, failure messages and stack traces are decoded (inputs and results stay encoded: use get_workflow_event).",
            family: Read,
            idempotent: true,
            inputs: with(
                wf_inputs(),
                vec![(
                    "max_events",
                    int("At most this many events", 1, 10_000, 1000),
                    false,
                )],
            ),
            outputs: extend(
                wf_out(),
                vec![
                    (
                        "events",
                        json!({"type": "array", "items": {"type": "object"}}),
                    ),
                    ("count", t("integer")),
                    ("truncated", t("boolean")),
                ],
            ),
        },
        ToolSpec {
            name: "get_workflow_event",
            title: "Get one history event",
            description: "One event of a Workflow's history by `event_id`, with its payloads (inputs, results, failure details) decoded through the codec when one is configured.",
            family: Read,
            idempotent: true,
            inputs: with(
                wf_inputs(),
                vec![(
                    "event_id",
                    json!({"type": "integer", "minimum": 1, "description": "Event id (1 is WorkflowExecutionStarted)"}),
                    true,
                )],
            ),
            outputs: extend(wf_out(), vec![("event", t("object"))]),
        },
        ToolSpec {
            name: "query_workflow",
            title: "Query a Workflow",
            description: "Run a query handler of a Workflow and return its answer, without changing the Workflow. A worker must be running for the Workflow's task queue.",
            family: Read,
            idempotent: true,
            inputs: with(
                wf_inputs(),
                vec![
                    ("query_type", s("Query name"), true),
                    ("args", args("Query arguments, one JSON value each"), false),
                ],
            ),
            outputs: extend(
                wf_out(),
                vec![("query_type", t("string")), ("result", json!({}))],
            ),
        },
        ToolSpec {
            name: "signal_workflow",
            title: "Signal a Workflow",
            description: "Send a signal with JSON `args` to a running Workflow.",
            family: Write,
            idempotent: false,
            inputs: with(
                wf_inputs(),
                vec![
                    ("signal_name", s("Signal name"), true),
                    ("args", args("Signal arguments, one JSON value each"), false),
                ],
            ),
            outputs: extend(
                wf_out(),
                vec![("signal_name", t("string")), ("signalled", t("boolean"))],
            ),
        },
        ToolSpec {
            name: "cancel_workflow",
            title: "Request a Workflow's cancellation",
            description: "Request cancellation of a running Workflow. The Workflow decides how to handle it: the answer says whether it is already CANCELED or still running after `wait_seconds` (a cancel request is not a cancellation).",
            family: Write,
            idempotent: true,
            inputs: with(
                wf_inputs(),
                vec![
                    ("reason", s("Why, recorded in the history"), false),
                    (
                        "wait_seconds",
                        int(
                            "How long to watch for the Workflow to close before answering",
                            0,
                            60,
                            2,
                        ),
                        false,
                    ),
                ],
            ),
            outputs: extend(
                wf_out(),
                vec![
                    ("cancel_requested", t("boolean")),
                    ("status", t("string")),
                    ("cancelled", t("boolean")),
                ],
            ),
        },
        ToolSpec {
            name: "terminate_workflow",
            title: "Terminate a Workflow",
            description: "Forcefully terminate a running Workflow: no cleanup code runs. Use cancel_workflow to let it clean up.",
            family: Admin,
            idempotent: false,
            inputs: with(
                wf_inputs(),
                vec![("reason", s("Why, recorded in the history"), true)],
            ),
            outputs: extend(
                wf_out(),
                vec![("terminated", t("boolean")), ("status", t("string"))],
            ),
        },
        ToolSpec {
            name: "continue_as_new",
            title: "Ask a Workflow to continue as new",
            description: "Send the signal (default `continue_as_new`) with which a Workflow asks itself to continue as new with `args`; Temporal cannot force it from outside, so the Workflow must handle that signal. Answers whether a new run started within `wait_seconds`.",
            family: Write,
            idempotent: false,
            inputs: vec![
                ("workflow_id", s(WORKFLOW_ID), true),
                (
                    "signal_name",
                    s("The Workflow's continue-as-new signal; default continue_as_new"),
                    false,
                ),
                (
                    "args",
                    args("Signal arguments (the new input), one JSON value each"),
                    false,
                ),
                (
                    "wait_seconds",
                    int("How long to wait for the new run", 0, 60, 5),
                    false,
                ),
            ],
            outputs: vec![
                ("namespace", t("string")),
                ("workflow_id", t("string")),
                ("previous_run_id", t("string")),
                ("signal_name", t("string")),
                ("continued", t("boolean")),
                ("new_run_id", nullable("string")),
                ("status", t("string")),
            ],
        },
        ToolSpec {
            name: "batch_signal",
            title: "Signal many Workflows",
            description: "Send a signal to every Running Workflow matching a visibility query, `batch_size` requests at a time. Answers how many matched, succeeded and failed (with each failure).",
            family: Write,
            idempotent: false,
            inputs: with(
                batch_inputs(),
                vec![
                    ("signal_name", s("Signal name"), true),
                    ("args", args("Signal arguments, one JSON value each"), false),
                ],
            ),
            outputs: batch_outputs(),
        },
        ToolSpec {
            name: "batch_cancel",
            title: "Request cancellation of many Workflows",
            description: "Request cancellation of every Running Workflow matching a visibility query, `batch_size` requests at a time. Each Workflow decides how to handle its cancel request.",
            family: Write,
            idempotent: true,
            inputs: with(
                batch_inputs(),
                vec![("reason", s("Why, recorded in each history"), false)],
            ),
            outputs: batch_outputs(),
        },
        ToolSpec {
            name: "batch_terminate",
            title: "Terminate many Workflows",
            description: "Forcefully terminate every Running Workflow matching a visibility query, `batch_size` requests at a time. No cleanup code runs.",
            family: Admin,
            idempotent: false,
            inputs: with(
                batch_inputs(),
                vec![("reason", s("Why, recorded in each history"), true)],
            ),
            outputs: batch_outputs(),
        },
        ToolSpec {
            name: "create_schedule",
            title: "Create a schedule",
            description: "Create a schedule that starts `workflow_type` on `task_queue` at the times of one or more cron expressions (e.g. \"0 9 * * MON-FRI\", UTC).",
            family: Write,
            idempotent: false,
            inputs: vec![
                ("schedule_id", s("Schedule id"), true),
                (
                    "cron",
                    json!({"description": "Cron expression, or a list of them", "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
                    true,
                ),
                ("workflow_type", s("Workflow type to start"), true),
                ("task_queue", s("Task queue of the started Workflows"), true),
                (
                    "workflow_id",
                    s(
                        "Workflow id prefix of the started Workflows (Temporal appends the time); default the schedule id",
                    ),
                    false,
                ),
                (
                    "args",
                    args("Workflow arguments, one JSON value each"),
                    false,
                ),
                (
                    "paused",
                    json!({"type": "boolean", "description": "Create it paused", "default": false}),
                    false,
                ),
                ("note", s("A note shown with the schedule's state"), false),
            ],
            outputs: sched_out(vec![("created", t("boolean")), ("paused", t("boolean"))]),
        },
        ToolSpec {
            name: "list_schedules",
            title: "List schedules",
            description: "List schedules with their Workflow type, paused state, recent and upcoming actions, with `limit` and `skip` for paging.",
            family: Read,
            idempotent: true,
            inputs: vec![
                ("limit", int("How many to return", 1, 100, 10), false),
                (
                    "skip",
                    int("How many to skip (paging)", 0, 10_000, 0),
                    false,
                ),
            ],
            outputs: vec![
                ("namespace", t("string")),
                (
                    "schedules",
                    json!({"type": "array", "items": {"type": "object"}}),
                ),
                ("count", t("integer")),
                ("has_more", t("boolean")),
            ],
        },
        ToolSpec {
            name: "describe_schedule",
            title: "Describe a schedule",
            description: "A schedule's spec, action, state (paused, notes), recent actions, running Workflows and upcoming action times.",
            family: Read,
            idempotent: true,
            inputs: vec![("schedule_id", s("Schedule id"), true)],
            outputs: sched_out(vec![
                ("paused", t("boolean")),
                ("notes", t("string")),
                ("spec", t("object")),
                ("action", t("object")),
                ("action_count", t("integer")),
                (
                    "recent_actions",
                    json!({"type": "array", "items": {"type": "object"}}),
                ),
                (
                    "running_workflows",
                    json!({"type": "array", "items": {"type": "object"}}),
                ),
                (
                    "next_action_times",
                    json!({"type": "array", "items": {"type": "string"}}),
                ),
            ]),
        },
        ToolSpec {
            name: "pause_schedule",
            title: "Pause a schedule",
            description: "Pause a schedule: it starts nothing until unpaused.",
            family: Write,
            idempotent: true,
            inputs: vec![
                ("schedule_id", s("Schedule id"), true),
                ("note", s("Why, shown with the schedule's state"), false),
            ],
            outputs: sched_out(vec![("paused", t("boolean"))]),
        },
        ToolSpec {
            name: "unpause_schedule",
            title: "Unpause a schedule",
            description: "Resume a paused schedule.",
            family: Write,
            idempotent: true,
            inputs: vec![
                ("schedule_id", s("Schedule id"), true),
                ("note", s("Why, shown with the schedule's state"), false),
            ],
            outputs: sched_out(vec![("paused", t("boolean"))]),
        },
        ToolSpec {
            name: "delete_schedule",
            title: "Delete a schedule",
            description: "Permanently delete a schedule. Workflows it started keep running.",
            family: Admin,
            idempotent: false,
            inputs: vec![("schedule_id", s("Schedule id"), true)],
            outputs: sched_out(vec![("deleted", t("boolean"))]),
        },
        ToolSpec {
            name: "trigger_schedule",
            title: "Trigger a schedule now",
            description: "Start the schedule's action once, immediately (subject to its overlap policy).",
            family: Write,
            idempotent: false,
            inputs: vec![("schedule_id", s("Schedule id"), true)],
            outputs: sched_out(vec![("triggered", t("boolean"))]),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const SEED_NAMES: [&str; 21] = [
        "start_workflow",
        "get_workflow_result",
        "describe_workflow",
        "list_workflows",
        "get_workflow_history",
        "get_workflow_event",
        "query_workflow",
        "signal_workflow",
        "cancel_workflow",
        "terminate_workflow",
        "continue_as_new",
        "batch_signal",
        "batch_cancel",
        "batch_terminate",
        "create_schedule",
        "list_schedules",
        "describe_schedule",
        "pause_schedule",
        "unpause_schedule",
        "delete_schedule",
        "trigger_schedule",
    ];

    #[test]
    fn names_are_the_seed_tools_exactly_once() {
        let names: Vec<_> = specs().iter().map(|s| s.name).collect();
        assert_eq!(names, SEED_NAMES);
    }

    #[test]
    fn annotations_tell_the_truth() {
        let destructive: BTreeSet<_> = specs()
            .iter()
            .filter(|s| s.annotations().destructive_hint == Some(true))
            .map(|s| s.name)
            .collect();
        assert_eq!(
            destructive,
            BTreeSet::from(["terminate_workflow", "batch_terminate", "delete_schedule"])
        );
        for spec in specs() {
            let a = spec.annotations();
            let read = spec.family == ToolFamily::Read;
            assert_eq!(a.read_only_hint, Some(read), "{}", spec.name);
            assert_eq!(a.open_world_hint, Some(false), "{}", spec.name);
            if read {
                assert!(
                    spec.name.starts_with("get_")
                        || spec.name.starts_with("list_")
                        || spec.name.starts_with("describe_")
                        || spec.name == "query_workflow",
                    "{}",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn every_tool_takes_a_namespace_and_has_object_schemas() {
        for spec in specs() {
            let tool = spec.tool();
            assert_eq!(tool.input_schema["type"], "object");
            assert!(
                tool.input_schema["properties"].get("namespace").is_some(),
                "{}",
                spec.name
            );
            let out = tool.output_schema.expect("output schema");
            assert_eq!(out["type"], "object");
            assert!(
                !out["required"].as_array().unwrap().is_empty(),
                "{}",
                spec.name
            );
            let required: Vec<_> = tool.input_schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .collect();
            for r in required {
                assert!(
                    tool.input_schema["properties"]
                        .get(r.as_str().unwrap())
                        .is_some(),
                    "{}: {r}",
                    spec.name
                );
            }
        }
    }
}
