//! When a proxied tool call's failure may be retried, and with which stable error type
//! ([`ToolCallErrorType`], the contract's). A tool result with `isError: true` is *not* an error
//! here: it is the tool's answer, returned intact and never retried.
//!
//! Transport failures (whether the request can have reached the tool, and so whether it may be
//! sent again) are classified in `transport_failure`.
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

    proptest! {
        #[test]
        fn backoff_is_jittered_within_its_bounds(initial_ms in 0u64..10_000, max_ms in 1u64..60_000) {
            let b = Backoff { initial: Duration::from_millis(initial_ms), max: Duration::from_millis(max_ms) };
            prop_assert_eq!(check_waits(b, 30), Ok(()));
        }
    }
}
