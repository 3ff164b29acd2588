//! An upstream task that asks for input (R-PRX-28, R-PRX-29, R-PRX-35): when a followed task of
//! the tasks extension reads `input_required`, the round ends as for an `InputRequiredResult`,
//! with the task's `inputRequests` and a `requestState` of the proxy's own naming the task and
//! the connection that made it. The next round brings that state back with the answers: it
//! sends `tasks/update` to that task instead of calling the tool again.
//!
//! Whoever may start operations on the proxy's endpoint may send any state, so a state is
//! honoured only when the proxy made it for this very call: it is signed with the proxy's state
//! key ([`StateKeys`]; a state the key does not verify names nothing), names this call's service
//! and tool, was made for these arguments, and was made by the round just before this one
//! ([`Round::follows`]: the round chain the connector names, R-PRX-29). The origin is checked
//! against the connection at hand by the Activity.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use crate::state_key::{STATE_KEY_ENV, StateKeys};
use durable_mcp_contract::input::{InputRequired, next_round_id};
use durable_mcp_contract::operation_name::tool_for_operation;
use durable_mcp_runtime::nexus::NexusLink;

/// What every state the proxy makes starts with, whatever its version: an upstream's own state
/// never does (it would have to copy ours), and one that does and is not valid is refused.
pub const TASK_STATE_PREFIX: &str = "durable-mcp-upstream-task.";
/// The form this build writes and reads: the prefix, `v2.`, then base64url of the
/// [`WaitingTask`]'s JSON, `.`, and its signature ([`StateKeys::sign`]). Earlier forms carry no
/// signature, and are refused.
const STATE_V2: &str = "durable-mcp-upstream-task.v2.";

/// The round an operation is, as the server names it in the start's Nexus link: a standalone
/// operation (the connector's rounds: `<first round's ID>~r<n>`, R-PRX-29), or a Nexus
/// operation of a Workflow (the in-Workflow client's rounds, one Workflow run).
///
/// The link is the caller's to write (a caller's `nexus-link` header takes its place), so the
/// round keeps a state in the call it was made for against callers that follow the protocol,
/// and against a replay in another call; a principal that can read every call's history can
/// read its arguments and results already (R-PRX-35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Round {
    Operation {
        namespace: String,
        id: String,
    },
    Workflow {
        namespace: String,
        id: String,
        run: String,
    },
}

impl Round {
    /// The round a start's links name, if any.
    pub fn of(links: &[NexusLink]) -> Option<Self> {
        links.iter().find_map(|link| Self::from_url(&link.url))
    }

    /// `temporal:///namespaces/<ns>/nexus-operations/<id>/<run>/details` or
    /// `temporal:///namespaces/<ns>/workflows/<id>/<run>/history?...`, segments percent-decoded.
    fn from_url(url: &str) -> Option<Self> {
        let url = url::Url::parse(url).ok()?;
        if url.scheme() != "temporal" {
            return None;
        }
        let decode = |s: &str| Some(percent_decode(s)?).filter(|s: &String| !s.is_empty());
        let segments: Vec<&str> = url.path_segments()?.collect();
        match segments.as_slice() {
            ["namespaces", ns, "nexus-operations", id, ..] => Some(Self::Operation {
                namespace: decode(ns)?,
                id: decode(id)?,
            }),
            ["namespaces", ns, "workflows", id, run, ..] => Some(Self::Workflow {
                namespace: decode(ns)?,
                id: decode(id)?,
                run: decode(run)?,
            }),
            _ => None,
        }
    }

    /// Whether `self` is the round right after `made`: the operation the connector starts for
    /// the answer to `made` (`next_round_id`), or an operation of the same Workflow run.
    pub fn follows(&self, made: &Round) -> bool {
        match (made, self) {
            (
                Self::Operation { namespace, id },
                Self::Operation {
                    namespace: here_ns,
                    id: here,
                },
            ) => namespace == here_ns && next_round_id(id).as_deref() == Some(here.as_str()),
            (made @ Self::Workflow { .. }, here @ Self::Workflow { .. }) => made == here,
            _ => false,
        }
    }
}

/// `%XX` escapes decoded; `None` for text that is not UTF-8 once decoded.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The upstream task a round ended waiting on, and the round that ended.
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
    /// The round that made the state; `None` for a start that named none (delivered by hand).
    pub round: Option<Round>,
}

impl WaitingTask {
    /// The `requestState` naming this task, signed with the current state key.
    pub fn request_state(&self, keys: &StateKeys) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(json);
        let signature = keys.sign(body.as_bytes());
        format!("{STATE_V2}{body}.{signature}")
    }

    /// The round's answer: an `InputRequiredResult` with the task's `inputRequests` and this
    /// task's `requestState`, which the connector shows its caller as any (R-PRX-29).
    pub fn input_required(&self, input_requests: &Map<String, Value>, keys: &StateKeys) -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": input_requests,
            "requestState": self.request_state(keys),
        })
    }
}

/// The round a state was brought back to: the call's service, tool and arguments, and the
/// round it is ([`Round::of`] its start's links).
pub struct RoundCall<'a> {
    pub service: &'a str,
    pub tool: &'a str,
    pub arguments: &'a Map<String, Value>,
    pub round: Option<&'a Round>,
}

/// The task a state of the proxy's form names, once its signature verifies; `None` for an
/// upstream's own state; an error saying why for one of ours that does not verify.
fn signed_task(state: &str, keys: &StateKeys) -> Option<Result<WaitingTask, String>> {
    let rest = state.strip_prefix(TASK_STATE_PREFIX)?;
    let Some(signed) = rest.strip_prefix("v2.") else {
        return Some(Err(
            "in a form this proxy no longer accepts (unsigned, from before R-PRX-35)".into(),
        ));
    };
    let unsigned = || {
        let hint = if keys.is_shared() {
            "that no state key of this proxy signed (forged, or signed with a key since retired)"
        } else {
            "that this process did not sign: it was made by another proxy worker or before a restart, and the workers share no state key (set {STATE_KEY_ENV} to the same key on every worker)"
        };
        Err(hint.replace("{STATE_KEY_ENV}", STATE_KEY_ENV))
    };
    let Some((body, signature)) = signed.split_once('.') else {
        return Some(unsigned());
    };
    if !keys.verify(body.as_bytes(), signature) {
        return Some(unsigned());
    }
    let task = URL_SAFE_NO_PAD
        .decode(body)
        .ok()
        .and_then(|json| serde_json::from_slice::<WaitingTask>(&json).ok());
    Some(task.ok_or_else(|| "in a form this proxy never writes".to_owned()))
}

/// The task a round's `requestState` names, when the proxy made it: `None` for an upstream's
/// own state (the round calls the tool again with it); an error, and nothing is sent, for a
/// state of ours that does not verify or was not made by the round before `call`.
pub fn waiting_task(
    state: &str,
    call: &RoundCall<'_>,
    keys: &StateKeys,
) -> Option<Result<WaitingTask, String>> {
    let tool = call.tool;
    let refused = |why: &str| {
        Some(Err(format!(
            "the round's requestState names an upstream task {why}; call tool {tool:?} again without inputResponses and requestState"
        )))
    };
    let task = match signed_task(state, keys)? {
        Ok(task) => task,
        Err(why) => return refused(&why),
    };
    if task.service != call.service || task.tool != call.tool {
        return refused("of another tool");
    }
    if task.task_id.is_empty() || task.origin.is_empty() {
        return refused("without its ID or connection");
    }
    if task.arguments != arguments_fingerprint(call.arguments) {
        return refused("that a call with other arguments made");
    }
    if !follows(call.round, task.round.as_ref()) {
        return refused("that another call, or another round of this one, made");
    }
    Some(Ok(task))
}

/// Whether the round `here` may answer a state made by `made`: the round right after it, or
/// both named by no link (starts delivered by hand, in tests).
fn follows(here: Option<&Round>, made: Option<&Round>) -> bool {
    match (here, made) {
        (Some(here), Some(made)) => here.follows(made),
        (None, None) => true,
        _ => false,
    }
}

/// The upstream task to send `tasks/cancel` when a cancel took the round after one that waits
/// for input (the marker operation, R-CON-46): the task the waiting round's `requestState`
/// names, when the proxy signed it for `service`, with an ID and a connection, and the marker
/// is the round right after the one that made it (the connector starts the marker with the
/// operation ID the answer would have had). `None` otherwise: nothing is sent. The marker
/// names no tool and carries no arguments, so those are not checked.
pub fn task_to_cancel(
    state: Option<&str>,
    service: &str,
    here: Option<&Round>,
    keys: &StateKeys,
) -> Option<WaitingTask> {
    let task = signed_task(state?, keys)?.ok()?;
    let named = task.service == service && !task.task_id.is_empty() && !task.origin.is_empty();
    (named && follows(here, task.round.as_ref())).then_some(task)
}

/// A partial round's input (R-CON-40) with the upstream task's state it keeps re-signed for
/// `here`, the partial round, when the proxy made it for the round before (R-PRX-35): the
/// tool's round after it then honours it, as it would the round right after the one that made
/// it. Any other state is left as it is (the tool's round judges it).
pub fn rebound_for_partial_round(
    mut asked: InputRequired,
    service: &str,
    here: Option<&Round>,
    keys: &StateKeys,
) -> InputRequired {
    let (Some(state), Some(operation)) = (asked.request_state(), asked.operation.as_deref()) else {
        return asked;
    };
    let tool = tool_for_operation(operation).unwrap_or_else(|| operation.to_owned());
    let call = RoundCall {
        service,
        tool: &tool,
        arguments: &asked.arguments,
        round: here,
    };
    if let Some(Ok(mut task)) = waiting_task(state, &call, keys) {
        task.round = here.cloned();
        if let Some(fields) = asked.result.as_object_mut() {
            fields.insert("requestState".into(), json!(task.request_state(keys)));
        }
    }
    asked
}

/// A fingerprint of a call's arguments (SHA-256 of their JSON, 128 bits in hex): the same on
/// every replica and version, which a state read by another replica needs. Not a secret: the
/// state's signature authenticates; this ties the state to its call's arguments.
pub fn arguments_fingerprint(arguments: &Map<String, Value>) -> String {
    let json = serde_json::to_string(arguments).unwrap_or_default();
    let digest = Sha256::digest(json.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_key::StateKey;

    fn arguments(key: &str) -> Map<String, Value> {
        json!({"key": key, "depth": 2})
            .as_object()
            .cloned()
            .unwrap()
    }

    fn keys() -> StateKeys {
        let key = StateKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        StateKeys::shared(key, vec![])
    }

    fn op(id: &str) -> Round {
        Round::Operation {
            namespace: "default".into(),
            id: id.into(),
        }
    }

    fn task(args: &Map<String, Value>) -> WaitingTask {
        WaitingTask {
            service: "mock".into(),
            tool: "research".into(),
            arguments: arguments_fingerprint(args),
            task_id: "t-1".into(),
            origin: "stdio:abc".into(),
            round: Some(op("conn-a-1")),
        }
    }

    fn call<'a>(tool: &'a str, args: &'a Map<String, Value>, round: &'a Round) -> RoundCall<'a> {
        RoundCall {
            service: "mock",
            tool,
            arguments: args,
            round: Some(round),
        }
    }

    #[test]
    fn an_upstream_tasks_request_state_is_read_back_only_by_the_next_round_of_its_call() {
        let (args, keys) = (arguments("k"), keys());
        let made = task(&args);
        let state = made.request_state(&keys);
        assert!(state.starts_with(STATE_V2));
        let next = op("conn-a-1~r2");
        assert_eq!(
            waiting_task(&state, &call("research", &args, &next), &keys),
            Some(Ok(made.clone()))
        );
        // A fixed function of the JSON, on every replica and version.
        assert_eq!(
            arguments_fingerprint(&Map::new()),
            "44136fa355b3678a1146ad16f7e8649e"
        );
        let other_args = arguments("another call");
        let (later, elsewhere) = (op("conn-a-1~r3"), op("conn-b-9~r2"));
        let wrong_ns = Round::Operation {
            namespace: "other".into(),
            id: "conn-a-1~r2".into(),
        };
        for (tool, args, round) in [
            ("other", &args, &next),
            ("research", &other_args, &next),
            ("research", &args, &later),
            ("research", &args, &elsewhere),
            ("research", &args, &wrong_ns),
        ] {
            let refused = waiting_task(&state, &call(tool, args, round), &keys);
            let Some(Err(why)) = refused else {
                panic!("{state} read for {tool} in {round:?}: {refused:?}")
            };
            assert!(why.contains("again without inputResponses"), "{why}");
        }
        let mut other_service = call("research", &args, &next);
        other_service.service = "other";
        assert!(matches!(
            waiting_task(&state, &other_service, &keys),
            Some(Err(_))
        ));
        // An upstream's own state is not the proxy's: the round calls the tool with it.
        assert_eq!(
            waiting_task(
                "mock-upstream-state:confirm",
                &call("research", &args, &next),
                &keys
            ),
            None
        );
    }

    /// R-CON-40, R-PRX-35: a partial round re-signs the upstream task's state it keeps for
    /// itself, so the tool's round after it reads it back; one it did not follow is left as is.
    #[test]
    fn a_partial_round_binds_the_waiting_tasks_state_to_itself() {
        let (args, keys) = (arguments("k"), keys());
        let state = task(&args).request_state(&keys);
        let partial = |state: &str| InputRequired {
            result: json!({"inputRequests": {"b": {}}, "requestState": state}),
            arguments: args.clone(),
            answered: json!({"a": {}}).as_object().unwrap().clone(),
            operation: Some("research".into()),
        };
        let (here, after) = (op("conn-a-1~r2"), op("conn-a-1~r3"));
        let rebound = rebound_for_partial_round(partial(&state), "mock", Some(&here), &keys);
        let kept = rebound.request_state().unwrap();
        assert_ne!(kept, state);
        let read = waiting_task(kept, &call("research", &args, &after), &keys);
        assert_eq!(read.unwrap().unwrap().round, Some(here.clone()));
        // The tool's round right after the partial one no longer reads the first state.
        assert!(matches!(
            waiting_task(&state, &call("research", &args, &after), &keys),
            Some(Err(_))
        ));
        // A partial round that is not the one after the state's round, or an upstream's own
        // state: unchanged.
        for (state, round) in [(state.as_str(), &after), ("upstream-own", &here)] {
            let same = rebound_for_partial_round(partial(state), "mock", Some(round), &keys);
            assert_eq!(same, partial(state));
        }
    }

    #[test]
    fn a_state_nobody_signed_names_no_task() {
        let (args, keys) = (arguments("k"), keys());
        let made = task(&args);
        let next = op("conn-a-1~r2");
        let signed = made.request_state(&keys);
        // What an earlier build wrote, and what a caller can write: unsigned JSON.
        let unsigned_v1 = format!(
            "{TASK_STATE_PREFIX}v1.{}",
            serde_json::json!({"service": "mock", "tool": "research", "arguments": made.arguments, "taskId": "t-1", "origin": "stdio:abc"})
        );
        let body = signed
            .strip_prefix(STATE_V2)
            .unwrap()
            .split_once('.')
            .unwrap()
            .0;
        let mut forged = made.clone();
        forged.task_id = "someone-elses".into();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let signature = signed.rsplit_once(&format!("{body}.")).unwrap().1;
        let other_key = StateKeys::per_process();
        for state in [
            unsigned_v1,
            format!("{STATE_V2}{body}"),
            format!("{STATE_V2}{body}.nokid"),
            format!("{STATE_V2}{forged_body}.{signature}"),
            made.request_state(&other_key),
            format!("{TASK_STATE_PREFIX}garbage"),
        ] {
            let read = waiting_task(&state, &call("research", &args, &next), &keys);
            assert!(matches!(read, Some(Err(_))), "{state}: {read:?}");
            assert_eq!(
                task_to_cancel(Some(&state), "mock", Some(&next), &keys),
                None
            );
        }
        // Verified under a previous key after a rotation.
        let new_key = StateKey::from_base64("ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8").unwrap();
        let old_key =
            StateKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        let rotated = StateKeys::shared(new_key, vec![old_key]);
        assert!(matches!(
            waiting_task(&signed, &call("research", &args, &next), &rotated),
            Some(Ok(_))
        ));
    }

    #[test]
    fn a_cancel_while_waiting_cancels_only_the_task_its_rounds_state_names_for_this_service() {
        let keys = keys();
        let made = task(&arguments("k"));
        let state = made.request_state(&keys);
        let next = op("conn-a-1~r2");
        assert_eq!(
            task_to_cancel(Some(&state), "mock", Some(&next), &keys),
            Some(made.clone())
        );
        let mut empty = made.clone();
        empty.task_id.clear();
        let empty = empty.request_state(&keys);
        for (state, service, here) in [
            (Some(state.as_str()), "other", Some(&next)),
            (Some(state.as_str()), "mock", Some(&op("conn-b-2~r2"))),
            (Some(state.as_str()), "mock", None),
            (Some(empty.as_str()), "mock", Some(&next)),
            (Some("mock-upstream-state:confirm"), "mock", Some(&next)),
            (None, "mock", Some(&next)),
        ] {
            assert_eq!(
                task_to_cancel(state, service, here, &keys),
                None,
                "{state:?} on {service} in {here:?}"
            );
        }
    }

    #[test]
    fn a_waiting_tasks_round_answer_asks_what_the_task_asks() {
        let requests = json!({"confirm": {"method": "elicitation/create", "params": {}}});
        let (waiting, keys) = (task(&arguments("k")), keys());
        let asked = waiting.input_required(requests.as_object().unwrap(), &keys);
        assert_eq!(asked["resultType"], "input_required");
        assert_eq!(asked["inputRequests"], requests);
        assert_eq!(asked["requestState"], waiting.request_state(&keys));
        assert!(durable_mcp_contract::input::is_input_required(&asked));
    }

    #[test]
    fn rounds_are_read_from_the_starts_links_and_follow_in_order() {
        let link = |url: &str| NexusLink {
            url: url.into(),
            r#type: String::new(),
        };
        let standalone =
            link("temporal:///namespaces/default/nexus-operations/conn-a-1~r2/01a2/details");
        assert_eq!(Round::of(&[standalone]), Some(op("conn-a-1~r2")));
        let escaped = link("temporal:///namespaces/my%20ns/nexus-operations/a%2Fb/r/details");
        assert_eq!(
            Round::of(&[escaped]),
            Some(Round::Operation {
                namespace: "my ns".into(),
                id: "a/b".into()
            })
        );
        let workflow = link(
            "temporal:///namespaces/default/workflows/agent-1/run-9/history?referenceType=EventReference&eventID=5",
        );
        let in_workflow = Round::Workflow {
            namespace: "default".into(),
            id: "agent-1".into(),
            run: "run-9".into(),
        };
        assert_eq!(
            Round::of(&[link("https://x/y"), workflow]),
            Some(in_workflow.clone())
        );
        for none in [
            "",
            "temporal:///namespaces/default/nexus-operations",
            "not a url",
        ] {
            assert_eq!(Round::of(&[link(none)]), None, "{none}");
        }
        assert!(op("a~r2").follows(&op("a")) && op("a~r3").follows(&op("a~r2")));
        assert!(!op("a~r3").follows(&op("a")) && !op("a").follows(&op("a")));
        assert!(in_workflow.follows(&in_workflow) && !op("a~r2").follows(&in_workflow));
        let other_run = Round::Workflow {
            namespace: "default".into(),
            id: "agent-1".into(),
            run: "run-10".into(),
        };
        assert!(!other_run.follows(&in_workflow));
    }
}

/// Property tests of the upstream-task `requestState` the proxy signs (R-PRX-35, R-CON-51):
/// it reads back as the task it names, any changed byte makes it name no task, and any text a
/// caller sends is a task, an upstream's own state or a refusal, never a panic.
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{answer, mutate, mutation};
    use crate::state_key::StateKey;
    use proptest::prelude::*;

    fn keys(byte: u8) -> StateKeys {
        let key = StateKey::from_base64(&URL_SAFE_NO_PAD.encode([byte; 32])).unwrap();
        StateKeys::shared(key, vec![])
    }

    /// Every byte of `text` as a `%XX` escape.
    fn escaped(text: &str) -> String {
        text.bytes().map(|b| format!("%{b:02X}")).collect()
    }

    fn round() -> impl Strategy<Value = Option<Round>> {
        prop::option::of(prop_oneof![
            ("\\PC{1,20}", "\\PC{1,40}")
                .prop_map(|(namespace, id)| Round::Operation { namespace, id }),
            ("\\PC{1,20}", "\\PC{1,40}", "\\PC{1,20}")
                .prop_map(|(namespace, id, run)| Round::Workflow { namespace, id, run }),
        ])
    }

    fn waiting() -> impl Strategy<Value = (WaitingTask, Map<String, Value>)> {
        (
            "\\PC{0,20}",
            "\\PC{0,20}",
            answer(),
            "\\PC{1,30}",
            "\\PC{1,30}",
            round(),
        )
            .prop_map(|(service, tool, args, task_id, origin, round)| {
                let args = match args {
                    Value::Object(m) => m,
                    other => Map::from_iter([("v".to_owned(), other)]),
                };
                let task = WaitingTask {
                    service,
                    tool,
                    arguments: arguments_fingerprint(&args),
                    task_id,
                    origin,
                    round,
                };
                (task, args)
            })
    }

    /// The round right after `made`, as the next call's start names it.
    fn next(made: &Option<Round>) -> Option<Round> {
        made.clone().map(|r| match r {
            Round::Operation { namespace, id } => Round::Operation {
                namespace,
                id: durable_mcp_contract::input::next_round_id(&id).unwrap_or(id),
            },
            workflow => workflow,
        })
    }

    proptest! {
        #[test]
        fn a_signed_state_reads_back_and_any_changed_byte_names_no_task(
            (task, args) in waiting(),
            key in any::<u8>(),
            m in mutation(),
        ) {
            let keys = keys(key);
            let state = task.request_state(&keys);
            let here = next(&task.round);
            let call = RoundCall { service: &task.service, tool: &task.tool, arguments: &args, round: here.as_ref() };
            if here.as_ref().is_none_or(|h| task.round.as_ref().is_some_and(|m| h.follows(m))) {
                prop_assert_eq!(waiting_task(&state, &call, &keys), Some(Ok(task.clone())));
            }
            if let Some(changed) = mutate(&state, &m) {
                prop_assert!(!matches!(waiting_task(&changed, &call, &keys), Some(Ok(_))));
                prop_assert_eq!(task_to_cancel(Some(&changed), &task.service, here.as_ref(), &keys), None);
            }
            prop_assert!(!matches!(waiting_task(&state, &call, &self::keys(key.wrapping_add(1))), Some(Ok(_))));
        }

        #[test]
        fn any_state_a_caller_sends_is_a_task_an_upstreams_or_refused(
            state in prop_oneof!["\\PC{0,80}", "\\PC{0,40}".prop_map(|s| format!("{STATE_V2}{s}")), "[A-Za-z0-9_.-]{0,80}".prop_map(|s| format!("{STATE_V2}{s}"))],
        ) {
            let args = Map::new();
            let call = RoundCall { service: "s", tool: "t", arguments: &args, round: None };
            prop_assert!(!matches!(waiting_task(&state, &call, &keys(1)), Some(Ok(_))));
        }

        /// Any link URL names a round or none; a link the server writes reads back.
        #[test]
        fn a_link_of_any_text_names_a_round_or_none_and_written_links_read_back(
            url in "\\PC{0,80}",
            (namespace, id, run) in ("\\PC{1,20}", "\\PC{1,40}", "\\PC{1,20}"),
            workflow in any::<bool>(),
        ) {
            let _ = Round::from_url(&url);
            let _ = Round::from_url(&format!("temporal:///namespaces/{url}"));
            // URLs read `.` and `..` segments (escaped too) as dot segments: no round names one.
            let dots = [&namespace, &id, &run].iter().any(|s| matches!(s.as_str(), "." | ".."));
            prop_assume!(!dots);
            let (ns, i, r) = (escaped(&namespace), escaped(&id), escaped(&run));
            let (written, expected) = if workflow {
                (format!("temporal:///namespaces/{ns}/workflows/{i}/{r}/history?x=1"), Round::Workflow { namespace, id, run })
            } else {
                (format!("temporal:///namespaces/{ns}/nexus-operations/{i}/{r}/details"), Round::Operation { namespace, id })
            };
            prop_assert_eq!(Round::from_url(&written), Some(expected));
        }
    }
}
