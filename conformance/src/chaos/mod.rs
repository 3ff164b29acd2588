//! `durable-mcp-conformance chaos`: a seeded fault campaign at load (R-CNF-21).

pub mod checker;
pub mod history;
pub mod relay;
pub mod schedule;
