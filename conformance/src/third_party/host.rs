//! The durable path as a host sees it (R-CNF-19): a connector in this process, serving
//! Streamable HTTP on loopback with `--task-after 0`, in front of the third-party run's proxy,
//! and a caller that declares the tasks extension and answers input requests, as Claude Code
//! does in interactive mode. A call that becomes a task is followed with `tasks/get` to its end;
//! the input requests it reads there are answered with `tasks/update`.

use std::time::{Duration, Instant};

use durable_mcp::connector::{http::HttpOptions, server::ConnectorOptions};
use rmcp::model::{JsonObject, TASKS_EXTENSION_ID};
use serde_json::{Value, json};
use tokio_util::sync::DropGuard;

use super::{CALL_TIMEOUT, DurablePath, Status, host_limits, synth};
use crate::{fixtures::RawHttpClient, kit::mcp::serve_connector_http};

/// How often the caller reads a task.
const POLL: Duration = Duration::from_millis(200);

/// A connector over HTTP in front of the durable path; stopped when dropped.
pub(super) struct HostPath {
    url: String,
    _stop: DropGuard,
}

/// A call followed through the connector as a task, to its end.
pub(super) struct Followed {
    pub task_id: String,
    /// The methods of the input requests answered with `tasks/update`, in order.
    pub answered: Vec<String>,
    /// The task's inlined result.
    pub result: Value,
}

impl HostPath {
    /// Serves a connector routing to `path`'s proxy, making every call of a task-capable
    /// caller a task at once (`--task-after 0`).
    pub async fn start(path: &DurablePath) -> anyhow::Result<Self> {
        let mut options = ConnectorOptions::new(Vec::new());
        options.task_after = Duration::ZERO;
        let connector = path.connector(options);
        let (server, stop) =
            serve_connector_http(connector, HttpOptions::new(([127, 0, 0, 1], 0).into())).await?;
        Ok(Self {
            url: server.url,
            _stop: stop.drop_guard(),
        })
    }

    /// A session as a host opens it: the tasks extension and every input capability declared.
    async fn caller(&self) -> Result<RawHttpClient, String> {
        let capabilities = json!({
            "extensions": {TASKS_EXTENSION_ID: {}},
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
        });
        RawHttpClient::initialize_with(&self.url, capabilities)
            .await
            .map_err(|e| format!("opening a session with the connector: {e:#}"))
    }

    /// The connector's listing of `tool` (what a host reads before calling it).
    pub async fn listed(&self, tool: &str) -> Option<Value> {
        let mut caller = self.caller().await.ok()?;
        let tools = caller.list_tools().await.ok()?;
        tools.into_iter().find(|t| t["name"] == tool)
    }

    /// Calls `tool` as a task-capable host and follows the task it becomes to its end,
    /// answering what it asks; why not, when it was answered at once or did not complete.
    pub async fn follow(&self, tool: &str, args: &JsonObject) -> Result<Followed, String> {
        let mut caller = self.caller().await?;
        let created = caller
            .call(tool, Value::Object(args.clone()))
            .await
            .map_err(|e| format!("tools/call through the connector: {e:#}"))?;
        if created["resultType"] != "task" {
            let support = self.listed(tool).await.map_or(Value::Null, |t| {
                t.pointer("/execution/taskSupport")
                    .cloned()
                    .unwrap_or(Value::Null)
            });
            let answered = match created["resultType"].as_str() {
                Some(kind) => format!("answered at once ({kind})"),
                None => "answered at once with its result".to_owned(),
            };
            return Err(format!(
                "{answered}, not as a task, though the caller declared the tasks extension and \
                 the connector's --task-after was 0; the connector lists it with \
                 execution.taskSupport {support}"
            ));
        }
        let task_id = created["taskId"]
            .as_str()
            .ok_or_else(|| format!("a task answer without a taskId: {created}"))?
            .to_owned();
        let (answered, result) = follow_task(&mut caller, &task_id).await?;
        Ok(Followed {
            task_id,
            answered,
            result,
        })
    }
}

/// Reads the task with `tasks/get` until it ends, answering each round of input requests with
/// `tasks/update`: the methods answered and the inlined result.
async fn follow_task(
    caller: &mut RawHttpClient,
    task_id: &str,
) -> Result<(Vec<String>, Value), String> {
    let deadline = Instant::now() + CALL_TIMEOUT;
    let mut answered = Vec::new();
    let mut last_asked = Value::Null;
    loop {
        let task = caller
            .request("tasks/get", json!({"taskId": task_id}))
            .await
            .map_err(|e| format!("tasks/get: {e:#}"))?;
        match task["status"].as_str() {
            Some("completed") => return Ok((answered, task["result"].clone())),
            Some("input_required") if task["inputRequests"] != last_asked => {
                let requests = &task["inputRequests"];
                let responses = answers(requests)?;
                answered.extend(methods(requests));
                caller
                    .request(
                        "tasks/update",
                        json!({"taskId": task_id, "inputResponses": responses}),
                    )
                    .await
                    .map_err(|e| format!("tasks/update: {e:#}"))?;
                last_asked = requests.clone();
            }
            Some("working" | "input_required") => {}
            _ => return Err(format!("the task ended {}", truncate(&task.to_string()))),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the task had not ended after {} s",
                CALL_TIMEOUT.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The methods of a round's input requests.
fn methods(requests: &Value) -> Vec<String> {
    let asked = requests.as_object().into_iter().flat_map(|m| m.values());
    asked
        .map(|r| r["method"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// What a host answers to each input request of a round (`inputResponses`, by key): a form is
/// accepted with content built from its `requestedSchema`, a URL accepted, a message sampled
/// with a fixed text, roots answered with none.
pub(super) fn answers(requests: &Value) -> Result<Value, String> {
    let Some(requests) = requests.as_object() else {
        return Err(format!("inputRequests is not an object: {requests}"));
    };
    let mut responses = serde_json::Map::new();
    for (key, request) in requests {
        let answer = match request["method"].as_str() {
            Some("elicitation/create") if request["params"]["mode"] == "url" => {
                json!({"action": "accept"})
            }
            Some("elicitation/create") => {
                let schema = &request["params"]["requestedSchema"];
                let content = synth::synthesize(schema)
                    .map_err(|why| format!("no answer fits the form {key:?} asks for ({why})"))?;
                json!({"action": "accept", "content": content})
            }
            Some("sampling/createMessage") => json!({
                "role": "assistant",
                "content": {"type": "text", "text": "A sample from durable-mcp-conformance."},
                "model": "durable-mcp-conformance",
                "stopReason": "endTurn",
            }),
            Some("roots/list") => json!({"roots": []}),
            other => return Err(format!("{key:?} asks {other:?}, which no host answers")),
        };
        responses.insert(key.clone(), answer);
    }
    Ok(Value::Object(responses))
}

/// The verdict on a call followed as a task: it must have become one, with an ID a host takes,
/// and completed; `asked` says whether it had to ask for input on the way.
pub(super) fn verdict(followed: &Result<Followed, String>, asked: bool) -> (Status, String) {
    let followed = match followed {
        Ok(f) => f,
        Err(why) => return (Status::Fail(why.clone()), String::new()),
    };
    if let Some(why) = host_limits::task_id_refusal(&followed.task_id) {
        return (
            Status::Fail(format!(
                "it became a task and was followed to its end, but {why}"
            )),
            String::new(),
        );
    }
    if asked && followed.answered.is_empty() {
        return (
            Status::Fail(
                "it asked for input directly, but its task never read input_required".into(),
            ),
            String::new(),
        );
    }
    let input = if followed.answered.is_empty() {
        String::new()
    } else {
        format!(
            ", asked for {} (answered with tasks/update)",
            followed.answered.join(", ")
        )
    };
    let error = if followed.result["isError"] == true {
        " (a tool error)"
    } else {
        ""
    };
    (
        Status::Pass,
        format!(
            "became a task through the connector (ID {} characters){input}, followed with \
             tasks/get to its result{error}",
            followed.task_id.chars().count()
        ),
    )
}

fn truncate(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_answers_forms_urls_samples_and_roots() {
        let requests = json!({
            "confirm": {"method": "elicitation/create", "params": {"message": "?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                    "required": ["ok"]}}},
            "visit": {"method": "elicitation/create",
                      "params": {"mode": "url", "url": "https://x"}},
            "sample": {"method": "sampling/createMessage", "params": {"messages": []}},
            "roots": {"method": "roots/list"},
        });
        let got = answers(&requests).unwrap();
        assert_eq!(
            got["confirm"],
            json!({"action": "accept", "content": {"ok": false}})
        );
        assert_eq!(got["visit"], json!({"action": "accept"}));
        assert_eq!(got["sample"]["role"], "assistant");
        assert_eq!(got["roots"], json!({"roots": []}));
        let odd = answers(&json!({"k": {"method": "ping"}})).unwrap_err();
        assert!(odd.contains("no host answers"), "{odd}");
        assert_eq!(methods(&requests).len(), 4);
    }

    #[test]
    fn a_task_passes_only_with_an_id_a_host_takes_and_the_input_it_asked() {
        let followed = |chars, answered: &[&str]| {
            Ok(Followed {
                task_id: "t".repeat(chars),
                answered: answered.iter().map(|m| m.to_string()).collect(),
                result: json!({"content": []}),
            })
        };
        let (status, detail) = verdict(&followed(100, &[]), false);
        assert_eq!(status, Status::Pass);
        assert!(detail.contains("ID 100 characters"), "{detail}");
        assert!(
            matches!(verdict(&followed(250, &[]), false).0, Status::Fail(w) if w.contains("250"))
        );
        assert!(matches!(
            verdict(&followed(100, &[]), true).0,
            Status::Fail(_)
        ));
        let (status, detail) = verdict(&followed(100, &["elicitation/create"]), true);
        assert_eq!(status, Status::Pass);
        assert!(detail.contains("asked for elicitation/create"), "{detail}");
        assert!(matches!(verdict(&Err("boom".into()), false).0, Status::Fail(w) if w == "boom"));
    }
}
