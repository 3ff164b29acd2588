//! What current hosts refuse in an answer (R-CNF-19): the checks the TypeScript SDK client
//! 1.32.2 makes of a `CallToolResult` (its zod schemas and `Client.callTool`), which every
//! host built on it shares, and Claude Code 2.1.328's limit on a task ID. A tool whose answer
//! trips one fails for that host however well the durable path carries it, so third-party mode
//! names it. Pure rules over JSON; no JSON Schema validation of `structuredContent` (the SDK's
//! AJV check) beyond its presence.

use base64::Engine as _;
use serde_json::Value;

/// The longest task ID Claude Code 2.1.328 accepts: a longer one is "a malformed task handle",
/// which it cancels and reports to the model as an error.
pub const MAX_TASK_ID_CHARS: usize = 128;

/// Why a host would refuse the task ID `id`, if it would.
pub(super) fn task_id_refusal(id: &str) -> Option<String> {
    let chars = id.chars().count();
    (chars > MAX_TASK_ID_CHARS).then(|| {
        format!(
            "its task ID is {chars} characters; Claude Code refuses more than \
             {MAX_TASK_ID_CHARS} (a malformed task handle: it cancels the task)"
        )
    })
}

/// Why a TypeScript SDK client (1.32.2) would refuse `result`, the answer to a call of the tool
/// listed as `tool`: each reason names the place. Empty when it would take it.
pub(super) fn result_refusals(tool: &Value, result: &Value) -> Vec<String> {
    let Some(map) = result.as_object() else {
        return vec!["the result is not a JSON object".into()];
    };
    let mut why = Vec::new();
    match map.get("content") {
        None => {}
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                why.extend(
                    block_refusals(block)
                        .into_iter()
                        .map(|w| format!("/content/{i}: {w}")),
                );
            }
        }
        Some(_) => why.push("/content is not an array".into()),
    }
    if map.get("structuredContent").is_some_and(|s| !s.is_object()) {
        why.push("/structuredContent is not an object".into());
    }
    if map.get("isError").is_some_and(|e| !e.is_boolean()) {
        why.push("/isError is not a boolean".into());
    }
    if map.get("_meta").is_some_and(|m| !m.is_object()) {
        why.push("/_meta is not an object".into());
    }
    let is_error = map.get("isError") == Some(&Value::Bool(true));
    if tool.get("outputSchema").is_some() && !is_error && map.get("structuredContent").is_none() {
        why.push(
            "the tool lists an outputSchema but the result has no structuredContent \
             (Client.callTool throws)"
                .into(),
        );
    }
    why
}

/// Why one content block fails the SDK's `ContentBlockSchema`.
fn block_refusals(block: &Value) -> Vec<String> {
    let mut why = Vec::new();
    let text = |key: &str| block.get(key).is_some_and(Value::is_string);
    match block.get("type").and_then(Value::as_str) {
        Some("text") if !text("text") => why.push("text without a string `text`".into()),
        Some("image" | "audio") => {
            if !block.get("data").is_some_and(is_base64) {
                why.push("`data` is not base64".into());
            }
            if !text("mimeType") {
                why.push("no string `mimeType`".into());
            }
        }
        Some("resource_link") if !(text("uri") && text("name")) => {
            why.push("a resource_link needs string `uri` and `name`".into());
        }
        Some("resource") => why.extend(resource_refusals(&block["resource"])),
        Some("text" | "resource_link") => {}
        Some(other) => why.push(format!("unknown content type {other:?}")),
        None => why.push("no `type`".into()),
    }
    if let Some(annotations) = block.get("annotations") {
        why.extend(annotation_refusals(annotations));
    }
    why
}

fn resource_refusals(resource: &Value) -> Vec<String> {
    let mut why = Vec::new();
    if !resource.get("uri").is_some_and(Value::is_string) {
        why.push("an embedded resource needs a string `uri`".into());
    }
    let has_text = resource.get("text").is_some_and(Value::is_string);
    let has_blob = resource.get("blob").is_some_and(is_base64);
    if !has_text && !has_blob {
        why.push("an embedded resource needs a string `text` or a base64 `blob`".into());
    }
    why
}

fn annotation_refusals(annotations: &Value) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(audience) = annotations.get("audience") {
        let roles = audience.as_array().map(|a| {
            a.iter()
                .all(|r| matches!(r.as_str(), Some("user" | "assistant")))
        });
        if roles != Some(true) {
            why.push("annotations.audience holds a role other than user or assistant".into());
        }
    }
    if let Some(priority) = annotations.get("priority")
        && !priority.as_f64().is_some_and(|p| (0.0..=1.0).contains(&p))
    {
        why.push("annotations.priority is not a number from 0 to 1".into());
    }
    if let Some(modified) = annotations.get("lastModified")
        && !modified.as_str().is_some_and(is_iso_datetime)
    {
        why.push("annotations.lastModified is not an ISO 8601 time with an offset".into());
    }
    why
}

/// Whether `time` is `YYYY-MM-DDThh:mm:ss[.fraction]` with `Z` or a `+hh:mm`/`-hh:mm` offset
/// (zod's `z.iso.datetime({offset: true})`).
fn is_iso_datetime(time: &str) -> bool {
    let shape = |text: &str, pattern: &str| {
        text.len() == pattern.len()
            && text.chars().zip(pattern.chars()).all(|(c, p)| match p {
                'd' => c.is_ascii_digit(),
                _ => c == p,
            })
    };
    let Some((date_time, offset)) = time.strip_suffix('Z').map(|t| (t, "")).or_else(|| {
        time.len()
            .checked_sub(6)
            .and_then(|i| time.is_char_boundary(i).then(|| time.split_at(i)))
    }) else {
        return false;
    };
    let offset_ok = offset.is_empty()
        || ((offset.starts_with('+') || offset.starts_with('-')) && shape(&offset[1..], "dd:dd"));
    let (whole, fraction) = match date_time.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (date_time, None),
    };
    offset_ok
        && shape(whole, "dddd-dd-ddTdd:dd:dd")
        && fraction.is_none_or(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()))
}

/// Whether `value` is a string `atob` decodes (the SDK's `Base64Schema`): the base64 alphabet,
/// padding optional, ASCII whitespace ignored.
fn is_base64(value: &Value) -> bool {
    let Some(text) = value.as_str() else {
        return false;
    };
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    engine.decode(compact.as_bytes()).is_ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_task_id_over_128_characters_is_refused() {
        assert_eq!(task_id_refusal(&"a".repeat(128)), None);
        assert!(is_iso_datetime("2025-01-01T00:00:00.5+02:00"));
        assert!(is_iso_datetime("2025-01-01T00:00:00Z"));
        assert!(!is_iso_datetime("2025-01-01T00:00:00"));
        assert!(!is_iso_datetime("yesterday"));
        let why = task_id_refusal(&"a".repeat(250)).unwrap();
        assert!(why.contains("250 characters"), "{why}");
        assert!(why.contains("Claude Code"), "{why}");
    }

    #[test]
    fn results_the_typescript_sdk_takes_pass() {
        let tool = json!({"name": "t", "outputSchema": {"type": "object"}});
        let result = json!({
            "content": [
                {"type": "text", "text": "hi", "annotations": {"audience": ["user"], "priority": 1,
                 "lastModified": "2025-01-01T00:00:00Z"}},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "audio", "data": "UklGRg", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "test://x", "name": "x"},
                {"type": "resource", "resource": {"uri": "test://y", "blob": "AAEC"}},
            ],
            "structuredContent": {"n": 1},
            "_meta": {"k": "v"},
        });
        assert_eq!(result_refusals(&tool, &result), Vec::<String>::new());
        let failed = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(result_refusals(&tool, &failed), Vec::<String>::new());
    }

    #[test]
    fn each_refusal_names_its_place() {
        let tool = json!({"name": "t", "outputSchema": {"type": "object"}});
        let result = json!({
            "content": [
                {"type": "image", "data": "not base64!", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "test://x"},
                {"type": "video", "url": "x"},
                {"type": "text", "text": "x", "annotations": {"priority": 2, "audience": ["model"],
                 "lastModified": "yesterday"}},
            ],
            "isError": "no",
        });
        let why = result_refusals(&tool, &result);
        for expected in [
            "/content/0: `data` is not base64",
            "/content/1: a resource_link needs",
            "/content/2: unknown content type \"video\"",
            "/content/3: annotations.audience",
            "/content/3: annotations.priority",
            "/content/3: annotations.lastModified",
            "/isError is not a boolean",
            "outputSchema but the result has no structuredContent",
        ] {
            assert!(
                why.iter().any(|w| w.contains(expected)),
                "{expected}: {why:?}"
            );
        }
        assert_eq!(
            result_refusals(&json!({}), &json!({"structuredContent": [1]})),
            vec!["/structuredContent is not an object".to_owned()]
        );
    }
}
