//! Tests that cannot run here say why, and are counted (R-HAR-6).
//!
//! `cargo test` has no runtime skip: a test that returns early is reported as passed. So a test
//! that lacks something (a Docker engine, Node, Python's MCP SDK) calls [`skip`], which
//! - prints `skipped: <test>: <reason>` straight to stderr (libtest does not capture that), so
//!   the skip shows in every run;
//! - appends the same line to the file named by [`SKIP_LOG_ENV`], from which `scripts/test`
//!   prints the number of skipped tests under cargo's summary;
//! - panics instead when [`REQUIRE_ENV`] names the missing thing: CI, having set up a Docker
//!   engine, must not let the container tests skip.

use std::io::Write as _;

/// File that every skip is appended to (one line each), when set.
pub const SKIP_LOG_ENV: &str = "DURABLE_MCP_SKIP_LOG";
/// Comma-separated [`Need`] names that must not be skipped, e.g. `docker`.
pub const REQUIRE_ENV: &str = "DURABLE_MCP_REQUIRE";

/// What a test may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A Docker engine (the container backend).
    Docker,
    /// Node.js (server-everything).
    Node,
    /// Python with pip (the Python MCP SDK).
    Python,
}

impl Need {
    /// The name used in [`REQUIRE_ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Need::Docker => "docker",
            Need::Node => "node",
            Need::Python => "python",
        }
    }
}

/// Whether `list` (the value of [`REQUIRE_ENV`]) names `need`.
pub fn required(list: &str, need: Need) -> bool {
    list.split(',')
        .any(|item| item.trim().eq_ignore_ascii_case(need.name()))
}

/// The line recorded for a skip.
pub fn skip_line(test: &str, reason: &str) -> String {
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("skipped: {test}: {reason}")
}

/// Records that the calling test cannot run here (see the module docs); the caller returns
/// right after. Panics when [`REQUIRE_ENV`] names `need`.
pub fn skip(need: Need, reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed test)");
    if std::env::var(REQUIRE_ENV).is_ok_and(|list| required(&list, need)) {
        panic!(
            "{test} needs {} ({REQUIRE_ENV} requires it) but cannot run: {reason}",
            need.name()
        );
    }
    let line = skip_line(test, reason);
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty()) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            let _ = writeln!(std::io::stderr(), "warning: cannot record the skip: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_list_is_comma_separated_and_case_insensitive() {
        assert!(required("docker", Need::Docker));
        assert!(required("node, Docker", Need::Docker));
        assert!(!required("node", Need::Docker));
        assert!(!required("", Need::Python));
    }

    #[test]
    fn skip_line_is_one_line() {
        assert_eq!(
            skip_line("t", "no engine:\n  start one"),
            "skipped: t: no engine: start one"
        );
    }
}
