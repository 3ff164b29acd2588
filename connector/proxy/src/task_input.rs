//! An upstream task that asks for input (R-PRX-28, R-PRX-29): when a followed task of the tasks
//! extension reads `input_required`, the round ends as for an `InputRequiredResult`, with the
//! task's `inputRequests` and a `requestState` of the proxy's own naming the task and the
//! connection that made it. The next round brings that state back with the answers: it sends
//! `tasks/update` to that task instead of calling the tool again.
//!
//! The state is the proxy's, so it is checked before anything is sent: its shape, that it names
//! this call's service and tool, and that it was made for these arguments (a fingerprint: a
//! round's arguments are the first round's, R-PRX-29). The connector passes only the state its
//! round recorded (R-CON-40); these checks keep a state of another tool or call from reaching
//! an upstream task. The origin is checked against the connection at hand by the Activity.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// What every state the proxy makes starts with: an upstream's own state never does (it would
/// have to copy ours), and one that does and is not valid is refused.
pub const TASK_STATE_PREFIX: &str = "durable-mcp-upstream-task.v1.";

/// The upstream task a round ended waiting on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitingTask {
    pub service: String,
    pub tool: String,
    /// The fingerprint of the arguments the round called with ([`arguments_fingerprint`]).
    pub arguments: String,
    #[serde(rename = "taskId")]
    pub task_id: String,
    /// The upstream connection that made the task (R-PRX-28).
    pub origin: String,
}

impl WaitingTask {
    /// The `requestState` naming this task.
    pub fn request_state(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{TASK_STATE_PREFIX}{json}")
    }

    /// The round's answer: an `InputRequiredResult` with the task's `inputRequests` and this
    /// task's `requestState`, which the connector shows its caller as any (R-PRX-29).
    pub fn input_required(&self, input_requests: &Map<String, Value>) -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": input_requests,
            "requestState": self.request_state(),
        })
    }
}

/// The task a round's `requestState` names, when the proxy made it: `None` for an upstream's
/// own state (the round calls the tool again with it); an error, and nothing is sent, for a
/// state of ours that is broken or was not made for this call of `tool` on `service` with
/// `arguments`.
pub fn waiting_task(
    state: &str,
    service: &str,
    tool: &str,
    arguments: &Map<String, Value>,
) -> Option<Result<WaitingTask, String>> {
    let json = state.strip_prefix(TASK_STATE_PREFIX)?;
    let refused = |why: &str| {
        Some(Err(format!(
            "the round's requestState names an upstream task {why}; call tool {tool:?} again without inputResponses and requestState"
        )))
    };
    let Ok(task) = serde_json::from_str::<WaitingTask>(json) else {
        return refused("in a form this proxy never writes");
    };
    if task.service != service || task.tool != tool {
        return refused("of another tool");
    }
    if task.task_id.is_empty() || task.origin.is_empty() {
        return refused("without its ID or connection");
    }
    if task.arguments != arguments_fingerprint(arguments) {
        return refused("that a call with other arguments made");
    }
    Some(Ok(task))
}

/// The upstream task to send `tasks/cancel` when a cancel took the round after one that waits
/// for input (the marker operation, R-CON-46): the task the waiting round's `requestState`
/// names, when it is the proxy's state for `service` with an ID and a connection. `None` for
/// an upstream's own state, none, or one of another service or form: nothing is sent. The
/// marker names no tool, so the tool and arguments are not checked: the connector writes the
/// marker's input only from the round's recorded outcome (R-CON-40).
pub fn task_to_cancel(state: Option<&str>, service: &str) -> Option<WaitingTask> {
    let json = state?.strip_prefix(TASK_STATE_PREFIX)?;
    let task = serde_json::from_str::<WaitingTask>(json).ok()?;
    let named = task.service == service && !task.task_id.is_empty() && !task.origin.is_empty();
    named.then_some(task)
}

/// A fingerprint of a call's arguments (64-bit FNV-1a of their JSON, in hex): stable across
/// processes and versions, which a state read by another replica needs. Not a secret: it ties a
/// state to its call, it does not authenticate it.
pub fn arguments_fingerprint(arguments: &Map<String, Value>) -> String {
    let json = serde_json::to_string(arguments).unwrap_or_default();
    let hash = json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(key: &str) -> Map<String, Value> {
        json!({"key": key, "depth": 2})
            .as_object()
            .cloned()
            .unwrap()
    }

    fn task(args: &Map<String, Value>) -> WaitingTask {
        WaitingTask {
            service: "mock".into(),
            tool: "research".into(),
            arguments: arguments_fingerprint(args),
            task_id: "t-1".into(),
            origin: "stdio:abc".into(),
        }
    }

    #[test]
    fn an_upstream_tasks_request_state_is_read_back_only_by_a_round_of_its_call() {
        let args = arguments("k");
        let made = task(&args);
        let state = made.request_state();
        assert!(state.starts_with(TASK_STATE_PREFIX));
        assert_eq!(
            waiting_task(&state, "mock", "research", &args),
            Some(Ok(made.clone()))
        );
        // A fixed function of the JSON (FNV-1a of `{}`), on every replica and version.
        assert_eq!(arguments_fingerprint(&Map::new()), "08f44b07b5901a25");
        // Another tool, service, call or shape: refused, naming what to do, nothing sent.
        let forged = format!("{TASK_STATE_PREFIX}{{\"taskId\": \"7\"}}");
        let mut empty = made.clone();
        empty.origin.clear();
        let empty = empty.request_state();
        for (state, service, tool, args) in [
            (&state, "mock", "other", &args),
            (&state, "other", "research", &args),
            (&state, "mock", "research", &arguments("another call")),
            (&forged, "mock", "research", &args),
            (&empty, "mock", "research", &args),
        ] {
            let refused = waiting_task(state, service, tool, args);
            let Some(Err(why)) = refused else {
                panic!("{state} read for {service}/{tool}: {refused:?}")
            };
            assert!(why.contains("again without inputResponses"), "{why}");
        }
        // An upstream's own state is not the proxy's: the round calls the tool with it.
        assert_eq!(
            waiting_task("mock-upstream-state:confirm", "mock", "research", &args),
            None
        );
    }

    #[test]
    fn a_cancel_while_waiting_cancels_only_the_task_its_rounds_state_names_for_this_service() {
        let made = task(&arguments("k"));
        let state = made.request_state();
        assert_eq!(task_to_cancel(Some(&state), "mock"), Some(made.clone()));
        let mut empty = made.clone();
        empty.task_id.clear();
        let empty = empty.request_state();
        let forged = format!("{TASK_STATE_PREFIX}{{\"taskId\": \"7\"}}");
        for (state, service) in [
            (Some(state.as_str()), "other"),
            (Some(empty.as_str()), "mock"),
            (Some(forged.as_str()), "mock"),
            (Some("mock-upstream-state:confirm"), "mock"),
            (None, "mock"),
        ] {
            assert_eq!(
                task_to_cancel(state, service),
                None,
                "{state:?} on {service}"
            );
        }
    }

    #[test]
    fn a_waiting_tasks_round_answer_asks_what_the_task_asks() {
        let requests = json!({"confirm": {"method": "elicitation/create", "params": {}}});
        let waiting = task(&arguments("k"));
        let asked = waiting.input_required(requests.as_object().unwrap());
        assert_eq!(asked["resultType"], "input_required");
        assert_eq!(asked["inputRequests"], requests);
        assert_eq!(asked["requestState"], waiting.request_state());
        assert!(durable_mcp_contract::input::is_input_required(&asked));
    }
}
