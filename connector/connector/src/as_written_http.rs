//! Answers over Streamable HTTP as written, byte for byte as the tool service wrote them
//! (R-CON-12).
//!
//! rmcp's HTTP service serves the connector's typed handler, so it writes rmcp's typed view of
//! `tools/list` and `tools/call` answers (`"priority": 1` would become `1.0`, unknown keys would
//! be dropped). This layer wraps that service: before rmcp sees a POST it puts an empty
//! [`HttpAnswers`] into the request's extensions; the handler, which gets the request's HTTP
//! parts from rmcp, keeps each answer as it is to be written there, by JSON-RPC id; and as the
//! response body goes out (one JSON body, or the events of an event stream, each passed on as
//! soon as it is complete so progress and log messages stay live) the response with that id is
//! written with [`written_result`] instead, keeping what rmcp decided for the peer. Everything
//! else passes byte for byte. A stateless request's answers live as long as the request: nothing
//! is kept once its response was written.
//!
//! Replays: rmcp keeps a session request's events (typed) for a `GET` with `Last-Event-ID`, the
//! way a client resumes a stream it lost, for a minute after the request completed. So a
//! session's answers are kept beside them (while the request runs and [`REPLAY_KEPT`]
//! after) and a replay is written with them too. Without a session (stateless
//! 2026-07-28 requests) rmcp keeps nothing to replay, and neither does this.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, Method, header::CONTENT_TYPE},
    middleware::Next,
    response::Response,
};
use futures::StreamExt as _;
use serde_json::Value;

use rmcp::{RoleServer, service::RequestContext};

pub use super::server::as_written::written_result;
use super::server::as_written::{self, HttpAnswers};

/// Keeps `value` (a `tools/list` answer's tools array, or a `CallToolResult`) as the answer to
/// `context`'s request as it is to be written, when the request came through
/// [`write_answers_as_written`]; otherwise does nothing. For any rmcp handler served behind the
/// layer (the connector's, or a test's MCP server that must write JSON rmcp's model would
/// change).
pub fn keep_answer(context: &RequestContext<RoleServer>, value: Value) {
    as_written::keep(None, context, value);
}

/// Axum middleware (`axum::middleware::from_fn(write_answers_as_written)`) around rmcp's
/// `StreamableHttpService` serving [`super::server::Connector::typed`]: its `tools/list` and
/// `tools/call` answers are written as the tool service gave them, also when a session's stream
/// is replayed. `durable-mcp-connector` mounts it; a library host mounting the connector itself
/// adds it the same way.
pub async fn write_answers_as_written(mut request: Request, next: Next) -> Response {
    let session = session_of(request.headers());
    if request.method() == Method::GET && request.headers().contains_key(LAST_EVENT_ID) {
        let response = next.run(request).await;
        return match session {
            Some(session) => {
                let lookup = move |id: &Value| REPLAYS.find(&session, id, Instant::now());
                rewrite_body(response, Arc::new(lookup)).await
            }
            None => response,
        };
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let answers = HttpAnswers::default();
    request.extensions_mut().insert(answers.clone());
    let lookup: Lookup = match session {
        Some(session) => {
            REPLAYS.keep(&session, &answers, Instant::now());
            Arc::new(move |id: &Value| answers.get(id))
        }
        None => Arc::new(move |id: &Value| answers.take(id)),
    };
    let response = next.run(request).await;
    rewrite_body(response, lookup).await
}

/// Finds the answer as written for a JSON-RPC response id.
type Lookup = Arc<dyn Fn(&Value) -> Option<Value> + Send + Sync>;

/// The response with its answers written from `lookup`: one JSON body, or the events of an
/// event stream, each passed on as soon as it is complete.
async fn rewrite_body(response: Response, lookup: Lookup) -> Response {
    let kind = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (parts, body) = response.into_parts();
    if kind.starts_with("application/json") {
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return Response::from_parts(parts, Body::empty());
        };
        let rewritten = rewrite_message(&bytes, &*lookup).map_or(bytes, Bytes::from);
        let mut parts = parts;
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(rewritten));
    }
    if !kind.starts_with("text/event-stream") {
        return Response::from_parts(parts, body);
    }
    let events = Arc::new(Mutex::new(EventSplitter::default()));
    let rest = events.clone();
    let stream = body
        .into_data_stream()
        .map(move |chunk| {
            chunk.map(|bytes| Bytes::from(events.lock().unwrap().push(&bytes, &*lookup)))
        })
        .chain(futures::stream::once(async move {
            Ok(Bytes::from(rest.lock().unwrap().finish()))
        }));
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Splits an event stream into whole events (ended by a blank line) and writes each one, its
/// answer rewritten, as soon as it is complete.
#[derive(Default)]
struct EventSplitter {
    pending: Vec<u8>,
}

impl EventSplitter {
    /// The complete events so far, rewritten; an incomplete one waits for more bytes.
    fn push(&mut self, bytes: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            out.extend(rewrite_event(&event, answers).unwrap_or(event));
        }
        out
    }

    /// What is left when the stream ends (an event without its blank line), unchanged.
    fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// One event (`field: value` lines and the blank line) with its `data` rewritten, if it is the
/// answer to a request that kept one; `None` leaves it as it is.
fn rewrite_event(event: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let lines: Vec<&str> = text.split('\n').collect();
    let mut data = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("data:"));
    let (at, line) = data.next()?;
    if data.next().is_some() {
        return None; // rmcp writes one data line per message
    }
    let value = &line["data:".len()..];
    let json = value.strip_prefix(' ').unwrap_or(value);
    let rewritten = rewrite_message(json.as_bytes(), answers)?;
    let mut out = String::with_capacity(text.len());
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if i == at {
            out.push_str("data: ");
            out.push_str(std::str::from_utf8(&rewritten).ok()?);
        } else {
            out.push_str(l);
        }
    }
    Some(out.into_bytes())
}

/// A JSON-RPC message rewritten when it answers a request whose answer was kept.
fn rewrite_message(json: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(json).ok()?;
    let object = message.as_object_mut()?;
    if object.contains_key("method") {
        return None;
    }
    let typed = object.get("result")?;
    let written = answers(object.get("id")?)?;
    let answer = written_result(typed, written)?;
    object.insert("result".into(), answer);
    serde_json::to_vec(&message).ok()
}

/// The session a request belongs to (`Mcp-Session-Id`), if any.
fn session_of(headers: &HeaderMap) -> Option<String> {
    let id = headers.get("mcp-session-id")?.to_str().ok()?;
    (!id.is_empty()).then(|| id.to_owned())
}

const LAST_EVENT_ID: &str = "last-event-id";

/// How long a session's answers stay for a replay once their request ended (its handler done
/// and its response written): rmcp keeps its typed copies a minute
/// (`SessionConfig::DEFAULT_COMPLETED_CACHE_TTL`); this outlasts them.
pub const REPLAY_KEPT: Duration = Duration::from_secs(90);

/// Pruned at most this often, so a busy connector does not scan every kept answer per request.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// Every session's answers for replays, process-wide: the layer is a plain function, and
/// session ids are random, so connectors sharing a process never see each other's. A replay
/// only reads its own session's answers; under inbound auth (R-CON-9, which runs first) only the
/// caller that opened a session can use its id.
static REPLAYS: LazyLock<Replays> = LazyLock::new(Replays::default);

/// The answers of session requests, by session id.
#[derive(Default)]
struct Replays(Mutex<ReplayState>);

#[derive(Default)]
struct ReplayState {
    sessions: HashMap<String, Vec<Kept>>,
    pruned: Option<Instant>,
}

/// One request's answers, and when its request was first seen ended.
struct Kept {
    answers: HttpAnswers,
    ended: Option<Instant>,
}

impl Replays {
    /// Keeps a session request's answers for replays.
    fn keep(&self, session: &str, answers: &HttpAnswers, now: Instant) {
        let mut state = self.0.lock().unwrap();
        state.prune(now);
        state
            .sessions
            .entry(session.to_owned())
            .or_default()
            .push(Kept {
                answers: answers.clone(),
                ended: None,
            });
    }

    /// The answer as written to the session's request with this JSON-RPC id.
    fn find(&self, session: &str, id: &Value, now: Instant) -> Option<Value> {
        let mut state = self.0.lock().unwrap();
        state.prune(now);
        state
            .sessions
            .get(session)?
            .iter()
            .rev()
            .find_map(|k| k.answers.get(id))
    }
}

impl ReplayState {
    /// Drops the answers of requests that ended over [`REPLAY_KEPT`] ago (at once when they
    /// kept none), at most every [`PRUNE_EVERY`].
    fn prune(&mut self, now: Instant) {
        if self
            .pruned
            .is_some_and(|at| now.saturating_duration_since(at) < PRUNE_EVERY)
        {
            return;
        }
        self.pruned = Some(now);
        self.sessions.retain(|_, kept| {
            kept.retain_mut(|k| {
                if k.answers.in_use() {
                    return true;
                }
                let ended = *k.ended.get_or_insert(now);
                !k.answers.is_empty() && now.saturating_duration_since(ended) < REPLAY_KEPT
            });
            !kept.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answers_with(id: Value, written: Value) -> HttpAnswers {
        let answers = HttpAnswers::default();
        answers.insert_for_test(&id, written);
        answers
    }

    fn taking(answers: &HttpAnswers) -> impl Fn(&Value) -> Option<Value> + '_ {
        move |id| answers.take(id)
    }

    #[test]
    fn answers_in_events_are_rewritten_and_everything_else_passes_byte_for_byte() {
        let written = json!({"content": [{"type": "text", "text": "x",
            "annotations": {"priority": 1}}], "x-extra": true});
        let answers = answers_with(json!(7), written);
        let progress = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1.0}}\nid: 0\n\n";
        let typed = b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\",\"annotations\":{\"priority\":1.0}}],\"resultType\":\"complete\"}}\nid: 1\n\n";
        let mut stream: Vec<u8> = Vec::new();
        stream.extend(b": keep-alive\n\n");
        stream.extend(progress);
        stream.extend(typed);
        let mut splitter = EventSplitter::default();
        let mut out = Vec::new();
        // Cut anywhere: events are written whole, as soon as they are complete.
        for chunk in stream.chunks(5) {
            out.extend(splitter.push(chunk, &taking(&answers)));
        }
        out.extend(splitter.finish());
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(events[0], ": keep-alive");
        assert_eq!(
            format!("{}\n\n", events[1]).as_bytes(),
            progress,
            "notifications pass unchanged"
        );
        let (data, id) = events[2].split_once('\n').unwrap();
        assert_eq!(id, "id: 1", "the event id stays");
        let message: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert!(message["result"]["content"][0]["annotations"]["priority"].is_u64());
        assert_eq!(message["result"]["x-extra"], true);
        assert_eq!(message["result"]["resultType"], "complete", "rmcp's choice");
        assert_eq!(message["id"], 7);
        assert!(answers.take(&json!(7)).is_none(), "taken once");
    }

    #[test]
    fn only_the_answer_with_the_kept_id_is_rewritten() {
        let answers = answers_with(json!("7"), json!({"content": [], "n": 1}));
        let other = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert!(
            rewrite_message(other, &taking(&answers)).is_none(),
            "a number id is not the string id"
        );
        let error = br#"{"jsonrpc":"2.0","id":"7","error":{"code":-32603,"message":"m"}}"#;
        assert!(rewrite_message(error, &taking(&answers)).is_none());
        let body = br#"{"jsonrpc":"2.0","id":"7","result":{"content":[]}}"#;
        let rewritten: Value =
            serde_json::from_slice(&rewrite_message(body, &taking(&answers)).unwrap()).unwrap();
        assert_eq!(rewritten["result"], json!({"content": [], "n": 1}));
    }

    #[test]
    fn a_sessions_answers_stay_for_replays_while_in_use_and_a_while_after() {
        let replays = Replays::default();
        let t0 = Instant::now();
        let answers = answers_with(json!(3), json!({"content": [], "n": 1}));
        replays.keep("s1", &answers, t0);
        replays.keep("s1", &HttpAnswers::default(), t0);
        assert_eq!(
            replays.find("s1", &json!(3), t0),
            Some(json!({"content": [], "n": 1}))
        );
        assert_eq!(replays.find("s2", &json!(3), t0), None, "another session's");
        // The request is still in flight (the handler holds its answers): kept however long.
        let later = t0 + REPLAY_KEPT * 3;
        assert!(replays.find("s1", &json!(3), later).is_some());
        drop(answers);
        let ended = later + PRUNE_EVERY;
        assert!(
            replays.find("s1", &json!(3), ended).is_some(),
            "kept after it ended"
        );
        assert_eq!(
            replays.0.lock().unwrap().sessions["s1"].len(),
            1,
            "a request that kept no answer is dropped at once"
        );
        let gone = ended + REPLAY_KEPT + PRUNE_EVERY;
        assert_eq!(replays.find("s1", &json!(3), gone), None);
        assert!(replays.0.lock().unwrap().sessions.is_empty());
    }
}
