//! The client capabilities an input request needs (R-CON-43, R-CON-44): a 2026-07-28 caller
//! must have declared, in the request's `_meta["io.modelcontextprotocol/clientCapabilities"]`,
//! the capability each request needs, else the call is answered with -32021 naming the missing
//! ones; a session client's are the ones it declared at initialize.

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{ErrorCode, ProtocolVersion},
    service::RequestContext,
};
use serde_json::{Map, Value, json};

/// The client capability an input request needs (SEP-2322's request kinds), as a dotted name:
/// `elicitation` (form mode, which a bare `elicitation: {}` declares), `elicitation.url` for a
/// URL-mode elicitation, `sampling` (`sampling.tools` when the request offers tools), `roots`.
fn capability_of(request: &Value) -> Option<&'static str> {
    let params = request.get("params");
    let param = |key: &str| params.and_then(|p| p.get(key)).filter(|v| !v.is_null());
    match request.get("method").and_then(Value::as_str)? {
        "elicitation/create" if param("mode").and_then(Value::as_str) == Some("url") => {
            Some("elicitation.url")
        }
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" if param("tools").is_some() => Some("sampling.tools"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether `declared` (a `ClientCapabilities` JSON) has the dotted `capability`. A bare
/// `elicitation: {}` is form mode (2025-11-25); an `elicitation` naming only `url` is not.
fn has(declared: &Value, capability: &str) -> bool {
    let present = |v: Option<&Value>| v.is_some_and(|v| !v.is_null());
    match capability.split_once('.') {
        Some((top, sub)) => present(declared.get(top).and_then(|t| t.get(sub))),
        None if capability == "elicitation" => match declared.get("elicitation") {
            Some(Value::Object(modes)) => modes.is_empty() || present(modes.get("form")),
            other => present(other),
        },
        None => present(declared.get(capability)),
    }
}

/// The capabilities the input requests need that `declared` (a `ClientCapabilities` JSON)
/// lacks, each once, in the requests' order, as dotted names. A method of no known kind needs
/// none here.
pub(super) fn undeclared(requests: &Value, declared: &Value) -> Vec<&'static str> {
    let mut missing = Vec::new();
    let asked = requests.as_object().into_iter().flat_map(|m| m.values());
    for request in asked {
        if let Some(capability) = capability_of(request)
            && !has(declared, capability)
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
    let mut required = Map::new();
    for capability in missing {
        let (top, sub) = capability.split_once('.').unwrap_or((capability, ""));
        let entry = required.entry(top).or_insert_with(|| json!({}));
        if let (false, Some(entry)) = (sub.is_empty(), entry.as_object_mut()) {
            entry.insert(sub.to_owned(), json!({}));
        }
    }
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

/// The capabilities a session client declared at initialize, as JSON (`{}` when unknown).
pub(super) fn session_capabilities(context: &RequestContext<RoleServer>) -> Value {
    context
        .peer
        .peer_info()
        .and_then(|i| serde_json::to_value(&i.capabilities).ok())
        .unwrap_or_else(|| json!({}))
}

/// Whether the caller speaks MCP 2026-07-28 or later, whose requests carry no session.
pub(super) fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether the caller's host takes `sampling/createMessage` itself: a session client of an
/// earlier version that declared `sampling` at initialize, to which the request is relayed
/// (R-CON-43), so its user consents, rather than shown to the model (R-CON-11).
pub(super) fn host_samples(context: &RequestContext<RoleServer>) -> bool {
    !is_modern(context) && session_capabilities(context).get("sampling").is_some()
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
    fn url_elicitation_and_sampling_with_tools_need_their_sub_capabilities() {
        let requests = json!({
            "a": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}},
            "b": {"method": "sampling/createMessage", "params": {"messages": [], "tools": []}},
        });
        let plain = json!({"elicitation": {}, "sampling": {}});
        assert_eq!(
            undeclared(&requests, &plain),
            ["elicitation.url", "sampling.tools"]
        );
        let full = json!({"elicitation": {"url": {}}, "sampling": {"tools": {}}});
        assert!(undeclared(&requests, &full).is_empty());
        // A client that named only URL mode cannot answer a form.
        let form = json!({"f": {"method": "elicitation/create", "params": {"mode": "form"}}});
        assert_eq!(
            undeclared(&form, &json!({"elicitation": {"url": {}}})),
            ["elicitation"]
        );
        assert!(undeclared(&form, &json!({"elicitation": {"form": {}}})).is_empty());
        let e = missing_capabilities(&["elicitation.url", "sampling"]);
        assert_eq!(
            e.data.unwrap()["requiredCapabilities"],
            json!({"elicitation": {"url": {}}, "sampling": {}})
        );
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
