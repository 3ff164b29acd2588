//! When a proxied tool call's failure may be retried, and with which stable error type
//! ([`ToolCallErrorType`], the contract's). A tool result with `isError: true` is *not* an error
//! here: it is the tool's answer, returned intact and never retried.
//!
//! ## Transport failures
//!
//! What matters is whether the request can have reached the tool ([`Phase`]):
//!
//! | phase          | tool           | timed out | action                                       |
//! |----------------|----------------|-----------|----------------------------------------------|
//! | `NotDelivered` | any            | any       | retry within the attempt, with [`Backoff::within_attempt`] |
//! | `MayHaveRun`   | one attempt    | any       | fail, non-retryable `ToolCallOutcomeUnknown` |
//! | `MayHaveRun`   | retryable      | yes       | fail, retryable `UpstreamTimeout`            |
//! | `MayHaveRun`   | retryable      | no        | fail, retryable `UpstreamUnavailable`        |
//!
//! A request that provably never reached the tool is safe to send again even for a tool that
//! must never run twice; the retries stop when the attempt's own timeout ends it.
//!
//! ## JSON-RPC errors
//!
//! An error response to `tools/call` is split by code ([`on_jsonrpc_error`]). "Retryable" means
//! the failure is left to the Activity's retry policy, which still gives a one-attempt tool no
//! second attempt.
//!
//! | code                   | meaning                                            | type                    | retryable |
//! |------------------------|----------------------------------------------------|-------------------------|-----------|
//! | -32700                 | parse error                                        | `UpstreamProtocolError` | no        |
//! | -32600                 | invalid request                                    | `UpstreamProtocolError` | no        |
//! | -32601                 | method not found (some servers: unknown tool)      | `UnknownTool`           | no        |
//! | -32602                 | invalid params (MCP's answer to an unknown tool too) | `InvalidArguments`    | no        |
//! | -32603                 | internal error                                     | `UpstreamRejected`      | yes       |
//! | -32002                 | MCP: resource not found                            | `UpstreamRejected`      | no        |
//! | -32022, -32021, -32020 | MCP: unsupported protocol version, missing client capability, header mismatch | `UpstreamProtocolError` | no |
//! | other -32099..=-32000  | server-defined (overloaded, not ready, ...)        | `UpstreamUnavailable`   | yes       |
//! | anything else          | application-defined                                | `UpstreamRejected`      | no        |
//!
//! MCP servers answer a call to an unknown tool with -32602 (as the MCP specification's example
//! does) or -32601. The code alone cannot tell an unknown tool from bad arguments, so -32602 is
//! `InvalidArguments`; a caller that knows from discovery that the tool does not exist should
//! report `UnknownTool` instead.

use std::time::Duration;

pub use durable_mcp_contract::errors::ToolCallErrorType;

/// How far a failed request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Proved never to have reached the tool: connection refused, DNS failure, an HTTP session
    /// rejected before the call (unknown session, 404 on a terminated session), 401/403 on
    /// connect, a stdio child that failed to spawn or was not running when the request was due.
    NotDelivered,
    /// Sent, so the tool may have run: connection reset mid-response, read timeout, a stdio
    /// child that crashed during the call.
    MayHaveRun,
}

/// What a failed HTTP request to an upstream shows about whether it reached the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpFailure {
    /// No connection was ever made (refused, unreachable, DNS): the request never left.
    NeverConnected,
    /// An answer of 503 Service Unavailable or 429 Too Many Requests. The upstream declines
    /// requests so before running them, but a gateway in front of it may answer so after
    /// forwarding one.
    Unavailable,
    /// Anything else (a reset, a 500, a 502, a closed stream): the request may have run.
    Other,
}

/// The [`Phase`] of a failed HTTP request (R-PRX-14). A 503 or 429 proves the tool never ran
/// only when the upstream's config says so (`unavailable_means_not_run`): by default a gateway
/// may have forwarded the request first, so a tool that must run at most once gets
/// `ToolCallOutcomeUnknown` rather than a second run.
pub fn http_failure_phase(failure: HttpFailure, unavailable_means_not_run: bool) -> Phase {
    match failure {
        HttpFailure::NeverConnected => Phase::NotDelivered,
        HttpFailure::Unavailable if unavailable_means_not_run => Phase::NotDelivered,
        HttpFailure::Unavailable | HttpFailure::Other => Phase::MayHaveRun,
    }
}

/// What to do about a transport failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Safe: back off ([`Backoff::within_attempt`]) and try again inside this activity attempt.
    RetryWithinAttempt,
    /// Fail the attempt with this type and let Temporal's retry policy decide.
    FailRetryable(ToolCallErrorType),
    /// Fail the activity with this type; no retry.
    FailNonRetryable(ToolCallErrorType),
}

/// The action for a transport failure in `phase`, per the module doc's table.
/// `one_attempt_tool` is the resolved call options' `one_attempt`; `timed_out` says
/// whether the failure was the upstream not answering in time.
pub fn on_transport_failure(
    phase: Phase,
    one_attempt_tool: bool,
    timed_out: bool,
) -> FailureAction {
    use ToolCallErrorType::*;
    match (phase, one_attempt_tool) {
        (Phase::NotDelivered, _) => FailureAction::RetryWithinAttempt,
        (Phase::MayHaveRun, true) => FailureAction::FailNonRetryable(ToolCallOutcomeUnknown),
        (Phase::MayHaveRun, false) if timed_out => FailureAction::FailRetryable(UpstreamTimeout),
        (Phase::MayHaveRun, false) => FailureAction::FailRetryable(UpstreamUnavailable),
    }
}

/// The error type for a JSON-RPC error response, and whether it is retryable, per the module
/// doc's table.
pub fn on_jsonrpc_error(code: i32) -> (ToolCallErrorType, bool) {
    use ToolCallErrorType::*;
    match code {
        -32700 | -32600 => (UpstreamProtocolError, false),
        -32601 => (UnknownTool, false),
        -32602 => (InvalidArguments, false),
        -32603 => (UpstreamRejected, true),
        -32002 => (UpstreamRejected, false),
        -32022..=-32020 => (UpstreamProtocolError, false),
        -32099..=-32000 => (UpstreamUnavailable, true),
        _ => (UpstreamRejected, false),
    }
}

/// Capped exponential backoff: from `initial`, doubling, at most `max`; each wait is jittered
/// between half and all of that ([`durable_mcp_runtime::nexus::outage::Backoff`]), so proxy
/// workers that lost an upstream together do not retry it together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// Between retries of an undelivered request inside one attempt: 100 ms doubling to 5 s,
    /// quick enough for a brief upstream restart, light enough for a long outage.
    pub const fn within_attempt() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }

    /// Between failed discoveries of one upstream: 1 s doubling to 60 s, so a dead upstream is
    /// not hammered.
    pub const fn discovery() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }

    /// A fresh sequence of waits: `next_delay` gives the wait before each retry in turn.
    pub fn start(&self) -> durable_mcp_runtime::nexus::outage::Backoff {
        durable_mcp_runtime::nexus::outage::Backoff::new(self.initial, self.max)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{ToolCallErrorType::*, *};

    #[test]
    fn a_503_or_429_proves_nothing_unless_the_upstream_says_so() {
        use HttpFailure::*;
        assert_eq!(
            http_failure_phase(NeverConnected, false),
            Phase::NotDelivered
        );
        assert_eq!(
            http_failure_phase(NeverConnected, true),
            Phase::NotDelivered
        );
        assert_eq!(http_failure_phase(Unavailable, false), Phase::MayHaveRun);
        assert_eq!(http_failure_phase(Unavailable, true), Phase::NotDelivered);
        assert_eq!(http_failure_phase(Other, true), Phase::MayHaveRun);
        // So by default a one-attempt tool behind a gateway gets an unknown outcome.
        assert_eq!(
            on_transport_failure(http_failure_phase(Unavailable, false), true, false),
            FailureAction::FailNonRetryable(ToolCallOutcomeUnknown)
        );
    }

    #[test]
    fn transport_failures() {
        use FailureAction::*;
        for (one_attempt, timed_out) in [(false, false), (false, true), (true, false), (true, true)]
        {
            assert_eq!(
                on_transport_failure(Phase::NotDelivered, one_attempt, timed_out),
                RetryWithinAttempt
            );
        }
        assert_eq!(
            on_transport_failure(Phase::MayHaveRun, true, false),
            FailNonRetryable(ToolCallOutcomeUnknown)
        );
        assert_eq!(
            on_transport_failure(Phase::MayHaveRun, true, true),
            FailNonRetryable(ToolCallOutcomeUnknown)
        );
        assert_eq!(
            on_transport_failure(Phase::MayHaveRun, false, true),
            FailRetryable(UpstreamTimeout)
        );
        assert_eq!(
            on_transport_failure(Phase::MayHaveRun, false, false),
            FailRetryable(UpstreamUnavailable)
        );
    }

    #[test]
    fn jsonrpc_errors() {
        let cases = [
            (-32700, UpstreamProtocolError, false),
            (-32600, UpstreamProtocolError, false),
            (-32601, UnknownTool, false),
            (-32602, InvalidArguments, false),
            (-32603, UpstreamRejected, true),
            (-32002, UpstreamRejected, false),
            (-32020, UpstreamProtocolError, false),
            (-32021, UpstreamProtocolError, false),
            (-32022, UpstreamProtocolError, false),
            (-32000, UpstreamUnavailable, true),
            (-32001, UpstreamUnavailable, true),
            (-32019, UpstreamUnavailable, true),
            (-32023, UpstreamUnavailable, true),
            (-32099, UpstreamUnavailable, true),
            (-32100, UpstreamRejected, false),
            (-31999, UpstreamRejected, false),
            (-1, UpstreamRejected, false),
            (0, UpstreamRejected, false),
            (42, UpstreamRejected, false),
            (i32::MIN, UpstreamRejected, false),
        ];
        for (code, kind, retryable) in cases {
            assert_eq!(on_jsonrpc_error(code), (kind, retryable), "code {code}");
        }
    }

    /// Each wait lies between half and all of the unjittered one (`initial`, doubling, capped).
    fn check_waits(b: Backoff, count: usize) -> Result<(), String> {
        let mut waits = b.start();
        let mut nominal = b.initial.min(b.max);
        let slack = Duration::from_micros(1);
        for n in 0..count {
            let d = waits.next_delay();
            if d + slack < nominal / 2 || d > nominal + slack || d > b.max {
                return Err(format!(
                    "wait {n}: {d:?} not within [{:?}, {nominal:?}]",
                    nominal / 2
                ));
            }
            nominal = (nominal * 2).min(b.max);
        }
        Ok(())
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let ms = Duration::from_millis;
        check_waits(Backoff::within_attempt(), 40).unwrap();
        check_waits(Backoff::discovery(), 40).unwrap();
        let mut w = Backoff::within_attempt().start();
        assert!(w.next_delay() <= ms(100));
        let late = (0..12).map(|_| w.next_delay()).last().unwrap();
        assert!(late >= ms(2499) && late <= ms(5000), "{late:?}");
        let mut d = Backoff::discovery().start();
        assert!(d.next_delay() <= ms(1000));
        let capped = Backoff {
            initial: ms(90),
            max: ms(50),
        };
        check_waits(capped, 3).unwrap();
    }

    fn phase() -> impl Strategy<Value = Phase> {
        prop_oneof![Just(Phase::NotDelivered), Just(Phase::MayHaveRun)]
    }

    proptest! {
        #[test]
        fn not_delivered_never_fails_and_one_attempt_never_retries(
            phase in phase(), one_attempt in any::<bool>(), timed_out in any::<bool>(),
        ) {
            let action = on_transport_failure(phase, one_attempt, timed_out);
            if phase == Phase::NotDelivered {
                prop_assert_eq!(action, FailureAction::RetryWithinAttempt);
            }
            if one_attempt {
                prop_assert!(!matches!(action, FailureAction::FailRetryable(_)));
            }
        }

        #[test]
        fn backoff_is_jittered_within_its_bounds(initial_ms in 0u64..10_000, max_ms in 1u64..60_000) {
            let b = Backoff { initial: Duration::from_millis(initial_ms), max: Duration::from_millis(max_ms) };
            prop_assert_eq!(check_waits(b, 30), Ok(()));
        }
    }
}
