//! The byte bound of an answer (R-OPS-8): a tool's structured answer and its text rendering
//! are held in the connector's memory, so a caller could otherwise make it hold a whole
//! history, or a query result of any size, per call.

use serde_json::Value;

use super::error::{ErrorKind, ToolError};

/// The most bytes of JSON one answer's structured content may take (its text rendering is
/// bounded separately, [`super::render`]).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The length of `v` as compact JSON, counted without building the text.
pub fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A JSON value always serializes; were it not to, it would count as too large.
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// `Ok` when `data` fits in `limit` bytes of JSON; else an `AnswerTooLarge` error naming both
/// sizes and how to ask for less.
pub fn check(tool: &str, data: &Value, limit: usize) -> Result<(), ToolError> {
    let len = json_len(data);
    if len <= limit {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorKind::TooLarge,
        format!(
            "{tool}'s answer would be {len} bytes, over the connector's limit of {limit} bytes; nothing is returned"
        ),
        "ask for less: a smaller max_events or limit, one event with get_workflow_event, or read large values with the Temporal CLI",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_over_the_limit_are_refused_naming_both_sizes() {
        let data = json!({"result": "x".repeat(100)});
        assert_eq!(json_len(&data), serde_json::to_vec(&data).unwrap().len());
        assert!(check("query_workflow", &data, 200).is_ok());
        let err = check("query_workflow", &data, 50).unwrap_err();
        assert_eq!(err.kind, ErrorKind::TooLarge);
        assert!(
            err.message.contains("113 bytes") && err.message.contains("limit of 50 bytes"),
            "{}",
            err.message
        );
    }
}
