//! `logging/setLevel` per caller (R-CON-13). The connector declares the `logging` capability;
//! the upstream's log messages for a call reach its caller, before the result, when they are
//! at or above the level the caller set (`info` until it sets one); a 2026-07-28 stateless
//! request gets them only at the level its `_meta` names ([`request_log_level`]). rmcp's default `set_level`
//! answers -32601 even when `logging` is declared, so the handler overrides it.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use durable_mcp_contract::call::log_rank;

/// The level a caller gets until it sends `logging/setLevel`.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// One caller's level, as a rank in MCP's levels. Clones share it.
#[derive(Clone)]
pub(super) struct LogLevel(Arc<AtomicUsize>);

impl Default for LogLevel {
    fn default() -> Self {
        Self(Arc::new(AtomicUsize::new(log_rank(DEFAULT_LOG_LEVEL))))
    }
}

impl LogLevel {
    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
    pub(super) fn set(&self, level: rmcp::model::LoggingLevel) {
        self.0.store(rank_of(level), Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

#[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
fn rank_of(level: rmcp::model::LoggingLevel) -> usize {
    let name = serde_json::to_value(level)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| DEFAULT_LOG_LEVEL.into());
    log_rank(&name)
}

/// The lowest level of log message a request's caller gets (R-CON-13), as a rank; `None` for
/// none at all. A request's own `_meta["io.modelcontextprotocol/logLevel"]` decides (2026-07-28
/// callers opt in per request); a stateless request (one that names its protocol version in
/// `_meta`) without it gets none; a session request gets its session's `logging/setLevel`.
pub(super) fn request_log_level(
    meta: &rmcp::model::RequestMetaObject,
    session: &LogLevel,
) -> Option<usize> {
    if let Some(level) = meta.log_level() {
        return Some(rank_of(level));
    }
    if meta.protocol_version().is_some() {
        return None;
    }
    Some(session.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(json: serde_json::Value) -> rmcp::model::RequestMetaObject {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_stateless_request_opts_in_to_logs_per_request_and_a_session_follows_its_level() {
        let session = LogLevel::default();
        let stateless = |extra: serde_json::Value| {
            let mut m =
                serde_json::json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
            m.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            meta(m)
        };
        assert_eq!(
            request_log_level(&stateless(serde_json::json!({})), &session),
            None
        );
        assert_eq!(
            request_log_level(
                &stateless(serde_json::json!({"io.modelcontextprotocol/logLevel": "warning"})),
                &session
            ),
            Some(log_rank("warning"))
        );
        assert_eq!(
            request_log_level(&meta(serde_json::json!({})), &session),
            Some(log_rank("info")),
            "a session request without the key: its session's level"
        );
        assert_eq!(
            request_log_level(
                &meta(serde_json::json!({"io.modelcontextprotocol/logLevel": "error"})),
                &session
            ),
            Some(log_rank("error")),
            "the request's own level wins in a session too"
        );
    }

    #[test]
    #[allow(deprecated)]
    fn a_caller_starts_at_info_and_sets_its_own_level() {
        let level = LogLevel::default();
        assert_eq!(level.get(), log_rank("info"));
        let other = LogLevel::default();
        level.set(rmcp::model::LoggingLevel::Warning);
        assert_eq!(level.get(), log_rank("warning"));
        assert_eq!(other.get(), log_rank("info"), "levels are per caller");
        level.clone().set(rmcp::model::LoggingLevel::Debug);
        assert_eq!(
            level.get(),
            log_rank("debug"),
            "clones share one caller's level"
        );
    }
}
