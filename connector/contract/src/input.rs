//! Durable input (SEP-2322 multi round-trip requests through the durable path; R-PRX-29,
//! R-CON-40): a tool call whose upstream answers `input_required` ends its round with an
//! [`InputRequired`] payload instead of failing, and the answer to its input requests starts the
//! next round as a new operation carrying an [`InputRound`].
//!
//! Rounds are operations whose IDs follow from the first one's ([`next_round_id`]): round 1 is
//! the call's own operation, round `n + 1` is `<round 1's id>~r<n + 1>`. So whoever answers (any
//! replica, once or twice) starts the same operation, and Temporal's ID uniqueness lets it run
//! once. Plain data and pure functions: the proxy writes and reads the payloads, the connector
//! names the rounds.
//!
//! Answers to some of a round's requests (SEP-2663 partial fulfilment) are kept the same way:
//! the next round is then a [`PARTIAL_ROUND`] operation, which the tool service answers at
//! once, without the tool, with the requests still unanswered and the answers so far
//! ([`InputRequired::answered`]); the round after it gets every answer at once.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use temporalio_protos::temporal::api::common::v1::Payload;

use crate::{operation::OperationOutcome, payload};

/// The [`super::payload::MCP_TYPE_KEY`] value of a round that ended asking for input: the
/// payload holds an [`InputRequired`].
pub const INPUT_REQUIRED: &str = "InputRequired";
/// The [`super::payload::MCP_TYPE_KEY`] value of an operation input that answers the previous
/// round's input requests: the payload holds an [`InputRound`].
pub const INPUT_ROUND: &str = "InputRound";
/// The error type (`_meta["io.durable-mcp/errorType"]`) of a call that asked for input its
/// caller cannot give, or did not give in time.
pub const INPUT_REQUIRED_ERROR_TYPE: &str = "InputRequired";
/// Most rounds one call may take; the next answer is refused (SDKs stop at 10 by default).
pub const MAX_ROUNDS: u32 = 32;

/// How a round ended when the upstream asked for input: the upstream's `InputRequiredResult`
/// as it wrote it (`inputRequests`, its opaque `requestState`), and the arguments the round
/// called the tool with, which the next round calls it with again. A [`PARTIAL_ROUND`] also
/// keeps the answers given so far and names the tool's operation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputRequired {
    pub result: Value,
    pub arguments: Map<String, Value>,
    /// Answers already given to requests of this round; `inputRequests` no longer holds them.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub answered: Map<String, Value>,
    /// The tool's operation, when the round that ended with this is a [`PARTIAL_ROUND`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
}

/// The operation name of a round that keeps answers to some of the previous round's requests
/// (R-CON-40): no tool's (R-NXC-5 writes `~` only before two hex digits). Its input is the
/// [`InputRequired`] it ends with, marked [`INPUT_REQUIRED`]: the tool service answers it at
/// once with that ([`partial_round_outcome`]), and runs nothing.
pub const PARTIAL_ROUND: &str = "~~input-answered-in-part";

/// What the caller's answers to a round's requests start.
#[derive(Debug, Clone, PartialEq)]
pub enum Answering {
    /// The tool's next round, with every answer.
    Complete(InputRound),
    /// A [`PARTIAL_ROUND`] keeping these answers and asking the rest.
    Partial(InputRequired),
}

impl InputRequired {
    /// The upstream's input requests (an empty map when it sent none).
    pub fn input_requests(&self) -> Value {
        self.result
            .get("inputRequests")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    /// The upstream's `requestState`, which the next round echoes.
    pub fn request_state(&self) -> Option<&str> {
        self.result.get("requestState").and_then(Value::as_str)
    }

    /// The next round's input: the same arguments, the answers kept so far with the caller's
    /// responses, and the upstream's state.
    pub fn answered(&self, input_responses: Map<String, Value>) -> InputRound {
        let mut all = self.answered.clone();
        for (key, response) in input_responses {
            all.entry(key).or_insert(response);
        }
        InputRound {
            arguments: self.arguments.clone(),
            input_responses: all,
            request_state: self.request_state().map(str::to_owned),
        }
    }

    /// The responses to requests this round asks (SEP-2663: others are ignored, and so is a
    /// second answer to a request already answered, which it no longer asks).
    pub fn asked_of(&self, responses: Map<String, Value>) -> Map<String, Value> {
        let requests = self.input_requests();
        responses
            .into_iter()
            .filter(|(key, _)| requests.get(key).is_some())
            .collect()
    }

    /// What `responses` (to requests this round asks, [`Self::asked_of`]) start, the round
    /// being of the tool's `operation` (or a [`PARTIAL_ROUND`] naming it): the tool's next round
    /// when nothing is left unanswered (or nothing was ever answered: the tool judges that),
    /// else a partial round asking the rest and keeping every answer so far.
    pub fn answer(&self, responses: Map<String, Value>, operation: &str) -> Answering {
        let requests = self.input_requests();
        let left: Map<String, Value> = requests
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| !responses.contains_key(*key))
            .map(|(key, request)| (key.clone(), request.clone()))
            .collect();
        if left.is_empty() || (responses.is_empty() && self.answered.is_empty()) {
            return Answering::Complete(self.answered(responses));
        }
        if responses.is_empty() {
            // Nothing new for a round that keeps answers: the same rest is asked again.
            return Answering::Partial(self.clone());
        }
        let mut result = self.result.clone();
        if let Value::Object(fields) = &mut result {
            fields.insert("inputRequests".into(), Value::Object(left));
        }
        let mut answered = self.answered.clone();
        answered.extend(responses);
        Answering::Partial(InputRequired {
            result,
            arguments: self.arguments.clone(),
            answered,
            operation: Some(
                self.operation
                    .clone()
                    .unwrap_or_else(|| operation.to_owned()),
            ),
        })
    }

    /// The tool's operation of the round `operation` that ended with this: the one a
    /// [`PARTIAL_ROUND`] names, else `operation` itself.
    pub fn tool_operation<'a>(&'a self, operation: &'a str) -> &'a str {
        match (&self.operation, operation) {
            (Some(tool), PARTIAL_ROUND) => tool,
            _ => operation,
        }
    }
}

/// A tool service's answer to a [`PARTIAL_ROUND`] operation: its input, the round's end,
/// checked (an [`InputRequired`] that still asks something and names the tool's operation)
/// and marked [`INPUT_REQUIRED`]. Runs nothing.
pub fn partial_round_outcome(input: &Payload) -> Result<Payload, String> {
    let asked: InputRequired = payload::from_payload(input)
        .map_err(|e| format!("a partly answered round's input is not valid: {e}"))?;
    let asks = asked
        .input_requests()
        .as_object()
        .is_some_and(|r| !r.is_empty());
    if !asks || asked.operation.is_none() || asked.answered.is_empty() {
        return Err(
            "a partly answered round must keep answers, ask the rest and name its tool".into(),
        );
    }
    payload::to_marked_payload(&asked, INPUT_REQUIRED).map_err(|e| e.to_string())
}

/// The input of a round after the first: `tools/call` is sent upstream again with these
/// arguments, `inputResponses` and `requestState` (SEP-2322).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRound {
    pub arguments: Map<String, Value>,
    #[serde(rename = "inputResponses")]
    pub input_responses: Map<String, Value>,
    #[serde(
        rename = "requestState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_state: Option<String>,
}

/// The operation name of a round a cancel took while the call waited for input (R-CON-46):
/// no tool's (R-NXC-5 writes `~` only before two hex digits). A handler that does not serve it
/// refuses it, so nothing runs; the proxy serves it only to cancel its upstream task waiting
/// for that input (R-PRX-29) and then refuses it alike.
pub const CANCELLED_ROUND: &str = "~~cancelled-while-waiting-for-input";

/// The input of a [`CANCELLED_ROUND`] operation: the `requestState` the waiting round's
/// outcome recorded (never a caller's), so that the tool service can end what waits on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelledRound {
    #[serde(
        rename = "requestState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_state: Option<String>,
}

/// Whether an upstream's answer to `tools/call` asks for input (`resultType: "input_required"`).
pub fn is_input_required(answer: &Value) -> bool {
    answer.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// Whether an operation's outcome is a round that ended asking for input (its payload is
/// marked [`INPUT_REQUIRED`]).
pub fn asks_for_input(outcome: &OperationOutcome) -> bool {
    matches!(outcome, OperationOutcome::Succeeded(p) if payload::mcp_type(p) == Some(INPUT_REQUIRED))
}

/// The separator between round 1's operation ID and the round number.
const ROUND_MARK: &str = "~r";

/// Round 1's operation ID and the round `operation_id` names (1 for a call's own operation).
pub fn split_round(operation_id: &str) -> (&str, u32) {
    operation_id
        .rsplit_once(ROUND_MARK)
        .and_then(|(first, n)| Some((first, n.parse::<u32>().ok()?)))
        .filter(|(_, n)| *n >= 2)
        .unwrap_or((operation_id, 1))
}

/// The operation ID of round `round` of the call whose own operation is `first`: `first`
/// itself for round 1.
pub fn round_id(first: &str, round: u32) -> String {
    match round {
        0 | 1 => first.to_owned(),
        _ => format!("{first}{ROUND_MARK}{round}"),
    }
}

/// The round an operation ID names: 1 for a call's own operation.
pub fn round_of(operation_id: &str) -> u32 {
    split_round(operation_id).1
}

/// The operation ID of the round after the one `operation_id` names; `None` past
/// [`MAX_ROUNDS`].
pub fn next_round_id(operation_id: &str) -> Option<String> {
    let (first, round) = split_round(operation_id);
    (round < MAX_ROUNDS).then(|| round_id(first, round + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rounds_follow_from_the_first_operation_id() {
        assert_eq!(round_of("conn-ab-123"), 1);
        let second = next_round_id("conn-ab-123").unwrap();
        assert_eq!(second, "conn-ab-123~r2");
        assert_eq!(round_of(&second), 2);
        let third = next_round_id(&second).unwrap();
        assert_eq!(third, "conn-ab-123~r3");
        assert_eq!(next_round_id(&second), Some(third), "deterministic");
        // Something that only looks like a mark is round 1.
        assert_eq!(round_of("a~rx"), 1);
        assert_eq!(round_of("a~r1"), 1);
        assert_eq!(next_round_id("a~r1").unwrap(), "a~r1~r2");
        let last = format!("a{ROUND_MARK}{MAX_ROUNDS}");
        assert_eq!(next_round_id(&last), None);
    }

    #[test]
    fn a_round_splits_into_the_first_id_and_its_number_and_back() {
        assert_eq!(split_round("conn-ab-123"), ("conn-ab-123", 1));
        assert_eq!(split_round("conn-ab-123~r7"), ("conn-ab-123", 7));
        assert_eq!(split_round("a~r1"), ("a~r1", 1));
        assert_eq!(split_round("a~r02"), ("a", 2), "a number, however written");
        for round in 1..=MAX_ROUNDS {
            let id = round_id("conn-ab-123", round);
            assert_eq!(split_round(&id), ("conn-ab-123", round));
        }
    }

    #[test]
    fn the_next_round_carries_arguments_responses_and_the_upstreams_state() {
        let asked = InputRequired {
            result: json!({
                "resultType": "input_required",
                "inputRequests": {"confirm": {"method": "elicitation/create", "params": {}}},
                "requestState": "opaque"
            }),
            arguments: json!({"path": "/x"}).as_object().unwrap().clone(),
            ..Default::default()
        };
        assert!(is_input_required(&asked.result));
        assert_eq!(
            asked.input_requests()["confirm"]["method"],
            "elicitation/create"
        );
        let responses = json!({"confirm": {"action": "accept"}});
        let round = asked.answered(responses.as_object().unwrap().clone());
        assert_eq!(
            serde_json::to_value(&round).unwrap(),
            json!({
                "arguments": {"path": "/x"},
                "inputResponses": {"confirm": {"action": "accept"}},
                "requestState": "opaque"
            })
        );
        let stateless = InputRequired {
            result: json!({"resultType": "input_required"}),
            arguments: Map::new(),
            ..Default::default()
        };
        assert_eq!(stateless.input_requests(), json!({}));
        let round = stateless.answered(Map::new());
        assert!(
            !serde_json::to_value(&round)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("requestState")
        );
        assert!(!is_input_required(&json!({"resultType": "complete"})));
    }

    #[test]
    fn a_partial_answer_keeps_its_answers_and_asks_the_rest_and_the_last_sends_them_all() {
        let asked = InputRequired {
            result: json!({
                "resultType": "input_required",
                "inputRequests": {"a": {"method": "elicitation/create"}, "b": {"method": "roots/list"}},
                "requestState": "opaque"
            }),
            arguments: json!({"x": 1}).as_object().unwrap().clone(),
            ..Default::default()
        };
        let responses = |v: Value| v.as_object().unwrap().clone();
        // Only what the round asks counts.
        let given = asked.asked_of(responses(json!({"a": {"action": "accept"}, "z": {}})));
        assert_eq!(given, responses(json!({"a": {"action": "accept"}})));
        let Answering::Partial(rest) = asked.answer(given, "ask") else {
            panic!("b is still asked")
        };
        assert_eq!(
            rest.input_requests(),
            json!({"b": {"method": "roots/list"}})
        );
        assert_eq!(rest.request_state(), Some("opaque"));
        assert_eq!(
            (rest.operation.as_deref(), &rest.arguments),
            (Some("ask"), &asked.arguments)
        );
        assert_eq!(rest.tool_operation(PARTIAL_ROUND), "ask");
        assert_eq!(asked.tool_operation("ask"), "ask");
        // A second answer to `a` is no longer asked; the answer to `b` completes the round.
        let given = rest.asked_of(responses(
            json!({"a": {"action": "decline"}, "b": {"roots": []}}),
        ));
        let Answering::Complete(round) = rest.answer(given, PARTIAL_ROUND) else {
            panic!("nothing is left")
        };
        assert_eq!(
            serde_json::to_value(&round).unwrap(),
            json!({
                "arguments": {"x": 1},
                "inputResponses": {"a": {"action": "accept"}, "b": {"roots": []}},
                "requestState": "opaque"
            })
        );
        // Nothing answered: the tool's next round, as before; but a round that keeps answers
        // never sends the tool only those, it asks the rest again.
        assert!(
            matches!(asked.answer(Map::new(), "ask"), Answering::Complete(r) if r.input_responses.is_empty())
        );
        assert_eq!(
            rest.answer(Map::new(), PARTIAL_ROUND),
            Answering::Partial(rest.clone())
        );
    }

    #[test]
    fn a_partial_rounds_outcome_is_its_checked_input() {
        let rest = InputRequired {
            result: json!({"resultType": "input_required", "inputRequests": {"b": {}}}),
            arguments: Map::new(),
            answered: json!({"a": {}}).as_object().unwrap().clone(),
            operation: Some("ask".into()),
        };
        let input = payload::to_marked_payload(&rest, INPUT_REQUIRED).unwrap();
        let outcome = partial_round_outcome(&input).unwrap();
        assert_eq!(payload::mcp_type(&outcome), Some(INPUT_REQUIRED));
        assert_eq!(
            payload::from_payload::<InputRequired>(&outcome).unwrap(),
            rest
        );
        for broken in [
            InputRequired {
                operation: None,
                ..rest.clone()
            },
            InputRequired {
                answered: Map::new(),
                ..rest.clone()
            },
            InputRequired {
                result: json!({"inputRequests": {}}),
                ..rest.clone()
            },
        ] {
            let input = payload::to_marked_payload(&broken, INPUT_REQUIRED).unwrap();
            assert!(partial_round_outcome(&input).is_err(), "{broken:?}");
        }
        assert!(partial_round_outcome(&payload::to_payload(&json!(1)).unwrap()).is_err());
    }
}
