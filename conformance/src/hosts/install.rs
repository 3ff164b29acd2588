//! The hosts the family drives, pinned and installed into the harness cache on first use
//! (`~/.cache/durable-mcp`), each checked before use. A host that cannot be installed here
//! makes its checks `skipped:` with the reason (R-HAR-6), never passed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::{fixtures::everything, harness::cache_dir, harness::npm};

/// Claude Code, as its npm package's prebuilt native binary (it needs no Node).
pub const CLAUDE_CODE_PACKAGE: &str = "@anthropic-ai/claude-code";
pub const CLAUDE_CODE_VERSION: &str = "2.1.328";
/// The TypeScript MCP SDK.
pub const TS_SDK_PACKAGE: &str = "@modelcontextprotocol/sdk";
pub const TS_SDK_VERSION: &str = "1.32.2";
/// The MCP Inspector's command-line client.
pub const INSPECTOR_PACKAGE: &str = "@modelcontextprotocol/inspector-cli";
pub const INSPECTOR_VERSION: &str = "1.0.3";

/// The platform package that carries Claude Code's native binary for `arch` (Rust's
/// `std::env::consts::ARCH`) on Linux with glibc or musl; `None` where it ships none.
pub fn claude_code_platform_package(os: &str, arch: &str, musl: bool) -> Option<String> {
    let arch = match arch {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        _ => return None,
    };
    let libc = if musl { "-musl" } else { "" };
    (os == "linux").then(|| format!("{CLAUDE_CODE_PACKAGE}-linux-{arch}{libc}"))
}

/// Claude Code's binary, installed if needed. The package `@anthropic-ai/claude-code` itself
/// needs Node 22 only for its installer script, which links the platform package's binary
/// (`@anthropic-ai/claude-code-linux-x64@<same version>`): that package is installed directly,
/// and its binary runs on its own.
pub fn claude_code() -> anyhow::Result<PathBuf> {
    let musl = Path::new("/etc/alpine-release").exists();
    let package = claude_code_platform_package(std::env::consts::OS, std::env::consts::ARCH, musl)
        .with_context(|| {
            format!(
                "Claude Code ships no binary for {}/{}",
                std::env::consts::OS,
                std::env::consts::ARCH
            )
        })?;
    let dir = cache_dir().join(format!("claude-code-{CLAUDE_CODE_VERSION}"));
    npm::install(&package, CLAUDE_CODE_VERSION, &dir, |prefix| {
        let (package_dir, _) = npm::installed_package(prefix, &package, CLAUDE_CODE_VERSION)?;
        let binary = package_dir.join("claude");
        if !binary.is_file() {
            bail!("{} has no binary `claude`", package_dir.display());
        }
        Ok(binary)
    })
}

/// The `node_modules` directory holding the TypeScript SDK (and its `zod`), installed if needed.
pub fn ts_sdk() -> anyhow::Result<PathBuf> {
    let dir = cache_dir().join(format!("ts-sdk-{TS_SDK_VERSION}"));
    npm::install(TS_SDK_PACKAGE, TS_SDK_VERSION, &dir, |prefix| {
        npm::installed_package(prefix, TS_SDK_PACKAGE, TS_SDK_VERSION)?;
        Ok(prefix.join("node_modules"))
    })
}

/// The Inspector CLI's `build` directory (it is run from there: it reads its own
/// `../package.json` relative to the working directory), installed if needed.
pub fn inspector_cli() -> anyhow::Result<PathBuf> {
    let dir = cache_dir().join(format!("inspector-cli-{INSPECTOR_VERSION}"));
    npm::install(INSPECTOR_PACKAGE, INSPECTOR_VERSION, &dir, |prefix| {
        let (package_dir, _) =
            npm::installed_package(prefix, INSPECTOR_PACKAGE, INSPECTOR_VERSION)?;
        let build = package_dir.join("build");
        if !build.join("cli.js").is_file() {
            bail!("{} has no build/cli.js", package_dir.display());
        }
        Ok(build)
    })
}

/// Why Node-based hosts cannot run here, if they cannot (Node >= 18 and npm).
pub fn node_missing() -> Option<String> {
    everything::node_available().err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_binary_package_follows_the_platform() {
        assert_eq!(
            claude_code_platform_package("linux", "x86_64", false).as_deref(),
            Some("@anthropic-ai/claude-code-linux-x64")
        );
        assert_eq!(
            claude_code_platform_package("linux", "aarch64", true).as_deref(),
            Some("@anthropic-ai/claude-code-linux-arm64-musl")
        );
        assert_eq!(
            claude_code_platform_package("linux", "riscv64", false),
            None
        );
        assert_eq!(
            claude_code_platform_package("freebsd", "x86_64", false),
            None
        );
    }
}
