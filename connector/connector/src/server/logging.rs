//! `logging/setLevel` per caller (R-CON-13). The connector declares the `logging` capability;
//! the upstream's log messages for a call reach its caller, before the result, when they are
//! at or above the level the caller set (`info` until it sets one). rmcp's default `set_level`
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
        let name = serde_json::to_value(level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| DEFAULT_LOG_LEVEL.into());
        self.0.store(log_rank(&name), Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
