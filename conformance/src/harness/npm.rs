//! npm packages installed into the harness cache once (server-everything, the official
//! conformance suite, Node itself): into a fresh staging directory beside the final one, then
//! renamed into place, so a concurrent or interrupted install is never half seen.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Mutex,
};

use anyhow::{Context, bail};

use super::{cache_dir, tail_lines};

/// Serialises installs within one process (tests run in parallel threads).
static INSTALL_LOCK: Mutex<()> = Mutex::new(());

/// Installs the npm package `spec` (`name@version`) into `final_dir` under the cache, unless
/// `usable` already accepts what is there, and returns what `usable` makes of the install (its
/// entry file). Runs `npm install --prefix <staging> SPEC --no-audit --no-fund`; a directory
/// rename is atomic and fails when another process got there first, whose install is then
/// used. An existing unusable install (interrupted, another version) is moved aside. Blocking.
pub fn install(
    spec: &str,
    final_dir: &Path,
    usable: impl Fn(&Path) -> anyhow::Result<PathBuf>,
) -> anyhow::Result<PathBuf> {
    let _guard = INSTALL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(entry) = usable(final_dir) {
        return Ok(entry);
    }
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".npm-staging-")
        .tempdir_in(&cache)
        .with_context(|| format!("creating a staging dir in {}", cache.display()))?;
    eprintln!(
        "durable-mcp fixtures: installing {spec} into {} ...",
        final_dir.display()
    );
    let started = std::time::Instant::now();
    let out = std::process::Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(staging.path())
        .arg(spec)
        .args(["--no-audit", "--no-fund"])
        .stdin(Stdio::null())
        .output()
        .context("running npm (is it on PATH?)")?;
    if !out.status.success() {
        bail!(
            "`npm install --prefix {} {spec} --no-audit --no-fund` failed ({}):\n{}",
            staging.path().display(),
            out.status,
            tail_lines(&String::from_utf8_lossy(&out.stderr), 12)
        );
    }
    usable(staging.path()).context("npm install succeeded but left no usable package")?;
    eprintln!(
        "durable-mcp fixtures: npm install took {:.1?}",
        started.elapsed()
    );
    if final_dir.exists() && usable(final_dir).is_err() {
        let aside = cache.join(format!(".npm-broken-{}", std::process::id()));
        if std::fs::rename(final_dir, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, final_dir) {
        let _ = std::fs::remove_dir_all(&staged);
        if usable(final_dir).is_err() {
            return Err(e).with_context(|| {
                format!(
                    "moving the install from {} to {}",
                    staged.display(),
                    final_dir.display()
                )
            });
        }
    }
    usable(final_dir)
}
