//! Input requests relayed to session clients of earlier protocol versions (R-CON-43).
//!
//! A session client of an earlier protocol version (2025-06-18, 2025-11-25) cannot answer an
//!   `InputRequiredResult`, but it can answer server-to-client requests on its session: a round
//!   that asks for input has its requests relayed to the session as `elicitation/create`,
//!   `sampling/createMessage` or `roots/list` (as each request says, its params as the tool
//!   wrote them), and the client's answers become the next round's `inputResponses`, the same
//!   path as `tasks/update` (once, by the caller that made the call).

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResponse, CustomRequest, ServerRequest},
    service::{PeerRequestOptions, RequestContext},
};
use serde_json::{Map, Value, json};
use tracing::info;

use super::{Answer, Typed, complete, internal::internal};
use crate::task_ref::CallerScope;
use durable_mcp_contract::{
    input::{INPUT_REQUIRED_ERROR_TYPE, InputRequired},
    outcome::ERROR_TYPE_META,
};
use durable_mcp_runtime::nexus::OperationRef;

/// The tool error that ends a relayed call the session client cannot answer (R-CON-43).
fn not_relayed(why: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("The tool asked for input that was not given: {why}. The call ended there; call the tool again.")}],
        "isError": true,
        "_meta": {ERROR_TYPE_META: INPUT_REQUIRED_ERROR_TYPE},
    })
}

impl Typed {
    /// Relays the input requests of the call's round `op` (and of each round after it that
    /// asks again) to the session client, and answers with the call's end: its result, a task,
    /// or a tool error when the client did not declare what it would need, failed to answer,
    /// or is gone (R-CON-43). The rounds are the call's: they run in the in-flight slot its
    /// caller holds (R-CON-17), and take no second one.
    pub(super) async fn relay_input(
        &self,
        op: &OperationRef,
        context: &RequestContext<RoleServer>,
        scope: &CallerScope,
    ) -> Result<CallToolResponse, McpError> {
        let mut op = op.clone();
        loop {
            let described = self
                .inner
                .client
                .describe(&op)
                .await
                .map_err(|e| internal("reading the tool call", e))?;
            let Some(asked) = super::input::asked_of(&described) else {
                return complete(not_relayed("the tool's request could not be read"));
            };
            if let Some(why) = unrelayable(&asked, context) {
                return complete(not_relayed(&why));
            }
            let responses = match self.ask_session(&asked, context).await {
                Ok(responses) => responses,
                Err(why) => {
                    // Unanswered past --input-timeout: nobody will (R-CON-40).
                    self.end_expired_round(&described);
                    return complete(not_relayed(&why));
                }
            };
            let tool = super::input::round_tool(&described);
            let share = super::scope::request_share(context);
            let (next, _) = self
                .start_round(&described, responses, (scope, share.as_ref()))
                .await?;
            let json = match self.follow_round(&tool, &next, context, scope).await? {
                Answer::Task(task) => return Ok(CallToolResponse::Task(task)),
                Answer::Result(json) => json,
            };
            if !super::input::asks(&json) {
                super::as_written::keep(self.written.as_ref(), context, json.clone());
                return complete(json);
            }
            op = next;
        }
    }

    /// Relays the requests of the waiting last round of the call `op` (a companion task whose
    /// round asks the user or the host, R-CON-11) to the session client, and starts the next
    /// round with its answers: `None` once started (or when nothing waits any more), else why
    /// it could not be relayed (the round still waits).
    pub(super) async fn relay_waiting_round(
        &self,
        op: &OperationRef,
        context: &RequestContext<RoleServer>,
        (scope, share): (&CallerScope, Option<&crate::fair::Share>),
    ) -> Result<Option<String>, McpError> {
        let last = self
            .last_round(op)
            .await
            .map_err(|e| super::tasks::task_error("reading the task", e))?;
        let Some(asked) = super::input::asked_of(&last).filter(|_| self.waits_for_input(&last))
        else {
            return Ok(None);
        };
        if let Some(why) = unrelayable(&asked, context) {
            return Ok(Some(why));
        }
        let responses = match self.ask_session(&asked, context).await {
            Ok(responses) => responses,
            Err(why) => {
                self.end_expired_round(&last);
                return Ok(Some(why));
            }
        };
        self.start_round(&last, responses, (scope, share)).await?;
        Ok(None)
    }

    /// Sends each input request to the session client and collects its answers by key; why
    /// not, when the client answered one with an error, or is gone, or the caller cancelled.
    async fn ask_session(
        &self,
        asked: &InputRequired,
        context: &RequestContext<RoleServer>,
    ) -> Result<Map<String, Value>, String> {
        let requests = asked.input_requests();
        let mut responses = Map::new();
        for (key, request) in requests.as_object().into_iter().flatten() {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            relayable(method)?;
            let params = request.get("params").cloned();
            let sent = ServerRequest::CustomRequest(CustomRequest::new(method, params));
            let mut options = PeerRequestOptions::no_options();
            options.timeout = Some(self.inner.options.input_timeout);
            info!(
                method,
                "relaying a tool's input request to the session client"
            );
            let answer = async {
                let handle = context.peer.send_request_with_option(sent, options).await?;
                handle.await_response().await
            };
            let answered = tokio::select! {
                answered = answer => answered,
                _ = context.ct.cancelled() => return Err("the caller cancelled the call".into()),
            };
            let answered = answered
                .map_err(|e| format!("the client did not answer its {method} request ({e})"))?;
            let answered = serde_json::to_value(answered)
                .map_err(|e| format!("the client's answer is not JSON ({e})"))?;
            responses.insert(key.clone(), answered);
        }
        Ok(responses)
    }
}

/// Why `asked` cannot be relayed to the caller's session, if it cannot: a 2026-07-28 caller
/// has no session to send it to, and a session client must have declared each capability the
/// requests need at initialize (R-CON-43).
fn unrelayable(asked: &InputRequired, context: &RequestContext<RoleServer>) -> Option<String> {
    if super::capabilities::is_modern(context) {
        return Some(
            "this client speaks MCP 2026-07-28, whose requests carry no session to send it on"
                .into(),
        );
    }
    let missing = super::capabilities::undeclared(
        &asked.input_requests(),
        &super::capabilities::session_capabilities(context),
    );
    (!missing.is_empty()).then(|| {
        format!(
            "it needs the {} capability, which this client did not declare at initialize",
            missing.join(" and ")
        )
    })
}

/// The input requests a session client is asked (R-CON-43, SEP-2322's three): any other
/// method a tool's answer names is not sent to the client, whatever it is.
fn relayable(method: &str) -> Result<(), String> {
    match method {
        "elicitation/create" | "sampling/createMessage" | "roots/list" => Ok(()),
        other => Err(format!(
            "the tool asked for input with {other:?}, which is not an input request (only \
             elicitation/create, sampling/createMessage and roots/list are relayed)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_input_requests_are_relayed() {
        for method in ["elicitation/create", "sampling/createMessage", "roots/list"] {
            assert_eq!(relayable(method), Ok(()));
        }
        for method in ["tools/call", "ping", ""] {
            let why = relayable(method).unwrap_err();
            assert!(why.contains("not an input request"), "{why}");
        }
    }

    #[test]
    fn an_input_not_relayed_is_a_typed_tool_error_saying_why() {
        let result = not_relayed("it needs the elicitation capability");
        assert_eq!(result["isError"], true);
        assert_eq!(result["_meta"][ERROR_TYPE_META], INPUT_REQUIRED_ERROR_TYPE);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("elicitation capability"), "{text}");
    }
}
