//! The stable error types of a tool call (R-NXC-4).
//!
//! The strings ([`ToolCallErrorType::as_str`]) are the `type` of the Temporal application
//! failure a call ends with. Callers (the connector, the in-Workflow client, retry policies)
//! match on them, so they never change. The connector's own tool errors, answered without a
//! tool call failing, have stable types too ([`ConnectorErrorType`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The stable error types a proxied tool call can fail with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ToolCallErrorType {
    /// The upstream could not be reached or failed without answering; retryable.
    UpstreamUnavailable,
    /// The upstream did not answer in time; retryable.
    UpstreamTimeout,
    /// The upstream answered with something that is not valid MCP / JSON-RPC.
    UpstreamProtocolError,
    /// The request may have reached a tool that must not run twice, and its outcome is not
    /// known: never retried automatically. Check the upstream before calling again.
    ToolCallOutcomeUnknown,
    /// The upstream has no tool by this name.
    UnknownTool,
    /// The upstream rejected the tool's arguments.
    InvalidArguments,
    /// The upstream answered the call with a JSON-RPC error.
    UpstreamRejected,
    /// The tool's result is larger than Temporal's payload limit.
    ResultTooLarge,
    /// The call was canceled.
    Canceled,
}

impl ToolCallErrorType {
    /// Every type, in declaration order.
    pub const ALL: [Self; 9] = [
        Self::UpstreamUnavailable,
        Self::UpstreamTimeout,
        Self::UpstreamProtocolError,
        Self::ToolCallOutcomeUnknown,
        Self::UnknownTool,
        Self::InvalidArguments,
        Self::UpstreamRejected,
        Self::ResultTooLarge,
        Self::Canceled,
    ];

    /// The failure type string, the variant's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::UpstreamUnavailable => "UpstreamUnavailable",
            Self::UpstreamTimeout => "UpstreamTimeout",
            Self::UpstreamProtocolError => "UpstreamProtocolError",
            Self::ToolCallOutcomeUnknown => "ToolCallOutcomeUnknown",
            Self::UnknownTool => "UnknownTool",
            Self::InvalidArguments => "InvalidArguments",
            Self::UpstreamRejected => "UpstreamRejected",
            Self::ResultTooLarge => "ResultTooLarge",
            Self::Canceled => "Canceled",
        }
    }

    /// The type named by a failure type string, if it is one of ours.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The type of an upstream's JSON-RPC error answer to `tools/call`, by its code (the
    /// proxy's table, R-PRX-4). MCP servers answer a call to an unknown tool with -32602 (as
    /// the MCP specification's example does) or -32601: the code alone cannot tell an unknown
    /// tool from bad arguments, so -32602 is `InvalidArguments`.
    pub fn of_jsonrpc_code(code: i32) -> Self {
        match code {
            -32700 | -32600 | -32022..=-32020 => Self::UpstreamProtocolError,
            -32601 => Self::UnknownTool,
            -32602 => Self::InvalidArguments,
            -32603 | -32002 | -32042 => Self::UpstreamRejected,
            -32099..=-32000 => Self::UpstreamUnavailable,
            _ => Self::UpstreamRejected,
        }
    }
}

impl fmt::Display for ToolCallErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The stable error types of the tool errors the connector answers itself, with nothing
/// started or changed: the `_meta["io.durable-mcp/errorType"]` of its `isError` results, and
/// the first word of their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConnectorErrorType {
    /// The idempotency key was already used with different arguments by the same caller; the
    /// first call is unchanged (R-CON-7).
    IdempotencyConflict,
    /// The caller's token lacks the OAuth scope a Temporal tool's family needs; nothing was
    /// sent to Temporal (R-OPS-5).
    InsufficientScope,
}

impl ConnectorErrorType {
    /// Every type, in declaration order.
    pub const ALL: [Self; 2] = [Self::IdempotencyConflict, Self::InsufficientScope];

    /// The error type string, the variant's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyConflict => "IdempotencyConflict",
            Self::InsufficientScope => "InsufficientScope",
        }
    }

    /// The type named by an error type string, if it is one of the connector's.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for ConnectorErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_strings_are_stable_and_parse_back() {
        let names: Vec<&str> = ToolCallErrorType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "UpstreamUnavailable",
                "UpstreamTimeout",
                "UpstreamProtocolError",
                "ToolCallOutcomeUnknown",
                "UnknownTool",
                "InvalidArguments",
                "UpstreamRejected",
                "ResultTooLarge",
                "Canceled",
            ]
        );
        for t in ToolCallErrorType::ALL {
            assert_eq!(ToolCallErrorType::parse(t.as_str()), Some(t));
            assert_eq!(t.to_string(), t.as_str());
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        assert_eq!(ToolCallErrorType::parse("upstreamunavailable"), None);
        assert_eq!(ToolCallErrorType::parse(""), None);
    }

    #[test]
    fn connector_type_strings_are_stable_and_parse_back() {
        let names: Vec<&str> = ConnectorErrorType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, ["IdempotencyConflict", "InsufficientScope"]);
        for t in ConnectorErrorType::ALL {
            assert_eq!(ConnectorErrorType::parse(t.as_str()), Some(t));
            assert_eq!(t.to_string(), t.as_str());
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            assert_eq!(
                ToolCallErrorType::parse(t.as_str()),
                None,
                "not a call's failure"
            );
        }
    }
}
