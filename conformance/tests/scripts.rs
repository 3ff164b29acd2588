//! `scripts/test`, CI's command (R-HAR-7): it finds or installs `just`, runs the test suite,
//! then `just conformance` once, and fails when either fails. Run on a copy of `scripts/` with
//! `cargo` and `just` replaced by stubs that log their arguments, so the script's own logic is
//! what is checked (a copy, because the script writes under its checkout's `target/`).

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn write_executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A checkout with only `scripts/`, stubs for `cargo` and `just` (in `stubs/`, or `just` only in
/// the cache), and a log of what they were called with.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// `just_at`: `Some(true)` on PATH, `Some(false)` in the cache, `None` nowhere.
    fn new(just_at: Option<bool>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for script in ["test", "lib.sh"] {
            let to = dir.path().join("scripts").join(script);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(repo().join("scripts").join(script), &to).unwrap();
        }
        let log = dir.path().join("calls.log");
        let stub = |name: &str, exit: &str| {
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\nexit {exit}\n",
                log.display()
            )
        };
        write_executable(&dir.path().join("stubs/cargo"), &stub("cargo", "0"));
        let just = stub("just", "${JUST_EXIT:-0}");
        match just_at {
            Some(true) => write_executable(&dir.path().join("stubs/just"), &just),
            // Installed earlier into the cache: found there, no pip needed.
            Some(false) => {
                write_executable(&dir.path().join("cache/rust-just-1.59.0/bin/just"), &just)
            }
            None => {}
        }
        Self { dir }
    }

    /// Runs `scripts/test ARGS` with `JUST_EXIT` as the conformance run's exit code; returns
    /// the script's exit code and the stubs' calls.
    fn run(&self, args: &[&str], just_exit: i32) -> (i32, Vec<String>) {
        let root = self.dir.path();
        let path = format!("{}:/usr/bin:/bin", root.join("stubs").display());
        let status = Command::new("bash")
            .arg(root.join("scripts/test"))
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", root)
            .env("DURABLE_MCP_CACHE_DIR", root.join("cache"))
            .env("DURABLE_MCP_DOCKER", "skip")
            .env("TEMPORAL_CLI", "/bin/true")
            .env("JUST_EXIT", just_exit.to_string())
            .status()
            .expect("bash runs scripts/test");
        let calls = std::fs::read_to_string(root.join("calls.log")).unwrap_or_default();
        let _ = std::fs::remove_file(root.join("calls.log"));
        (
            status.code().unwrap_or(-1),
            calls.lines().map(str::to_owned).collect(),
        )
    }
}

#[test]
fn the_test_script_installs_just_and_runs_the_main_job_once() {
    // just from the cache (as installed by an earlier run): tests, then `just conformance` once.
    let sandbox = Sandbox::new(Some(false));
    let (code, calls) = sandbox.run(&[], 0);
    assert_eq!(code, 0, "{calls:?}");
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("cargo test")).count(),
        1,
        "{calls:?}"
    );
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("just "))
            .collect::<Vec<_>>(),
        ["just conformance"],
        "{calls:?}"
    );
    assert!(
        calls.last().is_some_and(|c| c == "just conformance"),
        "the main job runs after the tests: {calls:?}"
    );

    // A failing conformance run fails the script.
    let (code, calls) = sandbox.run(&[], 3);
    assert_eq!(code, 3, "{calls:?}");

    // just on PATH is used as it is.
    let sandbox = Sandbox::new(Some(true));
    let (code, calls) = sandbox.run(&[], 0);
    assert_eq!(code, 0, "{calls:?}");
    assert!(calls.iter().any(|c| c == "just conformance"), "{calls:?}");

    // Arguments narrow the test run: no conformance run, and just is neither needed nor
    // installed.
    let sandbox = Sandbox::new(None);
    let (code, calls) = sandbox.run(&["-p", "durable-mcp", "--lib"], 0);
    assert_eq!(code, 0, "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("just")), "{calls:?}");
    assert!(
        !sandbox.dir.path().join("cache/rust-just-1.59.0").exists(),
        "just was installed for a run that does not use it"
    );
    assert!(
        calls.iter().any(|c| c
            == "cargo test --workspace --all-targets --locked --no-fail-fast -p durable-mcp --lib"),
        "{calls:?}"
    );
}
