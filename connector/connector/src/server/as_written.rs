//! Answers as written, byte for byte as the tool service wrote them (R-CON-12). rmcp's typed
//! model changes what passes through it: numbers take the field's type (`"priority": 1` becomes
//! `1.0`) and fields it has no place for are dropped (a tool's `execution`, unknown annotation
//! keys). So the connector is an rmcp `Service` of its own: its typed handler
//! ([`super::Typed`]) does the protocol work (version checks, `resultType`, cache hints), and for
//! `tools/list` and `tools/call` the JSON as it is to be written travels beside the typed answer
//! and replaces it, keeping only what rmcp decided for this peer (`resultType`, `ttlMs`,
//! `cacheScope`, and the legacy peers' rule that structured output is an object).

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{Arc, Mutex},
};

use rmcp::{
    ErrorData as McpError, RoleServer, Service,
    model::{
        ClientNotification, ClientRequest, CustomResult, ProtocolVersion, RequestId, ServerConfig,
        ServerResult,
    },
    service::{NotificationContext, RequestContext},
};
use serde_json::Value;

use super::Connector;

/// The answer to one request as it is to be written, if the typed handler set one: the slot of
/// one request served through the connector's own `Service` (stdio, library hosts).
#[derive(Clone, Default)]
pub(crate) struct Written(Arc<Mutex<Option<Value>>>);

impl Written {
    fn keep(&self, value: Value) {
        *self.0.lock().unwrap() = Some(value);
    }

    fn take(&self) -> Option<Value> {
        self.0.lock().unwrap().take()
    }
}

/// The answers of one HTTP request as they are to be written, by JSON-RPC id: put in the
/// request's extensions by the `as_written_http` middleware before rmcp sees the
/// request, filled by the typed handler (rmcp hands the request's HTTP parts to it), and taken
/// when the response body is written. It lives as long as that one request, so nothing outlives
/// the answer (a session's are also kept a while for replays, within bounds, R-CON-38).
#[derive(Clone, Default)]
pub struct HttpAnswers(Arc<Mutex<Answers>>);

#[derive(Default)]
struct Answers {
    by_id: HashMap<String, Value>,
    /// The memory what `by_id` holds takes ([`held_len`]).
    bytes: usize,
    /// Called after each answer is kept: the replay store checks its byte bounds then, since
    /// answers arrive after their request was kept (R-CON-38).
    on_insert: Option<Arc<dyn Fn(usize) + Send + Sync>>,
}

impl HttpAnswers {
    /// The answer kept for the JSON-RPC response with this `id`, taken once.
    pub fn take(&self, id: &Value) -> Option<Value> {
        let mut answers = self.0.lock().unwrap();
        let taken = answers.by_id.remove(&id.to_string())?;
        answers.bytes = answers.bytes.saturating_sub(held_len(&taken));
        Some(taken)
    }

    /// The answer kept for the JSON-RPC response with this `id`, kept for a later replay.
    pub fn get(&self, id: &Value) -> Option<Value> {
        self.0.lock().unwrap().by_id.get(&id.to_string()).cloned()
    }

    /// Whether anything besides the caller holds these answers: the request's handler or its
    /// response body (both end with the request).
    pub(crate) fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().unwrap().by_id.is_empty()
    }

    /// The JSON length of the answers held, for the replay store's byte bounds.
    pub(crate) fn bytes(&self) -> usize {
        self.0.lock().unwrap().bytes
    }

    #[cfg(test)]
    pub(crate) fn insert_for_test(&self, id: &Value, value: Value) {
        self.insert(id.to_string(), value);
    }

    fn keep(&self, id: &RequestId, value: Value) {
        if let Ok(id) = serde_json::to_value(id) {
            self.insert(id.to_string(), value);
        }
    }

    /// Calls `hook` with the bytes held after each answer is kept from now on.
    pub(crate) fn on_insert(&self, hook: Arc<dyn Fn(usize) + Send + Sync>) {
        self.0.lock().unwrap().on_insert = Some(hook);
    }

    fn insert(&self, id: String, value: Value) {
        let hook = {
            let mut answers = self.0.lock().unwrap();
            answers.bytes += held_len(&value);
            if let Some(old) = answers.by_id.insert(id, value) {
                answers.bytes = answers.bytes.saturating_sub(held_len(&old));
            }
            (answers.on_insert.clone(), answers.bytes)
        };
        // Outside this lock: the hook locks the store, which locks each request's answers.
        if let (Some(hook), bytes) = hook {
            hook(bytes);
        }
    }
}

/// About how much memory `value` holds beyond its own [`Value`] (R-CON-38): a `Value` per
/// array item, each string's and key's bytes, and a map entry's own overhead. The replay
/// bounds count this, not the JSON length: `[0,0,...]` is 2 bytes a number as JSON but a
/// whole `Value` each in memory.
fn held_len(value: &Value) -> usize {
    const NODE: usize = std::mem::size_of::<Value>();
    const ENTRY: usize = std::mem::size_of::<(String, Value)>() + 2 * std::mem::size_of::<usize>();
    let mut held = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => held += s.len(),
            Value::Array(items) => {
                held += items.len() * NODE;
                stack.extend(items);
            }
            Value::Object(map) => {
                for (key, item) in map {
                    held += ENTRY + key.len();
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    held
}

/// Keeps the answer to `context`'s request as it is to be written: in the HTTP request's
/// [`HttpAnswers`] when it came over HTTP, else in `written` (the connector's own `Service`
/// takes it). A handler with neither (rmcp's HTTP service without the rewriting layer) keeps
/// nothing.
pub(crate) fn keep(written: Option<&Written>, context: &RequestContext<RoleServer>, value: Value) {
    let http = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<HttpAnswers>());
    match (http, written) {
        (Some(answers), _) => answers.keep(&context.id, value),
        (None, Some(written)) => written.keep(value),
        (None, None) => {}
    }
}

/// Marks a feature answer (R-CON-45) as written: the routes' result object, whole.
const FEATURE_WRITTEN: &str = "io.durable-mcp/featureAsWritten";

/// A feature answer as written, for [`keep`].
pub(crate) fn feature_written(raw: Value) -> Value {
    serde_json::json!({ FEATURE_WRITTEN: raw })
}

fn feature_raw(written: &Value) -> Option<&Value> {
    let object = written.as_object()?;
    (object.len() == 1).then(|| object.get(FEATURE_WRITTEN))?
}

/// A feature answer as written (R-CON-45): the upstream's result, with what rmcp decided for
/// this peer (`resultType`, `ttlMs`, `cacheScope`) taken from the typed answer.
fn feature_result(typed: &Value, raw: Value) -> Value {
    let Value::Object(mut answer) = raw else {
        return typed.clone();
    };
    for key in ["resultType", "ttlMs", "cacheScope"] {
        match typed.get(key) {
            Some(v) => answer.insert(key.into(), v.clone()),
            None => answer.remove(key),
        };
    }
    Value::Object(answer)
}

/// The typed answer with the written JSON in place of rmcp's re-serialisation.
fn written_answer(typed: ServerResult, written: Value) -> ServerResult {
    let Ok(typed_json) = serde_json::to_value(&typed) else {
        return typed;
    };
    match written_result(&typed_json, written) {
        Some(answer) => ServerResult::CustomResult(CustomResult(answer)),
        None => typed,
    }
}

/// A `tools/list` or `tools/call` result as it is to be written: `written` (the tools array, or
/// the CallToolResult) in place of what rmcp serialised (`typed`), keeping what rmcp decided for
/// this peer. `None` keeps rmcp's answer (the written JSON does not fit this answer).
pub fn written_result(typed: &Value, written: Value) -> Option<Value> {
    if let Some(raw) = feature_raw(&written) {
        return Some(feature_result(typed, raw.clone()));
    }
    match written {
        Value::Array(mut tools) => {
            let typed_tools = typed.get("tools")?.as_array()?;
            if typed_tools.len() != tools.len() {
                return None;
            }
            for (tool, typed_tool) in tools.iter_mut().zip(typed_tools) {
                // rmcp drops a non-object outputSchema for legacy peers: so does this.
                if typed_tool.get("outputSchema").is_none()
                    && let Value::Object(tool) = tool
                {
                    tool.remove("outputSchema");
                }
            }
            let mut answer = typed.as_object()?.clone();
            answer.insert("tools".into(), Value::Array(tools));
            Some(Value::Object(answer))
        }
        Value::Object(mut answer) => {
            // rmcp moved non-object structured content into the text for a legacy peer.
            if typed.get("structuredContent").is_none() && answer.contains_key("structuredContent")
            {
                return None;
            }
            typed.get("content")?;
            match typed.get("resultType") {
                Some(t) => answer.insert("resultType".into(), t.clone()),
                None => answer.remove("resultType"),
            };
            Some(Value::Object(answer))
        }
        _ => None,
    }
}

impl Service<RoleServer> for Connector {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let method = request.method().to_owned();
        super::catch_panics::answer_catching(&method, self.answer_as_written(request, context))
            .await
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handler = self.typed_sharing_level();
        let handled = handler.handle_notification(notification, context);
        let handled = durable_mcp_runtime::panics::catching(
            durable_mcp_runtime::panics::NOTIFICATION,
            handled,
        );
        handled.await.unwrap_or(Ok(()))
    }

    fn get_info(&self) -> ServerConfig {
        Service::get_info(&self.typed())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Service::supported_protocol_versions(&self.typed())
    }
}

impl Connector {
    /// One request's answer, as written where the tool service wrote it.
    async fn answer_as_written(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let answered_as_written = matches!(
            request,
            ClientRequest::ListToolsRequest(_)
                | ClientRequest::CallToolRequest(_)
                | ClientRequest::ListResourcesRequest(_)
                | ClientRequest::ListResourceTemplatesRequest(_)
                | ClientRequest::ReadResourceRequest(_)
                | ClientRequest::ListPromptsRequest(_)
                | ClientRequest::GetPromptRequest(_)
                | ClientRequest::CompleteRequest(_)
        );
        let handler = self.typed_sharing_level();
        if let ClientRequest::SubscriptionsListenRequest(listen) = &request {
            handler.before_listen(&listen.params.notifications).await;
        }
        let typed = handler.handle_request(request, context).await?;
        let written = handler.written.as_ref().and_then(Written::take);
        Ok(match written {
            Some(written) if answered_as_written => written_answer(typed, written),
            _ => typed,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_an_answer_holds_counts_its_memory_not_its_json() {
        let zeros = Value::Array(vec![json!(0); 1000]);
        let as_json = serde_json::to_vec(&zeros).unwrap().len();
        assert!(held_len(&zeros) >= 1000 * std::mem::size_of::<Value>());
        assert!(
            held_len(&zeros) > 8 * as_json,
            "{} vs {as_json}",
            held_len(&zeros)
        );
        let text = json!({"content": [{"type": "text", "text": "x".repeat(10_000)}]});
        let held = held_len(&text);
        assert!((10_000..10_000 + 1024).contains(&held), "{held}");
    }
    use rmcp::model::{CallToolResult, ListToolsResult, ResultType, Tool};
    use serde_json::json;

    use super::*;

    #[test]
    fn written_listings_keep_unknown_fields_and_integers() {
        let tool = json!({"name": "t", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "x-cost": 3},
            "icons": [{"src": "https://example.com/i.png"}],
            "execution": {"taskSupport": "optional"}});
        let typed = ServerResult::ListToolsResult(ListToolsResult::with_all_items(vec![
            serde_json::from_value::<Tool>(tool.clone()).unwrap(),
        ]));
        let ServerResult::CustomResult(CustomResult(answer)) =
            written_answer(typed, json!([tool.clone()]))
        else {
            panic!("not rewritten")
        };
        assert_eq!(answer["tools"][0], tool);
    }

    #[test]
    fn written_results_keep_integers_and_take_rmcps_result_type() {
        let raw = json!({"content": [{"type": "text", "text": "x",
            "annotations": {"priority": 1}}], "extra": {"n": 2}});
        let mut typed: CallToolResult = serde_json::from_value(raw.clone()).unwrap();
        typed.result_type = Some(ResultType::COMPLETE);
        let ServerResult::CustomResult(CustomResult(answer)) =
            written_answer(ServerResult::CallToolResult(typed.clone()), raw.clone())
        else {
            panic!("not rewritten")
        };
        assert!(answer["content"][0]["annotations"]["priority"].is_u64());
        assert_eq!(answer["extra"], json!({"n": 2}));
        assert_eq!(answer["resultType"], "complete");

        typed.result_type = None;
        let mut with_type = raw.clone();
        with_type["resultType"] = json!("complete");
        let ServerResult::CustomResult(CustomResult(answer)) =
            written_answer(ServerResult::CallToolResult(typed), with_type)
        else {
            panic!("not rewritten")
        };
        assert_eq!(answer, raw, "a legacy peer gets no resultType");
    }
}
