//! Temporal operations as MCP tools (R-OPS-1..5): start, inspect, signal, query, cancel and
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

/// What a tool call needs: the connection, its namespace (checked), identity and payload I/O.
pub struct Ctx<'a> {
    pub connection: &'a Connection,
    pub namespace: String,
    pub io: &'a PayloadIo,
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
    scopes: FamilyScopes,
}

impl TemporalToolset {
    /// A toolset on `connection`; tools default to `default_namespace` and may use the
    /// namespaces `policy` allows. With a codec, payloads are encoded and decoded through it.
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
            scopes: FamilyScopes::default(),
        }
    }

    /// Requires these OAuth scopes per tool family (R-OPS-5).
    pub fn with_scopes(mut self, scopes: FamilyScopes) -> Self {
        self.scopes = scopes;
        self
    }

    /// The tool definitions, in listing order.
    pub fn tools(&self) -> Vec<Tool> {
        specs().iter().map(|s| s.tool()).collect()
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
        match self.answer(name, arguments).await {
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
    fn required_scopes(&self, name: &str) -> Vec<&str> {
        self.family(name)
            .map(|family| self.scopes.for_tool(name, family))
            .unwrap_or_default()
    }
}
