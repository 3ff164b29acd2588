//! Whether a failed upstream request can have reached the tool, and so what the call does next
//! (R-PRX-5, with R-PRX-14, R-PRX-15 and R-PRX-27): pure functions over plain data. The
//! transport (`upstream`) only reads the facts off its errors into a [`Failure`]; what they
//! mean is decided here, and the table test below holds one row per case.
//!
//! ## What a failure shows ([`phase`])
//!
//! | failure                                                        | phase          |
//! |----------------------------------------------------------------|----------------|
//! | no connection could be made (spawn, refused, DNS, handshake, a factory's error) | `NotDelivered` |
//! | a write to a stdio child that is gone                          | `NotDelivered` |
//! | a failed send on a program's own transport (R-PRX-27)          | `MayHaveRun`   |
//! | HTTP: never connected (refused, unreachable, DNS)              | `NotDelivered` |
//! | HTTP: no bearer token to send (R-PRX-15)                       | `NotDelivered` |
//! | HTTP: 503 or 429, with `unavailable_means_not_run` (R-PRX-14)  | `NotDelivered` |
//! | HTTP: 503 or 429 by default (R-PRX-14)                         | `MayHaveRun`   |
//! | HTTP: any other status, a reset, a cut stream                  | `MayHaveRun`   |
//! | the connection closed before the answer                        | `MayHaveRun`   |
//! | no answer in time                                              | `MayHaveRun`   |
//!
//! ## What the call does ([`on_transport_failure`])
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
//! [`Backoff::within_attempt`]: super::errors::Backoff::within_attempt

use durable_mcp_contract::errors::ToolCallErrorType;

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

/// How a request to an upstream failed, as the transport read it off its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be made: a child that would not start, an address refused or
    /// unreachable, an `initialize` handshake that failed or timed out, a factory's error.
    NoConnection,
    /// The request could not be sent over the connection.
    SendFailed(SendFailure),
    /// The connection closed before the answer.
    Closed,
    /// No answer in time.
    NoAnswerInTime,
}

/// A send that failed, by how the upstream is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendFailure {
    /// A write to a stdio child: it is gone before it read the request.
    Stdio,
    /// A Streamable HTTP request (the whole POST): what its error chain shows, and whether the
    /// upstream's config says a 503 or 429 means the tool never ran (R-PRX-14).
    Http {
        chain: Vec<Evidence>,
        unavailable_means_not_run: bool,
    },
    /// A program's own transport (R-PRX-27): what it did with the request is unknown.
    Factory,
}

/// What one error in an HTTP failure's chain shows, outermost first. An error that shows none
/// of these is left out of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The server (or a gateway) answered with this HTTP status.
    Status(u16),
    /// The HTTP client could not connect.
    ConnectFailed,
    /// No bearer token could be had for the request (R-PRX-15).
    NoToken,
    /// An I/O error of this kind.
    Io(std::io::ErrorKind),
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

/// How far a failed request got (see the module doc's first table).
pub fn phase(failure: &Failure) -> Phase {
    match failure {
        Failure::NoConnection => Phase::NotDelivered,
        Failure::SendFailed(SendFailure::Stdio) => Phase::NotDelivered,
        Failure::SendFailed(SendFailure::Http {
            chain,
            unavailable_means_not_run,
        }) => http_failure_phase(http_failure(chain), *unavailable_means_not_run),
        Failure::SendFailed(SendFailure::Factory) => Phase::MayHaveRun,
        Failure::Closed | Failure::NoAnswerInTime => Phase::MayHaveRun,
    }
}

/// What an HTTP error's chain shows: the first error in it that tells. A status tells (503 and
/// 429 are refusals; other statuses, 500, 502 or 504, may come after the tool ran); so does a
/// connection never made (refused, unreachable, no bearer token to send); an I/O error of
/// another kind does not, and the chain is read on. A chain that never tells may have run.
pub fn http_failure(chain: &[Evidence]) -> HttpFailure {
    use std::io::ErrorKind::*;
    for evidence in chain {
        match evidence {
            Evidence::Status(429 | 503) => return HttpFailure::Unavailable,
            Evidence::Status(_) => return HttpFailure::Other,
            Evidence::ConnectFailed | Evidence::NoToken => return HttpFailure::NeverConnected,
            Evidence::Io(
                ConnectionRefused | AddrNotAvailable | NetworkUnreachable | HostUnreachable,
            ) => return HttpFailure::NeverConnected,
            Evidence::Io(_) => {}
        }
    }
    HttpFailure::Other
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
    ///
    /// [`Backoff::within_attempt`]: super::errors::Backoff::within_attempt
    RetryWithinAttempt,
    /// Fail the attempt with this type and let Temporal's retry policy decide.
    FailRetryable(ToolCallErrorType),
    /// Fail the activity with this type; no retry.
    FailNonRetryable(ToolCallErrorType),
}

/// The action for a transport failure in `phase`, per the module doc's second table.
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

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;

    use proptest::prelude::*;

    use super::{FailureAction::*, ToolCallErrorType::*, *};

    fn http(chain: &[Evidence], unavailable_means_not_run: bool) -> Failure {
        Failure::SendFailed(SendFailure::Http {
            chain: chain.to_vec(),
            unavailable_means_not_run,
        })
    }

    /// One row per case of the classification: the rule it follows, the case, the failure as
    /// the transport reads it, how far the request got, and what the call of a one-attempt tool
    /// and of any other tool then does.
    #[test]
    fn each_transport_failure_is_classified_by_its_rule() {
        use ErrorKind::*;
        use Evidence::*;
        use Phase::*;
        const RETRY: FailureAction = RetryWithinAttempt;
        const UNKNOWN: FailureAction = FailNonRetryable(ToolCallOutcomeUnknown);
        const UNAVAILABLE: FailureAction = FailRetryable(UpstreamUnavailable);
        let stdio = Failure::SendFailed(SendFailure::Stdio);
        let factory = Failure::SendFailed(SendFailure::Factory);
        #[rustfmt::skip]
        let rows = [
            ("R-PRX-5",  "no connection could be made (spawn, DNS, handshake)", Failure::NoConnection,                            NotDelivered, RETRY,   RETRY),
            ("R-PRX-27", "a factory's error is a connect failure",              Failure::NoConnection,                            NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "a write to a stdio child that is gone",               stdio,                                            NotDelivered, RETRY,   RETRY),
            ("R-PRX-27", "a failed send on a factory's transport",              factory,                                          MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP: the client could not connect",                  http(&[ConnectFailed], false),                    NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "HTTP: connection refused",                            http(&[Io(ConnectionRefused)], false),            NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "HTTP: address not available",                         http(&[Io(AddrNotAvailable)], false),             NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "HTTP: network unreachable",                           http(&[Io(NetworkUnreachable)], false),           NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "HTTP: host unreachable",                              http(&[Io(HostUnreachable)], false),              NotDelivered, RETRY,   RETRY),
            ("R-PRX-15", "HTTP: no bearer token to send",                       http(&[NoToken], false),                          NotDelivered, RETRY,   RETRY),
            ("R-PRX-14", "HTTP 503, by default",                                http(&[Status(503)], false),                      MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-14", "HTTP 429, by default",                                http(&[Status(429)], false),                      MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-14", "HTTP 503, the upstream says it means not run",        http(&[Status(503)], true),                       NotDelivered, RETRY,   RETRY),
            ("R-PRX-14", "HTTP 429, the upstream says it means not run",        http(&[Status(429)], true),                       NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "HTTP 500, whatever the upstream says of 503",         http(&[Status(500)], true),                       MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP 502 from a gateway",                             http(&[Status(502)], false),                      MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP 504 from a gateway",                             http(&[Status(504)], false),                      MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP: connection reset after the request went out",   http(&[Io(ConnectionReset)], false),              MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP: an error that shows nothing (a cut stream)",    http(&[], false),                                 MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP: the first error that tells decides",            http(&[Status(502), ConnectFailed], false),       MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "HTTP: an I/O error that tells nothing is read past",  http(&[Io(Other), Io(ConnectionRefused)], false), NotDelivered, RETRY,   RETRY),
            ("R-PRX-5",  "the connection closed mid-call",                      Failure::Closed,                                  MayHaveRun,   UNKNOWN, UNAVAILABLE),
            ("R-PRX-5",  "no answer in time",                                   Failure::NoAnswerInTime,                          MayHaveRun,   UNKNOWN, UNAVAILABLE),
        ];
        for (rule, case, failure, want, one_attempt, other) in rows {
            let got = phase(&failure);
            assert_eq!(got, want, "{rule}: {case}");
            // `timed_out` as the tool-call Activity passes it: it sets no request timeout.
            let action = |one_attempt_tool| on_transport_failure(got, one_attempt_tool, false);
            assert_eq!(
                action(true),
                one_attempt,
                "{rule}: {case}, a one-attempt tool"
            );
            assert_eq!(action(false), other, "{rule}: {case}, any other tool");
        }
    }

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

    fn any_phase() -> impl Strategy<Value = Phase> {
        prop_oneof![Just(Phase::NotDelivered), Just(Phase::MayHaveRun)]
    }

    proptest! {
        #[test]
        fn not_delivered_never_fails_and_one_attempt_never_retries(
            phase in any_phase(), one_attempt in any::<bool>(), timed_out in any::<bool>(),
        ) {
            let action = on_transport_failure(phase, one_attempt, timed_out);
            if phase == Phase::NotDelivered {
                prop_assert_eq!(action, FailureAction::RetryWithinAttempt);
            }
            if one_attempt {
                prop_assert!(!matches!(action, FailureAction::FailRetryable(_)));
            }
        }
    }
}
