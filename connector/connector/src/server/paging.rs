//! The connector's own pages of its resource, resource template and prompt lists (R-CON-47):
//! at most [`PAGE_SIZE`] items a page, the next page named by an opaque cursor that holds its
//! offset, so any replica answers it without a shared table. A cursor the connector did not
//! write, or past the list's end, is refused as invalid params.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

/// The most items a page holds.
pub const PAGE_SIZE: usize = 100;

/// What every cursor's text starts with, before its encoding.
const MARK: &str = "durable-mcp-page:";

/// The cursor of the page starting at `offset`.
pub fn cursor_for(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{MARK}{offset}"))
}

/// The offset `cursor` names, if the connector wrote it.
fn offset_of(cursor: &str) -> Option<usize> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix(MARK)?.parse().ok()
}

/// The page of `list` (a merged list result whose array is `items`) that `cursor` names (the
/// first without one): its items from the offset, at most `size`, the other fields as they
/// are, and `nextCursor` when more follow.
pub fn page(
    items: &str,
    mut list: Value,
    cursor: Option<&str>,
    size: usize,
) -> Result<Value, McpError> {
    let all = match list.get_mut(items) {
        Some(Value::Array(all)) => std::mem::take(all),
        _ => Vec::new(),
    };
    let offset = match cursor {
        None => 0,
        Some(cursor) => offset_of(cursor)
            .filter(|offset| *offset < all.len())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!(
                        "unknown cursor {cursor:?}: it was not given by this connector, or the \
                         list got shorter; list again without a cursor (R-CON-47)"
                    ),
                    Some(json!({"cursor": cursor})),
                )
            })?,
    };
    let end = all.len().min(offset + size);
    let more = end < all.len();
    // A list result is an object; one that is not pages as an empty one would.
    let mut fields = match list {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    let page = all.get(offset..end).unwrap_or_default();
    fields.insert(items.into(), Value::Array(page.to_vec()));
    fields.remove("nextCursor");
    if more {
        fields.insert("nextCursor".into(), Value::String(cursor_for(end)));
    }
    Ok(Value::Object(fields))
}

/// A list request's params as the connector reads them: its `cursor`, if any.
pub(super) fn cursor_params(request: Option<rmcp::model::PaginatedRequestParams>) -> Value {
    json!({"cursor": request.and_then(|r| r.cursor)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(n: usize) -> Value {
        let items: Vec<Value> = (0..n).map(|i| json!({"uri": format!("x://{i}")})).collect();
        json!({"resources": items, "ttlMs": 5})
    }

    /// No host limits list cursors (the TypeScript SDK and Claude Code take any string); the
    /// longest the connector writes, for the largest offset, is 50 characters of base64url.
    #[test]
    fn the_longest_cursor_is_50_characters() {
        let cursor = cursor_for(usize::MAX);
        assert_eq!(cursor.len(), 50);
        assert!(
            cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(offset_of(&cursor), Some(usize::MAX));
    }

    #[test]
    fn pages_hold_at_most_the_size_and_name_the_next() {
        let first = page("resources", list(5), None, 2).unwrap();
        assert_eq!(
            first["resources"],
            json!([{"uri": "x://0"}, {"uri": "x://1"}])
        );
        assert_eq!(first["ttlMs"], 5);
        let next = first["nextCursor"].as_str().unwrap();
        let second = page("resources", list(5), Some(next), 2).unwrap();
        assert_eq!(second["resources"][0]["uri"], "x://2");
        let last = page("resources", list(5), second["nextCursor"].as_str(), 2).unwrap();
        assert_eq!(last["resources"], json!([{"uri": "x://4"}]));
        assert!(last.get("nextCursor").is_none());
        let whole = page("resources", list(2), None, 2).unwrap();
        assert_eq!(whole, list(2), "a list that fits is one page, as it is");
    }

    #[test]
    fn a_cursor_the_connector_did_not_write_is_invalid_params() {
        for cursor in [
            "page-2",
            "",
            &cursor_for(5),
            &URL_SAFE_NO_PAD.encode("other:1"),
        ] {
            let refused = page("resources", list(5), Some(cursor), 2).unwrap_err();
            assert_eq!(
                refused.code,
                rmcp::model::ErrorCode::INVALID_PARAMS,
                "{cursor}"
            );
            assert!(refused.message.contains("list again without a cursor"));
        }
    }
}

/// Property tests of the connector's cursors (R-CON-47, R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{json, mutate, mutation};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_cursor_reads_back_as_its_offset(offset in any::<usize>()) {
            prop_assert_eq!(offset_of(&cursor_for(offset)), Some(offset));
        }

        /// A changed cursor names another offset or none: never a panic.
        #[test]
        fn a_changed_cursor_names_another_page_or_none(offset in any::<usize>(), m in mutation()) {
            if let Some(changed) = mutate(&cursor_for(offset), &m) {
                prop_assert_ne!(offset_of(&changed), Some(offset));
            }
        }

        /// Any list result and any cursor: a page or invalid params, never a panic; following
        /// the pages from the first gives every item once, in order.
        #[test]
        fn any_list_and_cursor_give_a_page_or_invalid_params(
            list in json(),
            cursor in prop::option::of("\\PC{0,30}"),
            size in 1usize..5,
        ) {
            if let Err(e) = page("tools", list.clone(), cursor.as_deref(), size) {
                prop_assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            }
            let all = list.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
            let (mut seen, mut next) = (Vec::new(), None::<String>);
            loop {
                let got = page("tools", list.clone(), next.as_deref(), size).unwrap();
                seen.extend(got["tools"].as_array().unwrap().iter().cloned());
                match got.get("nextCursor").and_then(Value::as_str) {
                    Some(c) => next = Some(c.to_owned()),
                    None => break,
                }
            }
            prop_assert_eq!(seen, all);
        }
    }
}
