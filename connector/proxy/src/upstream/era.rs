//! Which MCP era an upstream speaks, and what each request to it declares (R-PRX-33).
//!
//! Every connection opens as a dual-era client: `server/discover` offering 2026-07-28 (the
//! modern, per-request `_meta` lifecycle, SEP-2575), falling back to the `initialize`
//! handshake at 2025-11-25 when the upstream answers with an error that is not a modern one,
//! or not within the probe's wait (rmcp's `ClientLifecycleMode::Auto`, 10 s; a stdio
//! upstream's `discover_wait`, see `probe`).
//!
//! A modern upstream learns the client's capabilities from each request's
//! `_meta["io.modelcontextprotocol/clientCapabilities"]`: the proxy declares elicitation (form
//! and URL), sampling and roots there, since an upstream's input request ends the call's round
//! and goes to the caller (R-PRX-29), plus the tasks extension on a call that asks for a task
//! and on `tasks/*` (R-PRX-28) — but none on a resource, prompt or completion request, whose
//! input request could reach nobody (R-PRX-32); and it asks for every log message with
//! `_meta["io.modelcontextprotocol/logLevel"]` when the upstream declares `logging`
//! (R-PRX-10). A legacy upstream gets nothing of this in its handshake (it would send
//! `elicitation/create` to a session nobody answers); on a request asking for a task it gets
//! only the tasks extension, when it offers it (R-PRX-28).

use rmcp::{
    Peer, RoleClient,
    model::{ProtocolVersion, RequestMetaObject, TASKS_EXTENSION_ID},
    service::ClientLifecycleMode,
};
use serde_json::{Value, json};

/// The per-request client capabilities key (SEP-2575).
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The per-request log level key (SEP-2575).
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// How every upstream connection opens: 2026-07-28 if offered, else the legacy handshake.
pub fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// What the upstream behind `peer` said of itself, as far as requests to it depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    /// It negotiated 2026-07-28 or later (no `initialize`).
    pub modern: bool,
    /// It declares the tasks extension.
    pub offers_tasks: bool,
    /// It declares `logging`.
    pub logs: bool,
}

impl Upstream {
    #[allow(deprecated)] // logging is deprecated (SEP-2577) but still declared
    pub fn of(peer: &Peer<RoleClient>) -> Self {
        let info = peer.peer_info();
        let info = info.as_deref();
        Self {
            modern: info.is_some_and(|i| !i.protocol_version.has_initialize()),
            offers_tasks: info.is_some_and(|i| i.capabilities.supports_tasks()),
            logs: info.is_some_and(|i| i.capabilities.logging.is_some()),
        }
    }
}

/// The `_meta` a request to `upstream` carries beyond rmcp's own (see the module); `tasks`
/// says whether it asks for a task or is a `tasks/*` request. `None`: nothing to add.
pub fn request_meta(upstream: Upstream, tasks: bool) -> Option<RequestMetaObject> {
    let with_tasks = tasks && upstream.offers_tasks;
    let mut meta = RequestMetaObject::new();
    if upstream.modern {
        let extensions = with_tasks.then(|| json!({TASKS_EXTENSION_ID: {}}));
        let mut capabilities = json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
            "extensions": extensions,
        });
        if let (None, Some(fields)) = (&extensions, capabilities.as_object_mut()) {
            fields.remove("extensions");
        }
        meta.0
            .0
            .insert(CLIENT_CAPABILITIES.to_owned(), capabilities);
        if upstream.logs {
            meta.0.0.insert(LOG_LEVEL.to_owned(), Value::from("debug"));
        }
        Some(meta)
    } else if with_tasks {
        meta.0.0.insert(
            CLIENT_CAPABILITIES.to_owned(),
            json!({"extensions": {TASKS_EXTENSION_ID: {}}}),
        );
        Some(meta)
    } else {
        None
    }
}

/// The `_meta` of a resource, prompt or completion request to `upstream` (R-PRX-32, R-PRX-33):
/// like a tool call's, but declaring no input capability (an empty
/// `clientCapabilities`). A read is answered inline and nothing carries an input request back
/// to its reader, so an upstream that needs input answers -32021, which goes to the caller
/// as written, instead of an `input_required` result nobody could answer.
pub fn feature_request_meta(upstream: Upstream) -> Option<RequestMetaObject> {
    let mut meta = request_meta(upstream, false)?;
    meta.0.0.insert(
        CLIENT_CAPABILITIES.to_owned(),
        Value::Object(Default::default()),
    );
    Some(meta)
}

/// A tool's result without the 2026-07-28 envelope marker `resultType: "complete"`, which a
/// modern upstream writes on every result and whose absence means the same (SEP-2322): what
/// the durable path records is the result as an upstream of any era wrote it, and the
/// connector marks it for the callers whose version wants the marker. Other result types
/// (`input_required`, `task`) are kept: they are what the answer is.
pub fn without_complete_marker(mut result: Value) -> Value {
    if let Value::Object(fields) = &mut result
        && fields.get("resultType").and_then(Value::as_str) == Some("complete")
    {
        fields.remove("resultType");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(modern: bool, offers_tasks: bool, logs: bool) -> Upstream {
        Upstream {
            modern,
            offers_tasks,
            logs,
        }
    }

    fn meta(upstream: Upstream, tasks: bool) -> Value {
        serde_json::to_value(request_meta(upstream, tasks)).unwrap()
    }

    #[test]
    fn a_modern_upstream_gets_the_input_capabilities_on_every_request() {
        let plain = meta(upstream(true, true, false), false);
        assert_eq!(
            plain,
            json!({CLIENT_CAPABILITIES: {
                "elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}
            }})
        );
        let task = meta(upstream(true, true, true), true);
        assert_eq!(
            task[CLIENT_CAPABILITIES]["extensions"],
            json!({TASKS_EXTENSION_ID: {}})
        );
        assert_eq!(task[CLIENT_CAPABILITIES]["sampling"], json!({}));
        assert_eq!(task[LOG_LEVEL], "debug");
        // The extension only to an upstream that offers it.
        let no_tasks = meta(upstream(true, false, false), true);
        assert!(no_tasks[CLIENT_CAPABILITIES].get("extensions").is_none());
    }

    #[test]
    fn a_feature_request_declares_no_input_capability() {
        let modern =
            serde_json::to_value(feature_request_meta(upstream(true, true, true))).unwrap();
        assert_eq!(modern, json!({CLIENT_CAPABILITIES: {}, LOG_LEVEL: "debug"}));
        let legacy = feature_request_meta(upstream(false, true, true));
        assert!(legacy.is_none());
    }

    #[test]
    fn a_legacy_upstream_gets_only_the_tasks_extension_and_only_when_asking_for_a_task() {
        assert_eq!(meta(upstream(false, true, true), false), Value::Null);
        assert_eq!(meta(upstream(false, false, true), true), Value::Null);
        assert_eq!(
            meta(upstream(false, true, true), true),
            json!({CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION_ID: {}}}})
        );
    }

    #[test]
    fn only_the_complete_marker_is_taken_off_a_result() {
        let modern =
            json!({"content": [], "resultType": "complete", "x": {"resultType": "complete"}});
        assert_eq!(
            without_complete_marker(modern),
            json!({"content": [], "x": {"resultType": "complete"}})
        );
        let asked = json!({"resultType": "input_required", "inputRequests": {}});
        assert_eq!(without_complete_marker(asked.clone()), asked);
        let legacy = json!({"content": [], "isError": false});
        assert_eq!(without_complete_marker(legacy.clone()), legacy);
    }

    #[test]
    fn connections_offer_2026_07_28_and_fall_back_to_the_legacy_handshake() {
        let ClientLifecycleMode::Auto {
            preferred_versions,
            legacy_version,
        } = lifecycle()
        else {
            panic!("a dual-era lifecycle")
        };
        assert_eq!(preferred_versions, [ProtocolVersion::V_2026_07_28]);
        assert_eq!(legacy_version, Some(ProtocolVersion::V_2025_11_25));
    }
}
