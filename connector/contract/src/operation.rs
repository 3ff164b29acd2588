//! How a Nexus operation ends and what state it is in, as every caller sees it: the handler
//! error kinds (the Nexus wire names), an operation's status, and its outcome read from
//! Temporal's `Failure` chain. Plain data and pure functions; the runtime's client and handler
//! produce them, the outcome table (`outcome`) turns them into MCP results.

use temporalio_protos::temporal::api::{
    common::v1::Payload,
    enums::v1::NexusOperationExecutionStatus,
    failure::v1::{Failure, failure::FailureInfo},
};

/// The kinds of Nexus handler errors (the names are the wire values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandlerErrorKind {
    BadRequest,
    Unauthenticated,
    Unauthorized,
    NotFound,
    RequestTimeout,
    Conflict,
    ResourceExhausted,
    Internal,
    NotImplemented,
    Unavailable,
    UpstreamTimeout,
}

impl HandlerErrorKind {
    /// Every kind, for tests and documentation tables.
    pub const ALL: [HandlerErrorKind; 11] = [
        Self::BadRequest,
        Self::Unauthenticated,
        Self::Unauthorized,
        Self::NotFound,
        Self::RequestTimeout,
        Self::Conflict,
        Self::ResourceExhausted,
        Self::Internal,
        Self::NotImplemented,
        Self::Unavailable,
        Self::UpstreamTimeout,
    ];

    /// The wire name (`BAD_REQUEST`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BAD_REQUEST",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::NotFound => "NOT_FOUND",
            Self::RequestTimeout => "REQUEST_TIMEOUT",
            Self::Conflict => "CONFLICT",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::Internal => "INTERNAL",
            Self::NotImplemented => "NOT_IMPLEMENTED",
            Self::Unavailable => "UNAVAILABLE",
            Self::UpstreamTimeout => "UPSTREAM_TIMEOUT",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether the Nexus spec retries this kind when the handler does not say otherwise.
    pub fn retryable_by_default(self) -> bool {
        matches!(
            self,
            Self::RequestTimeout
                | Self::ResourceExhausted
                | Self::Internal
                | Self::Unavailable
                | Self::UpstreamTimeout
        )
    }
}

/// An operation's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationStatus {
    Running,
    Completed,
    Failed,
    Canceled,
    Terminated,
    TimedOut,
    Unknown,
}

impl From<NexusOperationExecutionStatus> for OperationStatus {
    fn from(s: NexusOperationExecutionStatus) -> Self {
        match s {
            NexusOperationExecutionStatus::Running => Self::Running,
            NexusOperationExecutionStatus::Completed => Self::Completed,
            NexusOperationExecutionStatus::Failed => Self::Failed,
            NexusOperationExecutionStatus::Canceled => Self::Canceled,
            NexusOperationExecutionStatus::Terminated => Self::Terminated,
            NexusOperationExecutionStatus::TimedOut => Self::TimedOut,
            _ => Self::Unknown,
        }
    }
}

/// How an operation ended, as its caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationOutcome {
    Succeeded(Payload),
    Failed {
        message: String,
        error_type: Option<String>,
        /// Set when the handler failed the request rather than the operation failing.
        handler_error: Option<HandlerErrorKind>,
    },
    Canceled {
        message: String,
    },
    TimedOut {
        message: String,
    },
    Terminated {
        message: String,
    },
}

impl OperationOutcome {
    /// How it ended, in one word, for log lines that must not hold the result or the message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Succeeded(_) => "succeeded",
            Self::Failed { .. } => "failed",
            Self::Canceled { .. } => "canceled",
            Self::TimedOut { .. } => "timed_out",
            Self::Terminated { .. } => "terminated",
        }
    }

    /// Classifies a failure outcome by its chain; `status` (from describe) wins when known.
    pub fn from_failure(failure: &Failure, status: Option<OperationStatus>) -> Self {
        let FailureSummary {
            message,
            error_type,
            handler_error,
            canceled,
            timed_out,
            terminated,
        } = summarize(failure);
        match status {
            Some(OperationStatus::Canceled) => Self::Canceled { message },
            Some(OperationStatus::TimedOut) => Self::TimedOut { message },
            Some(OperationStatus::Terminated) => Self::Terminated { message },
            _ if terminated => Self::Terminated { message },
            _ if timed_out => Self::TimedOut { message },
            _ if canceled => Self::Canceled { message },
            _ => Self::Failed {
                message,
                error_type,
                handler_error,
            },
        }
    }
}

/// What a closed operation's failure alone tells about its status (R-CON-37), so that learning
/// how a call failed costs no describe. The server closes an operation Canceled, TimedOut or
/// Terminated with that failure outermost; an application failure outermost is a failed
/// operation (the handler's operation error, or its work's failure through the completion
/// callback); and an operation that had started (`started`: it has a token) ends by its
/// completion callback, which makes it Canceled only with a canceled failure outermost, and
/// Failed otherwise. `None` when only a describe can tell: a start that never succeeded and
/// ended with a handler error, which the server may have retried until the operation timed out.
pub fn status_from_failure(failure: &Failure, started: bool) -> Option<OperationStatus> {
    match &failure.failure_info {
        Some(FailureInfo::CanceledFailureInfo(_)) => Some(OperationStatus::Canceled),
        Some(FailureInfo::TimeoutFailureInfo(_)) => Some(OperationStatus::TimedOut),
        Some(FailureInfo::TerminatedFailureInfo(_)) => Some(OperationStatus::Terminated),
        Some(FailureInfo::ApplicationFailureInfo(_)) => Some(OperationStatus::Failed),
        _ if started => Some(OperationStatus::Failed),
        _ => None,
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
    use temporalio_protos::temporal::api::failure::v1::{
        ApplicationFailureInfo, CanceledFailureInfo, NexusHandlerFailureInfo,
        TerminatedFailureInfo, TimeoutFailureInfo,
    };

    fn failure(info: Option<FailureInfo>, cause: Option<Failure>) -> Failure {
        Failure {
            message: "m".into(),
            failure_info: info,
            cause: cause.map(Box::new),
            ..Default::default()
        }
    }

    #[test]
    fn a_failures_outermost_kind_tells_the_status() {
        let canceled = Some(FailureInfo::CanceledFailureInfo(
            CanceledFailureInfo::default(),
        ));
        let timeout = Some(FailureInfo::TimeoutFailureInfo(
            TimeoutFailureInfo::default(),
        ));
        let terminated = Some(FailureInfo::TerminatedFailureInfo(
            TerminatedFailureInfo::default(),
        ));
        let application = Some(FailureInfo::ApplicationFailureInfo(
            ApplicationFailureInfo::default(),
        ));
        let handler = Some(FailureInfo::NexusHandlerFailureInfo(
            NexusHandlerFailureInfo::default(),
        ));
        for started in [false, true] {
            let status = |info: &Option<FailureInfo>| {
                status_from_failure(&failure(info.clone(), None), started)
            };
            assert_eq!(status(&canceled), Some(OperationStatus::Canceled));
            assert_eq!(status(&timeout), Some(OperationStatus::TimedOut));
            assert_eq!(status(&terminated), Some(OperationStatus::Terminated));
            assert_eq!(status(&application), Some(OperationStatus::Failed));
        }
        // A handler error on a start that never succeeded may have been retried until the
        // operation timed out: only a describe tells.
        assert_eq!(
            status_from_failure(&failure(handler.clone(), None), false),
            None
        );
        assert_eq!(status_from_failure(&failure(None, None), false), None);
        // Once started, the operation ended by its completion callback: failed.
        assert_eq!(
            status_from_failure(&failure(handler, None), true),
            Some(OperationStatus::Failed)
        );
    }

    #[test]
    fn a_cancel_wrapping_a_timeout_stays_a_cancel_without_a_describe() {
        // The ambiguity the status resolves: the chain holds both a cancel and a timeout.
        let f = failure(
            Some(FailureInfo::CanceledFailureInfo(
                CanceledFailureInfo::default(),
            )),
            Some(failure(
                Some(FailureInfo::TimeoutFailureInfo(
                    TimeoutFailureInfo::default(),
                )),
                None,
            )),
        );
        assert!(matches!(
            OperationOutcome::from_failure(&f, None),
            OperationOutcome::TimedOut { .. }
        ));
        assert!(matches!(
            OperationOutcome::from_failure(&f, status_from_failure(&f, true)),
            OperationOutcome::Canceled { .. }
        ));
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
