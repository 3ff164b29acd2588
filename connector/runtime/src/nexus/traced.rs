//! The Nexus handler's span (R-RUN-9): a child of the span whose context the start request's
//! headers carry, current while the handler runs, so what it starts carries it on.

use opentelemetry::Context;

use super::handler::{StartContext, StartError, StartOutcome};
use crate::trace::{Kind, attribute, end, extract, start};

/// The span `nexus.start_operation` of the start `ctx`, under the caller's context.
pub fn handler_span(ctx: &StartContext) -> Context {
    let parent = extract(ctx.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    start(
        "nexus.start_operation",
        Kind::Server,
        &parent,
        vec![
            attribute("nexus.service", &ctx.service),
            attribute("nexus.operation", &ctx.operation),
        ],
    )
}

/// Ends the handler's span with how the start went: `sync`, `async`, `operation_failed`,
/// `handler_error` or `panicked`.
pub fn handler_ended<E>(cx: &Context, outcome: &Result<Result<StartOutcome, StartError>, E>) {
    let (label, failed) = match outcome {
        Ok(Ok(StartOutcome::Sync(_))) => ("sync", false),
        Ok(Ok(StartOutcome::Async { .. })) => ("async", false),
        Ok(Err(StartError::Operation(_))) => ("operation_failed", true),
        Ok(Err(StartError::Handler(_))) => ("handler_error", true),
        Err(_) => ("panicked", true),
    };
    end(cx, label, failed);
}
