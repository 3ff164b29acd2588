//! The workspace's own binaries (the connector, the proxy, the example tool service, the mock
//! upstream), found one way for everyone: tests, benches, the scenario runner and the load run.

use std::path::PathBuf;

/// The connector binary's name.
pub const CONNECTOR_BIN: &str = "durable-mcp-connector";
/// Environment variable that overrides where [`connector_bin`] looks.
pub const CONNECTOR_BIN_ENV: &str = "DURABLE_MCP_CONNECTOR";
/// The proxy binary's name.
pub const PROXY_BIN: &str = "durable-mcp-proxy";
/// Environment variable that overrides where [`proxy_bin`] looks.
pub const PROXY_BIN_ENV: &str = "DURABLE_MCP_PROXY";
/// The native example tool service's binary.
pub const EXAMPLE_TOOLS_BIN: &str = "durable-mcp-example-tools";
/// Environment variable that overrides where [`example_tools_bin`] looks.
pub const EXAMPLE_TOOLS_BIN_ENV: &str = "DURABLE_MCP_EXAMPLE_TOOLS";
/// The mock upstream binary's name.
pub const MOCK_UPSTREAM_BIN: &str = "durable-mcp-mock-upstream";
/// Environment variable that overrides where [`mock_upstream_bin`] looks.
pub const MOCK_UPSTREAM_BIN_ENV: &str = "DURABLE_MCP_MOCK_UPSTREAM";

/// `$DURABLE_MCP_CONNECTOR`, else `durable-mcp-connector` next to the running executable.
pub fn connector_bin() -> anyhow::Result<PathBuf> {
    workspace_bin(CONNECTOR_BIN)
}

/// `$DURABLE_MCP_PROXY`, else `durable-mcp-proxy` next to the running executable.
pub fn proxy_bin() -> anyhow::Result<PathBuf> {
    workspace_bin(PROXY_BIN)
}

/// `$DURABLE_MCP_EXAMPLE_TOOLS`, else `durable-mcp-example-tools` next to the running executable.
pub fn example_tools_bin() -> anyhow::Result<PathBuf> {
    workspace_bin(EXAMPLE_TOOLS_BIN)
}

/// Path of the built `durable-mcp-mock-upstream` binary, for tests outside this package:
/// `$DURABLE_MCP_MOCK_UPSTREAM` if set, else the binary next to the running test's target
/// directory (`target/<profile>/`). Cargo builds it only for this package's own tests, so other
/// packages should run `cargo build -p durable-mcp-conformance --bin durable-mcp-mock-upstream`
/// first; the error says so.
pub fn mock_upstream_bin() -> anyhow::Result<PathBuf> {
    workspace_bin(MOCK_UPSTREAM_BIN)
}

/// The environment variable that overrides where [`workspace_bin`] looks for `name`: the name
/// in upper case with `_` for `-` (`durable-mcp-proxy` -> `DURABLE_MCP_PROXY`).
pub fn bin_env(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// The package that builds `name`, for the error that says how to build it.
fn package_of(name: &str) -> &'static str {
    match name {
        MOCK_UPSTREAM_BIN | "durable-mcp-conformance" => "-p durable-mcp-conformance",
        EXAMPLE_TOOLS_BIN => "-p durable-mcp-examples",
        n if n.starts_with("durable-mcp-") => "-p durable-mcp-cli",
        _ => "--workspace",
    }
}

/// A binary of this workspace: `$<NAME>` (see [`bin_env`]) if set, else `name` next to the
/// running executable (`target/<profile>/`, also from `target/<profile>/deps/`). The error says
/// how to build it (`cargo build <package> --bin <name>`, or `cargo build --workspace --bins`).
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let env_var = bin_env(name);
    if let Some(path) = std::env::var_os(&env_var) {
        return Ok(path.into());
    }
    let exe = std::env::current_exe()?;
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    // target/<profile>/deps/<test> or target/<profile>/<bin>
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join(&file);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "{file} not found near {}; run `cargo build {} --bin {name}` (or `cargo build \
         --workspace --bins`) or set {env_var}",
        exe.display(),
        package_of(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_variables_follow_the_names() {
        for (name, var) in [
            (CONNECTOR_BIN, CONNECTOR_BIN_ENV),
            (PROXY_BIN, PROXY_BIN_ENV),
            (EXAMPLE_TOOLS_BIN, EXAMPLE_TOOLS_BIN_ENV),
            (MOCK_UPSTREAM_BIN, MOCK_UPSTREAM_BIN_ENV),
        ] {
            assert_eq!(bin_env(name), var);
        }
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let e = workspace_bin("durable-mcp-no-such-binary").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("cargo build -p durable-mcp-cli --bin durable-mcp-no-such-binary")
                && msg.contains("DURABLE_MCP_NO_SUCH_BINARY"),
            "{msg}"
        );
    }
}
