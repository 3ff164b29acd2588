//! Temporal Nexus: the handler runtime (worker side) and the standalone-operation client
//! (caller side), sharing one set of handler and failure types.

pub mod client;
pub mod failure;
pub mod handler;
pub mod outage;
pub mod times;
mod traced;
pub mod worker;

pub use client::{
    CancelState, ConflictPolicy, OperationClient, OperationClientError, OperationDescription,
    OperationRef, ReusePolicy, StartOperation,
};
pub use durable_mcp_contract::operation::{HandlerErrorKind, OperationOutcome, OperationStatus};
pub use handler::{
    CancelContext, HandlerError, NexusLink, OperationError, OperationHandler, RetryBehavior,
    Service, StartContext, StartError, StartOutcome, partial_round, start_fn,
};
pub use times::OperationTimes;
pub use worker::{NexusWorker, NexusWorkerError, NexusWorkerOptions, ShutdownHandle};
