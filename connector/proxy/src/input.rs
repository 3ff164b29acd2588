//! Durable input through the proxy (R-PRX-29): an upstream that answers `tools/call` with an
//! `InputRequiredResult` (SEP-2322) ends the round, not the call. The Activity completes with the
//! upstream's answer as written and the arguments it called with ([`InputRequired`], marked
//! [`INPUT_REQUIRED`]), so nothing waits in a process while a person decides; the next round is
//! a new operation whose input ([`InputRound`], marked [`INPUT_ROUND`]) carries the caller's
//! `inputResponses` and the upstream's `requestState`, which the Activity sends upstream with
//! `tools/call` again. A round is a protocol step, not a retry: a one-attempt tool runs once per
//! round.

use rmcp::model::CallToolRequestParams;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use temporalio_protos::temporal::api::common::v1::Payload;

use durable_mcp_contract::{
    input::{INPUT_REQUIRED, INPUT_ROUND, InputRequired, InputRound, is_input_required},
    payload::{self, PayloadError},
};

/// What a round after the first sends upstream beside the arguments (SEP-2322), as the
/// Activity records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundAnswers {
    #[serde(rename = "inputResponses")]
    pub input_responses: Map<String, Value>,
    #[serde(
        rename = "requestState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_state: Option<String>,
}

/// A later round's arguments and the answers that go with them.
pub type Round = (Map<String, Value>, RoundAnswers);

/// An operation's input: the arguments, and the answers when it is a later round (an input
/// marked [`INPUT_ROUND`]); `None` for an input of another kind.
pub fn round_input(input: &Payload) -> Option<Result<Round, String>> {
    if payload::mcp_type(input) != Some(INPUT_ROUND) {
        return None;
    }
    Some(
        payload::from_payload::<InputRound>(input)
            .map(|round| {
                let answers = RoundAnswers {
                    input_responses: round.input_responses,
                    request_state: round.request_state,
                };
                (round.arguments, answers)
            })
            .map_err(|e| format!("a later round's input is not valid: {e}")),
    )
}

/// The `tools/call` parameters of a round: the answers go with the arguments.
pub fn with_answers(
    params: CallToolRequestParams,
    answers: Option<&RoundAnswers>,
) -> CallToolRequestParams {
    let Some(answers) = answers else {
        return params;
    };
    let mut params =
        params.with_input_responses(answers.input_responses.clone().into_iter().collect());
    params.request_state = answers.request_state.clone();
    params
}

/// The Activity's answer payload for the upstream's answer `result`: a `CallToolResult`, or a
/// round that asks for input, with the arguments the next round sends again.
pub fn answer_payload(
    result: &Value,
    arguments: &Map<String, Value>,
) -> Result<Payload, PayloadError> {
    if is_input_required(result) {
        let asked = InputRequired {
            result: result.clone(),
            arguments: arguments.clone(),
            ..Default::default()
        };
        return payload::to_marked_payload(&asked, INPUT_REQUIRED);
    }
    payload::to_marked_payload(result, payload::CALL_TOOL_RESULT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_later_rounds_input_carries_the_answers_and_a_first_rounds_does_not() {
        let round = InputRound {
            arguments: map(json!({"a": 1})),
            input_responses: map(json!({"confirm": {"action": "accept"}})),
            request_state: Some("s".into()),
        };
        let marked = payload::to_marked_payload(&round, INPUT_ROUND).unwrap();
        let (arguments, answers) = round_input(&marked).unwrap().unwrap();
        assert_eq!(arguments, round.arguments);
        assert_eq!(answers.request_state.as_deref(), Some("s"));
        let params = with_answers(
            CallToolRequestParams::new("t").with_arguments(arguments),
            Some(&answers),
        );
        let sent = serde_json::to_value(&params).unwrap();
        assert_eq!(sent["inputResponses"]["confirm"]["action"], "accept");
        assert_eq!(sent["requestState"], "s");
        assert!(round_input(&payload::to_payload(&json!({"a": 1})).unwrap()).is_none());
        let broken = payload::to_marked_payload(&json!(1), INPUT_ROUND).unwrap();
        assert!(round_input(&broken).unwrap().is_err());
    }

    #[test]
    fn an_answer_that_asks_for_input_is_marked_with_the_arguments() {
        let asked = json!({"resultType": "input_required", "requestState": "s"});
        let p = answer_payload(&asked, &map(json!({"a": 1}))).unwrap();
        assert_eq!(payload::mcp_type(&p), Some(INPUT_REQUIRED));
        let back: InputRequired = payload::from_payload(&p).unwrap();
        assert_eq!(back.result, asked);
        assert_eq!(back.arguments, map(json!({"a": 1})));
        let done = json!({"content": [], "resultType": "complete"});
        let p = answer_payload(&done, &Map::new()).unwrap();
        assert_eq!(payload::mcp_type(&p), Some(payload::CALL_TOOL_RESULT));
    }
}
