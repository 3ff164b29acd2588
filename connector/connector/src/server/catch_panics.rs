//! A request whose handler panics is answered with JSON-RPC -32603 (R-CON-51): the panic ends
//! that request only, counted and logged once by [`durable_mcp_runtime::panics`]; the session,
//! the stdio pipe or the HTTP connection carries on.

use std::borrow::Cow;

use durable_mcp_runtime::panics::{self, catching};
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::*,
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

/// `answer` to a `method` request, or -32603 when it panicked.
pub(super) async fn answer_catching<T>(
    method: &str,
    answer: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    match catching(panics::mcp_method(method), answer).await {
        Ok(answer) => answer,
        Err(panicked) => Err(McpError::internal_error(panicked.caller_message(), None)),
    }
}

/// A notification's handling, a panic in it caught (there is no answer to give).
async fn notified(handling: impl Future<Output = ()>) {
    let _ = catching(panics::NOTIFICATION, handling).await;
}

/// A server handler whose requests' and notifications' panics are caught: rmcp's Streamable
/// HTTP service takes a `ServerHandler`, so the HTTP transport serves the typed handler through
/// this (the connector's own `Service`, for stdio and library hosts, catches them itself).
/// Every method is the wrapped handler's.
#[derive(Clone)]
pub struct CatchPanics<S>(pub S);

/// Requests with params: each answered by the wrapped handler, caught.
macro_rules! caught_requests {
    ($($name:ident($params:ty) -> $answer:ty = $method:literal;)*) => {$(
        async fn $name(
            &self,
            request: $params,
            context: RequestContext<RoleServer>,
        ) -> Result<$answer, McpError> {
            answer_catching($method, self.0.$name(request, context)).await
        }
    )*};
}

// MCP logging and resources/subscribe are deprecated but served (R-CON-13, R-CON-49).
#[allow(deprecated)]
impl<S: ServerHandler> ServerHandler for CatchPanics<S> {
    caught_requests! {
        initialize(InitializeRequestParams) -> InitializeResult = "initialize";
        complete(CompleteRequestParams) -> CompleteResult = "completion/complete";
        set_level(SetLevelRequestParams) -> () = "logging/setLevel";
        get_prompt(GetPromptRequestParams) -> GetPromptResponse = "prompts/get";
        list_prompts(Option<PaginatedRequestParams>) -> ListPromptsResult = "prompts/list";
        list_resources(Option<PaginatedRequestParams>) -> ListResourcesResult = "resources/list";
        list_resource_templates(Option<PaginatedRequestParams>) -> ListResourceTemplatesResult
            = "resources/templates/list";
        read_resource(ReadResourceRequestParams) -> ReadResourceResponse = "resources/read";
        subscribe(SubscribeRequestParams) -> () = "resources/subscribe";
        unsubscribe(UnsubscribeRequestParams) -> () = "resources/unsubscribe";
        call_tool(CallToolRequestParams) -> CallToolResponse = "tools/call";
        list_tools(Option<PaginatedRequestParams>) -> ListToolsResult = "tools/list";
        on_custom_request(CustomRequest) -> CustomResult = "_other";
        get_task(GetTaskParams) -> GetTaskResult = "tasks/get";
        update_task(UpdateTaskParams) -> () = "tasks/update";
        cancel_task(CancelTaskParams) -> () = "tasks/cancel";
        list_skills(Option<PaginatedRequestParams>) -> ListSkillsResult = "skills/list";
        get_skill(GetSkillRequestParams) -> GetSkillResult = "skills/get";
        read_resource_directory(ReadResourceDirectoryRequestParams)
            -> ReadResourceDirectoryResult = "resources/directory/read";
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        answer_catching("ping", self.0.ping(context)).await
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        answer_catching("server/discover", self.0.discover(context)).await
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        answer_catching("subscriptions/listen", self.0.listen(context)).await
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, McpError> {
        self.0.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.0.accepted_subscription_filter(requested)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0.get_tool(name)
    }

    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        notified(self.0.on_cancelled(notification, context)).await
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        notified(self.0.on_progress(notification, context)).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        notified(self.0.on_initialized(context)).await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        notified(self.0.on_roots_list_changed(context)).await
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        notified(self.0.on_custom_notification(notification, context)).await
    }
}

#[cfg(test)]
mod tests {
    use rmcp::ServiceExt as _;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    use super::*;

    /// A handler whose `tools/list` panics the way indexing a caller's JSON did.
    struct Panicking;

    impl ServerHandler for Panicking {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, McpError> {
            let mut params = json!("a caller's string");
            params["notifications"].take();
            Ok(ListToolsResult::default())
        }
    }

    #[tokio::test]
    async fn a_panicking_request_is_an_internal_error_and_the_session_goes_on() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server);
        let running = tokio::spawn(CatchPanics(Panicking).serve((read, write)));
        let (read, mut write) = tokio::io::split(client);
        let mut lines = BufReader::new(read).lines();
        let mut ask = async |message: Value| {
            write
                .write_all(format!("{message}\n").as_bytes())
                .await
                .unwrap();
        };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}});
        ask(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})).await;
        let before = panics::counted("tools/list");
        let mut read_answer = async || -> Value {
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap()
        };
        assert!(read_answer().await.get("result").is_some());
        ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
        let answer = read_answer().await;
        assert_eq!(
            answer.pointer("/error/code"),
            Some(&json!(-32603)),
            "{answer}"
        );
        assert_eq!(answer.get("id"), Some(&json!(2)), "{answer}");
        let message = answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap();
        assert!(!message.contains("a caller's string"), "{message}");
        assert_eq!(panics::counted("tools/list"), before + 1);
        ask(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"})).await;
        let answer = read_answer().await;
        assert_eq!(answer.get("result"), Some(&json!({})), "{answer}");
        running.abort();
    }
}
