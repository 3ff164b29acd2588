//! The client capabilities an input request needs (R-CON-43, R-CON-44): a 2026-07-28 caller
//! must have declared, in the request's `_meta["io.modelcontextprotocol/clientCapabilities"]`,
//! the capability each request needs, else the call is answered with -32021 naming the missing
//! ones; a session client's are the ones it declared at initialize.

use rmcp::{ErrorData as McpError, RoleServer, model::ErrorCode, service::RequestContext};
use serde_json::{Map, Value, json};

/// The client capability an input request's method needs (SEP-2322's request kinds).
fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// The capabilities the input requests need that `declared` (a `ClientCapabilities` JSON)
/// lacks, each once, in the requests' order. A method of no known kind needs none here.
pub(super) fn undeclared(requests: &Value, declared: &Value) -> Vec<&'static str> {
    let mut missing = Vec::new();
    let asked = requests.as_object().into_iter().flat_map(|m| m.values());
    for request in asked {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        if let Some(capability) = capability_of(method)
            && declared.get(capability).is_none_or(Value::is_null)
            && !missing.contains(&capability)
        {
            missing.push(capability);
        }
    }
    missing
}

/// -32021 (SEP-2575, MissingRequiredClientCapability) for a 2026-07-28 caller whose call asks
/// for input it did not declare it can give (R-CON-44).
pub(super) fn missing_capabilities(missing: &[&str]) -> McpError {
    let required: Map<String, Value> = missing
        .iter()
        .map(|c| ((*c).to_owned(), json!({})))
        .collect();
    McpError::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!(
            "the tool asks its caller for input that needs the {} client capability, which this request did not declare; declare it in _meta[\"io.modelcontextprotocol/clientCapabilities\"] and call the tool again",
            missing.join(" and ")
        ),
        Some(json!({"requiredCapabilities": required})),
    )
}

/// The capabilities a 2026-07-28 request declared in its `_meta`, as JSON.
pub(super) fn request_capabilities(context: &RequestContext<RoleServer>) -> Value {
    context
        .meta
        .client_capabilities()
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or_else(|| json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_kind_needs_its_capability_once() {
        let requests = json!({
            "a": {"method": "elicitation/create", "params": {}},
            "b": {"method": "elicitation/create", "params": {}},
            "c": {"method": "sampling/createMessage", "params": {}},
            "d": {"method": "roots/list"},
            "e": {"method": "something/else"},
        });
        assert_eq!(
            undeclared(&requests, &json!({})),
            ["elicitation", "sampling", "roots"]
        );
        let declared = json!({"elicitation": {"form": {}}, "roots": null, "sampling": {}});
        assert_eq!(undeclared(&requests, &declared), ["roots"]);
        assert!(undeclared(&json!({}), &json!({})).is_empty());
    }

    #[test]
    fn missing_capabilities_are_32021_listing_them() {
        let e = missing_capabilities(&["elicitation", "sampling"]);
        assert_eq!(e.code.0, -32021);
        let data = e.data.unwrap();
        assert_eq!(
            data["requiredCapabilities"],
            json!({"elicitation": {}, "sampling": {}})
        );
        assert!(e.message.contains("clientCapabilities"), "{}", e.message);
    }
}
