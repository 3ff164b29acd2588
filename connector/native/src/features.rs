//! Resources, resource templates and prompts a native tool service publishes (R-NAT-8), served
//! as the reserved operations of R-NXC-8 beside its tools: `upstream_capabilities` declares
//! `resources` and `prompts` when the service has some, the lists answer the MCP list results,
//! and `read_resource` / `get_prompt` answer the MCP results (or a JSON-RPC error, marked, for a
//! URI or prompt the service does not have or arguments that do not fit). A prompt or template
//! with a `.completion(..)` handler also answers `completion/complete` (declared as
//! `completions`; see [`crate::completion`]).
//!
//! ```no_run
//! # use durable_mcp_native::{Contents, Prompt, PromptMessages, Resource, ResourceTemplate, ToolFailure, ToolService};
//! /// Summarizes a topic.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Topic {
//!     /// What to summarize.
//!     topic: String,
//! }
//! async fn summarize(args: Topic) -> Result<PromptMessages, ToolFailure> {
//!     Ok(PromptMessages::new().user(format!("Summarize {}.", args.topic)))
//! }
//! async fn report(uri: String) -> Result<Contents, ToolFailure> {
//!     Ok(Contents::text(format!("the report at {uri}")).mime_type("text/plain"))
//! }
//! let service = ToolService::new("my-tools")
//!     .resource(Resource::new("docs://readme", "readme", Contents::text("Read me.")))
//!     .resource_template(ResourceTemplate::new("reports://{id}", "report", report))
//!     .prompt(Prompt::new("summarize", summarize))
//!     .build();
//! ```

use std::{future::Future, sync::Arc};

use base64::Engine as _;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;

use super::completion::{
    CompleteFn, CompletionRequest, Reference, complete_fn, complete_result, template_variables,
};
use super::result::{ToolFailure, schema_of};
use durable_mcp_contract::{
    features::{
        COMPLETE, GET_PROMPT, LIST_PROMPTS, LIST_RESOURCE_TEMPLATES, LIST_RESOURCES, READ_RESOURCE,
        UPSTREAM_CAPABILITIES, template_matches,
    },
    jsonrpc_error::JsonRpcError,
    payload::{self, MAX_PAYLOAD_BYTES},
};
use durable_mcp_runtime::nexus::{HandlerError, Service, StartError, StartOutcome, start_fn};

/// MCP's JSON-RPC code for a resource the server does not have.
pub const RESOURCE_NOT_FOUND: i32 = -32002;
/// JSON-RPC's invalid-params code: an unknown prompt, or arguments that do not fit.
pub const INVALID_PARAMS: i32 = -32602;

/// What a read answers for a URI: text or bytes, with an optional MIME type.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    body: Body,
    mime_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Text(String),
    Blob(Vec<u8>),
}

impl Contents {
    /// Text contents.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            body: Body::Text(text.into()),
            mime_type: None,
        }
    }
    /// Binary contents (sent base64-encoded as MCP's `blob`).
    pub fn blob(bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            body: Body::Blob(bytes.into()),
            mime_type: None,
        }
    }
    /// The contents' MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// The MCP `TextResourceContents` or `BlobResourceContents` of `uri`.
    pub fn to_json(&self, uri: &str) -> Value {
        let mut c = Map::new();
        c.insert("uri".into(), uri.into());
        if let Some(m) = &self.mime_type {
            c.insert("mimeType".into(), m.clone().into());
        }
        match &self.body {
            Body::Text(t) => c.insert("text".into(), t.clone().into()),
            Body::Blob(b) => c.insert(
                "blob".into(),
                base64::engine::general_purpose::STANDARD.encode(b).into(),
            ),
        };
        Value::Object(c)
    }
}

/// The listing fields resources, templates and prompts share.
#[derive(Debug, Clone, Default)]
struct Described {
    title: Option<String>,
    description: Option<String>,
}

impl Described {
    fn fill(&self, m: &mut Map<String, Value>) {
        if let Some(t) = &self.title {
            m.insert("title".into(), t.clone().into());
        }
        if let Some(d) = &self.description {
            m.insert("description".into(), d.clone().into());
        }
    }
}

/// The `title` and `description` builder methods of a definition with a `described` field.
macro_rules! describe_methods {
    () => {
        /// A human-friendly name for hosts' menus.
        pub fn title(mut self, title: impl Into<String>) -> Self {
            self.described.title = Some(title.into());
            self
        }
        /// What it holds or is for (a prompt's replaces its input type's doc comment).
        pub fn description(mut self, description: impl Into<String>) -> Self {
            self.described.description = Some(description.into());
            self
        }
    };
}

/// The `completion` builder method of a definition with a `complete` field.
macro_rules! completion_method {
    ($what:literal) => {
        #[doc = concat!("Completes the ", $what, " a caller is typing (MCP `completion/complete`):")]
        /// `complete` gets the argument's name, what was typed and the arguments already
        /// chosen, and answers the candidate values; at most 100 are sent, with `total` and
        /// `hasMore` saying how many there were.
        pub fn completion<F, Fut>(mut self, complete: F) -> Self
        where
            F: Fn(CompletionRequest) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<Vec<String>, ToolFailure>> + Send + 'static,
        {
            self.complete = Some(complete_fn(complete));
            self
        }
    };
}

/// A static resource: listed, and read as the contents given.
#[derive(Debug, Clone)]
pub struct Resource {
    pub(super) uri: String,
    name: String,
    described: Described,
    contents: Contents,
}

impl Resource {
    /// The resource `uri`, listed as `name`, whose read answers `contents`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>, contents: Contents) -> Self {
        Self {
            uri: uri.into(),
            name: name.into(),
            described: Described::default(),
            contents,
        }
    }
    describe_methods!();

    /// The MCP `Resource` this is listed as.
    pub fn listing(&self) -> Value {
        let mut m = Map::new();
        m.insert("uri".into(), self.uri.clone().into());
        m.insert("name".into(), self.name.clone().into());
        self.described.fill(&mut m);
        if let Some(mime) = &self.contents.mime_type {
            m.insert("mimeType".into(), mime.clone().into());
        }
        Value::Object(m)
    }
}

type ReadFn =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Contents, ToolFailure>> + Send + Sync>;

/// A resource template: listed, and a URI matching it is read by its function.
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(super) uri_template: String,
    name: String,
    described: Described,
    mime_type: Option<String>,
    read: ReadFn,
    complete: Option<CompleteFn>,
}

impl std::fmt::Debug for ResourceTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceTemplate")
            .field("uri_template", &self.uri_template)
            .finish_non_exhaustive()
    }
}

impl ResourceTemplate {
    /// The RFC 6570 `uri_template`, listed as `name`; `read` answers the contents of a URI
    /// that matches it (its literal text in order, each expression any text).
    pub fn new<F, Fut>(uri_template: impl Into<String>, name: impl Into<String>, read: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Contents, ToolFailure>> + Send + 'static,
    {
        Self {
            uri_template: uri_template.into(),
            name: name.into(),
            described: Described::default(),
            mime_type: None,
            read: Arc::new(move |uri| Box::pin(read(uri))),
            complete: None,
        }
    }
    describe_methods!();
    completion_method!("template variable");
    /// The MIME type of every resource of the template.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// The MCP `ResourceTemplate` this is listed as.
    pub fn listing(&self) -> Value {
        let mut m = Map::new();
        m.insert("uriTemplate".into(), self.uri_template.clone().into());
        m.insert("name".into(), self.name.clone().into());
        self.described.fill(&mut m);
        if let Some(mime) = &self.mime_type {
            m.insert("mimeType".into(), mime.clone().into());
        }
        Value::Object(m)
    }
}

/// The messages a prompt answers (MCP `GetPromptResult`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptMessages {
    description: Option<String>,
    messages: Vec<Value>,
}

impl PromptMessages {
    pub fn new() -> Self {
        Self::default()
    }
    /// The result's description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
    /// A user message of one text content.
    pub fn user(self, text: impl Into<String>) -> Self {
        self.message("user", json!({"type": "text", "text": text.into()}))
    }
    /// An assistant message of one text content.
    pub fn assistant(self, text: impl Into<String>) -> Self {
        self.message("assistant", json!({"type": "text", "text": text.into()}))
    }
    /// A message of `role` with any MCP content item (image, audio, embedded resource).
    pub fn message(mut self, role: &str, content: Value) -> Self {
        self.messages
            .push(json!({"role": role, "content": content}));
        self
    }

    /// The `GetPromptResult` JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(d) = &self.description {
            m.insert("description".into(), d.clone().into());
        }
        m.insert("messages".into(), Value::Array(self.messages.clone()));
        Value::Object(m)
    }
}

type GetFn = Arc<
    dyn Fn(Value) -> BoxFuture<'static, Result<Result<PromptMessages, String>, ToolFailure>>
        + Send
        + Sync,
>;

/// A prompt: listed with the arguments of its input type, answered by its function.
#[derive(Clone)]
pub struct Prompt {
    pub(super) name: String,
    described: Described,
    arguments: Vec<Value>,
    get: GetFn,
    complete: Option<CompleteFn>,
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Prompt {
    /// A prompt from `async fn(Input) -> Result<PromptMessages, ToolFailure>`. Its arguments
    /// are `Input`'s fields (MCP prompt arguments are strings): each field's doc comment is the
    /// argument's description, and a field that is not an `Option` is required. The prompt's
    /// description defaults to `Input`'s doc comment.
    pub fn new<I, F, Fut>(name: impl Into<String>, get: F) -> Self
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptMessages, ToolFailure>> + Send + 'static,
    {
        let schema = schema_of::<I>();
        let get = Arc::new(get);
        Self {
            name: name.into(),
            described: Described {
                title: None,
                description: text(&schema, "description").map(str::to_owned),
            },
            arguments: prompt_arguments(&schema),
            get: Arc::new(move |args| {
                let get = get.clone();
                Box::pin(async move {
                    match serde_json::from_value::<I>(args) {
                        Ok(input) => get(input).await.map(Ok),
                        Err(e) => Ok(Err(e.to_string())),
                    }
                })
            }),
            complete: None,
        }
    }
    describe_methods!();
    completion_method!("prompt argument");

    /// The MCP `Prompt` this is listed as.
    pub fn listing(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), self.name.clone().into());
        self.described.fill(&mut m);
        if !self.arguments.is_empty() {
            m.insert("arguments".into(), Value::Array(self.arguments.clone()));
        }
        Value::Object(m)
    }
}

/// `value[key]` when it is a string (`value` may be anything a caller sent).
fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// MCP `PromptArgument`s from an object schema's properties: name, description, required.
pub fn prompt_arguments(schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, p)| {
            let mut a = Map::new();
            a.insert("name".into(), name.clone().into());
            if let Some(d) = text(p, "description") {
                a.insert("description".into(), d.into());
            }
            a.insert("required".into(), required.contains(&name.as_str()).into());
            Value::Object(a)
        })
        .collect()
}

/// What a service publishes besides its tools.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

impl Published {
    /// The `upstream_capabilities` answer: `resources` and `prompts` when there are some.
    pub fn capabilities(&self) -> Value {
        let mut c = Map::new();
        if !self.resources.is_empty() || !self.templates.is_empty() {
            c.insert("resources".into(), json!({}));
        }
        if !self.prompts.is_empty() {
            c.insert("prompts".into(), json!({}));
        }
        if self.completes() {
            c.insert("completions".into(), json!({}));
        }
        Value::Object(c)
    }

    /// Whether a prompt or template has a completion handler.
    fn completes(&self) -> bool {
        self.prompts.iter().any(|p| p.complete.is_some())
            || self.templates.iter().any(|t| t.complete.is_some())
    }

    /// Why these cannot be served: a duplicate URI, template or prompt name, or an empty one.
    pub fn problem(&self) -> Option<String> {
        let keys = [
            (
                "resource URI",
                self.resources.iter().map(|r| &r.uri).collect::<Vec<_>>(),
            ),
            (
                "resource template",
                self.templates.iter().map(|t| &t.uri_template).collect(),
            ),
            (
                "prompt name",
                self.prompts.iter().map(|p| &p.name).collect(),
            ),
        ];
        for (what, names) in keys {
            let mut seen = std::collections::BTreeSet::new();
            for n in names {
                if n.trim().is_empty() {
                    return Some(format!("a {what} must not be empty"));
                }
                if !seen.insert(n) {
                    return Some(format!("two of its {what}s are {n:?}; they must be unique"));
                }
            }
        }
        None
    }

    /// The read of `params` (`{"uri"}`): a static resource's contents, else the first
    /// matching template's read, else a JSON-RPC "resource not found".
    pub async fn read(&self, params: &Value) -> Result<Payload, StartError> {
        let Some(uri) = text(params, "uri") else {
            return Ok(rpc_error(
                INVALID_PARAMS,
                "resources/read needs a \"uri\" string",
            )?);
        };
        let contents = if let Some(r) = self.resources.iter().find(|r| r.uri == uri) {
            r.contents.clone()
        } else if let Some(t) = self
            .templates
            .iter()
            .find(|t| template_matches(&t.uri_template, uri))
        {
            (t.read)(uri.to_owned()).await?
        } else {
            return Ok(rpc_error(
                RESOURCE_NOT_FOUND,
                &format!("Resource not found: {uri}"),
            )?);
        };
        Ok(bounded(
            READ_RESOURCE.method,
            answer(&json!({"contents": [contents.to_json(uri)]}))?,
        )?)
    }

    /// The prompt of `params` (`{"name", "arguments"}`), or a JSON-RPC invalid-params error.
    pub async fn get(&self, params: &Value) -> Result<Payload, StartError> {
        let name = text(params, "name").unwrap_or_default();
        let Some(prompt) = self.prompts.iter().find(|p| p.name == name) else {
            return Ok(rpc_error(
                INVALID_PARAMS,
                &format!("Unknown prompt: {name:?}"),
            )?);
        };
        let args = match params.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(a) => a.clone(),
        };
        match (prompt.get)(args).await? {
            Ok(messages) => Ok(bounded(GET_PROMPT.method, answer(&messages.to_json())?)?),
            Err(why) => Ok(rpc_error(
                INVALID_PARAMS,
                &format!("the arguments of prompt {name:?} do not fit: {why}"),
            )?),
        }
    }

    /// The completion of `params` (MCP `completion/complete`): the handler's values, bounded
    /// ([`complete_result`]); none for a prompt or template without a handler; a JSON-RPC
    /// invalid-params error for an unknown prompt, template or argument.
    pub async fn complete(&self, params: &Value) -> Result<Payload, StartError> {
        let (reference, asked) = match super::completion::parse(params) {
            Ok(parsed) => parsed,
            Err(why) => return Ok(rpc_error(INVALID_PARAMS, &why)?),
        };
        let (complete, names) = match &reference {
            Reference::Prompt(name) => match self.prompts.iter().find(|p| &p.name == name) {
                Some(p) => (
                    &p.complete,
                    p.arguments
                        .iter()
                        .filter_map(|a| a.get("name").cloned())
                        .collect(),
                ),
                None => {
                    return Ok(rpc_error(
                        INVALID_PARAMS,
                        &format!("Unknown prompt: {name:?}"),
                    )?);
                }
            },
            Reference::Template(uri) => {
                match self.templates.iter().find(|t| &t.uri_template == uri) {
                    Some(t) => (
                        &t.complete,
                        template_variables(uri)
                            .into_iter()
                            .map(Value::from)
                            .collect::<Vec<_>>(),
                    ),
                    None => {
                        let why = format!(
                            "Unknown resource template: {uri:?} (complete a template's variables by its uriTemplate)"
                        );
                        return Ok(rpc_error(INVALID_PARAMS, &why)?);
                    }
                }
            }
        };
        if !names.contains(&Value::from(asked.argument.as_str())) {
            let why = format!(
                "{reference} has no argument {:?}; it has {}",
                asked.argument,
                Value::Array(names)
            );
            return Ok(rpc_error(INVALID_PARAMS, &why)?);
        }
        let values = match complete {
            Some(complete) => complete(asked).await?,
            None => Vec::new(),
        };
        Ok(bounded(COMPLETE.method, answer(&complete_result(values))?)?)
    }

    /// Adds `upstream_capabilities` and, for what is published, the list and read operations;
    /// the error is [`Published::problem`]'s.
    pub fn add_operations(self, mut service: Service) -> Result<Service, String> {
        if let Some(reason) = self.problem() {
            return Err(reason);
        }
        let capabilities = answer(&self.capabilities()).map_err(|e| format!("{e:?}"))?;
        service = service.operation(UPSTREAM_CAPABILITIES, fixed(capabilities));
        let this = Arc::new(self);
        if !this.resources.is_empty() || !this.templates.is_empty() {
            let listed: Vec<Value> = this.resources.iter().map(Resource::listing).collect();
            let templates: Vec<Value> = this
                .templates
                .iter()
                .map(ResourceTemplate::listing)
                .collect();
            let reads = this.clone();
            service = service
                .operation(
                    LIST_RESOURCES.operation,
                    fixed(list_answer("resources", listed)?),
                )
                .operation(
                    LIST_RESOURCE_TEMPLATES.operation,
                    fixed(list_answer("resourceTemplates", templates)?),
                )
                .operation(
                    READ_RESOURCE.operation,
                    start_fn(move |_, input| {
                        let reads = reads.clone();
                        async move {
                            reads
                                .read(&params_of(&input)?)
                                .await
                                .map(StartOutcome::Sync)
                        }
                    }),
                );
        }
        if !this.prompts.is_empty() {
            let listed: Vec<Value> = this.prompts.iter().map(Prompt::listing).collect();
            let gets = this.clone();
            service = service
                .operation(
                    LIST_PROMPTS.operation,
                    fixed(list_answer("prompts", listed)?),
                )
                .operation(
                    GET_PROMPT.operation,
                    start_fn(move |_, input| {
                        let gets = gets.clone();
                        async move { gets.get(&params_of(&input)?).await.map(StartOutcome::Sync) }
                    }),
                );
        }
        if this.completes() {
            let completes = this.clone();
            service = service.operation(
                COMPLETE.operation,
                start_fn(move |_, input| {
                    let completes = completes.clone();
                    async move {
                        let params = params_of(&input)?;
                        completes.complete(&params).await.map(StartOutcome::Sync)
                    }
                }),
            );
        }
        Ok(service)
    }
}

/// An operation that always answers `p`.
fn fixed(p: Payload) -> std::sync::Arc<dyn durable_mcp_runtime::nexus::OperationHandler> {
    start_fn(move |_, _| {
        let p = p.clone();
        async move { Ok(StartOutcome::Sync(p)) }
    })
}

fn list_answer(items: &str, listed: Vec<Value>) -> Result<Payload, String> {
    answer(&json!({ items: listed })).map_err(|e| format!("{e:?}"))
}

/// A reserved operation's input: the MCP request's params (null is `{}`).
fn params_of(input: &Payload) -> Result<Value, HandlerError> {
    match payload::to_json(input) {
        Ok(Value::Null) => Ok(json!({})),
        Ok(params @ Value::Object(_)) => Ok(params),
        Ok(_) => Err(HandlerError::bad_request("params must be a JSON object")),
        Err(e) => Err(HandlerError::bad_request(e.to_string())),
    }
}

fn answer(value: &Value) -> Result<Payload, HandlerError> {
    payload::to_payload(value).map_err(|e| HandlerError::internal(e.to_string()))
}

/// `answered`, or the JSON-RPC error a proxy gives for an answer larger than a Temporal
/// payload may hold (R-NAT-8, R-PRX-32: -32603 with `data.resultTooLarge`): sent as it is, the
/// answer would fail the operation, which would be retried until the caller's timeout.
fn bounded(method: &str, answered: Payload) -> Result<Payload, HandlerError> {
    let bytes = answered.data.len();
    if bytes <= MAX_PAYLOAD_BYTES {
        return Ok(answered);
    }
    let error = JsonRpcError {
        code: -32603,
        message: format!(
            "the tool service's {method} answer is {bytes} bytes of JSON, more than the \
             {MAX_PAYLOAD_BYTES} bytes a Temporal payload may hold (its 2 MiB limit, less room \
             for metadata); ask for less (another resource, fewer arguments), or have the \
             service publish it in smaller parts"
        ),
        data: Some(json!({"resultTooLarge": true, "bytes": bytes, "maxBytes": MAX_PAYLOAD_BYTES})),
    };
    error
        .to_payload()
        .map_err(|e| HandlerError::internal(e.to_string()))
}

/// A JSON-RPC error as the operation's answer, marked (R-NXC-8).
fn rpc_error(code: i32, message: &str) -> Result<Payload, HandlerError> {
    let error = JsonRpcError {
        code,
        message: message.to_owned(),
        data: None,
    };
    error
        .to_payload()
        .map_err(|e| HandlerError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use durable_mcp_runtime::nexus::StartContext;
    use serde::Deserialize;

    use super::*;
    use crate::ToolService;

    /// Summarizes a topic.
    #[derive(Deserialize, JsonSchema)]
    struct Topic {
        /// What to summarize.
        topic: String,
        /// How long, in words.
        words: Option<String>,
    }

    async fn summarize(args: Topic) -> Result<PromptMessages, ToolFailure> {
        Ok(PromptMessages::new()
            .description("a summary")
            .user(format!("Summarize {} in {:?}.", args.topic, args.words)))
    }

    async fn report(uri: String) -> Result<Contents, ToolFailure> {
        Ok(Contents::text(format!("report {uri}")))
    }

    fn service() -> Service {
        ToolService::new("s")
            .resource(
                Resource::new(
                    "docs://readme",
                    "readme",
                    Contents::text("hi").mime_type("text/plain"),
                )
                .title("Read me")
                .description("The readme."),
            )
            .resource(Resource::new(
                "docs://logo",
                "logo",
                Contents::blob(*b"\x89PNG"),
            ))
            .resource_template(
                ResourceTemplate::new("reports://{id}/text", "report", report)
                    .mime_type("text/plain"),
            )
            .prompt(Prompt::new("summarize", summarize).title("Summarize"))
            .build()
            .unwrap()
    }

    async fn run(s: &Service, operation: &str, input: Value) -> Payload {
        let ctx = StartContext::new("e", "s", operation, "r");
        let input = payload::to_payload(&input).unwrap();
        match s
            .handler(operation)
            .unwrap()
            .start(ctx, input)
            .await
            .unwrap()
        {
            StartOutcome::Sync(p) => p,
            _ => panic!("{operation} answers sync"),
        }
    }

    async fn json_of(s: &Service, operation: &str, input: Value) -> Value {
        payload::to_json(&run(s, operation, input).await).unwrap()
    }

    async fn error_of(s: &Service, operation: &str, input: Value) -> JsonRpcError {
        JsonRpcError::from_payload(&run(s, operation, input).await)
            .expect("a JSON-RPC error")
            .unwrap()
    }

    #[tokio::test]
    async fn published_resources_and_prompts_are_declared_and_listed() {
        let s = service();
        assert_eq!(
            json_of(&s, UPSTREAM_CAPABILITIES, json!({})).await,
            json!({"resources": {}, "prompts": {}})
        );
        assert_eq!(
            json_of(&s, LIST_RESOURCES.operation, json!({})).await,
            json!({"resources": [
                {"uri": "docs://readme", "name": "readme", "title": "Read me",
                 "description": "The readme.", "mimeType": "text/plain"},
                {"uri": "docs://logo", "name": "logo"}]})
        );
        assert_eq!(
            json_of(&s, LIST_RESOURCE_TEMPLATES.operation, json!({})).await,
            json!({"resourceTemplates": [
                {"uriTemplate": "reports://{id}/text", "name": "report", "mimeType": "text/plain"}]})
        );
        assert_eq!(
            json_of(&s, LIST_PROMPTS.operation, json!({})).await,
            json!({"prompts": [{"name": "summarize", "title": "Summarize",
                "description": "Summarizes a topic.", "arguments": [
                    {"name": "topic", "description": "What to summarize.", "required": true},
                    {"name": "words", "description": "How long, in words.", "required": false}]}]})
        );
        let bare = ToolService::new("t").build().unwrap();
        assert_eq!(
            json_of(&bare, UPSTREAM_CAPABILITIES, json!({})).await,
            json!({})
        );
        assert!(bare.handler(LIST_RESOURCES.operation).is_none());
        assert!(bare.handler(GET_PROMPT.operation).is_none());
    }

    #[tokio::test]
    async fn reads_and_gets_answer_mcp_results_or_jsonrpc_errors() {
        let s = service();
        let read = |uri: &str| json!({"uri": uri});
        assert_eq!(
            json_of(&s, READ_RESOURCE.operation, read("docs://readme")).await,
            json!({"contents": [{"uri": "docs://readme", "mimeType": "text/plain", "text": "hi"}]})
        );
        assert_eq!(
            json_of(&s, READ_RESOURCE.operation, read("docs://logo")).await,
            json!({"contents": [{"uri": "docs://logo", "blob": "iVBORw=="}]})
        );
        assert_eq!(
            json_of(&s, READ_RESOURCE.operation, read("reports://7/text")).await,
            json!({"contents": [{"uri": "reports://7/text", "text": "report reports://7/text"}]})
        );
        let missing = error_of(&s, READ_RESOURCE.operation, read("docs://nope")).await;
        assert_eq!(missing.code, RESOURCE_NOT_FOUND);
        assert!(missing.message.contains("docs://nope"), "{missing:?}");

        let got = json_of(
            &s,
            GET_PROMPT.operation,
            json!({"name": "summarize", "arguments": {"topic": "tides"}}),
        )
        .await;
        assert_eq!(
            got,
            json!({"description": "a summary", "messages": [{"role": "user",
                "content": {"type": "text", "text": "Summarize tides in None."}}]})
        );
        let unknown = error_of(&s, GET_PROMPT.operation, json!({"name": "zz"})).await;
        assert_eq!(unknown.code, INVALID_PARAMS);
        let bad = error_of(&s, GET_PROMPT.operation, json!({"name": "summarize"})).await;
        assert_eq!(bad.code, INVALID_PARAMS);
        assert!(bad.message.contains("topic"), "{bad:?}");
    }

    /// A read larger than a Temporal payload is a final JSON-RPC error at once, shaped as the
    /// proxy's (R-PRX-32), instead of an operation failure retried until the caller's timeout.
    #[tokio::test]
    async fn a_read_over_the_payload_limit_is_a_jsonrpc_error_saying_so() {
        async fn huge(_: String) -> Result<Contents, ToolFailure> {
            Ok(Contents::text("x".repeat(MAX_PAYLOAD_BYTES + 1)))
        }
        let s = ToolService::new("s")
            .resource_template(ResourceTemplate::new("big://{id}", "big", huge))
            .build()
            .unwrap();
        let error = error_of(&s, READ_RESOURCE.operation, json!({"uri": "big://1"})).await;
        assert_eq!(error.code, -32603);
        assert!(
            error.message.contains("resources/read") && error.message.contains("ask for less"),
            "{error:?}"
        );
        let data = error.data.unwrap();
        assert_eq!(data["resultTooLarge"], true);
        assert_eq!(data["maxBytes"], MAX_PAYLOAD_BYTES);
        assert!(data["bytes"].as_u64().unwrap() > MAX_PAYLOAD_BYTES as u64);
        // Just under the limit is answered.
        let fits = Contents::text("y".repeat(MAX_PAYLOAD_BYTES - 200));
        let s = ToolService::new("s")
            .resource(Resource::new("big://fits", "fits", fits))
            .build()
            .unwrap();
        let read = json_of(&s, READ_RESOURCE.operation, json!({"uri": "big://fits"})).await;
        assert_eq!(read["contents"][0]["uri"], "big://fits");
    }

    /// Topics starting with what was typed, 150 of them for "t" (more than one answer holds).
    async fn topics(asked: CompletionRequest) -> Result<Vec<String>, ToolFailure> {
        let depth = asked.arguments.get("words").cloned().unwrap_or_default();
        let known = [
            "tides".to_owned(),
            format!("trees{depth}"),
            "sand".to_owned(),
        ];
        let mut values: Vec<String> = known
            .into_iter()
            .filter(|t| t.starts_with(&asked.value))
            .collect();
        if asked.value == "t" {
            values.extend((0..148).map(|i| format!("t{i}")));
        }
        Ok(values)
    }

    async fn ids(asked: CompletionRequest) -> Result<Vec<String>, ToolFailure> {
        Ok(vec![
            format!("{}1", asked.value),
            format!("{}2", asked.value),
        ])
    }

    #[tokio::test]
    async fn completions_answer_prompt_arguments_and_template_variables_bounded() {
        let s = ToolService::new("s")
            .resource_template(
                ResourceTemplate::new("reports://{id}/text", "report", report).completion(ids),
            )
            .prompt(Prompt::new("summarize", summarize).completion(topics))
            .prompt(Prompt::new("plain", summarize))
            .build()
            .unwrap();
        assert_eq!(
            json_of(&s, UPSTREAM_CAPABILITIES, json!({})).await,
            json!({"resources": {}, "prompts": {}, "completions": {}})
        );
        let ask = |reference: Value, name: &str, value: &str| {
            json!({"ref": reference, "argument": {"name": name, "value": value},
                   "context": {"arguments": {"words": "9"}}})
        };
        let prompt = |name: &str| json!({"type": "ref/prompt", "name": name});
        assert_eq!(
            json_of(
                &s,
                COMPLETE.operation,
                ask(prompt("summarize"), "topic", "tr")
            )
            .await,
            json!({"completion": {"values": ["trees9"], "total": 1, "hasMore": false}}),
            "the handler gets the value typed and the arguments already chosen"
        );
        let many = json_of(
            &s,
            COMPLETE.operation,
            ask(prompt("summarize"), "topic", "t"),
        )
        .await;
        assert_eq!(many["completion"]["values"].as_array().unwrap().len(), 100);
        assert_eq!(many["completion"]["total"], 150);
        assert_eq!(many["completion"]["hasMore"], true);
        let template = json!({"type": "ref/resource", "uri": "reports://{id}/text"});
        assert_eq!(
            json_of(&s, COMPLETE.operation, ask(template.clone(), "id", "4")).await,
            json!({"completion": {"values": ["41", "42"], "total": 2, "hasMore": false}})
        );
        assert_eq!(
            json_of(&s, COMPLETE.operation, ask(prompt("plain"), "topic", "t")).await,
            json!({"completion": {"values": [], "total": 0, "hasMore": false}}),
            "a prompt without a handler completes nothing"
        );
        for (params, names) in [
            (ask(prompt("zz"), "topic", ""), "zz"),
            (ask(prompt("summarize"), "nope", ""), "nope"),
            (ask(template, "nope", ""), "nope"),
            (
                ask(
                    json!({"type": "ref/resource", "uri": "reports://7/text"}),
                    "id",
                    "",
                ),
                "reports://7/text",
            ),
            (
                json!({"ref": {"type": "ref/prompt", "name": "summarize"}}),
                "argument",
            ),
        ] {
            let e = error_of(&s, COMPLETE.operation, params.clone()).await;
            assert_eq!(e.code, INVALID_PARAMS, "{params}");
            assert!(e.message.contains(names), "{params}: {e:?}");
        }
        // Without a handler the service declares no completions and serves no such operation.
        let plain = service();
        assert!(
            json_of(&plain, UPSTREAM_CAPABILITIES, json!({}))
                .await
                .get("completions")
                .is_none()
        );
        assert!(plain.handler(COMPLETE.operation).is_none());
    }

    #[test]
    fn duplicate_uris_and_prompt_names_are_refused() {
        let readme = || Resource::new("docs://readme", "readme", Contents::text("hi"));
        let e = ToolService::new("s")
            .resource(readme())
            .resource(readme())
            .build()
            .expect_err("refused");
        assert!(e.to_string().contains("\"docs://readme\""), "{e}");
        let e = ToolService::new("s")
            .prompt(Prompt::new("p", summarize))
            .prompt(Prompt::new("p", summarize))
            .build()
            .expect_err("refused");
        assert!(e.to_string().contains("prompt name"), "{e}");
    }
}
