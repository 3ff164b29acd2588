//! Outbound proxy: unchanged upstream MCP servers (HTTP or stdio) fronted as Nexus services,
//! every tool call a standalone Activity.
//!
//! The pure rules (no I/O beyond reading the config file):
//!
//! - [`options`]: per-call Activity options, layered so that only supplied keys change.
//! - [`retry`]: the retry policy inferred from a tool's MCP annotations.
//! - [`errors`]: stable error types, and which JSON-RPC errors are safe to retry.
//! - [`transport_failure`]: whether a failed upstream request can have reached the tool, and so
//!   whether it may be sent again.
//! - [`config`]: the `proxy.toml` file, with `${VAR}` expansion for secrets.
//! - [`refusal`]: which of Temporal's refusals fail a call at once.
//! - [`learned_url`]: which addresses a URL learned from a server may reach (SSRF).
//!
//! The I/O around them: [`upstream`] (rmcp connections to upstream servers), [`auth`] (their
//! bearer tokens: OAuth client credentials, or a provider of your own; [`oauth_discovery`] finds
//! their token endpoint), [`child`] (how a
//! stdio upstream's process is started), [`as_written`] (the upstream's answers as written, beside
//! rmcp's typed view), [`http_client`] (its HTTP errors scrubbed of URL secrets), [`discovery`]
//! (`tools/list` outside activities), [`service`] (the Nexus service per upstream),
//! [`call_activity`] (the tool-call activity), [`input`] (rounds of a call that asks for input), [`task_input`] (an upstream task's input requests as rounds, their states signed with the [`state_key`]), [`factory`] (upstreams reached through a
//! program's own client factory), [`library`] (proxied upstreams on a program's own worker,
//! next to its native tools) and [`proxy`] (the `durable-mcp-proxy` worker, built on it).

pub mod as_written;
pub mod assertion;
pub mod auth;
pub mod call_activity;
mod cancelled_round;
pub mod child;
pub mod config;
pub mod discovery;
pub mod errors;
pub mod factory;
mod features;
pub mod flights;
pub mod health;
pub mod http_client;
pub mod inline;
mod inline_call;
pub mod input;
pub mod learned_url;
pub mod library;
#[cfg(test)]
mod loopback_direct;
pub mod metrics;
pub mod oauth_discovery;
pub mod options;
pub mod progress;
#[cfg(test)]
mod props;
pub mod proxy;
pub mod refusal;
pub mod resource_versions;
pub mod retry;
pub mod service;
pub mod state_key;
pub mod stderr;
pub mod task_input;
pub mod trace;
pub mod transport_failure;
pub mod upstream;

pub use config::{ProxyConfig, TransportConfig, UpstreamConfig};
pub use factory::{UpstreamFactory, UpstreamTransport};
pub use health::ProxyHealth;
pub use library::{Proxy, ProxyBuilder, ProxyWorkerPlugin};
pub use proxy::{ProxyError, ProxyOptions, run_proxy, run_proxy_with_health};
