//! A scripted stand-in for Claude Code's model: the Messages API on loopback
//! (`ANTHROPIC_BASE_URL`), so Claude Code runs for real while nothing leaves the machine.
//!
//! It plays one turn at a time: when a user message holds the turn's marker and the turn's
//! tool is listed, it answers with one `tool_use` block; when the host sends the `tool_result`,
//! it answers with text (or, for a turn that stops its task, with a `TaskStop` tool use naming
//! the background task Claude Code reported). It keeps every `tool_result` and every
//! `<task-notification>` Claude Code sent: what the host made of the server's answers.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use axum::{Router, extract::State as AxumState, response::IntoResponse, routing::post};
use serde_json::{Value, json};

/// One scripted turn.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Text of the prompt typed for this turn; the tool use answers only a message holding it.
    pub marker: String,
    /// `mcp__<server>__<tool>`.
    pub tool: String,
    pub input: Value,
    /// When the host reports the call moved to a background task, stop it with `TaskStop`.
    pub stop_task: bool,
}

/// What Claude Code told the model when a background task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Claude Code's own id of the background task.
    pub task_id: String,
    pub status: String,
    pub result: String,
}

/// The stand-in's record, read by the driver.
#[derive(Debug, Default)]
pub struct Record {
    turn: Option<Turn>,
    /// The id of the tool use answered for the current turn.
    pub issued: Option<String>,
    /// The id of the `TaskStop` tool use, once sent.
    pub stop: Option<String>,
    /// Requests whose last user message held the turn's marker before its tool use was
    /// issued: how the driver knows the prompt it typed reached the model.
    pub asked: usize,
    /// Of those, the ones sent while the turn's tool was not listed yet (MCP servers connect
    /// in the background): the prompt is typed again.
    pub unlisted: usize,
    /// Every `tool_result` block, by tool use id.
    pub results: BTreeMap<String, Value>,
    pub notifications: Vec<Notification>,
    /// A line per request (the last [`Record::KEPT`]): what it held and what was answered,
    /// for a failure message.
    pub requests: std::collections::VecDeque<String>,
    next_id: usize,
}

impl Record {
    /// Starts `turn`.
    pub fn begin(&mut self, turn: Turn) {
        self.turn = Some(turn);
        self.issued = None;
        self.stop = None;
        self.asked = 0;
        self.unlisted = 0;
    }

    const KEPT: usize = 12;

    /// The blocks and stop reason answering one Messages API request `body` (pure apart from
    /// this record), noted in [`Record::requests`].
    pub fn answer(&mut self, body: &Value) -> (Vec<Value>, &'static str) {
        let (blocks, stop) = self.reply(body);
        let tools = body["tools"].as_array().map_or(0, Vec::len);
        let text: String = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| content_blocks(&m["content"]))
            .unwrap_or_default()
            .iter()
            .map(|b| {
                b["text"]
                    .as_str()
                    .map_or(format!("[{}]", b["type"]), cut_line)
            })
            .collect::<Vec<_>>()
            .join(" ");
        let answered: Vec<String> = blocks
            .iter()
            .map(|b| {
                b["name"]
                    .as_str()
                    .map_or("text".into(), |n| format!("tool_use {n}"))
            })
            .collect();
        if self.requests.len() == Self::KEPT {
            self.requests.pop_front();
        }
        self.requests.push_back(format!(
            "{tools} tools, last message {text:?} -> {}",
            answered.join(", ")
        ));
        (blocks, stop)
    }

    fn reply(&mut self, body: &Value) -> (Vec<Value>, &'static str) {
        let last_user = body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .cloned()
            .unwrap_or(Value::Null);
        let blocks = content_blocks(&last_user["content"]);
        let mut got_result = None;
        for block in &blocks {
            if block["type"] == "tool_result"
                && let Some(id) = block["tool_use_id"].as_str()
            {
                self.results.insert(id.to_owned(), block.clone());
                got_result = Some(id.to_owned());
            }
            if let Some(text) = block["text"].as_str() {
                self.notifications.extend(notifications(text));
            }
        }
        let Some(turn) = self.turn.clone() else {
            return (vec![text_block("ok")], "end_turn");
        };
        // A result for an earlier turn's call (Claude Code sends one for an interrupted call
        // with the next prompt) is kept, but does not end this turn.
        if let Some(id) = got_result.filter(|id| Some(id) == self.issued.as_ref()) {
            if turn.stop_task && self.stop.is_none() {
                let text = result_text(&self.results[&id]);
                if let Some(task) = between(&text, "TaskStop with task_id \"", "\"") {
                    let use_id = self.fresh_id();
                    self.stop = Some(use_id.clone());
                    return (
                        vec![tool_use(&use_id, "TaskStop", json!({"task_id": task}))],
                        "tool_use",
                    );
                }
            }
            return (vec![text_block("done")], "end_turn");
        }
        let holds_marker = blocks
            .iter()
            .any(|b| b["text"].as_str().is_some_and(|t| t.contains(&turn.marker)));
        if holds_marker && self.issued.is_none() {
            self.asked += 1;
            let listed = body["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|t| t["name"] == turn.tool.as_str()));
            if listed {
                let id = self.fresh_id();
                self.issued = Some(id.clone());
                return (
                    vec![tool_use(&id, &turn.tool, turn.input.clone())],
                    "tool_use",
                );
            }
            self.unlisted += 1;
        }
        (vec![text_block("ok")], "end_turn")
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("toolu_standin_{:04}", self.next_id)
    }
}

/// The end of a text block, on one line.
fn cut_line(text: &str) -> String {
    let chars: Vec<char> = text.chars().filter(|c| !c.is_control()).collect();
    chars[chars.len().saturating_sub(60)..].iter().collect()
}

fn content_blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// The text of a `tool_result` block: its string content, or its text blocks joined (other
/// blocks as `[<type>]`).
pub fn result_text(block: &Value) -> String {
    match &block["content"] {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(|b| match b["text"].as_str() {
                Some(t) => t.to_owned(),
                None => format!("[{}]", b["type"].as_str().unwrap_or("?")),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &text[text.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

/// The `<task-notification>`s in a user text block.
pub fn notifications(text: &str) -> Vec<Notification> {
    text.split("<task-notification>")
        .skip(1)
        .filter_map(|part| {
            let part = part.split("</task-notification>").next()?;
            Some(Notification {
                task_id: between(part, "<task-id>", "</task-id>")?.trim().to_owned(),
                status: between(part, "<status>", "</status>")?.trim().to_owned(),
                result: between(part, "<result>", "</result>")
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            })
        })
        .collect()
}

/// The server-sent events of a streamed message holding `blocks`.
pub fn events(id: &str, blocks: &[Value], stop_reason: &str) -> String {
    let mut out = Vec::new();
    let usage = json!({"input_tokens": 1, "output_tokens": 1});
    out.push((
        "message_start",
        json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": "stand-in", "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    ));
    for (index, block) in blocks.iter().enumerate() {
        let (start, delta) = if block["type"] == "tool_use" {
            let mut start = block.clone();
            start["input"] = json!({});
            let partial = block["input"].to_string();
            (
                start,
                json!({"type": "input_json_delta", "partial_json": partial}),
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            )
        };
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        out.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push(("message_delta", json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 1}})));
    out.push(("message_stop", json!({"type": "message_stop"})));
    out.iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// The running stand-in; it stops when dropped.
pub struct StandIn {
    pub url: String,
    pub record: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    pub async fn start() -> anyhow::Result<Self> {
        let record = Arc::new(Mutex::new(Record::default()));
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .with_state(record.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, record, task })
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> T {
        f(&mut self.record.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn messages(
    AxumState(record): AxumState<Arc<Mutex<Record>>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (blocks, stop) = record
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .answer(&body);
    let id = format!("msg_standin_{}", uuid::Uuid::new_v4().simple());
    if body["stream"] == true {
        let sse = events(&id, &blocks, stop);
        return ([("content-type", "text/event-stream")], sse).into_response();
    }
    axum::Json(
        json!({"id": id, "type": "message", "role": "assistant", "model": "stand-in",
        "content": blocks, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 1, "output_tokens": 1}}),
    )
    .into_response()
}

async fn count_tokens() -> axum::Json<Value> {
    axum::Json(json!({"input_tokens": 1}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(stop_task: bool) -> Turn {
        Turn {
            marker: "hosts step 1".into(),
            tool: "mcp__mock__slow".into(),
            input: json!({"key": "k"}),
            stop_task,
        }
    }

    fn request(content: Value, tools: &[&str]) -> Value {
        let tools: Vec<_> = tools.iter().map(|t| json!({"name": t})).collect();
        json!({"messages": [{"role": "user", "content": content}], "tools": tools, "stream": true})
    }

    #[test]
    fn the_tool_is_used_once_its_listed_and_the_result_kept() {
        let mut record = Record::default();
        record.begin(turn(false));
        let (blocks, _) = record.answer(&request(json!("hosts step 1"), &["Bash"]));
        assert_eq!(blocks[0]["type"], "text");
        assert_eq!((record.asked, record.unlisted), (1, 1));
        let (blocks, stop) = record.answer(&request(json!("hosts step 1"), &["mcp__mock__slow"]));
        assert_eq!(
            (blocks[0]["name"].as_str(), stop),
            (Some("mcp__mock__slow"), "tool_use")
        );
        let id = record.issued.clone().unwrap();
        let result = json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "hi"}]}]);
        let (blocks, _) = record.answer(&request(result, &["mcp__mock__slow"]));
        assert_eq!(blocks[0]["text"], "done");
        assert_eq!(result_text(&record.results[&id]), "hi");
        // A later message with the marker uses no tool again.
        let (blocks, _) = record.answer(&request(json!("hosts step 1"), &["mcp__mock__slow"]));
        assert_eq!(blocks[0]["type"], "text");
        assert_eq!((record.asked, record.unlisted), (2, 1));
    }

    #[test]
    fn an_earlier_calls_result_sent_with_the_next_prompt_does_not_end_the_turn() {
        let mut record = Record::default();
        record.begin(turn(false));
        let interrupted = json!([
            {"type": "tool_result", "tool_use_id": "toolu_old", "content": "interrupted", "is_error": true},
            {"type": "text", "text": "hosts step 1"}
        ]);
        let (blocks, _) = record.answer(&request(interrupted, &["mcp__mock__slow"]));
        assert_eq!(blocks[0]["type"], "tool_use");
        assert!(record.results.contains_key("toolu_old"));
    }

    #[test]
    fn a_background_task_is_stopped_when_the_turn_says_so() {
        let mut record = Record::default();
        record.begin(turn(true));
        record.answer(&request(json!("hosts step 1"), &["mcp__mock__slow"]));
        let id = record.issued.clone().unwrap();
        let text = "It was moved to the background as task kx1. To stop it, use TaskStop with task_id \"kx1\"; ...";
        let result = json!([{"type": "tool_result", "tool_use_id": id, "content": text}]);
        let (blocks, stop) = record.answer(&request(result, &[]));
        assert_eq!(
            (blocks[0]["name"].as_str(), stop),
            (Some("TaskStop"), "tool_use")
        );
        assert_eq!(blocks[0]["input"], json!({"task_id": "kx1"}));
    }

    #[test]
    fn task_notifications_are_read() {
        let text = "<system-reminder>\n<task-notification>\n<task-id>k5</task-id>\n<status>completed</status>\n\
                    <summary>MCP task x completed.</summary>\n<result>\n{\"key\":\"k1\"}\n</result>\n</task-notification>";
        assert_eq!(
            notifications(text),
            vec![Notification {
                task_id: "k5".into(),
                status: "completed".into(),
                result: "{\"key\":\"k1\"}".into()
            }]
        );
    }

    #[test]
    fn a_streamed_tool_use_carries_its_input_as_a_json_delta() {
        let sse = events("m", &[tool_use("t1", "x", json!({"a": 1}))], "tool_use");
        assert!(sse.starts_with("event: message_start\n"));
        assert!(sse.contains(r#""partial_json":"{\"a\":1}""#), "{sse}");
        assert!(sse.contains(r#""stop_reason":"tool_use""#));
    }
}
