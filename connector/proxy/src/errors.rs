//! When a proxied tool call's failure may be retried, and with which stable error type
//! ([`ToolCallErrorType`], the contract's). A tool result with `isError: true` is *not* an error
//! here: it is the tool's answer, returned intact and never retried.
//!
//! Transport failures (whether the request can have reached the tool, and so whether it may be
//! sent again) are classified in `transport_failure`.
//!
//! ## JSON-RPC errors
//!
//! An error response to `tools/call` is typed by its code
//! ([`ToolCallErrorType::of_jsonrpc_code`]) and retried a bounded number of times by it
//! ([`jsonrpc_retries`], R-PRX-4): each retry is another Activity attempt, on the Activity's
//! retry policy's back-off, and only where that policy allows one at all (a one-attempt tool,
//! destructive and not idempotent, is never retried; an explicit policy's `maximum_attempts`
//! and `non_retryable_error_types` stop earlier). When no retry is left the call ends with the
//! upstream's error object itself, unchanged ([`durable_mcp_contract::jsonrpc_error`]): a task
//! caller sees the task `failed` with it, a waiting caller gets it as its JSON-RPC error.
//!
//! | code                   | meaning                                                       | type                    | retries |
//! |------------------------|---------------------------------------------------------------|-------------------------|---------|
//! | -32700                 | parse error: the same bytes parse no better next time          | `UpstreamProtocolError` | 0       |
//! | -32600                 | invalid request: the same request stays invalid                | `UpstreamProtocolError` | 0       |
//! | -32601                 | method not found (some servers: unknown tool)                  | `UnknownTool`           | 0       |
//! | -32602                 | invalid params (MCP's answer to an unknown tool too)           | `InvalidArguments`      | 0       |
//! | -32603                 | internal error: may be a passing fault, may be a bug           | `UpstreamRejected`      | 3       |
//! | -32002                 | MCP: resource not found                                        | `UpstreamRejected`      | 0       |
//! | -32042                 | MCP: URL elicitation required (a person must act first)        | `UpstreamRejected`      | 0       |
//! | -32022, -32021, -32020 | MCP: unsupported protocol version, missing client capability, header mismatch | `UpstreamProtocolError` | 0 |
//! | other -32099..=-32000  | server-defined: SDKs' connection closed (-32000) and request timeout (-32001), overloaded, not ready | `UpstreamUnavailable` | 5 |
//! | anything else          | application-defined: the application said no                  | `UpstreamRejected`      | 0       |
//!
//! -32603 gets fewer retries than the server-defined range: an internal error is as often a
//! bug that fails every time as a passing fault, and three retries (about 7 s on Temporal's
//! default back-off) ride out a restart without holding a task `working` for minutes. The
//! server-defined codes SDKs use for timeouts and closed connections say the request did not
//! finish for reasons outside it, so five (about 31 s) are allowed.
//!
//! MCP servers answer a call to an unknown tool with -32602 (as the MCP specification's
//! example does) or -32601. The code alone cannot tell an unknown tool from bad arguments, so
//! -32602 is `InvalidArguments`; a caller that knows from discovery that the tool does not
//! exist should report `UnknownTool` instead.

use std::time::Duration;

pub use durable_mcp_contract::errors::ToolCallErrorType;
use temporalio_protos::temporal::api::common::v1::RetryPolicy;

/// How many times a JSON-RPC error answer with this code is retried at most (the module
/// doc's table).
pub fn jsonrpc_retries(code: i32) -> u32 {
    match code {
        -32603 => 3,
        -32700 | -32600 | -32601 | -32602 | -32002 | -32042 | -32022..=-32020 => 0,
        -32099..=-32000 => 5,
        _ => 0,
    }
}

/// What a JSON-RPC error answer leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnJsonRpcError {
    /// Fail this attempt, retryable, with this type: the Activity's retry policy runs the
    /// next one.
    Retry(ToolCallErrorType),
    /// The call ends with the upstream's error object.
    Answer,
}

/// What a JSON-RPC error answer with `code` leads to in attempt `attempt` (1 for the first)
/// of a call whose Activity has `policy`: another attempt while the code has retries left
/// ([`jsonrpc_retries`]) and the policy allows one (R-PRX-4), else the error is the answer.
pub fn on_jsonrpc_error(
    code: i32,
    attempt: u32,
    one_attempt: bool,
    policy: Option<&RetryPolicy>,
) -> OnJsonRpcError {
    let kind = ToolCallErrorType::of_jsonrpc_code(code);
    let policy_allows = policy.is_none_or(|p| {
        let under_cap = p.maximum_attempts <= 0 || attempt < p.maximum_attempts.unsigned_abs();
        under_cap
            && !p
                .non_retryable_error_types
                .iter()
                .any(|t| t == kind.as_str())
    });
    if !one_attempt && policy_allows && attempt <= jsonrpc_retries(code) {
        OnJsonRpcError::Retry(kind)
    } else {
        OnJsonRpcError::Answer
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
    fn jsonrpc_errors_are_typed_and_retried_per_the_table() {
        let cases = [
            (-32700, UpstreamProtocolError, 0),
            (-32600, UpstreamProtocolError, 0),
            (-32601, UnknownTool, 0),
            (-32602, InvalidArguments, 0),
            (-32603, UpstreamRejected, 3),
            (-32002, UpstreamRejected, 0),
            (-32042, UpstreamRejected, 0),
            (-32020, UpstreamProtocolError, 0),
            (-32021, UpstreamProtocolError, 0),
            (-32022, UpstreamProtocolError, 0),
            (-32000, UpstreamUnavailable, 5),
            (-32001, UpstreamUnavailable, 5),
            (-32019, UpstreamUnavailable, 5),
            (-32023, UpstreamUnavailable, 5),
            (-32099, UpstreamUnavailable, 5),
            (-32100, UpstreamRejected, 0),
            (-31999, UpstreamRejected, 0),
            (-1, UpstreamRejected, 0),
            (0, UpstreamRejected, 0),
            (42, UpstreamRejected, 0),
            (i32::MIN, UpstreamRejected, 0),
        ];
        for (code, kind, retries) in cases {
            assert_eq!(
                ToolCallErrorType::of_jsonrpc_code(code),
                kind,
                "code {code}"
            );
            assert_eq!(jsonrpc_retries(code), retries, "code {code}");
            // Attempts 1..=retries are retried, the next one answers.
            for attempt in 1..=retries {
                assert_eq!(
                    on_jsonrpc_error(code, attempt, false, None),
                    OnJsonRpcError::Retry(kind),
                    "code {code} attempt {attempt}"
                );
            }
            assert_eq!(
                on_jsonrpc_error(code, retries + 1, false, None),
                OnJsonRpcError::Answer,
                "code {code}"
            );
        }
    }

    #[test]
    fn the_retry_policy_still_decides_whether_a_jsonrpc_error_is_retried_at_all() {
        let answer = OnJsonRpcError::Answer;
        // A one-attempt tool (destructive, not idempotent) never retries.
        assert_eq!(on_jsonrpc_error(-32603, 1, true, None), answer);
        assert_eq!(on_jsonrpc_error(-32000, 1, true, None), answer);
        let capped = |max| RetryPolicy {
            maximum_attempts: max,
            ..RetryPolicy::default()
        };
        // The policy's last attempt answers, even with retries left for the code.
        assert_eq!(on_jsonrpc_error(-32603, 2, false, Some(&capped(2))), answer);
        assert_eq!(
            on_jsonrpc_error(-32603, 1, false, Some(&capped(2))),
            OnJsonRpcError::Retry(UpstreamRejected)
        );
        assert_eq!(
            on_jsonrpc_error(-32603, 3, false, Some(&capped(0))),
            OnJsonRpcError::Retry(UpstreamRejected)
        );
        assert_eq!(on_jsonrpc_error(-32603, 1, false, Some(&capped(1))), answer);
        // A type the policy never retries answers at once.
        let never = RetryPolicy {
            non_retryable_error_types: vec!["UpstreamRejected".into()],
            ..RetryPolicy::default()
        };
        assert_eq!(on_jsonrpc_error(-32603, 1, false, Some(&never)), answer);
        assert_eq!(
            on_jsonrpc_error(-32000, 1, false, Some(&never)),
            OnJsonRpcError::Retry(UpstreamUnavailable)
        );
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

    proptest! {
        #[test]
        fn backoff_is_jittered_within_its_bounds(initial_ms in 0u64..10_000, max_ms in 1u64..60_000) {
            let b = Backoff { initial: Duration::from_millis(initial_ms), max: Duration::from_millis(max_ms) };
            prop_assert_eq!(check_waits(b, 30), Ok(()));
        }
    }
}
