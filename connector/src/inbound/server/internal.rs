//! Errors whose cause is internal (R-CON-15): a Temporal RPC that failed, an endpoint that does
//! not exist, a worker that is down. An MCP caller, authenticated or not, gets a stable message
//! that says what failed and what to do, plus a reference; the details (gRPC status, endpoint
//! and service names) go to the log under that reference, for the operator.

use std::fmt::Display;

use rmcp::ErrorData as McpError;
use tracing::warn;

/// The caller's error for `what` (e.g. "listing the tools") failing because of `detail`,
/// which is logged and never sent.
pub fn internal(what: &str, detail: impl Display) -> McpError {
    let reference = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    warn!(%reference, error = %detail, "{what} failed");
    McpError::internal_error(caller_message(what, &reference), None)
}

/// What the caller reads.
fn caller_message(what: &str, reference: &str) -> String {
    format!(
        "{what} failed: the tool service could not be reached or refused the request. Try \
         again later; if it keeps failing, the connector's operator can look up reference \
         {reference} in its log."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_get_a_stable_message_and_a_reference_never_the_detail() {
        let detail = "Temporal rejected StartNexusOperationExecution: status: NotFound, \
                      message: \"endpoint secret-endpoint not found\"";
        let error = internal("starting the tool call", detail);
        let text = error.message.to_string();
        assert!(
            text.starts_with("starting the tool call failed: ") && text.contains("reference "),
            "{text}"
        );
        for leaked in [
            "secret-endpoint",
            "NotFound",
            "StartNexusOperationExecution",
            "status",
        ] {
            assert!(
                !text.contains(leaked),
                "{leaked} reached the caller: {text}"
            );
        }
        assert!(error.data.is_none());
    }
}
