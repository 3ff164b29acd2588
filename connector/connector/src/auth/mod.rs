//! Inbound OAuth for the HTTP connector: an OAuth 2.1 resource server (RFC 9728 metadata,
//! RFC 6750 bearer tokens, JWT access tokens checked against the issuer's published keys).
//!
//! A verified token becomes a [`CallerScope::Subject`](crate::task_ref::CallerScope)
//! in the HTTP request's extensions; the connector scopes tasks and idempotency keys to it.
//! The token itself is removed from the request before MCP sees it, so it cannot reach a
//! Temporal call, a Nexus header or a log line. A host that authenticates in its own middleware
//! can insert a `CallerScope` the same way and skip this module.

mod config;
mod keys;
mod layer;
mod sessions;
mod token;

pub use config::{AuthConfig, AuthConfigError, DEFAULT_ALGORITHMS, WELL_KNOWN_RESOURCE};
pub use keys::{KeySource, metadata_urls};
pub(crate) use layer::SESSION_HEADER;
pub use layer::{Authenticator, DEFAULT_CONNECTIONS_PER_CALLER, metadata, require_bearer};
pub use sessions::{
    InUse, MAX_SESSIONS, MAX_SESSIONS_PER_CALLER, Opened, Refused, SESSION_IDLE, SessionOwners,
};
pub use token::{AuthError, GrantedScopes, VerifiedCaller, bearer_token, key_id, verify};
