//! Recorded result snapshots: one format (insta's `.snap` files in `fixtures/snapshots/`), one
//! way to check them, used by the tests and by the conformance runner alike (R-CNF-9).
//!
//! - [`assert_snapshot`]: panics on a difference, like any insta assertion (tests).
//! - [`check_snapshot`]: the same assertion, its failure returned as a message (the runner).
//! - [`redact_volatile`]: what differs between two runs of the same server (times, task and
//!   session ids) is masked before recording; nothing else is.
//!
//! Both go through the one `assert_json_snapshot!` call below, so a snapshot's header is the
//! same whoever records it, and one command re-records all of them: insta's own
//! `INSTA_UPDATE=always` (`just snapshots`; see `fixtures/README.md`).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// `fixtures/snapshots` of this checkout.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the conformance crate sits in the workspace")
        .join("fixtures")
        .join("snapshots")
}

/// The file snapshot `name` lives in.
pub fn snapshot_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.snap"))
}

/// Compares `value`, redacted, with snapshot `name` in `dir` and panics on a difference (insta
/// prints the diff and, outside CI, leaves a `.snap.new` beside the file). With
/// `INSTA_UPDATE=always` the snapshot is (re)written instead.
pub fn assert_snapshot(dir: &Path, name: &str, value: &Value) {
    let redacted = redact_volatile(value);
    insta::with_settings!({
        snapshot_path => dir,
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_json_snapshot!(name, redacted);
    });
}

/// [`assert_snapshot`] for callers that must not panic: `Err` says which snapshot differs and
/// how to re-record it.
pub fn check_snapshot(dir: &Path, name: &str, value: &Value) -> Result<(), String> {
    let file = snapshot_file(dir, name);
    if !file.is_file() && std::env::var("INSTA_UPDATE").as_deref() != Ok("always") {
        return Err(format!(
            "snapshot {} does not exist; record it with `just snapshots` \
             (INSTA_UPDATE=always, see fixtures/README.md)",
            file.display()
        ));
    }
    quiet_snapshot_panics();
    CHECKING.with(|c| c.set(true));
    let outcome = std::panic::catch_unwind(|| assert_snapshot(dir, name, value));
    CHECKING.with(|c| c.set(false));
    outcome.map_err(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        format!(
            "the result differs from snapshot {} ({}); if the change is deliberate, \
             re-record with `just snapshots` (INSTA_UPDATE=always, see fixtures/README.md)",
            file.display(),
            why.lines().next().unwrap_or("see the diff above")
        )
    })
}

thread_local! {
    /// Set while [`check_snapshot`] runs insta's assertion on this thread.
    static CHECKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// insta has already printed the diff when its assertion panics; in [`check_snapshot`] that
/// panic is an ordinary mismatch, so the panic message and backtrace are not printed after it.
/// Every other panic goes to the hook that was installed before.
fn quiet_snapshot_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CHECKING.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Keys whose values change from run to run, and what replaces them.
const VOLATILE_KEYS: [(&str, &str); 6] = [
    ("taskId", "[task id]"),
    ("createdAt", "[time]"),
    ("lastUpdatedAt", "[time]"),
    ("sessionId", "[session id]"),
    ("progressToken", "[progress token]"),
    ("requestId", "[request id]"),
];

/// `value` with what differs between runs masked: the values of [`VOLATILE_KEYS`] anywhere, and
/// the wall-clock time server-everything writes into its dynamic resources (`... created at
/// 3:25:15 PM`, also base64-encoded in a blob; see `fixtures::everything::mask_timestamps`).
/// Everything else is kept as it was, so any other change shows in the snapshot.
pub fn redact_volatile(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let masked = map
                .iter()
                .map(|(k, v)| {
                    let replacement = VOLATILE_KEYS
                        .iter()
                        .find(|(key, _)| key == k && !v.is_null())
                        .map(|(_, with)| Value::String((*with).to_owned()));
                    (k.clone(), replacement.unwrap_or_else(|| redact_volatile(v)))
                })
                .collect();
            crate::fixtures::everything::mask_timestamps(&Value::Object(masked))
        }
        Value::Array(items) => Value::Array(items.iter().map(redact_volatile).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn masks_only_volatile_values() {
        let seen = json!({
            "task": {"taskId": "b2c1", "status": "completed", "createdAt": "2026-12-01T03:00:00Z",
                     "lastUpdatedAt": "2026-12-01T03:00:04Z", "ttl": 60000},
            "notifications": [{"progressToken": "p-1", "progress": 2, "total": 3}],
            "content": [{"type": "resource", "resource": {"uri": "demo://resource/dynamic/text/2",
                "text": "Resource 2: created at 3:25:15 PM"}}],
            "none": {"taskId": null}
        });
        assert_eq!(
            redact_volatile(&seen),
            json!({
                "task": {"taskId": "[task id]", "status": "completed", "createdAt": "[time]",
                         "lastUpdatedAt": "[time]", "ttl": 60000},
                "notifications": [{"progressToken": "[progress token]", "progress": 2, "total": 3}],
                "content": [{"type": "resource", "resource": {"uri": "demo://resource/dynamic/text/2",
                    "text": "Resource 2: created at <time>"}}],
                "none": {"taskId": null}
            })
        );
    }

    #[test]
    fn a_difference_is_an_error_naming_the_snapshot_and_the_update_command() {
        // Under `INSTA_UPDATE=always` (`just snapshots`) every check records instead.
        let updating = std::env::var("INSTA_UPDATE").as_deref() == Ok("always");
        let dir = tempfile::tempdir().unwrap();
        if !updating {
            let missing = check_snapshot(dir.path(), "absent", &json!({"a": 1})).unwrap_err();
            assert!(
                missing.contains("absent.snap") && missing.contains("just snapshots"),
                "{missing}"
            );
        }
        std::fs::write(
            snapshot_file(dir.path(), "recorded"),
            "---\nsource: conformance/src/snapshots.rs\n---\n{\n  \"a\": 1\n}\n",
        )
        .unwrap();
        check_snapshot(dir.path(), "recorded", &json!({"a": 1})).unwrap();
        if !updating {
            let differs = check_snapshot(dir.path(), "recorded", &json!({"a": 2})).unwrap_err();
            assert!(
                differs.contains("recorded.snap") && differs.contains("re-record"),
                "{differs}"
            );
        }
    }
}
