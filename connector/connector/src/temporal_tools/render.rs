//! The text rendering of a tool's structured result: a headline, then the data as indented
//! `key: value` lines, so a model or a person reads it without parsing JSON.

use serde_json::Value;

/// Lines after this many are cut, so a huge history stays readable in text; the structured
/// content keeps everything (R-OPS-8).
const MAX_LINES: usize = 400;
/// A line longer than this (a long string value) is cut, so the text stays bounded too.
const MAX_LINE_CHARS: usize = 1000;

/// `headline`, a blank line, then `data` as indented lines: at most [`MAX_LINES`] lines of at
/// most [`MAX_LINE_CHARS`] characters. Rendering stops at the bound rather than render all and
/// cut.
pub fn render(headline: &str, data: &Value) -> String {
    let mut lines = Vec::new();
    let complete = tree(data, 0, &mut lines);
    let mut out = headline.to_owned();
    if !lines.is_empty() {
        out.push_str("\n\n");
        out.push_str(&lines.join("\n"));
        if !complete {
            out.push_str("\n... (more lines in the structured content)");
        }
    }
    out
}

/// `line` cut to [`MAX_LINE_CHARS`] characters, saying so.
fn bounded(line: String) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!(
            "{}... (cut; the structured content has it whole)",
            &line[..at]
        ),
        None => line,
    }
}

/// Adds `line` unless [`MAX_LINES`] are there; `false` when it could not.
fn push(out: &mut Vec<String>, line: String) -> bool {
    if out.len() >= MAX_LINES {
        return false;
    }
    out.push(bounded(line));
    true
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("-".into()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) => Some(v.to_string()),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(o) if o.is_empty() => Some("{}".into()),
        _ => None,
    }
}

/// Renders `v` into `out`; `false` when [`MAX_LINES`] cut it short.
fn tree(v: &Value, depth: usize, out: &mut Vec<String>) -> bool {
    let pad = "  ".repeat(depth);
    let mut entry = |label: String, child: &Value| match scalar(child) {
        Some(s) => push(out, format!("{pad}{label} {s}")),
        None => push(out, format!("{pad}{label}")) && tree(child, depth + 1, out),
    };
    match v {
        Value::Object(o) => o.iter().all(|(k, child)| entry(format!("{k}:"), child)),
        Value::Array(items) => items.iter().all(|item| entry("-".into(), item)),
        other => push(out, format!("{pad}{}", scalar(other).unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_and_lists_become_indented_lines() {
        let text = render(
            "Workflow w is RUNNING",
            &json!({"workflow_id": "w", "events": [{"id": 1}, "x"], "empty": [], "n": null}),
        );
        assert_eq!(
            text,
            // Keys in serde_json's (sorted) order.
            "Workflow w is RUNNING\n\nempty: []\nevents:\n  -\n    id: 1\n  - x\nn: -\nworkflow_id: w"
        );
    }

    #[test]
    fn long_answers_are_cut_with_a_pointer_to_the_structured_content() {
        let many: Vec<_> = (0..1000).collect();
        let text = render("h", &json!({ "ids": many }));
        assert!(text.lines().count() < MAX_LINES + 10);
        assert!(
            text.ends_with("more lines in the structured content)"),
            "{}",
            &text[text.len() - 80..]
        );
    }

    #[test]
    fn long_values_are_cut_within_their_line() {
        let text = render("h", &json!({ "blob": "x".repeat(1_000_000) }));
        assert!(text.len() < MAX_LINE_CHARS + 100, "{}", text.len());
        assert!(text.ends_with("(cut; the structured content has it whole)"));
    }

    #[test]
    fn a_headline_alone_has_no_trailing_blank() {
        assert_eq!(render("done", &json!({})), "done");
    }
}
