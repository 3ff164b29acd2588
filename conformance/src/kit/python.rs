//! The Python MCP SDK (`mcp`, PyPI), pinned, installed once into a virtualenv under the harness
//! cache (`~/.cache/durable-mcp/py-mcp-<version>`): the Python client tests and the hosts family
//! drive the connector with it.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::OnceLock,
};

/// The pinned release.
pub const MCP_VERSION: &str = "2.3.0";

/// The virtualenv's python with `mcp==2.3.0`, installed on first use (once per process).
pub async fn python_mcp() -> Result<PathBuf, String> {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    tokio::task::spawn_blocking(|| INSTALLED.get_or_init(install_python_mcp).clone())
        .await
        .unwrap()
}

fn run(command: &mut std::process::Command, what: &str) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<_> = stderr.lines().rev().take(5).collect();
    Err(format!(
        "{what} failed ({}): {}",
        output.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    ))
}

fn venv_python(dir: &Path) -> PathBuf {
    dir.join("bin").join("python")
}

fn install_python_mcp() -> Result<PathBuf, String> {
    let cache = crate::harness::cache_dir();
    let dir = cache.join(format!("py-mcp-{MCP_VERSION}"));
    let marker = dir.join(".durable-mcp-installed");
    let import_check = ["-c", "from mcp import Client, StdioServerParameters"];
    if marker.is_file() {
        if run(
            std::process::Command::new(venv_python(&dir)).args(import_check),
            "importing mcp",
        )
        .is_ok()
        {
            return Ok(venv_python(&dir));
        }
        // A broken install (a Python upgrade, a deleted file): drop its marker so the fresh
        // install below replaces it instead of deferring to it.
        let _ = std::fs::remove_file(&marker);
    }
    let started = std::time::Instant::now();
    std::fs::create_dir_all(&cache).map_err(|e| format!("creating {}: {e}", cache.display()))?;
    // Built beside the final place and renamed into it, so a half-done install is never used.
    let building = cache.join(format!(
        "py-mcp-{MCP_VERSION}.building-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&building);
    run(
        std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&building),
        "python3 -m venv",
    )?;
    let result = run(
        std::process::Command::new(venv_python(&building)).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--retries",
            "2",
            "--timeout",
            "30",
            &format!("mcp=={MCP_VERSION}"),
        ]),
        &format!("pip install mcp=={MCP_VERSION}"),
    )
    .and_then(|()| {
        run(
            std::process::Command::new(venv_python(&building)).args(import_check),
            "importing mcp",
        )
    });
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&building);
        return Err(e);
    }
    std::fs::write(building.join(".durable-mcp-installed"), MCP_VERSION)
        .map_err(|e| e.to_string())?;
    if marker.is_file() {
        // Another test process finished first: use its install.
        let _ = std::fs::remove_dir_all(&building);
        return Ok(venv_python(&dir));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::rename(&building, &dir) {
        let _ = std::fs::remove_dir_all(&building);
        // Another process may have finished first.
        if !marker.is_file() {
            return Err(format!("moving the virtualenv into {}: {e}", dir.display()));
        }
    }
    eprintln!(
        "mcp=={MCP_VERSION} installed into {} in {:.1?}",
        dir.display(),
        started.elapsed()
    );
    Ok(venv_python(&dir))
}
