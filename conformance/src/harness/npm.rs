//! Pinned npm packages installed once into the harness cache (`~/.cache/durable-mcp`):
//! server-everything and the hosts family's clients all install this one way, so a half-done
//! or wrong-version install is never used and parallel test processes never clash.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Mutex,
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::harness::cache_dir;

/// Serialises installs within one process (tests run in parallel threads).
static INSTALL_LOCK: Mutex<()> = Mutex::new(());

/// `package` installed under the npm `--prefix` `prefix`, checked: its manifest names the pinned
/// `version`, npm finished (it writes its hidden lockfile last), and every dependency resolves
/// (hoisted, or nested under the package). Returns the package's directory and manifest.
pub fn installed_package(
    prefix: &Path,
    package: &str,
    version: &str,
) -> anyhow::Result<(PathBuf, Value)> {
    let package_dir = prefix.join("node_modules").join(package);
    let manifest_path = package_dir.join("package.json");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(&manifest_path)
            .with_context(|| format!("reading {}", manifest_path.display()))?,
    )
    .with_context(|| format!("parsing {}", manifest_path.display()))?;
    let found = manifest["version"].as_str().unwrap_or_default();
    if found != version {
        bail!(
            "{} is version {found:?}, not {version}",
            manifest_path.display()
        );
    }
    if !prefix
        .join("node_modules")
        .join(".package-lock.json")
        .is_file()
    {
        bail!("{} is not a finished npm install", prefix.display());
    }
    if let Some(dependencies) = manifest["dependencies"].as_object() {
        for dependency in dependencies.keys() {
            let resolves = [
                prefix.join("node_modules"),
                package_dir.join("node_modules"),
            ]
            .iter()
            .any(|dir| dir.join(dependency).join("package.json").is_file());
            if !resolves {
                bail!("{}: dependency {dependency} is missing", prefix.display());
            }
        }
    }
    Ok((package_dir, manifest))
}

/// Installs `package@version` into `final_dir` (an npm `--prefix` in the cache) unless `check`
/// already accepts what is there, and returns what `check` makes of the install.
///
/// Runs `npm install --prefix <staging> package@version --no-audit --no-fund` into a fresh
/// staging directory next to the final one and renames it into place. A directory rename is
/// atomic and fails when another process got there first, in which case that process's install
/// is used. Blocking: call it from `spawn_blocking` in async code.
pub fn install<T>(
    package: &str,
    version: &str,
    final_dir: &Path,
    check: impl Fn(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let _guard = INSTALL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(found) = check(final_dir) {
        return Ok(found);
    }
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let name = final_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "npm".into());
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}-staging-"))
        .tempdir_in(&cache)
        .with_context(|| format!("creating a staging dir in {}", cache.display()))?;
    let spec = format!("{package}@{version}");
    eprintln!(
        "durable-mcp fixtures: installing {spec} into {} ...",
        final_dir.display()
    );
    let started = std::time::Instant::now();
    let out = std::process::Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(staging.path())
        .arg(&spec)
        .args(["--no-audit", "--no-fund"])
        .stdin(Stdio::null())
        .output()
        .context("running npm (is it on PATH?)")?;
    if !out.status.success() {
        bail!(
            "`npm install --prefix {} {spec} --no-audit --no-fund` failed ({}):\n{}",
            staging.path().display(),
            out.status,
            crate::harness::tail_lines(&String::from_utf8_lossy(&out.stderr), 12)
        );
    }
    check(staging.path()).context("npm install succeeded but left no usable package")?;
    eprintln!(
        "durable-mcp fixtures: npm install took {:.1?}",
        started.elapsed()
    );
    // An existing but unusable install (interrupted, wrong version) is moved out of the way; a
    // usable one (a concurrent process's) is kept and ours discarded.
    if final_dir.exists() && check(final_dir).is_err() {
        let aside = cache.join(format!(".{name}-broken-{}", std::process::id()));
        if std::fs::rename(final_dir, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, final_dir) {
        let _ = std::fs::remove_dir_all(&staged);
        if check(final_dir).is_err() {
            return Err(e).with_context(|| {
                format!(
                    "moving the install from {} to {}",
                    staged.display(),
                    final_dir.display()
                )
            });
        }
    }
    check(final_dir)
}
