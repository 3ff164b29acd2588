//! Tool errors: what went wrong and what to do next, as an `isError` result (R-OPS-3).
//!
//! Temporal's gRPC status codes become error kinds a caller can act on; the kind travels in
//! `_meta["io.durable-mcp/errorType"]` and the text always ends with a next step.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// `_meta` key carrying the error kind: the same key routed tools use (R-CON-4).
pub use durable_mcp_contract::outcome::ERROR_TYPE_META;

/// What kind of failure a tool call met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The arguments are wrong; nothing was sent.
    InvalidArguments,
    /// The namespace is outside the allow-list; nothing was sent.
    NamespaceDenied,
    /// The Workflow, run, event or schedule does not exist.
    NotFound,
    /// Temporal refused the request as malformed (a bad visibility query, a bad cron).
    BadRequest,
    /// The connection's credentials may not do this.
    PermissionDenied,
    /// A Workflow or schedule with this id already exists.
    AlreadyExists,
    /// The target is in a state that does not allow this (closed, query rejected).
    FailedPrecondition,
    /// Temporal could not be reached or timed out; trying again may work.
    Unavailable,
    /// The codec server failed.
    Codec,
    /// The answer would exceed the connector's answer limit (R-OPS-8).
    TooLarge,
    /// Anything else Temporal answered.
    Temporal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArguments => "InvalidArguments",
            Self::NamespaceDenied => "NamespaceDenied",
            Self::NotFound => "NotFound",
            Self::BadRequest => "BadRequest",
            Self::PermissionDenied => "PermissionDenied",
            Self::AlreadyExists => "AlreadyExists",
            Self::FailedPrecondition => "FailedPrecondition",
            Self::Unavailable => "Unavailable",
            Self::Codec => "CodecError",
            Self::TooLarge => "AnswerTooLarge",
            Self::Temporal => "TemporalError",
        }
    }
}

/// A failed tool call: its kind, what happened, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    pub next_step: String,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>, next_step: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            next_step: next_step.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::InvalidArguments,
            message,
            "fix the arguments (the tool's input schema lists them) and call again",
        )
    }

    /// A gRPC status from Temporal, about `target` (e.g. `Workflow "order-1"`).
    pub fn from_status(status: &tonic::Status, target: &str) -> Self {
        use tonic::Code;
        let detail = status.message();
        let (kind, next) = match status.code() {
            Code::NotFound => (
                ErrorKind::NotFound,
                "check the id and the namespace (list_workflows or list_schedules shows what exists)",
            ),
            Code::InvalidArgument => (
                ErrorKind::BadRequest,
                "fix the request (for visibility queries see https://docs.temporal.io/list-filter) and call again",
            ),
            Code::PermissionDenied | Code::Unauthenticated => (
                ErrorKind::PermissionDenied,
                "the connector's Temporal credentials may not do this; ask the operator for access or use another namespace",
            ),
            Code::AlreadyExists => (
                ErrorKind::AlreadyExists,
                "use another id, or inspect the existing one with describe_workflow / describe_schedule",
            ),
            Code::FailedPrecondition => (
                ErrorKind::FailedPrecondition,
                "describe the target to see its current state before trying again",
            ),
            Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted => (
                ErrorKind::Unavailable,
                "Temporal is unreachable or busy; try again shortly",
            ),
            _ => (
                ErrorKind::Temporal,
                "check the arguments and the Temporal server's state, then try again",
            ),
        };
        let message = match kind {
            ErrorKind::NotFound => format!("{target} was not found: {detail}"),
            _ => format!("{target}: {detail}"),
        };
        Self::new(kind, message, next)
    }

    pub fn codec(e: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::Codec,
            format!("the codec server failed: {e}"),
            "check that the codec server (--codec-endpoint) is up and accepts this namespace",
        )
    }

    /// The `isError` result the caller sees.
    pub fn into_result(self) -> CallToolResult {
        let text = format!(
            "{}: {}. Next: {}.",
            self.kind.as_str(),
            self.message,
            self.next_step
        );
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        let meta: Value = json!({ ERROR_TYPE_META: self.kind.as_str() });
        result.meta = serde_json::from_value(meta).ok();
        result
    }
}

impl From<super::namespace::NamespaceDenied> for ToolError {
    fn from(denied: super::namespace::NamespaceDenied) -> Self {
        Self::new(
            ErrorKind::NamespaceDenied,
            format!(
                "namespace {:?} is not allowed here (allowed: {}); no request was sent",
                denied.requested, denied.allowed
            ),
            format!(
                "omit `namespace` to use {:?}, or ask the operator to add it to --allowed-namespaces",
                denied.default
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_kinds_with_next_steps() {
        let cases = [
            (tonic::Code::NotFound, ErrorKind::NotFound),
            (tonic::Code::InvalidArgument, ErrorKind::BadRequest),
            (tonic::Code::PermissionDenied, ErrorKind::PermissionDenied),
            (tonic::Code::Unauthenticated, ErrorKind::PermissionDenied),
            (tonic::Code::AlreadyExists, ErrorKind::AlreadyExists),
            (tonic::Code::Unavailable, ErrorKind::Unavailable),
            (tonic::Code::Internal, ErrorKind::Temporal),
        ];
        for (code, kind) in cases {
            let e = ToolError::from_status(&tonic::Status::new(code, "detail"), "Workflow \"w\"");
            assert_eq!(e.kind, kind, "{code:?}");
            assert!(e.message.contains("Workflow \"w\"") && e.message.contains("detail"));
            assert!(!e.next_step.is_empty());
        }
    }

    #[test]
    fn results_are_errors_with_their_kind_in_meta() {
        let r = ToolError::invalid("`workflow_id` is required").into_result();
        assert_eq!(r.is_error, Some(true));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["_meta"][ERROR_TYPE_META], "InvalidArguments");
        let text = json["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("InvalidArguments: `workflow_id` is required."),
            "{text}"
        );
        assert!(text.contains("Next: "), "{text}");
    }

    #[test]
    fn denial_says_nothing_was_sent_and_how_to_fix_it() {
        let denied = super::super::namespace::NamespacePolicy::default_only("default")
            .resolve(Some("other"), "default")
            .unwrap_err();
        let e = ToolError::from(denied);
        assert_eq!(e.kind, ErrorKind::NamespaceDenied);
        assert!(e.message.contains("no request was sent"), "{}", e.message);
        assert!(e.next_step.contains("--allowed-namespaces"));
    }
}
