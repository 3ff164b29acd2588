//! R-CON-43: a session client of an earlier protocol version gets a tool's input requests
//! relayed to its session (`elicitation/create`), and its answer is the call's next round.
//! R-CON-44: a 2026-07-28 caller that did not declare the capability an input request needs
//! gets -32021.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent, ask_input::CONFIRM_KEY};
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{CallToolResponse, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction},
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::durable_input::{connector, setup};
use crate::support::*;

/// A session client that declares elicitation and accepts every request, keeping what it was
/// asked.
#[derive(Clone, Default)]
pub(crate) struct Confirmer {
    pub(crate) asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Confirmer {
    fn get_info(&self) -> ClientConfig {
        elicitation_client_config(false)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.asked
            .lock()
            .unwrap()
            .push(serde_json::to_value(request).unwrap());
        let mut answer = ElicitResult::new(ElicitationAction::Accept);
        answer.content = Some(json!({"confirm": true}));
        Ok(answer)
    }
}

/// The structured content of a completed call.
pub(crate) fn completed(answer: CallToolResponse) -> Value {
    let CallToolResponse::Complete(done) = answer else {
        panic!("expected the result, got {answer:?}")
    };
    assert_ne!(done.is_error, Some(true), "{done:?}");
    done.structured_content.unwrap()
}

/// Calls `ask` through `client` and checks the relayed question and the echoed answer.
async fn asks_and_echoes<C: rmcp::Service<RoleClient>>(
    client: &McpClient<C>,
    confirmer: &Confirmer,
    ledger: &Ledger,
    path: &str,
) {
    let before = ledger.count("ask", LedgerEvent::Called);
    let answer = client
        .peer()
        .call_tool_once(tool_call("ask", json!({"path": path})))
        .await
        .unwrap();
    let answered = completed(answer);
    assert_eq!(answered["inputResponses"][CONFIRM_KEY]["action"], "accept");
    assert_eq!(
        answered["inputResponses"][CONFIRM_KEY]["content"]["confirm"],
        true
    );
    assert_eq!(answered["arguments"]["path"], path);
    let asked = confirmer.asked.lock().unwrap().last().cloned().unwrap();
    assert_eq!(asked["message"], "Delete 40 GB?", "{asked}");
    assert_eq!(ledger.count("ask", LedgerEvent::Called), before + 2);
}

#[tokio::test]
async fn a_legacy_session_client_gets_the_elicitation_and_its_answer_is_the_next_round() {
    let (env, ledger, _proxy, key) = setup("input-relay-session").await;
    let day = Duration::from_secs(86_400);

    // Over stdio (an in-memory pipe, initialize handshake).
    let confirmer = Confirmer::default();
    let client = serve_in_memory(connector(&env, &key, "owner", day), confirmer.clone())
        .await
        .unwrap();
    asks_and_echoes(&client, &confirmer, &ledger, "/stdio").await;
    client.cancel().await.unwrap();

    // Over Streamable HTTP with a session.
    let (server, shutdown) =
        serve_connector_http(connector(&env, &key, "owner", day), loopback_http_options())
            .await
            .unwrap();
    let confirmer = Confirmer::default();
    let client = session_http_client(&server.url, confirmer.clone())
        .await
        .unwrap();
    asks_and_echoes(&client, &confirmer, &ledger, "/http").await;
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn a_legacy_client_without_elicitation_gets_a_tool_error_naming_the_capability() {
    let (env, ledger, _proxy, key) = setup("input-relay-undeclared").await;
    let day = Duration::from_secs(86_400);
    let client = client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    let answer = client
        .peer()
        .call_tool_once(tool_call("ask", json!({})))
        .await
        .unwrap();
    let CallToolResponse::Complete(done) = answer else {
        panic!("expected a tool error, got {answer:?}")
    };
    assert_eq!(done.is_error, Some(true));
    let text = serde_json::to_value(&done.content).unwrap()[0]["text"].clone();
    let text = text.as_str().unwrap();
    assert!(
        text.contains("elicitation capability") && text.contains("initialize"),
        "{text}"
    );
    assert_eq!(ledger.count("ask", LedgerEvent::Called), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_current_caller_without_the_capability_an_input_request_needs_gets_32021() {
    let (env, _ledger, _proxy, key) = setup("input-relay-32021").await;
    let day = Duration::from_secs(86_400);
    let (server, shutdown) =
        serve_connector_http(connector(&env, &key, "owner", day), loopback_http_options())
            .await
            .unwrap();
    let client = stateless_http_client(&server.url, ()).await.unwrap();
    let err = client
        .peer()
        .call_tool_once(tool_call("ask", json!({})))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("-32021") && text.contains("elicitation"),
        "{text}"
    );
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn a_native_tools_question_is_relayed_to_a_legacy_session_and_its_answer_acts() {
    let env = TestEnv::shared("input-relay-native").await;
    let _tools = example_tools(&env).await.unwrap();
    let key = durable_mcp::connector::task_ref::SigningKey::generate();
    let connector = crate::native_input::connector(&env, &key, "owner");
    let confirmer = Confirmer::default();
    let client = serve_in_memory(connector, confirmer.clone()).await.unwrap();
    let answer = client
        .peer()
        .call_tool_once(crate::native_input::delete_data())
        .await
        .unwrap();
    let CallToolResponse::Complete(done) = answer else {
        panic!("expected the result, got {answer:?}")
    };
    let text = serde_json::to_value(&done.content).unwrap()[0]["text"].clone();
    assert!(
        text.as_str().unwrap().starts_with("deleted"),
        "{text} {done:?}"
    );
    let asked = confirmer.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0]["message"].as_str().unwrap().contains("/data"),
        "{asked:?}"
    );
    client.cancel().await.unwrap();
}
