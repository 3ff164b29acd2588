//! A POST body rmcp cannot read gets a JSON-RPC error, not 415 (R-CON-30).
//!
//! rmcp's Streamable HTTP service answers a JSON POST whose body does not deserialize into a
//! client message with `415 Unsupported Media Type` and a plain-text reason, which reads as a
//! wrong `Content-Type`. The MCP transport has a server that cannot accept the input answer an
//! HTTP error status (its example: 400 Bad Request) whose body may be a JSON-RPC error, and
//! JSON-RPC 2.0 names the codes: -32700 for a body that is not JSON, -32600 for JSON that is
//! not a JSON-RPC 2.0 message, -32602 for a request whose `params` do not fit its method. This
//! layer sits in front of rmcp: it keeps the body (up to the size rmcp reads), and when rmcp
//! answers 415 to a POST that did say `Content-Type: application/json`, it answers 400 with the
//! JSON-RPC error instead. A wrong `Content-Type` still gets rmcp's 415, a missing `Accept` its
//! 406, and a readable body costs no second parse.

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header::CONTENT_TYPE},
    middleware::Next,
    response::Response,
};
use serde_json::{Value, json};

/// The largest POST body the connector reads (rmcp's default, set on its service as well).
pub const MAX_REQUEST_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Axum middleware around rmcp's `StreamableHttpService`, mounted by the `http` module's
/// router (a library host mounting the connector itself adds it the same way).
pub async fn answer_unreadable_bodies(request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !says_json(request.headers().get(CONTENT_TYPE)) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BODY_BYTES).await else {
        return plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: the request body exceeds {MAX_REQUEST_BODY_BYTES} bytes \
                 (or could not be read); send a smaller JSON-RPC message"
            ),
        );
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let error = refusal(&bytes);
    let mut answer = Response::new(Body::from(error.to_string()));
    *answer.status_mut() = StatusCode::BAD_REQUEST;
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    answer
}

fn plain(status: StatusCode, text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

/// Whether a `Content-Type` is JSON (`application/json`, parameters allowed): rmcp's 415 for
/// such a request is about the body, not the type.
fn says_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        .is_some_and(|essence| essence.eq_ignore_ascii_case("application/json"))
}

/// The JSON-RPC error for a body rmcp could not read: -32700 (not JSON), -32602 (a request
/// whose params do not fit its method, answered under its id) or -32600 (anything else that is
/// not one JSON-RPC 2.0 message; batches included, which MCP no longer has).
/// Over stdio the same errors answer a line rmcp cannot read (the connector's stdio transport).
pub(crate) fn refusal(body: &[u8]) -> Value {
    let error = |id: Value, code: i32, message: String| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return error(
                Value::Null,
                -32700,
                format!(
                    "Parse error: the request body is not JSON ({e}); send one JSON-RPC 2.0 message"
                ),
            );
        }
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned();
    let method = value.get("method").and_then(Value::as_str);
    let why = match serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value.clone()) {
        Err(e) => e.to_string(),
        Ok(_) => "it was not accepted".to_owned(),
    };
    match (value.get("jsonrpc").and_then(Value::as_str), method, id) {
        (Some("2.0"), Some(method), Some(id)) => {
            error(id, -32602, format!("Invalid params for {method}: {why}"))
        }
        (_, _, id) => error(
            id.unwrap_or(Value::Null),
            -32600,
            format!(
                "Invalid Request: the body is not one JSON-RPC 2.0 message ({why}); send an \
                 object with \"jsonrpc\": \"2.0\", a \"method\" and, for a request, an \"id\""
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> (i64, Value) {
        let answer = refusal(body.as_bytes());
        assert_eq!(answer["jsonrpc"], "2.0");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        (
            answer["error"]["code"].as_i64().unwrap(),
            answer["id"].clone(),
        )
    }

    #[test]
    fn bodies_that_are_not_json_are_parse_errors() {
        assert_eq!(code("{not json"), (-32700, Value::Null));
        assert_eq!(code(""), (-32700, Value::Null));
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request() {
        assert_eq!(code("42"), (-32600, Value::Null));
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            (-32600, Value::Null)
        );
        assert_eq!(
            code(r#"{"id":7,"method":"ping"}"#),
            (-32600, json!(7)),
            "no jsonrpc"
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#),
            (-32600, Value::Null)
        );
    }

    #[test]
    fn requests_whose_params_do_not_fit_are_invalid_params_under_their_id() {
        let (c, id) =
            code(r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"arguments":{}}}"#);
        assert_eq!((c, id), (-32602, json!("a")));
    }

    #[test]
    fn only_json_content_types_are_looked_at() {
        let h = |v: &'static str| Some(HeaderValue::from_static(v));
        assert!(says_json(h("application/json").as_ref()));
        assert!(says_json(h("Application/JSON; charset=utf-8").as_ref()));
        assert!(!says_json(h("text/plain").as_ref()));
        assert!(!says_json(None));
    }
}

/// Property tests: every body rmcp cannot read gets one JSON-RPC error (R-CON-30, R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{body, envelope};
    use proptest::prelude::*;

    /// `answer` is one JSON-RPC 2.0 error of the three codes, under a valid id, with a message.
    fn is_refusal(answer: &Value) -> Result<(), TestCaseError> {
        prop_assert_eq!(answer.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
        let error = answer.get("error");
        let code = error.and_then(|e| e.get("code")).and_then(Value::as_i64);
        prop_assert!(matches!(code, Some(-32700 | -32602 | -32600)), "{answer}");
        let message = error.and_then(|e| e.get("message")).and_then(Value::as_str);
        prop_assert!(message.is_some_and(|m| !m.is_empty()));
        let id = answer.get("id");
        prop_assert!(
            id.is_some_and(|id| id.is_null() || id.is_string() || id.is_i64() || id.is_u64())
        );
        // An id past i64 (rmcp's request ids) is echoed as the caller wrote it, as JSON-RPC asks.
        let rmcp_reads =
            serde_json::from_value::<rmcp::model::ServerJsonRpcMessage>(answer.clone());
        prop_assert!(rmcp_reads.is_ok() || id.is_some_and(|id| id.is_u64() && !id.is_i64()));
        Ok(())
    }

    proptest! {
        #[test]
        fn every_unreadable_body_gets_one_json_rpc_error(b in body()) {
            is_refusal(&refusal(&b))?;
        }

        /// A request with a valid id is answered under that id.
        #[test]
        fn a_request_is_refused_under_its_own_id(message in envelope()) {
            let answer = refusal(message.to_string().as_bytes());
            is_refusal(&answer)?;
            let id = message.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64());
            let request = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
                && message.get("method").is_some_and(Value::is_string);
            if let (true, Some(id)) = (request, id) {
                prop_assert_eq!(answer.get("id"), Some(id));
            }
        }
    }
}
