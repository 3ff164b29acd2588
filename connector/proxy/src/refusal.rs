//! What the proxy's Nexus handler answers when Temporal refuses one of its requests (starting
//! or looking up a call's activity), R-PRX-13: a refusal that the same request can never get
//! past (an id over Temporal's length limit, input over its blob size limit) fails the call at
//! once, non-retryable, saying why; anything else (the server unreachable or busy) is left to
//! the Nexus server's retries.

/// The handler's answer to a refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Fail now: a `BAD_REQUEST` handler error, not retried.
    Permanent(String),
    /// Try again: a retryable `UNAVAILABLE` handler error.
    Transient(String),
}

/// Classifies Temporal's answer `code`/`message` to the request described by `what` (e.g.
/// "starting the call's activity").
pub fn classify(what: &str, code: tonic::Code, message: &str) -> Refusal {
    use tonic::Code::*;
    match code {
        InvalidArgument | OutOfRange => {
            let lower = message.to_ascii_lowercase();
            // The server says "input exceeds length limit", "Blob data size exceeds limit",
            // "activity_id exceeds length limit".
            let hint = if ["input", "size", "blob"].iter().any(|w| lower.contains(w)) {
                " (the call's input is over Temporal's payload limit, about 2 MiB: send \
                 smaller arguments)"
            } else if lower.contains("id") && lower.contains("length") {
                " (the call's activity id, mcp/<service>/<tool>/<request id>, is over \
                 Temporal's id length limit: use a shorter tool name)"
            } else {
                ""
            };
            Refusal::Permanent(format!(
                "Temporal refused {what}: {message}{hint}; this will not succeed on retry"
            ))
        }
        _ => Refusal::Transient(format!("{what}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_requests_are_permanent_and_say_why() {
        let Refusal::Permanent(size) = classify(
            "starting the call's activity",
            tonic::Code::InvalidArgument,
            "Blob data size exceeds limit.",
        ) else {
            panic!("permanent expected")
        };
        assert!(
            size.contains("2 MiB") && size.contains("will not succeed"),
            "{size}"
        );
        let Refusal::Permanent(input) = classify(
            "starting the call's activity",
            tonic::Code::InvalidArgument,
            "input exceeds length limit",
        ) else {
            panic!("permanent expected")
        };
        assert!(input.contains("2 MiB"), "{input}");
        let Refusal::Permanent(id) = classify(
            "looking up the call's activity",
            tonic::Code::InvalidArgument,
            "activity_id exceeds length limit. Length=1042 Limit=1000",
        ) else {
            panic!("permanent expected")
        };
        assert!(
            id.contains("activity id") && id.contains("shorter tool name"),
            "{id}"
        );
    }

    #[test]
    fn an_unreachable_or_busy_server_is_transient() {
        for code in [
            tonic::Code::Unavailable,
            tonic::Code::ResourceExhausted,
            tonic::Code::DeadlineExceeded,
            tonic::Code::Internal,
        ] {
            assert_eq!(
                classify("starting the call's activity", code, "busy"),
                Refusal::Transient("starting the call's activity: busy".into())
            );
        }
    }
}
