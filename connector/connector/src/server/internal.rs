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

/// The caller's error for `what` failing, because of `detail`, after a tool call may have
/// started (R-CON-34): Temporal went away while the call was being started or waited for. "Try
/// again later" would invite a second run of a tool that may have run, so the caller reads
/// that it may have run, and how a retry can reach this call instead of starting another.
pub fn outcome_unknown(what: &str, detail: impl Display) -> McpError {
    let reference = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    warn!(%reference, error = %detail, "{what} failed; the call may have run");
    McpError::internal_error(unknown_outcome_message(what, &reference), None)
}

/// What the caller reads when the call may have run.
fn unknown_outcome_message(what: &str, reference: &str) -> String {
    format!(
        "{what} failed: the tool service could not be reached, after the call may have \
         started. The tool may have run, or may still be running: calling it again may run it \
         twice. A call with an idempotency key (_meta.idempotencyKey) can be repeated with the \
         same key, which returns this call's outcome instead of running the tool again; the \
         connector's operator can look up reference {reference} in its log."
    )
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
    #[test]
    fn the_may_have_run_message_has_no_runs_of_spaces() {
        let message = super::unknown_outcome_message("calling the tool", "0123456789ab");
        assert!(!message.contains("  "), "{message}");
        assert!(message.contains("may have run"), "{message}");
    }

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

    #[test]
    fn a_call_that_may_have_started_says_it_may_have_run_and_how_to_retry_safely() {
        let error = outcome_unknown(
            "waiting for the tool call",
            "status: Unavailable, message: \"secret-host:7233 refused\"",
        );
        let text = error.message.to_string();
        assert!(
            text.starts_with("waiting for the tool call failed: ")
                && text.contains("may have run")
                && text.contains("idempotencyKey")
                && text.contains("reference "),
            "{text}"
        );
        assert!(
            !text.contains("Try again") && !text.contains("secret-host"),
            "{text}"
        );
    }
}
