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
/// its verified token (`None` without inbound auth), `needed` what the set requires.
pub fn missing_scope<'a>(
    granted: Option<&GrantedScopes>,
    needed: Option<Vec<&'a str>>,
) -> Option<MissingScope<'a>> {
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
        assert_eq!(missing_scope(granted, Some(vec!["r"])), None);
        assert_eq!(
            missing_scope(granted, Some(vec!["r", "w"])),
            Some(MissingScope::Named("w"))
        );
        assert_eq!(missing_scope(granted, None), Some(MissingScope::Unnamed));
        let empty = GrantedScopes(Default::default());
        assert_eq!(
            missing_scope(Some(&empty), None),
            Some(MissingScope::Unnamed)
        );
        // Without inbound auth no token is checked, and none is asked for.
        assert_eq!(missing_scope(None, None), None);
        assert_eq!(missing_scope(None, Some(vec![])), None);
        assert_eq!(
            missing_scope(None, Some(vec!["r"])),
            Some(MissingScope::Named("r"))
        );
    }
}
