//! R-CON-48: every result the connector gives a 2026-07-28 request carries `resultType`
//! (`complete`, `task` or `input_required`, as the 2026-07-28 schema's `Result` requires), read
//! by a raw stateless HTTP client from the real connector binary in front of the dev server, the
//! proxy and the mock upstream serving its resources, prompts and completions; the methods
//! 2026-07-28 removed are -32601 with HTTP 404.

use std::time::Duration;

use durable_mcp_conformance::{
    fixtures::{
        Ledger, RawStatelessClient, ToolSpec, UpstreamSpec,
        ask_input::CONFIRM_KEY,
        server::features::{ITEM_TEMPLATE, TEXT_URI},
    },
    kit::{process::HttpConnectorProcess, upstreams::mock_stdio_upstream_with_args},
};
use serde_json::{Value, json};

use crate::support::*;

/// The tasks extension, as a request's client capabilities declare it.
fn tasks_extension() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// The standard mock with `ask`, a tool that asks for a confirmation.
fn asking_spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(
        serde_json::from_value::<ToolSpec>(json!({
            "name": "ask",
            "description": "Asks for a confirmation, then echoes it.",
            "annotations": {"readOnlyHint": true},
            "behavior": {"kind": "ask_input", "message": "Go on?"},
        }))
        .unwrap(),
    );
    spec
}

/// The answers whose `resultType` was not the one expected, each named.
#[derive(Default)]
struct Wrong(Vec<String>);

impl Wrong {
    /// `client`'s answer to `method`, noted when it is not a result with `resultType`
    /// `expected`.
    async fn result_of(
        &mut self,
        client: &mut RawStatelessClient,
        method: &str,
        params: Value,
        expected: &str,
    ) -> Value {
        let (status, answer) = client.exchange(method, params.clone()).await.unwrap();
        let result = answer.response["result"].clone();
        if (status, result["resultType"].as_str()) != (200, Some(expected)) {
            self.0.push(format!(
                "{method} {params}: HTTP {status}, expected resultType {expected:?}: {:.400}",
                answer.response.to_string()
            ));
        }
        result
    }

    /// Polls `tasks/get` until the task reads `status` (each answer must carry `resultType`).
    async fn task_reads(&mut self, client: &mut RawStatelessClient, task_id: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let get = json!({"taskId": task_id});
        loop {
            let task = self
                .result_of(client, "tasks/get", get.clone(), "complete")
                .await;
            if task["status"] == status {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the task never read {status}: {task}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The confirmation `ask` asks for, accepted.
fn confirmed() -> Value {
    json!({ CONFIRM_KEY: {"action": "accept", "content": {"confirm": true}} })
}

#[tokio::test]
async fn every_answer_to_a_current_request_carries_its_result_type() {
    let env = TestEnv::shared("result-types").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let spec_file = temp_path("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&asking_spec()).unwrap()).unwrap();
    let args = vec![
        "--spec".into(),
        spec_file.to_string_lossy().into_owned(),
        "--resources-and-prompts".into(),
    ];
    let upstream = mock_stdio_upstream_with_args("typed", args, &ledger).unwrap();
    let _proxy = start_proxy(&env, vec![upstream]);
    let connector = HttpConnectorProcess::start(&env, "typed", &["--task-after", "0s"])
        .await
        .unwrap();
    let mut plain = RawStatelessClient::new(&connector.url, json!({"elicitation": {}}));
    let mut wrong = Wrong::default();

    wrong
        .result_of(&mut plain, "server/discover", json!({}), "complete")
        .await;
    wrong
        .result_of(&mut plain, "tools/list", json!({}), "complete")
        .await;
    let echo = json!({"name": "echo", "arguments": {"key": "typed"}});
    wrong
        .result_of(&mut plain, "tools/call", echo, "complete")
        .await;
    let refused = json!({"name": "refuse", "arguments": {}});
    wrong
        .result_of(&mut plain, "tools/call", refused, "complete")
        .await;
    // A call that asks for input, answered by re-issuing it (SEP-2322).
    let ask = json!({"name": "ask", "arguments": {}});
    let asked = wrong
        .result_of(&mut plain, "tools/call", ask.clone(), "input_required")
        .await;
    let mut answered = ask.clone();
    answered["inputResponses"] = confirmed();
    answered["requestState"] = asked["requestState"].clone();
    wrong
        .result_of(&mut plain, "tools/call", answered, "complete")
        .await;
    for (method, params) in [
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        ("resources/read", json!({"uri": TEXT_URI})),
        ("prompts/list", json!({})),
        (
            "prompts/get",
            json!({"name": "greet", "arguments": {"who": "ada"}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": ITEM_TEMPLATE},
                   "argument": {"name": "id", "value": "1"}}),
        ),
    ] {
        wrong
            .result_of(&mut plain, method, params, "complete")
            .await;
    }

    // A caller with the tasks extension: with `--task-after 0s` every call is a task.
    let mut tasks = RawStatelessClient::new(&connector.url, tasks_extension());
    let slow = json!({"name": "slow", "arguments": {"key": "typed-task", "sleep_ms": 60000}});
    let created = wrong
        .result_of(&mut tasks, "tools/call", slow, "task")
        .await;
    let slow_id = created["taskId"].as_str().unwrap().to_owned();
    wrong.task_reads(&mut tasks, &slow_id, "working").await;
    let cancel = json!({"taskId": slow_id});
    wrong
        .result_of(&mut tasks, "tasks/cancel", cancel, "complete")
        .await;
    let created = wrong.result_of(&mut tasks, "tools/call", ask, "task").await;
    let ask_id = created["taskId"].as_str().unwrap().to_owned();
    wrong
        .task_reads(&mut tasks, &ask_id, "input_required")
        .await;
    let update = json!({"taskId": ask_id, "inputResponses": confirmed()});
    wrong
        .result_of(&mut tasks, "tasks/update", update, "complete")
        .await;
    wrong.task_reads(&mut tasks, &ask_id, "completed").await;
    assert!(wrong.0.is_empty(), "{:#?}", wrong.0);

    // What 2026-07-28 removed is not found, with the request's id (no result to type).
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
    ] {
        let (status, answer) = plain.exchange(method, json!({})).await.unwrap();
        assert_eq!(
            (status, &answer.response["error"]["code"]),
            (404, &json!(-32601)),
            "{method}: {}",
            answer.response
        );
    }
}
