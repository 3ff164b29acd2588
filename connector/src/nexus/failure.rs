//! Temporal `Failure` protos to and from this crate's typed errors and outcomes: pure functions.

use temporalio_protos::temporal::api::{
    common::v1::Payloads,
    enums::v1::NexusHandlerErrorRetryBehavior,
    failure::v1::{
        ApplicationFailureInfo, CanceledFailureInfo, Failure, NexusHandlerFailureInfo,
        failure::FailureInfo,
    },
};

use super::handler::{HandlerError, HandlerErrorKind, OperationError, RetryBehavior};

/// Source string stamped on failures this crate creates.
pub const FAILURE_SOURCE: &str = "durable-mcp";

/// The failure a start answers with when the operation failed or was canceled.
pub fn operation_error_to_failure(err: &OperationError) -> Failure {
    match err {
        OperationError::Failed {
            message,
            error_type,
            details,
        } => Failure {
            message: message.clone(),
            source: FAILURE_SOURCE.into(),
            failure_info: Some(FailureInfo::ApplicationFailureInfo(
                ApplicationFailureInfo {
                    r#type: error_type.clone(),
                    non_retryable: true,
                    details: details.clone().map(|p| Payloads { payloads: vec![p] }),
                    ..Default::default()
                },
            )),
            ..Default::default()
        },
        OperationError::Canceled { message } => Failure {
            message: message.clone(),
            source: FAILURE_SOURCE.into(),
            failure_info: Some(FailureInfo::CanceledFailureInfo(
                CanceledFailureInfo::default(),
            )),
            ..Default::default()
        },
    }
}

/// The failure a task completes with when the handler could not process the request.
pub fn handler_error_to_failure(err: &HandlerError) -> Failure {
    let retry_behavior = match err.retry {
        RetryBehavior::Default => NexusHandlerErrorRetryBehavior::Unspecified,
        RetryBehavior::Retryable => NexusHandlerErrorRetryBehavior::Retryable,
        RetryBehavior::NonRetryable => NexusHandlerErrorRetryBehavior::NonRetryable,
    };
    Failure {
        message: err.message.clone(),
        source: FAILURE_SOURCE.into(),
        failure_info: Some(FailureInfo::NexusHandlerFailureInfo(
            NexusHandlerFailureInfo {
                r#type: err.kind.as_str().to_owned(),
                retry_behavior: retry_behavior.into(),
            },
        )),
        ..Default::default()
    }
}

/// What kind of end a failure chain describes, as the caller of an operation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureSummary {
    /// The most specific message in the chain (the innermost non-empty one).
    pub message: String,
    /// The application error type, when an application failure is in the chain.
    pub error_type: Option<String>,
    /// The handler error kind, when the handler (not the operation) failed.
    pub handler_error: Option<HandlerErrorKind>,
    pub canceled: bool,
    pub timed_out: bool,
    pub terminated: bool,
}

/// Walks a failure and its causes and summarizes them.
pub fn summarize(failure: &Failure) -> FailureSummary {
    let mut summary = FailureSummary {
        message: String::new(),
        error_type: None,
        handler_error: None,
        canceled: false,
        timed_out: false,
        terminated: false,
    };
    let mut current = Some(failure);
    while let Some(f) = current {
        if !f.message.is_empty() {
            summary.message = f.message.clone();
        }
        match &f.failure_info {
            Some(FailureInfo::ApplicationFailureInfo(info))
                if summary.error_type.is_none() && !info.r#type.is_empty() =>
            {
                summary.error_type = Some(info.r#type.clone());
            }
            Some(FailureInfo::NexusHandlerFailureInfo(info)) if summary.handler_error.is_none() => {
                summary.handler_error = HandlerErrorKind::parse(&info.r#type);
            }
            Some(FailureInfo::CanceledFailureInfo(_)) => summary.canceled = true,
            Some(FailureInfo::TimeoutFailureInfo(_)) => summary.timed_out = true,
            Some(FailureInfo::TerminatedFailureInfo(_)) => summary.terminated = true,
            _ => {}
        }
        current = f.cause.as_deref();
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_protos::temporal::api::failure::v1::TimeoutFailureInfo;

    #[test]
    fn operation_failures_are_non_retryable_application_failures() {
        let f = operation_error_to_failure(&OperationError::Failed {
            message: "boom".into(),
            error_type: "UpstreamUnavailable".into(),
            details: None,
        });
        let Some(FailureInfo::ApplicationFailureInfo(info)) = &f.failure_info else {
            panic!("{f:?}")
        };
        assert!(info.non_retryable);
        assert_eq!(info.r#type, "UpstreamUnavailable");
        let s = summarize(&f);
        assert_eq!(s.message, "boom");
        assert_eq!(s.error_type.as_deref(), Some("UpstreamUnavailable"));
    }

    #[test]
    fn handler_errors_carry_kind_and_retry_behaviour() {
        let err = HandlerError::not_found("no such tool").with_retry(RetryBehavior::NonRetryable);
        let f = handler_error_to_failure(&err);
        let Some(FailureInfo::NexusHandlerFailureInfo(info)) = &f.failure_info else {
            panic!("{f:?}")
        };
        assert_eq!(info.r#type, "NOT_FOUND");
        assert_eq!(
            info.retry_behavior(),
            NexusHandlerErrorRetryBehavior::NonRetryable
        );
        assert_eq!(
            summarize(&f).handler_error,
            Some(HandlerErrorKind::NotFound)
        );
    }

    #[test]
    fn summary_walks_the_cause_chain() {
        let f = Failure {
            message: "nexus operation failed".into(),
            cause: Some(Box::new(Failure {
                message: "deadline".into(),
                failure_info: Some(FailureInfo::TimeoutFailureInfo(
                    TimeoutFailureInfo::default(),
                )),
                ..Default::default()
            })),
            ..Default::default()
        };
        let s = summarize(&f);
        assert!(s.timed_out && !s.canceled && !s.terminated);
        assert_eq!(s.message, "deadline");
    }
}
