//! Fidelity verdicts: is the durable result the direct result? Pure functions over JSON.
//!
//! Some tools answer differently on every call (timestamps, random ids). When two direct calls
//! of a read-only tool differ, the places where they differ are the tool's own variation, and
//! the durable result is compared everywhere else.

use durable_mcp::contract::call::{CallNotification, CallNotifications};
use serde_json::Value;

use super::report::Status;

/// A call's notifications as a caller sees them: progress as `progress/total "message"`, log
/// messages as `level logger: data` (the proxy's numbering left out).
fn seen(notes: &CallNotifications) -> Vec<String> {
    notes
        .items
        .iter()
        .map(|n| match n {
            CallNotification::Progress(p) => format!(
                "progress {}{}{}",
                p.progress,
                p.total.map(|t| format!("/{t}")).unwrap_or_default(),
                p.message
                    .as_ref()
                    .map(|m| format!(" {m:?}"))
                    .unwrap_or_default()
            ),
            CallNotification::Log(l) => format!(
                "log {}{}: {}",
                l.level,
                l.logger
                    .as_ref()
                    .map(|g| format!(" {g}"))
                    .unwrap_or_default(),
                l.data
            ),
        })
        .collect()
}

/// The progress and logging verdict for one tool (R-CNF-3): the notifications a direct call
/// got against those that travelled with the durable result, in order. `None` when the tool
/// sent none either way (nothing to check). When they differ, `again` (a second direct call's)
/// tells a tool whose notifications vary by themselves apart.
pub fn notifications_verdict(
    direct: &CallNotifications,
    durable: &CallNotifications,
    again: Option<&CallNotifications>,
) -> Option<(Status, String)> {
    if direct.is_empty() && durable.is_empty() {
        return None;
    }
    let (a, b) = (seen(direct), seen(durable));
    let count = |notes: &[String], kind: &str| notes.iter().filter(|n| n.starts_with(kind)).count();
    if a == b {
        return Some((
            Status::Pass,
            format!(
                "{} progress notification(s) and {} log message(s), the same both ways, in order",
                count(&a, "progress"),
                count(&a, "log")
            ),
        ));
    }
    if again.is_some_and(|again| seen(again) != a) {
        return Some((
            Status::Skipped(
                "the tool's own notifications differ between two direct calls (timing or content)"
                    .into(),
            ),
            String::new(),
        ));
    }
    let first = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let at = |notes: &[String]| {
        notes
            .get(first)
            .map_or("nothing more".to_owned(), |n| short(n))
    };
    Some((
        Status::Fail(format!(
            "notifications differ at #{}: direct {}, durable {} ({} direct, {} durable)",
            first + 1,
            at(&a),
            at(&b),
            a.len(),
            b.len()
        )),
        format!("direct: {}\ndurable: {}", a.join("; "), b.join("; ")),
    ))
}

/// Every place where `a` and `b` differ, as JSON pointers (`/content/1/text`); an array whose
/// lengths differ, or a value whose type differs, counts as one place.
pub fn differences(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(a, b, String::new(), &mut out);
    out
}

fn collect(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let path = format!("{at}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => collect(p, q, path, out),
                    _ => out.push(path),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                collect(p, q, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(if at.is_empty() { "/".into() } else { at }),
    }
}

/// RFC 6901 escaping of one pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether `path` is `varying` or inside it.
fn covered(path: &str, varying: &[String]) -> bool {
    varying.iter().any(|v| {
        v == "/"
            || path == v
            || path
                .strip_prefix(v.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// The verdict for one tool: `direct` and `durable` results, and, when they differ, a second
/// direct result (`again`) that tells the tool's own variation apart.
pub fn verdict(
    direct: &Result<Value, String>,
    durable: &Result<Value, String>,
    again: Option<&Result<Value, String>>,
) -> (Status, String) {
    match (direct, durable) {
        (Ok(a), Ok(b)) if a == b => (Status::Pass, "results equal (direct vs durable)".into()),
        (Ok(a), Ok(b)) => {
            let varying = match again {
                Some(Ok(c)) if c != a => differences(a, c),
                _ => Vec::new(),
            };
            let unexplained: Vec<String> = differences(a, b)
                .into_iter()
                .filter(|p| !covered(p, &varying))
                .collect();
            match unexplained.first() {
                None => (
                    Status::Pass,
                    format!(
                        "results equal except where the tool's own direct results vary ({})",
                        varying.join(", ")
                    ),
                ),
                Some(path) => (
                    Status::Fail(format!(
                        "results differ at {path}: direct {} vs durable {}",
                        short(&show(a, path)),
                        short(&show(b, path))
                    )),
                    String::new(),
                ),
            }
        }
        // Both failed: only the same failure is fidelity; a durable path that timed out or was
        // unavailable says nothing about the tool.
        (Err(a), Err(b)) if same_failure(a, b) => (
            Status::Pass,
            format!(
                "both failed alike (direct: {}; durable: {})",
                short(a),
                short(b)
            ),
        ),
        (Err(a), Err(b)) => (
            Status::Fail(format!(
                "the direct and durable calls failed differently (direct: {}; durable: {})",
                short(a),
                short(b)
            )),
            String::new(),
        ),
        (Ok(_), Err(b)) => (
            Status::Fail(format!(
                "direct call returned a result, durable call failed: {}",
                short(b)
            )),
            String::new(),
        ),
        (Err(a), Ok(_)) => (
            Status::Fail(format!(
                "direct call failed ({}), durable call returned a result",
                short(a)
            )),
            String::new(),
        ),
    }
}

/// Whether two failure messages are the same failure: the same JSON-RPC error code when the
/// direct one has one (the durable path carries the upstream's message), else the same text.
fn same_failure(direct: &str, durable: &str) -> bool {
    match jsonrpc_code(direct) {
        Some(code) => {
            jsonrpc_code(durable) == Some(code) || durable.contains(&format!("error {code}"))
        }
        None => direct == durable,
    }
}

/// The code in an rmcp error text such as `Mcp error: -32602: ...`.
fn jsonrpc_code(message: &str) -> Option<i64> {
    let rest = message.split("Mcp error: ").nth(1)?;
    rest.split(':').next()?.trim().parse().ok()
}

/// The value at a pointer, as compact JSON.
fn show(v: &Value, path: &str) -> String {
    let ptr = if path == "/" { "" } else { path };
    v.pointer(ptr)
        .map(|x| x.to_string())
        .unwrap_or_else(|| "(absent)".into())
}

pub fn short(s: &str) -> String {
    const MAX: usize = 120;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn progress_and_log_messages_are_compared_in_order() {
        use durable_mcp::contract::call::{ToolLog, ToolProgress};
        let progress = |p: f64| {
            CallNotification::Progress(ToolProgress {
                progress: p,
                total: Some(100.0),
                message: None,
            })
        };
        let log = |data: &str, seq: Option<u64>| {
            CallNotification::Log(ToolLog {
                level: "info".into(),
                logger: None,
                data: json!(data),
                seq,
            })
        };
        let notes = |items: Vec<CallNotification>| CallNotifications { items };
        let direct = notes(vec![progress(0.0), log("a", None), progress(100.0)]);
        assert!(notifications_verdict(&notes(vec![]), &notes(vec![]), None).is_none());
        let (status, detail) = notifications_verdict(
            &direct,
            &notes(vec![progress(0.0), log("a", Some(7)), progress(100.0)]),
            None,
        )
        .unwrap();
        assert_eq!(
            status,
            Status::Pass,
            "the proxy's numbering is not compared"
        );
        assert!(
            detail.contains("2 progress") && detail.contains("1 log"),
            "{detail}"
        );
        let (status, _) =
            notifications_verdict(&direct, &notes(vec![progress(100.0)]), None).unwrap();
        let Status::Fail(why) = status else {
            panic!("{status:?}")
        };
        assert!(
            why.contains("#1") && why.contains("progress 0/100"),
            "{why}"
        );
        let (status, _) = notifications_verdict(
            &direct,
            &notes(vec![log("a", None), progress(0.0), progress(100.0)]),
            Some(&direct),
        )
        .unwrap();
        assert!(
            matches!(status, Status::Fail(_)),
            "order counts: {status:?}"
        );
        let (status, _) =
            notifications_verdict(&direct, &notes(vec![]), Some(&notes(vec![progress(0.0)])))
                .unwrap();
        assert!(matches!(status, Status::Skipped(_)), "{status:?}");
    }

    #[test]
    fn differences_are_all_listed() {
        let a = json!({"content": [{"text": "x at 1"}, {"n": 1}], "k": {"a/b": 1}, "gone": 1});
        let b = json!({"content": [{"text": "x at 2"}, {"n": 1}], "k": {"a/b": 2}});
        assert_eq!(differences(&a, &b), ["/content/0/text", "/gone", "/k/a~1b"]);
        assert_eq!(differences(&json!([1]), &json!([1, 2])), ["/"]);
        assert!(differences(&a, &a).is_empty());
    }

    #[test]
    fn two_failures_pass_only_when_they_are_the_same_failure() {
        let direct = Err("Mcp error: -32602: bad arguments".to_owned());
        let durable = Err(
            "failed (UpstreamJsonRpcError): upstream \"upstream\" answered JSON-RPC error -32602: bad arguments".to_owned(),
        );
        assert_eq!(verdict(&direct, &durable, None).0, Status::Pass);
        let timed_out = Err("timed out: operation timed out".to_owned());
        assert!(matches!(
            verdict(&direct, &timed_out, None).0,
            Status::Fail(_)
        ));
        let unavailable = Err("durable path unavailable: no endpoint".to_owned());
        assert!(matches!(
            verdict(&direct, &unavailable, None).0,
            Status::Fail(_)
        ));
    }

    #[test]
    fn a_tools_own_variation_is_not_a_fidelity_failure() {
        let direct = Ok(json!({"content": [{"type": "text", "text": "created at 5:25:48"}]}));
        let again = Ok(json!({"content": [{"type": "text", "text": "created at 5:25:50"}]}));
        let durable = Ok(json!({"content": [{"type": "text", "text": "created at 5:25:59"}]}));
        let (status, detail) = verdict(&direct, &durable, Some(&again));
        assert_eq!(status, Status::Pass);
        assert!(detail.contains("/content/0/text"), "{detail}");

        // Elsewhere a difference still fails.
        let durable = Ok(json!({"content": [{"type": "image", "text": "created at 5:25:59"}]}));
        let (status, _) = verdict(&direct, &durable, Some(&again));
        assert!(matches!(status, Status::Fail(m) if m.contains("/content/0/type")));

        // A tool that answers the same twice has no excuse.
        let durable = Ok(json!({"content": [{"type": "text", "text": "other"}]}));
        let (status, _) = verdict(&direct, &durable, Some(&direct));
        assert!(matches!(status, Status::Fail(m) if m.contains("/content/0/text")));
    }
}
