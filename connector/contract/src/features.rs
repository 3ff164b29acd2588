//! Resources, resource templates, prompts and completions over Nexus (R-NXC-8): reserved
//! operations beside `list_tools`, one per MCP request, whose payloads are the upstream's JSON
//! as written.
//!
//! Names below are written without their `~~` prefix.
//!
//! - `upstream_capabilities`: input `{}`; output the upstream's `initialize` capabilities among
//!   `resources`, `prompts` and `completions` (an object, empty when it declared none).
//! - `list_resources`, `list_resource_templates`, `list_prompts`: input `{}`; output the
//!   upstream's list result with every page's items in its one array (`resources`,
//!   `resourceTemplates`, `prompts`) and no `nextCursor`; the first page's other fields
//!   (`_meta`, `ttlMs`, `cacheScope`) as written.
//! - `read_resource`, `get_prompt`, `complete_argument`: input the MCP request's `params`;
//!   output the upstream's result as written, or its JSON-RPC error as a payload marked
//!   [`crate::jsonrpc_error::JSONRPC_ERROR`].
//!
//! - `resource_versions`: input [`VersionsInput`], `{"uris": [...], "caller": "...",
//!   "released": [...]}` (at most [`MAX_VERSION_URIS`] URIs each; `caller` and `released`
//!   optional); output `{"versions": {uri: token}, "errors": {uri: JSON-RPC error}}`: the proxy
//!   keeps an upstream subscription to each URI asked and answers a token that moves when the
//!   upstream says the resource was updated ([`version_token`]); a URI the upstream refused, or
//!   the proxy would not watch, is in `errors`. `caller` names whose share the URIs count in
//!   and `released` the URIs that caller no longer subscribes to (R-PRX-36).
//!
//! Every reserved name starts with `~~`, which no tool's operation name holds (R-NXC-5 writes
//! `~` only before two hex digits): a tool named `read_resource` keeps its operation name, and
//! a connector or Workflow history from before these operations never reaches one of them.

use serde_json::{Map, Value};

/// The operation that answers the upstream's declared capabilities.
pub const UPSTREAM_CAPABILITIES: &str = "~~upstream_capabilities";

/// The operation that answers a version token per resource URI (R-PRX-34).
pub const RESOURCE_VERSIONS: &str = "~~resource_versions";

/// The most URIs one [`RESOURCE_VERSIONS`] input may name.
pub const MAX_VERSION_URIS: usize = 100;

/// The most bytes of a [`VersionsInput::caller`].
pub const MAX_CALLER_KEY_BYTES: usize = 64;

/// The input of [`RESOURCE_VERSIONS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionsInput {
    /// The URIs whose tokens are asked (and kept watched for the caller).
    pub uris: Vec<String>,
    /// Whose share the URIs count in at the proxy: an opaque key the connector derives from its
    /// caller, the same on each of its replicas; none for a caller that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// URIs the caller no longer subscribes to: the proxy lets go of them for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<String>,
}

impl VersionsInput {
    /// The input read from `value`, or what is wrong with it.
    pub fn read(value: Value) -> Result<Self, String> {
        let input: Self = serde_json::from_value(value).map_err(|e| {
            format!("input must be {{\"uris\": [string, ...], \"caller\"?: string, \"released\"?: [string, ...]}}: {e}")
        })?;
        for (what, list) in [
            ("URIs asked", &input.uris),
            ("URIs released", &input.released),
        ] {
            if list.len() > MAX_VERSION_URIS {
                return Err(format!(
                    "{} {what} at once; name at most {MAX_VERSION_URIS}",
                    list.len()
                ));
            }
        }
        if input
            .caller
            .as_ref()
            .is_some_and(|c| c.len() > MAX_CALLER_KEY_BYTES)
        {
            return Err(format!(
                "caller is longer than {MAX_CALLER_KEY_BYTES} bytes"
            ));
        }
        Ok(input)
    }
}

/// A resource's version token: the proxy's `epoch` (one per upstream connection of one proxy
/// replica) and a `serial` that only grows within it. Tokens of different epochs are not
/// comparable: a caller that sees a new epoch learns nothing but that one more exists.
pub fn version_token(epoch: &str, serial: u64) -> String {
    format!("{epoch}.{serial}")
}

/// A token's epoch and serial; `None` for text no proxy wrote.
pub fn parse_version_token(token: &str) -> Option<(&str, u64)> {
    let (epoch, serial) = token.rsplit_once('.')?;
    Some((epoch, serial.parse().ok()?)).filter(|(e, _)| !e.is_empty())
}

/// Whether an upstream's declared capabilities (as [`UPSTREAM_CAPABILITIES`] answers them)
/// offer `resources/subscribe`.
pub fn supports_subscribe(declared: &Map<String, Value>) -> bool {
    declared
        .get("resources")
        .and_then(|r| r.get("subscribe"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// The capability keys [`UPSTREAM_CAPABILITIES`] answers.
pub const CAPABILITY_KEYS: [&str; 3] = ["resources", "prompts", "completions"];

/// One MCP request served as a reserved operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// The Nexus operation name.
    pub operation: &'static str,
    /// The MCP method the proxy sends upstream.
    pub method: &'static str,
    /// The capability the upstream must declare (`initialize`'s `capabilities` key).
    pub capability: &'static str,
    /// For a listing, the result's array key; `None` for a single request.
    pub items: Option<&'static str>,
}

pub const LIST_RESOURCES: Feature = Feature {
    operation: "~~list_resources",
    method: "resources/list",
    capability: "resources",
    items: Some("resources"),
};
pub const LIST_RESOURCE_TEMPLATES: Feature = Feature {
    operation: "~~list_resource_templates",
    method: "resources/templates/list",
    capability: "resources",
    items: Some("resourceTemplates"),
};
pub const READ_RESOURCE: Feature = Feature {
    operation: "~~read_resource",
    method: "resources/read",
    capability: "resources",
    items: None,
};
pub const LIST_PROMPTS: Feature = Feature {
    operation: "~~list_prompts",
    method: "prompts/list",
    capability: "prompts",
    items: Some("prompts"),
};
pub const GET_PROMPT: Feature = Feature {
    operation: "~~get_prompt",
    method: "prompts/get",
    capability: "prompts",
    items: None,
};
pub const COMPLETE: Feature = Feature {
    operation: "~~complete_argument",
    method: "completion/complete",
    capability: "completions",
    items: None,
};

/// Every feature operation.
pub const FEATURES: [Feature; 6] = [
    LIST_RESOURCES,
    LIST_RESOURCE_TEMPLATES,
    READ_RESOURCE,
    LIST_PROMPTS,
    GET_PROMPT,
    COMPLETE,
];

/// Whether `name` is a reserved operation of this module.
pub fn is_reserved(name: &str) -> bool {
    name == UPSTREAM_CAPABILITIES
        || name == RESOURCE_VERSIONS
        || FEATURES.iter().any(|f| f.operation == name)
}

/// The feature an MCP method stands for.
pub fn for_method(method: &str) -> Option<Feature> {
    FEATURES.into_iter().find(|f| f.method == method)
}

/// The capabilities of an `initialize` result's `capabilities` that these operations serve.
pub fn served_capabilities(capabilities: &Value) -> Map<String, Value> {
    CAPABILITY_KEYS
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), capabilities.get(*k)?.clone())))
        .filter(|(_, v)| !v.is_null())
        .collect()
}

/// Pages of a list result folded into one: the first page as written, its `items` array
/// holding every page's items, and no `nextCursor`.
pub fn fold_pages(items: &str, pages: Vec<Value>) -> Value {
    let mut pages = pages.into_iter();
    let mut first = match pages.next() {
        Some(Value::Object(first)) => first,
        _ => Map::new(),
    };
    let mut all = match first.remove(items) {
        Some(Value::Array(listed)) => listed,
        _ => Vec::new(),
    };
    for page in pages {
        if let Some(Value::Array(listed)) = page.get(items) {
            all.extend(listed.iter().cloned());
        }
    }
    first.remove("nextCursor");
    first.insert(items.to_owned(), Value::Array(all));
    Value::Object(first)
}

/// A page's `nextCursor`, when there is a next page.
pub fn next_cursor(page: &Value) -> Option<String> {
    page.get("nextCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
}

/// Whether `uri` matches the RFC 6570 `template`: its literal text in order, each expression
/// standing for any text.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    let last = rest;
    let Some(mut left) = uri.strip_prefix(literals.first().copied().unwrap_or(last)) else {
        return false;
    };
    if literals.is_empty() {
        return left.is_empty();
    }
    for literal in &literals[1..] {
        match left.find(literal) {
            Some(at) => left = &left[at + literal.len()..],
            None => return false,
        }
    }
    left.ends_with(last)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pages_fold_into_the_first_as_written() {
        let pages = vec![
            json!({"resources": [{"uri": "a", "x": 1}], "nextCursor": "2", "ttlMs": 5,
                   "cacheScope": "shared", "_meta": {"m": 1}}),
            json!({"resources": [{"uri": "b"}], "ttlMs": 9}),
        ];
        assert_eq!(
            fold_pages("resources", pages),
            json!({"resources": [{"uri": "a", "x": 1}, {"uri": "b"}], "ttlMs": 5,
                   "cacheScope": "shared", "_meta": {"m": 1}})
        );
        assert_eq!(fold_pages("prompts", vec![]), json!({"prompts": []}));
    }

    #[test]
    fn cursors_and_capabilities_are_read_as_written() {
        assert_eq!(
            next_cursor(&json!({"nextCursor": "c"})).as_deref(),
            Some("c")
        );
        assert_eq!(next_cursor(&json!({"nextCursor": ""})), None);
        assert_eq!(next_cursor(&json!({})), None);
        let caps = json!({"tools": {}, "resources": {"subscribe": true}, "completions": {},
                          "prompts": null});
        assert_eq!(
            Value::Object(served_capabilities(&caps)),
            json!({"resources": {"subscribe": true}, "completions": {}})
        );
    }

    #[test]
    fn version_tokens_read_back_and_subscribe_is_read_from_resources() {
        let token = version_token("a1b2", 7);
        assert_eq!(parse_version_token(&token), Some(("a1b2", 7)));
        assert_eq!(parse_version_token("x.y"), None);
        assert_eq!(parse_version_token(".3"), None);
        assert_eq!(parse_version_token("plain"), None);
        let caps = |v: Value| v.as_object().unwrap().clone();
        assert!(supports_subscribe(&caps(
            json!({"resources": {"subscribe": true}})
        )));
        assert!(!supports_subscribe(&caps(json!({"resources": {}}))));
        assert!(!supports_subscribe(&caps(
            json!({"prompts": {"subscribe": true}})
        )));
    }

    #[test]
    fn every_reserved_name_is_no_tools_operation_and_methods_map_back() {
        use crate::operation_name::tool_for_operation;
        for f in FEATURES {
            assert!(is_reserved(f.operation) && tool_for_operation(f.operation).is_none());
            assert_eq!(for_method(f.method), Some(f));
        }
        assert!(tool_for_operation(UPSTREAM_CAPABILITIES).is_none());
        assert!(is_reserved(RESOURCE_VERSIONS) && tool_for_operation(RESOURCE_VERSIONS).is_none());
        assert!(!is_reserved("echo") && for_method("tools/call").is_none());
    }
}

/// Property tests of what crosses between the connector and the proxy for feature requests,
/// and of an upstream's list pages (R-CON-51): any JSON is read or refused, never a panic;
/// what one side writes the other reads back.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn json() -> impl Strategy<Value = Value> {
        const KEYS: &[&str] = &[
            "uris",
            "caller",
            "released",
            "resources",
            "subscribe",
            "nextCursor",
            "items",
            "prompts",
            "completions",
        ];
        crate::props::json_tree(KEYS, &["subscribe", "resources/list"])
    }

    proptest! {
        #[test]
        fn any_json_is_read_or_refused_without_a_panic(v in json(), more in prop::collection::vec(json(), 0..3)) {
            let _ = VersionsInput::read(v.clone());
            let _ = (served_capabilities(&v), next_cursor(&v));
            if let Value::Object(m) = &v {
                let _ = supports_subscribe(m);
            }
            let mut pages = vec![v];
            pages.extend(more);
            prop_assert!(fold_pages("items", pages).get("items").is_some_and(Value::is_array));
        }

        #[test]
        fn a_written_versions_input_reads_back(
            uris in prop::collection::vec("\\PC{0,20}", 0..5),
            caller in prop::option::of("[A-Za-z0-9_-]{0,64}"),
            released in prop::collection::vec("\\PC{0,20}", 0..5),
        ) {
            let input = VersionsInput { uris, caller, released };
            prop_assert_eq!(VersionsInput::read(json!(input)), Ok(input));
        }

        #[test]
        fn a_version_token_reads_back_and_any_text_is_one_or_none(epoch in "\\PC{1,20}", serial in any::<u64>(), text in "\\PC{0,30}") {
            let token = version_token(&epoch, serial);
            prop_assert_eq!(parse_version_token(&token), Some((epoch.as_str(), serial)));
            let _ = parse_version_token(&text);
        }

        /// A URI made from a template (any text for each expression) matches it; any template
        /// and URI give an answer, never a panic.
        #[test]
        fn a_uri_a_template_expands_to_matches_it(
            parts in prop::collection::vec(("[^{}]{0,6}", "\\PC{0,6}"), 1..4),
            last in "[^{}]{0,6}",
            any_template in "\\PC{0,20}",
            any_uri in "\\PC{0,20}",
        ) {
            let template: String = parts.iter().map(|(lit, _)| format!("{lit}{{x}}")).collect::<String>() + &last;
            let uri: String = parts.iter().map(|(lit, fill)| format!("{lit}{fill}")).collect::<String>() + &last;
            prop_assert!(template_matches(&template, &uri), "{} {}", template, uri);
            let _ = template_matches(&any_template, &any_uri);
        }
    }
}
