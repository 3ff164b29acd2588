//! Reading Temporal `Failure` chains, below any Nexus or MCP meaning.

use temporalio_protos::temporal::api::failure::v1::Failure;

/// The most specific message in a failure chain: the innermost non-empty one (outer failures
/// often only say "activity failed" around the cause that says why).
pub fn innermost_message(failure: &Failure) -> String {
    let mut message = String::new();
    let mut current = Some(failure);
    while let Some(f) = current {
        if !f.message.is_empty() {
            message.clone_from(&f.message);
        }
        current = f.cause.as_deref();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_non_empty_message_wins() {
        let inner = Failure {
            message: "connection refused".into(),
            cause: Some(Box::new(Failure::default())),
            ..Default::default()
        };
        let outer = Failure {
            message: "activity failed".into(),
            cause: Some(Box::new(inner)),
            ..Default::default()
        };
        assert_eq!(innermost_message(&outer), "connection refused");
        assert_eq!(innermost_message(&Failure::default()), "");
    }
}
