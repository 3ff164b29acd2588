//! Native tools: publish Rust functions and Temporal Workflows as MCP tools over Nexus
//! (R-NAT-*), on the same contract the proxy serves (R-NXC-*), so the connector and the
//! in-Workflow client call them exactly like proxied tools.
//!
//! ```no_run
//! # use durable_mcp_native::{Structured, Tool, ToolFailure, ToolService};
//! /// Counts the words of a text.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Text { text: String }
//! #[derive(serde::Serialize, schemars::JsonSchema)]
//! struct Words { words: usize }
//!
//! async fn word_count(input: Text) -> Result<Structured<Words>, ToolFailure> {
//!     let words = input.text.split_whitespace().count();
//!     Ok(Structured::new(Words { words }).with_text(format!("{words} words")))
//! }
//!
//! # fn f(temporal: durable_mcp_runtime::temporal::TemporalConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let service = ToolService::new("my-tools")
//!     .temporal(temporal)
//!     .tool(Tool::sync("word_count", word_count).title("Count words").read_only())
//!     // An existing Workflow type, in one line (its worker polls "my-queue"):
//!     // .tool(Tool::workflow("run_report", ReportWorkflow::run, "my-queue"))
//!     .build()?; // a nexus::Service: serve it with a nexus::NexusWorker
//! # Ok(()) }
//! ```
//!
//! ## Why a builder, not attribute macros
//!
//! The Temporal Rust SDK describes Workflows and Activities with attribute macros
//! (`#[workflow_methods]`, `#[activities]`), and a `#[tool]` macro in that style would read
//! the description from the function's doc comment. We chose a builder instead:
//!
//! - Everything a tool is made of is already a plain Rust value: the function, its input and
//!   output types (whose JSON Schemas schemars derives, with the input type's doc comment as the
//!   default description), and an existing Workflow's definition (`MyWorkflow::run`). A builder
//!   composes those without a proc-macro crate of our own, and a Workflow type written for
//!   another purpose becomes a tool without being edited.
//! - The checks a macro would do at compile time (names, duplicates, the reserved `list_tools`,
//!   object schemas) happen once in [`ToolService::build`], with an error naming the tool; the
//!   service can also be assembled at run time (configuration, feature flags, `expose_all`).
//! - Errors stay ordinary Rust errors in ordinary code, which a newcomer can read and step
//!   through; macro expansions are where such users get lost.
//!
//! The cost: the description is not taken from the handler function's doc comment (Rust has no
//! reflection for it); give it with [`Tool::description`], or on the input type.
//!
//! ## Two kinds of tool
//!
//! - [`Tool::sync`]: answers within the Nexus request deadline (about 8 s).
//! - [`Tool::workflow`]: starts a Workflow whose id derives from the Nexus request id and
//!   whose completion callback completes the call; cancel reaches the Workflow (see
//!   [`workflow`]).
//!
//! Handlers answer a [`ToolResult`] (text, `structuredContent`, any MCP content, or a tool
//! error with `isError`), or fail with a [`ToolFailure`] (retryable or not, with a stable
//! error type). Results travel as payloads marked `CallToolResult` (R-PAY-2).

pub mod completion;
pub mod features;
pub mod input;
pub mod names;
pub mod result;
pub mod service;
pub mod sync;
pub mod tool;
pub mod workflow;

pub use completion::CompletionRequest;
pub use features::{Contents, Prompt, PromptMessages, Resource, ResourceTemplate};
pub use input::{Answer, AskInput, InputAnswers, Round};
pub use result::{IntoToolResult, Structured, ToolFailure, ToolResult};
pub use service::{BuildError, ToolService};
pub use tool::Tool;
pub use workflow::{report_progress, sleep_unless_cancelled};

/// The [`features`] module's name before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed `features`, as in the other crates")]
pub mod resources {
    pub use crate::features::*;
}
