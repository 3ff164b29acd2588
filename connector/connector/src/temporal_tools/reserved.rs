//! durable-mcp's own executions are not the Temporal tools' to show or touch (R-OPS-6).
//!
//! A native Workflow-backed tool runs one Workflow per call, with id `mcp/{service}/{tool}/{request}`
//! (the same form as a proxied call's Activity id). That Workflow holds one caller's input, result
//! and the Nexus callback token that completes the caller's operation; the connector keeps each
//! caller's tasks to that caller (R-CON-6). So the Temporal tools leave every id under
//! [`RESERVED_PREFIX`] out of their visibility queries (list and batch) and refuse it by id, for
//! every caller and every scope: an operator inspects them with the Temporal CLI or UI, whose
//! access control is Temporal's own. Callback tokens and Nexus headers in any history are
//! redacted ([`redact_callbacks`]).

use serde_json::Value;

use super::error::{ErrorKind, ToolError};

/// The id prefix of executions durable-mcp starts for its callers.
pub const RESERVED_PREFIX: &str = "mcp/";

/// What replaces a redacted header value.
pub const REDACTED: &str = "***";

/// Whether `workflow_id` names one of durable-mcp's own executions.
pub fn is_reserved(workflow_id: &str) -> bool {
    workflow_id.starts_with(RESERVED_PREFIX)
}

/// Refuses a reserved id, saying how a caller reaches its own tool calls instead.
pub fn check_id(workflow_id: &str) -> Result<(), ToolError> {
    if !is_reserved(workflow_id) {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorKind::PermissionDenied,
        format!(
            "Workflow ids starting with {RESERVED_PREFIX:?} belong to durable-mcp's own tool calls, \
             which each caller reaches only through its own tasks"
        ),
        format!(
            "use an id that does not start with {RESERVED_PREFIX:?}; to inspect a tool call, use \
             tasks/get with its task id, or the Temporal CLI with your own Temporal credentials"
        ),
    ))
}

/// `query` narrowed to executions outside the reserved prefix. The user's filter is kept whole
/// in parentheses; a trailing `ORDER BY` (visibility stores that support it) stays last. A
/// query that could escape its parentheses is refused ([`check_contained`]).
pub fn exclude_reserved(query: &str) -> Result<String, ToolError> {
    let guard = format!("WorkflowId NOT STARTS_WITH '{RESERVED_PREFIX}'");
    let (filter, order) = split_order_by(query);
    let filter = filter.trim();
    for part in [query, filter] {
        check_contained(part).map_err(|why| {
            ToolError::new(
                ErrorKind::InvalidArguments,
                format!("the visibility query {query:?} is refused: {why}"),
                "balance the parentheses and quotes, leave out comments, backslashes and \
                 semicolons, and put ORDER BY last, outside any parentheses",
            )
        })?;
    }
    let narrowed = if filter.is_empty() {
        guard
    } else {
        format!("({filter}) AND {guard}")
    };
    Ok(match order {
        Some(order) => format!("{narrowed} {order}"),
        None => narrowed,
    })
}

/// Whether `query` stays inside the parentheses it is wrapped in (R-OPS-6): every parenthesis
/// outside quotes is closed, in order, and every quote is closed; no comment (`--`, `/*`, `*/`,
/// `#`) or `;` outside quotes, and no backslash anywhere (the visibility parser reads it as an
/// escape inside quotes, where this scan would not). `Err` says what is wrong.
pub fn check_contained(query: &str) -> Result<(), &'static str> {
    if query.contains('\\') {
        return Err("it contains a backslash");
    }
    let bytes = query.as_bytes();
    let mut quote: Option<u8> = None;
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        let next = bytes.get(i + 1).copied();
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match (b, next) {
                (b'\'' | b'"' | b'`', _) => quote = Some(b),
                (b'(', _) => depth += 1,
                (b')', _) => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or("a parenthesis is closed that was not opened")?
                }
                (b'-', Some(b'-')) | (b'/', Some(b'*')) | (b'*', Some(b'/')) | (b'#', _) => {
                    return Err("it contains a comment");
                }
                (b';', _) => return Err("it contains a semicolon"),
                _ => {}
            },
        }
    }
    match (quote, depth) {
        (Some(_), _) => Err("a quote is not closed"),
        (None, 0) => Ok(()),
        _ => Err("a parenthesis is not closed"),
    }
}

/// Splits off a top-level `ORDER BY ...` clause (outside quotes), if there is one.
fn split_order_by(query: &str) -> (&str, Option<&str>) {
    let lower = query.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut quote: Option<u8> = None;
    let mut found = None;
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' || b == b'`' => quote = Some(b),
            None if lower[i..].starts_with("order")
                && (i == 0 || bytes[i - 1].is_ascii_whitespace() || bytes[i - 1] == b')')
                && lower[i + 5..].trim_start().starts_with("by") =>
            {
                found = Some(i);
            }
            None => {}
        }
    }
    match found {
        Some(i) => (&query[..i], Some(&query[i..])),
        None => (query, None),
    }
}

/// Replaces every Nexus header value and completion callback in a rendered history event by
/// [`REDACTED`]: a callback token lets its holder complete someone's operation, and a
/// caller's Nexus headers are not another caller's to read.
pub fn redact_callbacks(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for (key, child) in o.iter_mut() {
                let k = key.to_ascii_lowercase().replace(['_', '-'], "");
                if k == "completioncallbacks" || k == "callbacks" || k == "nexusheader" {
                    blank_strings(child);
                } else if k.contains("callbacktoken") || k == "token" {
                    *child = Value::String(REDACTED.into());
                } else {
                    redact_callbacks(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_callbacks),
        _ => {}
    }
}

/// Every string under `v` becomes [`REDACTED`] (shape kept, so a reader sees what was there).
fn blank_strings(v: &mut Value) {
    match v {
        Value::String(s) => *s = REDACTED.into(),
        Value::Object(o) => o.values_mut().for_each(blank_strings),
        Value::Array(items) => items.iter_mut().for_each(blank_strings),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reserved_ids_are_the_mcp_prefix_only() {
        assert!(is_reserved("mcp/examples/slow_report/r-1"));
        assert!(!is_reserved("order-mcp/1"));
        assert!(!is_reserved("mcpx"));
        assert!(check_id("order-1").is_ok());
        let err = check_id("mcp/s/t/r").unwrap_err();
        assert_eq!(err.kind, ErrorKind::PermissionDenied);
        assert!(err.next_step.contains("tasks/get"), "{}", err.next_step);
    }

    #[test]
    fn a_visibility_query_cannot_escape_its_parentheses() {
        for (query, refused) in [
            ("WorkflowId STARTS_WITH 'mcp/') OR (1=1", Some("not opened")),
            ("(WorkflowType = 'A'", Some("parenthesis is not closed")),
            ("WorkflowType = 'A", Some("quote is not closed")),
            (
                "WorkflowType = 'a\\' OR 1=1 OR WorkflowType = '",
                Some("backslash"),
            ),
            ("WorkflowType = 'A' -- x", Some("comment")),
            ("WorkflowType = 'A' /* x */", Some("comment")),
            ("WorkflowType = 'A' # x", Some("comment")),
            ("WorkflowType = 'A'; x", Some("semicolon")),
            ("(WorkflowType = 'A') OR (WorkflowId = 'x')", None),
            ("WorkflowType = ')(' AND WorkflowId = \"--#;/*\"", None),
            ("WorkflowType = 'it''s'", None),
            ("", None),
        ] {
            let got = check_contained(query);
            match refused {
                Some(why) => assert!(got.is_err_and(|e| e.contains(why)), "{query}: {got:?}"),
                None => assert_eq!(got, Ok(()), "{query}"),
            }
        }
        // ORDER BY inside parentheses would leave the filter's half open: refused too.
        let err = exclude_reserved("(WorkflowId STARTS_WITH 'mcp/') OR (1=1 ORDER BY StartTime)")
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
        let err = exclude_reserved("WorkflowId STARTS_WITH 'mcp/') OR (1=1").unwrap_err();
        assert!(err.next_step.contains("parentheses"), "{}", err.next_step);
    }

    #[test]
    fn every_visibility_query_leaves_the_reserved_ids_out() {
        let exclude_reserved = |q: &str| exclude_reserved(q).unwrap();
        assert_eq!(exclude_reserved(""), "WorkflowId NOT STARTS_WITH 'mcp/'");
        assert_eq!(
            exclude_reserved("WorkflowType = 'A' OR WorkflowId = 'mcp/x'"),
            "(WorkflowType = 'A' OR WorkflowId = 'mcp/x') AND WorkflowId NOT STARTS_WITH 'mcp/'"
        );
        assert_eq!(
            exclude_reserved("WorkflowType = 'A' order by StartTime desc"),
            "(WorkflowType = 'A') AND WorkflowId NOT STARTS_WITH 'mcp/' order by StartTime desc"
        );
        // "order by" inside a quoted value is the user's data, not a clause.
        assert_eq!(
            exclude_reserved("WorkflowType = 'order by'"),
            "(WorkflowType = 'order by') AND WorkflowId NOT STARTS_WITH 'mcp/'"
        );
        assert_eq!(
            exclude_reserved("ORDER BY StartTime"),
            "WorkflowId NOT STARTS_WITH 'mcp/' ORDER BY StartTime"
        );
    }

    #[test]
    fn callback_tokens_and_nexus_headers_are_redacted_wherever_they_appear() {
        let mut event = json!({
            "workflowExecutionStartedEventAttributes": {
                "input": {"payloads": [{"data": "aW5wdXQ="}]},
                "completionCallbacks": [{"nexus": {
                    "url": "temporal://system",
                    "header": {"temporal-callback-token": "c2VjcmV0", "x": "y"}
                }}]
            },
            "nexusOperationScheduledEventAttributes": {"nexusHeader": {"authorization": "Bearer t"}},
            "links": [{"token": "abc"}],
            "temporal-callback-token": "zzz"
        });
        redact_callbacks(&mut event);
        let text = event.to_string();
        for secret in ["c2VjcmV0", "Bearer t", "abc", "zzz", "temporal://system"] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        assert_eq!(
            event["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]["data"],
            "aW5wdXQ=",
            "everything else is kept"
        );
    }
}
