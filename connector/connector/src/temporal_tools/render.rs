//! The text rendering of a tool's structured result: a headline, then the data as indented
//! `key: value` lines, so a model or a person reads it without parsing JSON.

use serde_json::Value;

/// Lines deeper than this are cut, so a huge history stays readable in text; the
/// structured content keeps everything.
const MAX_LINES: usize = 400;

/// `headline`, a blank line, then `data` as indented lines.
pub fn render(headline: &str, data: &Value) -> String {
    let mut lines = Vec::new();
    tree(data, 0, &mut lines);
    let mut out = headline.to_owned();
    if !lines.is_empty() {
        out.push_str("\n\n");
        let cut = lines.len() > MAX_LINES;
        let total = lines.len();
        lines.truncate(MAX_LINES);
        out.push_str(&lines.join("\n"));
        if cut {
            out.push_str(&format!(
                "\n... ({} more lines in the structured content)",
                total - MAX_LINES
            ));
        }
    }
    out
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

fn tree(v: &Value, depth: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                match scalar(child) {
                    Some(s) => out.push(format!("{pad}{k}: {s}")),
                    None => {
                        out.push(format!("{pad}{k}:"));
                        tree(child, depth + 1, out);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match scalar(item) {
                    Some(s) => out.push(format!("{pad}- {s}")),
                    None => {
                        out.push(format!("{pad}-"));
                        tree(item, depth + 1, out);
                    }
                }
            }
        }
        other => out.push(format!("{pad}{}", scalar(other).unwrap_or_default())),
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
    fn a_headline_alone_has_no_trailing_blank() {
        assert_eq!(render("done", &json!({})), "done");
    }
}
