//! Local tools: tools a connector serves itself, by calling Temporal directly, beside the
//! routed tools that are durable Nexus operations (R-OPS-1). The Temporal operations toolset
//! implements this; the connector lists and calls whatever implements it, without knowing
//! what the tools do.

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value};

use crate::auth::GrantedScopes;

/// A set of tools served in-process.
pub trait LocalTools: Send + Sync + 'static {
    /// The tool definitions, in listing order.
    fn tools(&self) -> Vec<Tool>;
    /// Whether `name` is one of these tools.
    fn has_tool(&self, name: &str) -> bool;
    /// Calls a tool. Failures are `isError` results, never protocol errors.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, CallToolResult>;
    /// What this set is called in messages (e.g. `--temporal-tools`).
    fn origin(&self) -> &str;
    /// The OAuth scopes a caller's token must carry to call `name` (R-OPS-5). The connector
    /// checks them before calling; without inbound OAuth, a set that requires scopes is
    /// refused at start. `None` when the set names no scope for `name`: an authenticated
    /// caller is then refused (fail closed); a caller without a token is not.
    fn required_scopes(&self, name: &str) -> Option<Vec<&str>>;
}

/// Why a caller may not call a local tool, if it may not (R-OPS-5): `granted` are the scopes of
/// its verified token (`None` without inbound auth), `needed` what the set requires. A caller
/// with an identity (`identified`: a [`CallerScope::Subject`], set by a host's own auth that
/// put no [`GrantedScopes`] beside it) is granted nothing rather than let through: fail closed.
///
/// [`CallerScope::Subject`]: crate::task_ref::CallerScope::Subject
pub fn missing_scope<'a>(
    granted: Option<&GrantedScopes>,
    identified: bool,
    needed: Option<Vec<&'a str>>,
) -> Option<MissingScope<'a>> {
    let none = GrantedScopes::default();
    let granted = granted.or(identified.then_some(&none));
    match (granted, needed) {
        (Some(_), None) => Some(MissingScope::Unnamed),
        (None, None) => None,
        (granted, Some(needed)) => needed
            .into_iter()
            .find(|n| !granted.is_some_and(|g| g.0.contains(*n)))
            .map(MissingScope::Named),
    }
}

/// A scope a caller lacks.
#[derive(Debug, PartialEq, Eq)]
pub enum MissingScope<'a> {
    /// The token does not carry this scope.
    Named(&'a str),
    /// The operator named no scope for the tool, so no token may call it.
    Unnamed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_callers_are_refused_tools_without_a_named_scope() {
        let token = GrantedScopes(["r".to_owned()].into());
        let granted = Some(&token);
        assert_eq!(missing_scope(granted, false, Some(vec!["r"])), None);
        assert_eq!(
            missing_scope(granted, false, Some(vec!["r", "w"])),
            Some(MissingScope::Named("w"))
        );
        assert_eq!(
            missing_scope(granted, false, None),
            Some(MissingScope::Unnamed)
        );
        let empty = GrantedScopes(Default::default());
        assert_eq!(
            missing_scope(Some(&empty), false, None),
            Some(MissingScope::Unnamed)
        );
        // Without inbound auth no token is checked, and none is asked for.
        assert_eq!(missing_scope(None, false, None), None);
        assert_eq!(missing_scope(None, false, Some(vec![])), None);
        assert_eq!(
            missing_scope(None, false, Some(vec!["r"])),
            Some(MissingScope::Named("r"))
        );
    }

    #[test]
    fn an_identified_caller_without_granted_scopes_is_refused_not_let_through() {
        // A host's own auth put a caller identity but no scopes in the request.
        assert_eq!(missing_scope(None, true, None), Some(MissingScope::Unnamed));
        assert_eq!(
            missing_scope(None, true, Some(vec!["r"])),
            Some(MissingScope::Named("r"))
        );
        // Scopes the host did grant are checked as for a token.
        let token = GrantedScopes(["r".to_owned()].into());
        assert_eq!(missing_scope(Some(&token), true, Some(vec!["r"])), None);
    }
}
