//! Per-call options of the in-Workflow client and the Nexus operation options they become
//! (R-WFC-2): pure functions, so what a Workflow schedules depends only on its own state.

use std::time::Duration;

use temporalio_protos::temporal::api::common::v1::Payload;
use temporalio_workflow::{
    NexusOperationCancellationType, NexusOperationOptions, WorkflowCancellationToken,
};

/// The schedule-to-close of a call whose tool advertises no timeout: the connector's default
/// (`--default-timeout`, R-CON-3).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// The schedule-to-close of a `list_tools` operation (answered synchronously, R-NXC-2).
pub const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// Options of one tool call. The default: the tool's advertised timeout, the SDK's cancellation
/// type (wait until the cancel completed), and the Workflow's own cancellation.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Schedule-to-close of the call; `None`: the tool's advertised timeout
    /// (`_meta["io.durable-mcp/timeoutMs"]`), else [`DEFAULT_CALL_TIMEOUT`].
    pub timeout: Option<Duration>,
    /// How a cancel is reported to the Workflow; `None`: wait until the cancel completed.
    pub cancellation_type: Option<NexusOperationCancellationType>,
    /// Cancels this call; `None`: the call is cancelled with the Workflow.
    pub cancellation: Option<WorkflowCancellationToken>,
    /// Nexus headers sent with the start (stored in history as they are: no secrets).
    pub headers: Vec<(String, String)>,
}

impl CallOptions {
    /// The call's schedule-to-close timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How a cancel of this call is reported to the Workflow.
    pub fn cancellation_type(mut self, cancellation_type: NexusOperationCancellationType) -> Self {
        self.cancellation_type = Some(cancellation_type);
        self
    }

    /// A token that cancels this call alone. It replaces the Workflow's own token for this call:
    /// pass `ctx.cancellation_token().child_token()` to keep Workflow cancellation too.
    pub fn cancellation(mut self, token: WorkflowCancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Adds a Nexus header to the start request.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }
}

/// The timeout a call runs with: the caller's, else the tool's advertised one, else the default.
pub fn call_timeout(explicit: Option<Duration>, advertised: Option<Duration>) -> Duration {
    explicit.or(advertised).unwrap_or(DEFAULT_CALL_TIMEOUT)
}

/// The Nexus operation a call (or a listing) schedules; `operation` is the Nexus operation's
/// name (a tool's is `durable_mcp_contract::operation_name::operation_for_tool` of it,
/// R-NXC-5).
pub fn nexus_options(
    endpoint: &str,
    service: &str,
    operation: &str,
    input: Payload,
    timeout: Duration,
    options: &CallOptions,
) -> NexusOperationOptions {
    let mut built = NexusOperationOptions::builder()
        .endpoint(endpoint)
        .service(service)
        .operation(operation)
        .input(input)
        .schedule_to_close_timeout(timeout)
        .nexus_header(options.headers.iter().cloned().collect())
        .build();
    built.cancellation_type = options.cancellation_type;
    built.cancellation_token = options.cancellation.clone();
    built
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_the_callers_else_the_advertised_else_the_default() {
        let (a, b) = (Duration::from_secs(7), Duration::from_secs(45));
        assert_eq!(call_timeout(Some(a), Some(b)), a);
        assert_eq!(call_timeout(None, Some(b)), b);
        assert_eq!(call_timeout(None, None), DEFAULT_CALL_TIMEOUT);
    }

    #[test]
    fn options_name_the_operation_and_carry_timeout_cancellation_and_headers() {
        let options = CallOptions::default()
            .cancellation_type(NexusOperationCancellationType::TryCancel)
            .header("trace", "t1");
        let built = nexus_options(
            "ep",
            "svc",
            "echo",
            Payload::default(),
            Duration::from_secs(9),
            &options,
        );
        assert_eq!(
            (&*built.endpoint, &*built.service, &*built.operation),
            ("ep", "svc", "echo")
        );
        assert_eq!(
            built.schedule_to_close_timeout,
            Some(Duration::from_secs(9))
        );
        assert_eq!(
            built.cancellation_type,
            Some(NexusOperationCancellationType::TryCancel)
        );
        assert!(
            built.cancellation_token.is_none(),
            "inherits the Workflow's"
        );
        assert_eq!(
            built.nexus_header.get("trace").map(String::as_str),
            Some("t1")
        );
        assert_eq!(
            nexus_options(
                "e",
                "s",
                "o",
                Payload::default(),
                DEFAULT_CALL_TIMEOUT,
                &CallOptions::default()
            )
            .cancellation_type,
            None,
            "the SDK's default: wait until the cancel completed"
        );
    }
}
