//! Temporal operations as MCP tools (R-OPS-1..9): start, inspect, signal, query, cancel and
//! terminate Workflows, operate on many at once, and manage schedules.
//!
//! These are management tools: each call is one or a few direct Temporal requests made by the
//! connector, not a durable Nexus operation. The rules live in small files:
//!
//! - [`namespace`]: which namespaces a call may use (checked before any request).
//! - [`reserved`]: durable-mcp's own executions, left out and refused (R-OPS-6).
//! - [`catalog`]: what a tool definition is (schemas, annotations, scope family) and the
//!   listing; each family module declares its own tools.
//! - [`args`], [`error`], [`render`], [`payloads`], [`paging`]: arguments, tool errors, text
//!   rendering, payloads through the codec, paging through listings.
//! - [`workflows`], [`batch`], [`schedules`]: the tools themselves, each beside its definition.

pub mod args;
pub mod batch;
pub mod catalog;
pub mod error;
pub mod namespace;
pub mod paging;
pub mod payloads;
pub mod render;
pub mod reserved;
pub mod schedules;
pub mod scopes;
pub mod size;
pub mod workflows;

use std::collections::HashMap;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{Map, Value};
use temporalio_client::Connection;

pub use catalog::ToolFamily;
pub use error::{ErrorKind, ToolError};
pub use namespace::{NamespacePolicy, PolicyError};
pub use scopes::FamilyScopes;

use args::Args;
use catalog::ToolSpec;
use durable_mcp_runtime::temporal::codec::RemoteCodec;
use payloads::PayloadIo;

/// Every tool of the set, in listing order; each family module declares its own.
pub fn specs() -> Vec<ToolSpec> {
    [workflows::specs(), batch::specs(), schedules::specs()]
        .into_iter()
        .flatten()
        .collect()
}

/// A tool's answer: a one-line headline and the structured data it renders.
pub struct Answer {
    pub headline: String,
    pub data: Value,
}

/// What a tool call needs: the connection, its namespace (checked), identity, payload I/O and
/// the byte bound of its answer (R-OPS-8).
pub struct Ctx<'a> {
    pub connection: &'a Connection,
    pub namespace: String,
    pub io: &'a PayloadIo,
    pub answer_bytes: usize,
}

impl Ctx<'_> {
    pub fn identity(&self) -> String {
        self.connection.identity().to_owned()
    }
}

/// The toolset. Cheap to clone.
#[derive(Clone)]
pub struct TemporalToolset {
    connection: Connection,
    default_namespace: String,
    policy: NamespacePolicy,
    io: PayloadIo,
    families: HashMap<&'static str, ToolFamily>,
    /// The scopes per family; `None` names none, which refuses every authenticated caller
    /// (fail closed, R-OPS-5).
    scopes: Option<FamilyScopes>,
    /// Whether the write and admin tools are served (R-OPS-9).
    changes: bool,
    answer_bytes: usize,
}

impl TemporalToolset {
    /// A toolset on `connection`; tools default to `default_namespace` and may use the
    /// namespaces `policy` allows. With a codec, values sent are encoded through it; values
    /// read back are decoded only after [`Self::with_decoding`] (R-OPS-7). It names no OAuth
    /// scopes until [`Self::with_scopes`]: an authenticated caller is refused every tool until
    /// then (R-OPS-5).
    pub fn new(
        connection: Connection,
        default_namespace: impl Into<String>,
        policy: NamespacePolicy,
        codec: Option<RemoteCodec>,
    ) -> Self {
        Self {
            connection,
            default_namespace: default_namespace.into(),
            policy,
            io: PayloadIo::new(codec),
            families: specs().iter().map(|s| (s.name, s.family)).collect(),
            scopes: None,
            changes: true,
            answer_bytes: size::MAX_ANSWER_BYTES,
        }
    }

    /// Requires these OAuth scopes per tool family (R-OPS-5).
    pub fn with_scopes(mut self, scopes: FamilyScopes) -> Self {
        self.scopes = Some(scopes);
        self
    }

    /// Decodes the values read back through the codec (R-OPS-7): whoever may call the tools
    /// that show them (with inbound OAuth: holds the `decode` scope) then reads every value
    /// of the namespace in plaintext, whoever wrote it.
    pub fn with_decoding(mut self) -> Self {
        self.io = self.io.decoding();
        self
    }

    /// Serves only the read tools: the write and admin tools are not listed, and a call of one
    /// is refused naming the flag (R-OPS-9).
    pub fn read_only(mut self) -> Self {
        self.changes = false;
        self
    }

    /// Bounds each answer to `bytes` of JSON (default [`size::MAX_ANSWER_BYTES`], R-OPS-8).
    pub fn with_answer_bytes(mut self, bytes: usize) -> Self {
        self.answer_bytes = bytes;
        self
    }

    /// Whether calls of `family`'s tools are served.
    fn serves(&self, family: ToolFamily) -> bool {
        self.changes || family == ToolFamily::Read
    }

    /// The tool definitions, in listing order.
    pub fn tools(&self) -> Vec<Tool> {
        specs()
            .iter()
            .filter(|s| self.serves(s.family))
            .map(|s| s.tool())
            .collect()
    }

    /// The names of the tools (for collision checks against routed tools).
    pub fn names() -> Vec<&'static str> {
        specs().iter().map(|s| s.name).collect()
    }

    /// Whether `name` is one of this set's tools.
    pub fn has_tool(&self, name: &str) -> bool {
        self.families.contains_key(name)
    }

    /// The scope family of a tool, for inbound OAuth (R-OPS-5).
    pub fn family(&self, name: &str) -> Option<ToolFamily> {
        self.families.get(name).copied()
    }

    /// Calls a tool. Every failure is an `isError` result saying what to do; a namespace
    /// outside the policy is refused before any request is built.
    pub async fn call(&self, name: &str, arguments: &Map<String, Value>) -> CallToolResult {
        let answer = self.answer(name, arguments).await.and_then(|answer| {
            size::check(name, &answer.data, self.answer_bytes)?;
            Ok(answer)
        });
        match answer {
            Ok(answer) => {
                let text = render::render(&answer.headline, &answer.data);
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(answer.data);
                result
            }
            Err(e) => e.into_result(),
        }
    }

    async fn answer(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Answer, ToolError> {
        if !self.has_tool(name) {
            return Err(ToolError::invalid(format!(
                "{name:?} is not a Temporal tool"
            )));
        }
        if let Some(family) = self.family(name).filter(|f| !self.serves(*f)) {
            return Err(ToolError::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{name} is a {family:?} tool, and this connector serves only the read tools: over HTTP without --auth-config every local process could call it; nothing was sent"
                ),
                "start the connector with --auth-config and --temporal-tools-scopes, or with --temporal-tools-unauthenticated-writes to let every caller change Temporal state",
            ));
        }
        let args = Args(arguments);
        // durable-mcp's own executions are refused by id, for every tool (R-OPS-6).
        if let Some(id) = args.opt_string("workflow_id")? {
            reserved::check_id(&id)?;
        }
        let namespace = self.policy.resolve(
            args.opt_string("namespace")?.as_deref(),
            &self.default_namespace,
        )?;
        let ctx = Ctx {
            connection: &self.connection,
            namespace,
            io: &self.io,
            answer_bytes: self.answer_bytes,
        };
        match name {
            "start_workflow" => workflows::start(&ctx, &args).await,
            "get_workflow_result" => workflows::result(&ctx, &args).await,
            "describe_workflow" => workflows::describe(&ctx, &args).await,
            "list_workflows" => workflows::list(&ctx, &args).await,
            "get_workflow_history" => workflows::history(&ctx, &args).await,
            "get_workflow_event" => workflows::event(&ctx, &args).await,
            "query_workflow" => workflows::query(&ctx, &args).await,
            "signal_workflow" => workflows::signal(&ctx, &args).await,
            "cancel_workflow" => workflows::cancel(&ctx, &args).await,
            "terminate_workflow" => workflows::terminate(&ctx, &args).await,
            "continue_as_new" => workflows::continue_as_new(&ctx, &args).await,
            "batch_signal" => batch::signal(&ctx, &args).await,
            "batch_cancel" => batch::cancel(&ctx, &args).await,
            "batch_terminate" => batch::terminate(&ctx, &args).await,
            "create_schedule" => schedules::create(&ctx, &args).await,
            "list_schedules" => schedules::list(&ctx, &args).await,
            "describe_schedule" => schedules::describe(&ctx, &args).await,
            "pause_schedule" => schedules::pause(&ctx, &args, true).await,
            "unpause_schedule" => schedules::pause(&ctx, &args, false).await,
            "delete_schedule" => schedules::delete(&ctx, &args).await,
            "trigger_schedule" => schedules::trigger(&ctx, &args).await,
            other => Err(ToolError::invalid(format!(
                "{other:?} is listed but not implemented"
            ))),
        }
    }
}

impl crate::local::LocalTools for TemporalToolset {
    fn tools(&self) -> Vec<Tool> {
        TemporalToolset::tools(self)
    }
    fn has_tool(&self, name: &str) -> bool {
        TemporalToolset::has_tool(self, name)
    }
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
    ) -> futures::future::BoxFuture<'a, CallToolResult> {
        Box::pin(TemporalToolset::call(self, name, arguments))
    }
    fn origin(&self) -> &str {
        "--temporal-tools"
    }
    fn required_scopes(&self, name: &str) -> Option<Vec<&str>> {
        let decodes = self.io.decodes() && payloads::DECODING_TOOLS.contains(&name);
        self.scopes
            .as_ref()?
            .for_call(name, self.family(name)?, decodes)
    }
}
