//! Temporal `Failure` protos to and from this crate's typed errors and outcomes: pure functions.

use temporalio_protos::temporal::api::{
    common::v1::Payloads,
    enums::v1::NexusHandlerErrorRetryBehavior,
    failure::v1::{
        ApplicationFailureInfo, CanceledFailureInfo, Failure, NexusHandlerFailureInfo,
        failure::FailureInfo,
    },
};

use super::handler::{HandlerError, OperationError, RetryBehavior};

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

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_contract::operation::{HandlerErrorKind, summarize};

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
}
