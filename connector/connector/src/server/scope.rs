//! Whose request this is (R-CON-6): the verified caller an HTTP middleware put in the request,
//! else the connector's configured scope; and the owner hash that scopes tasks and keys.

use rmcp::{ErrorData as McpError, RoleServer, model::CallToolResult, service::RequestContext};

use super::Connector;
use crate::{
    auth::GrantedScopes,
    fair::{Share, share_of},
    local::MissingScope,
    task_ref::{CallerScope, caller_hash},
};
use durable_mcp_contract::{errors::ConnectorErrorType, outcome::ERROR_TYPE_META};

impl Connector {
    pub(super) fn owner(&self, scope: &CallerScope) -> String {
        caller_hash(&self.inner.options.signing_key, scope)
    }

    /// Whose request this is: the verified caller an HTTP middleware put in the request's
    /// extensions (see [`crate::auth`]), else the connector's configured scope. A connector
    /// that requires verified callers refuses requests without one rather than fall back.
    pub fn request_scope(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallerScope, McpError> {
        let verified = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<CallerScope>());
        match verified {
            Some(scope) => Ok(scope.clone()),
            None if self.inner.options.require_verified_caller => Err(McpError::invalid_request(
                "this connector requires an authenticated caller",
                None,
            )),
            None => Ok(self.inner.options.caller_scope.clone()),
        }
    }
}

/// Whom per-caller limits count the request under (R-CON-38): its verified caller, else its
/// peer's address; `None` over stdio (one caller) and for hosts that say neither.
pub(super) fn request_share(context: &RequestContext<RoleServer>) -> Option<Share> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| share_of(&parts.extensions))
}

/// The scopes of the request's verified token, when an HTTP auth middleware put them in the
/// request's extensions; `None` over stdio and for unauthenticated HTTP.
pub(super) fn granted_scopes(context: &RequestContext<RoleServer>) -> Option<GrantedScopes> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<GrantedScopes>())
        .cloned()
}

/// The tool error for a caller whose token lacks the scope a tool needs: nothing was sent.
pub(super) fn insufficient_scope(tool: &str, missing: MissingScope<'_>) -> CallToolResult {
    let error_type = ConnectorErrorType::InsufficientScope.as_str();
    let text = match missing {
        MissingScope::Named(needed) => format!(
            "{error_type}: {tool} needs the OAuth scope {needed:?}, which this token does not \
             carry; nothing was sent to Temporal. Ask your authorization server for a token \
             with that scope."
        ),
        MissingScope::Unnamed => format!(
            "{error_type}: the connector's operator named no OAuth scope for {tool}, so no \
             token may call it; nothing was sent to Temporal. The operator names one with \
             --temporal-tools-scopes."
        ),
    };
    let mut result = CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]);
    let mut meta = rmcp::model::MetaObject::default();
    meta.0.insert(ERROR_TYPE_META.into(), error_type.into());
    result.meta = Some(meta);
    result
}
