//! Whether an answer is one (R-CNF-26): pure rules over what was sent and what came back.
//!
//! A request (a JSON-RPC 2.0 object with a string `method` and a string or integer `id`) must
//! get its response: over HTTP a 2xx with a JSON body or an event stream holding the response
//! under its id, or a 4xx (a refusal is an answer), or 503 (a cap); over stdio a line with the
//! response under its id. Anything else sent (a notification, a response, bytes that are no
//! request) needs no answer, but whatever comes back must be well-formed, and over stdio the
//! server must still answer a `ping` afterwards. A 5xx other than 503, a dropped connection, a
//! stream that ends without the response and a body that is no JSON-RPC are findings.

use serde_json::Value;

/// What went wrong with one case.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum Finding {
    /// The connection closed, or the stream ended, without the answer.
    NoAnswer(String),
    /// A 5xx other than 503.
    ServerError(u16),
    /// An answer that is no JSON-RPC, or not the request's.
    Malformed(String),
    /// Nothing within the time allowed.
    Hang,
}

impl Finding {
    /// A short name of the kind, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::NoAnswer(_) => "no answer",
            Finding::ServerError(_) => "5xx",
            Finding::Malformed(_) => "malformed answer",
            Finding::Hang => "hang",
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::NoAnswer(why) => write!(f, "no answer: {why}"),
            Finding::ServerError(status) => write!(f, "HTTP {status}"),
            Finding::Malformed(why) => write!(f, "malformed answer: {why}"),
            Finding::Hang => write!(f, "no answer in time (a hang)"),
        }
    }
}

/// The id a body asks an answer under, when it is a request: a JSON-RPC 2.0 object with a
/// string method and a string or integer id.
pub fn request_id(body: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let fields = value.as_object()?;
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return None;
    }
    fields.get("method")?.as_str()?;
    let id = fields.get("id")?;
    (id.is_string() || id.is_i64() || id.is_u64()).then(|| id.clone())
}

/// The method a body names, if it is JSON with a string `method`.
pub fn method_of(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value.get("method")?.as_str().map(str::to_owned)
}

/// What is wrong with `message` as a JSON-RPC message a server sends, if anything.
pub fn malformed(message: &Value) -> Option<String> {
    let Some(fields) = message.as_object() else {
        return Some(format!("not a JSON object: {}", excerpt(message)));
    };
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(format!("no \"jsonrpc\": \"2.0\": {}", excerpt(message)));
    }
    let (result, error) = (fields.get("result"), fields.get("error"));
    if fields.contains_key("method") {
        return None; // a request or notification of the server's
    }
    if !fields.contains_key("id") {
        return Some(format!("a response without an id: {}", excerpt(message)));
    }
    match (result, error) {
        (Some(_), None) => None,
        (None, Some(error)) => {
            let code = error.get("code").is_some_and(Value::is_i64);
            let text = error.get("message").is_some_and(Value::is_string);
            (!(code && text))
                .then(|| format!("an error without a code and message: {}", excerpt(message)))
        }
        _ => Some(format!(
            "neither one result nor one error: {}",
            excerpt(message)
        )),
    }
}

/// Whether `message` is the response to a request with `id`.
pub fn answers(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id) && message.get("method").is_none()
}

/// The messages of an event stream's text (`data:` lines joined per event); a data that is no
/// JSON is returned as an error.
pub fn sse_messages(text: &str) -> Vec<Result<Value, String>> {
    crate::fixtures::raw_http::sse_data(text)
        .into_iter()
        .filter(|data| !data.is_empty())
        .map(|data| {
            serde_json::from_str(&data).map_err(|_| format!("event data is no JSON: {data:.200}"))
        })
        .collect()
}

/// The verdict on an HTTP answer to `body`: `status`, its content type, and its body so far
/// (`complete`: the body ended; else the wait for it ran out).
pub fn judge_http(
    body: &[u8],
    long_lived: bool,
    status: u16,
    content_type: &str,
    answer: &[u8],
    complete: bool,
) -> Option<Finding> {
    if status >= 500 && status != 503 {
        return Some(Finding::ServerError(status));
    }
    let json = content_type.starts_with("application/json");
    let stream = content_type.starts_with("text/event-stream");
    if !(200..300).contains(&status) {
        // A refusal is an answer; a JSON one must be JSON.
        return (json && serde_json::from_slice::<Value>(answer).is_err()).then(|| {
            Finding::Malformed(format!(
                "HTTP {status} with a JSON type and a body that is no JSON: {}",
                bytes_excerpt(answer)
            ))
        });
    }
    let id = request_id(body);
    let messages = if stream {
        sse_messages(&String::from_utf8_lossy(answer))
    } else if json {
        vec![
            serde_json::from_slice(answer)
                .map_err(|_| format!("a body that is no JSON: {}", bytes_excerpt(answer))),
        ]
    } else if answer.is_empty() && id.is_none() {
        Vec::new() // 202 to a notification or response
    } else {
        return Some(Finding::Malformed(format!(
            "HTTP {status} of type {content_type:?}: {}",
            bytes_excerpt(answer)
        )));
    };
    for message in &messages {
        match message {
            Err(why) => return Some(Finding::Malformed(why.clone())),
            Ok(m) => {
                if let Some(why) = malformed(m) {
                    return Some(Finding::Malformed(why));
                }
            }
        }
    }
    let id = id?;
    let answered = messages.iter().flatten().any(|m| answers(m, &id));
    match (answered, long_lived && stream, complete) {
        (true, ..) | (false, true, _) => None,
        (false, false, true) => Some(Finding::NoAnswer(format!(
            "the {} answer ended without the response to id {id}",
            if stream { "event stream" } else { "JSON" }
        ))),
        (false, false, false) => Some(Finding::Hang),
    }
}

fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    text.chars().take(200).collect()
}

fn bytes_excerpt(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#;

    #[test]
    fn requests_are_objects_with_a_method_and_a_string_or_integer_id() {
        assert_eq!(request_id(CALL), Some(json!(7)));
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#),
            Some(json!("a"))
        );
        for no in [
            &br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..],
            br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":3}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
            b"\xff{",
        ] {
            assert_eq!(request_id(no), None, "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn a_request_needs_its_response_and_a_refusal_is_an_answer() {
        let ok = br#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        assert_eq!(
            judge_http(CALL, false, 200, "application/json", ok, true),
            None
        );
        let sse = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32602,\"message\":\"no\"}}\n\n";
        assert_eq!(
            judge_http(CALL, false, 200, "text/event-stream", sse, true),
            None
        );
        assert_eq!(
            judge_http(CALL, false, 400, "text/plain", b"Bad Request", true),
            None
        );
        assert_eq!(
            judge_http(CALL, false, 503, "text/plain", b"over the cap", true),
            None
        );
        let other = br#"{"jsonrpc":"2.0","id":8,"result":{}}"#;
        assert!(matches!(
            judge_http(CALL, false, 200, "application/json", other, true),
            Some(Finding::NoAnswer(_))
        ));
        assert_eq!(
            judge_http(CALL, false, 200, "text/event-stream", b"", false),
            Some(Finding::Hang)
        );
        assert_eq!(
            judge_http(CALL, false, 500, "application/json", b"{}", true),
            Some(Finding::ServerError(500))
        );
        assert!(matches!(
            judge_http(CALL, false, 400, "application/json", b"{", true),
            Some(Finding::Malformed(_))
        ));
        assert!(matches!(
            judge_http(CALL, false, 200, "text/html", b"<p>", true),
            Some(Finding::Malformed(_))
        ));
    }

    #[test]
    fn what_is_no_request_needs_no_response_but_must_be_well_formed() {
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(judge_http(note, false, 202, "", b"", true), None);
        assert_eq!(
            judge_http(
                b"{oops",
                false,
                400,
                "application/json",
                br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
                true
            ),
            None
        );
        let stream =
            b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n";
        assert_eq!(
            judge_http(CALL, true, 200, "text/event-stream", stream, false),
            None,
            "a long-lived stream"
        );
        assert!(matches!(
            judge_http(
                note,
                false,
                200,
                "text/event-stream",
                b"data: nope\n\n",
                true
            ),
            Some(Finding::Malformed(_))
        ));
    }

    #[test]
    fn server_messages_are_checked_for_their_shape() {
        assert_eq!(
            malformed(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            None
        );
        assert_eq!(
            malformed(&json!({"jsonrpc": "2.0", "method": "ping", "id": 3})),
            None
        );
        assert!(malformed(&json!({"jsonrpc": "2.0", "id": 1})).is_some());
        assert!(
            malformed(&json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}})).is_some()
        );
        assert!(
            malformed(&json!({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}))
                .is_some()
        );
        assert!(malformed(&json!([1])).is_some());
        assert_eq!(
            sse_messages("id: 1\ndata: {\"a\":1}\n\n: keep-alive\n\n").len(),
            1
        );
    }
}
