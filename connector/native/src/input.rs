//! Native tools that ask for input (R-NAT-7; SEP-2322 rounds as in R-PRX-29, R-CON-40): a sync
//! or Workflow-backed tool may end its round with input requests (an approval, a form, a
//! sampling request) and an opaque state of its own; the caller's answers start the tool's next
//! round, whose handler gets them with that state. Nothing waits in a process between rounds,
//! so a pending question survives worker and connector restarts.
//!
//! On the wire this is exactly what the proxy writes (R-PRX-29): the round's outcome is a
//! payload marked `InputRequired` holding the `InputRequiredResult` and the round's arguments,
//! and the next round's input is a payload marked `InputRound`, which [`decode_round`] reads.
//! Pure conversions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};
use temporalio_common::data_converters::RawValue;
use temporalio_protos::temporal::api::common::v1::Payload;

use super::result::{BadArguments, ToolFailure, ToolResult, decode_arguments};
use durable_mcp_contract::{
    errors::ToolCallErrorType,
    input::{INPUT_REQUIRED, INPUT_ROUND, InputRequired, InputRound},
    payload,
};
use durable_mcp_runtime::nexus::HandlerError;

/// What a round after the first brings: the caller's `inputResponses` (by the keys the tool
/// asked with) and the state the tool gave with its requests.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct InputAnswers {
    pub responses: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl InputAnswers {
    /// Whether the elicitation asked under `key` was accepted (`action: "accept"`) with the
    /// form's content, and, when the form has a boolean `confirm` field, that field is not
    /// `false`. An accept without content (a client that accepts without showing the form) is
    /// not a confirmation.
    pub fn accepted(&self, key: &str) -> bool {
        let Some(response) = self.responses.get(key) else {
            return false;
        };
        response.get("action").and_then(Value::as_str) == Some("accept")
            && response.get("content").is_some_and(Value::is_object)
            && response.pointer("/content/confirm") != Some(&Value::Bool(false))
    }
}

/// A tool round's input: the call's arguments, and the answers when this round follows one
/// that asked for input (`None` in the first round).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round<I> {
    pub arguments: I,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<InputAnswers>,
}

impl<I: Serialize> Round<I> {
    /// The Workflow result of a round that asks for input (a Workflow-backed asking tool
    /// returns [`RawValue`]): the requests, with this round's arguments.
    pub fn ask(&self, ask: &AskInput) -> Result<RawValue, ToolFailure> {
        let arguments = serde_json::to_value(&self.arguments).map_err(not_encoded)?;
        Ok(RawValue::new(vec![ask.to_payload(&arguments)?]))
    }
}

/// The Workflow result of a round that answers (a Workflow-backed asking tool returns
/// [`RawValue`]): the whole `CallToolResult`, marked as one (R-PAY-2).
pub fn finish(result: &ToolResult) -> Result<RawValue, ToolFailure> {
    let p = payload::to_marked_payload(&result.to_json(), payload::CALL_TOOL_RESULT)
        .map_err(not_encoded)?;
    Ok(RawValue::new(vec![p]))
}

/// A failure in an asking Workflow ends it failed, final (`?` in the Workflow's run).
impl From<ToolFailure> for temporalio_sdk::WorkflowTermination {
    fn from(f: ToolFailure) -> Self {
        temporalio_common::error::ApplicationFailure::non_retryable(f).into()
    }
}

fn not_encoded(e: impl std::fmt::Display) -> ToolFailure {
    ToolFailure::non_retryable(
        ToolCallErrorType::UpstreamProtocolError,
        format!("the tool's answer does not encode: {e}"),
    )
}

/// The input requests a round ends with (SEP-2322 `inputRequests`), and the state the tool
/// wants back with the answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AskInput {
    requests: Map<String, Value>,
    state: Option<String>,
}

impl AskInput {
    pub fn new() -> Self {
        Self::default()
    }

    /// A yes/no question under `key`: an `elicitation/create` form with one boolean `confirm`
    /// field; [`InputAnswers::accepted`] reads the answer.
    pub fn confirm(self, key: impl Into<String>, message: impl Into<String>) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean"}},
            "required": ["confirm"]
        });
        self.elicit(key, message, schema)
    }

    /// An `elicitation/create` form under `key` asking `message`, its answer shaped by
    /// `requested_schema`.
    pub fn elicit(
        self,
        key: impl Into<String>,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> Self {
        let params = json!({
            "mode": "form",
            "message": message.into(),
            "requestedSchema": requested_schema
        });
        self.request(key, "elicitation/create", params)
    }

    /// Any input request under `key` (`sampling/createMessage`, `roots/list`, ...).
    pub fn request(mut self, key: impl Into<String>, method: &str, params: Value) -> Self {
        let request = json!({"method": method, "params": params});
        self.requests.insert(key.into(), request);
        self
    }

    /// The opaque state the next round gets back in [`InputAnswers::state`].
    pub fn state(mut self, state: impl Into<String>) -> Self {
        self.state = Some(state.into());
        self
    }

    /// The `InputRequiredResult` this round answers with.
    pub fn to_result(&self) -> Value {
        let mut result = Map::new();
        result.insert("resultType".into(), Value::from("input_required"));
        result.insert("inputRequests".into(), Value::Object(self.requests.clone()));
        if let Some(state) = &self.state {
            result.insert("requestState".into(), Value::from(state.clone()));
        }
        Value::Object(result)
    }

    /// The round's outcome payload, as the proxy writes it (R-PRX-29): the requests and the
    /// arguments the next round is called with again.
    pub fn to_payload(&self, arguments: &Value) -> Result<Payload, ToolFailure> {
        let asked = InputRequired {
            result: self.to_result(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            ..Default::default()
        };
        payload::to_marked_payload(&asked, INPUT_REQUIRED).map_err(not_encoded)
    }
}

/// What an asking tool's round ends with: a result, or input requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<R> {
    Done(R),
    Ask(AskInput),
}

/// A round's input from the operation's: the arguments (R-NXC-3) and, for a payload marked
/// `InputRound`, the answers; the arguments' JSON comes too, for the round's outcome.
pub fn decode_round<I: DeserializeOwned>(
    input: &Payload,
) -> Result<(Round<I>, Value), BadArguments> {
    if payload::mcp_type(input) != Some(INPUT_ROUND) {
        let arguments = decode_arguments::<I>(input)?;
        let json = payload::to_json(input).unwrap_or(Value::Null);
        let json = if json.is_null() { json!({}) } else { json };
        return Ok((
            Round {
                arguments,
                answers: None,
            },
            json,
        ));
    }
    let round: InputRound = payload::from_payload(input).map_err(|e| {
        BadArguments::NotAnObject(HandlerError::bad_request(format!(
            "a later round's input is not valid: {e}"
        )))
    })?;
    let json = Value::Object(round.arguments);
    let arguments = decode_arguments::<I>(
        &payload::to_payload(&json)
            .map_err(|e| BadArguments::NotAnObject(HandlerError::bad_request(e.to_string())))?,
    )?;
    let answers = InputAnswers {
        responses: round.input_responses,
        state: round.request_state,
    };
    Ok((
        Round {
            arguments,
            answers: Some(answers),
        },
        json,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_contract::operation::OperationOutcome;
    use durable_mcp_contract::outcome::Outcome;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Del {
        path: String,
    }

    #[test]
    fn an_ask_is_the_outcome_the_proxy_writes_and_the_answer_comes_back_decoded() {
        let ask = AskInput::new().confirm("ok", "Delete 40 GB?").state("s1");
        let p = ask.to_payload(&json!({"path": "/x"})).unwrap();
        let Outcome::InputRequired(asked) = Outcome::from_operation(OperationOutcome::Succeeded(p))
        else {
            panic!("not an input request");
        };
        assert_eq!(asked.input_requests()["ok"]["method"], "elicitation/create");
        assert_eq!(
            asked.input_requests()["ok"]["params"]["message"],
            "Delete 40 GB?"
        );
        assert_eq!(asked.request_state(), Some("s1"));
        // The connector's next round, as it starts it.
        let responses = json!({"ok": {"action": "accept", "content": {"confirm": true}}});
        let next = asked.answered(responses.as_object().unwrap().clone());
        let input = payload::to_marked_payload(&next, INPUT_ROUND).unwrap();
        let (round, json) = decode_round::<Del>(&input).unwrap();
        assert_eq!(round.arguments, Del { path: "/x".into() });
        let answers = round.answers.unwrap();
        assert!(answers.accepted("ok") && !answers.accepted("other"));
        assert_eq!(answers.state.as_deref(), Some("s1"));
        assert_eq!(json, json!({"path": "/x"}));
    }

    #[test]
    fn a_first_round_has_no_answers_and_declines_are_not_accepts() {
        let first = payload::to_payload(&json!({"path": "/y"})).unwrap();
        let (round, _) = decode_round::<Del>(&first).unwrap();
        assert_eq!(round.answers, None);
        let answers = |v: Value| InputAnswers {
            responses: v.as_object().unwrap().clone(),
            state: None,
        };
        assert!(!answers(json!({"ok": {"action": "decline"}})).accepted("ok"));
        assert!(!answers(json!({"ok": {"action": "cancel"}})).accepted("ok"));
        let no = json!({"ok": {"action": "accept", "content": {"confirm": false}}});
        assert!(!answers(no).accepted("ok"));
        // Accepted without the form's content: not a confirmation.
        assert!(!answers(json!({"ok": {"action": "accept"}})).accepted("ok"));
        let broken = payload::to_marked_payload(&json!(1), INPUT_ROUND).unwrap();
        assert!(decode_round::<Del>(&broken).is_err());
    }

    #[test]
    fn a_workflow_round_answers_with_marked_payloads() {
        let round = Round {
            arguments: Del { path: "/z".into() },
            answers: None,
        };
        let raw = round.ask(&AskInput::new().confirm("ok", "?")).unwrap();
        assert_eq!(payload::mcp_type(&raw.payloads[0]), Some(INPUT_REQUIRED));
        let raw = finish(&ToolResult::text("done")).unwrap();
        assert_eq!(
            payload::mcp_type(&raw.payloads[0]),
            Some(payload::CALL_TOOL_RESULT)
        );
    }
}
