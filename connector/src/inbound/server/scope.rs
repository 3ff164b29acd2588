//! Whose request this is (R-CON-6): the verified caller an HTTP middleware put in the request,
//! else the connector's configured scope; and the owner hash that scopes tasks and keys.

use rmcp::{ErrorData as McpError, RoleServer, service::RequestContext};

use super::Connector;
use crate::inbound::task_ref::{CallerScope, caller_hash};

impl Connector {
    pub(super) fn owner(&self, scope: &CallerScope) -> String {
        caller_hash(&self.inner.options.signing_key, scope)
    }

    /// Whose request this is: the verified caller an HTTP middleware put in the request's
    /// extensions (see [`crate::inbound::auth`]), else the connector's configured scope. A connector
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
