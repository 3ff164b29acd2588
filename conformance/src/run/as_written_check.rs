//! `expect.matches_upstream_as_written` (R-CON-12, R-CNF-14). The runner's MCP client is rmcp's
//! typed one, which cannot see what the connector wrote: `1` and `1.0` read the same into its model,
//! and keys it has no place for are dropped on reading. So the step's call and its tool's
//! listing are sent once more as raw JSON-RPC (no MCP SDK in between), through the connector
//! replica and straight to a twin of the upstream (the same mock program and spec, writing no
//! ledger, so later steps' invocation counts are untouched), and the JSON values compared as
//! [`as_written`] says.

use serde_json::{Map, Value};

use super::{Failure, StepEnv, setup};
use crate::{
    fixtures::{
        self, HttpUpstream, RawHttpClient, SpecSource,
        as_written::{self, RouteKeys, as_connector_lists},
        everything::RawStdioClient,
    },
    scenario::{McpCallStep, UpstreamTransport},
};

/// A raw JSON-RPC client over Streamable HTTP or a byte stream (stdio, an in-memory pipe).
pub(crate) enum RawClient {
    Http(Box<RawHttpClient>),
    Lines(Box<RawStdioClient>),
}

impl RawClient {
    /// The whole answer to a request, `{"result": ...}` or `{"error": ...}`, as written.
    pub(crate) async fn exchange(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        Ok(match self {
            RawClient::Http(c) => c.exchange(method, params).await?.response,
            RawClient::Lines(c) => c.exchange(method, params).await?.response,
        })
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> anyhow::Result<Value> {
        match self {
            RawClient::Http(c) => c.call(tool, arguments).await,
            RawClient::Lines(c) => c.call(tool, arguments).await,
        }
    }

    /// The tool named `tool` as listed.
    async fn listed(&mut self, tool: &str) -> anyhow::Result<Value> {
        let tools = match self {
            RawClient::Http(c) => c.list_tools().await?,
            RawClient::Lines(c) => c.list_tools().await?,
        };
        tools
            .into_iter()
            .find(|t| t["name"] == tool)
            .ok_or_else(|| anyhow::anyhow!("{tool} is not listed"))
    }
}

/// A twin of the scenario's mock upstream: its client, and (HTTP) the server, stopped when
/// dropped.
pub(crate) struct Twin {
    pub(crate) client: RawClient,
    _server: Option<HttpUpstream>,
}

pub(crate) async fn twin(env: &StepEnv<'_>) -> Result<Twin, Failure> {
    match env.mock {
        Some(UpstreamTransport::Stdio) => {
            let bin = match &env.options.mock_bin {
                Some(b) => b.clone(),
                None => fixtures::mock_upstream_bin().map_err(setup)?,
            };
            let mut command = tokio::process::Command::new(bin);
            command.args(&env.mock_args);
            let client = RawStdioClient::spawn(command)
                .await
                .map_err(|e| Failure::Setup(format!("starting the upstream's twin: {e:#}")))?;
            Ok(Twin {
                client: RawClient::Lines(Box::new(client)),
                _server: None,
            })
        }
        Some(UpstreamTransport::Http) => {
            let server = fixtures::serve_mock_upstream_http_with(
                SpecSource::Inline(env.spec.clone()),
                None,
                "127.0.0.1:0".parse().map_err(setup)?,
                super::features_of(&env.more_resources),
            )
            .await
            .map_err(|e| Failure::Setup(format!("starting the upstream's twin: {e:#}")))?;
            let client = RawHttpClient::initialize(&server.url).await.map_err(|e| {
                Failure::Setup(format!("a session with the upstream's twin: {e:#}"))
            })?;
            Ok(Twin {
                client: RawClient::Http(Box::new(client)),
                _server: Some(server),
            })
        }
        None => Err(Failure::Setup(
            "matches_upstream_as_written needs a mock upstream without a fault".into(),
        )),
    }
}

/// Sends `call` (with `arguments`, placeholders filled) and `tools/list` raw through the step's
/// connector replica and to a twin of the upstream, and compares what they wrote.
pub(crate) async fn check_as_written(
    env: &StepEnv<'_>,
    call: &McpCallStep,
    arguments: &Map<String, Value>,
    summary: &mut String,
) -> Result<(), Failure> {
    let mut through = env
        .replicas()?
        .raw_client(call.connector.as_deref())
        .await
        .map_err(|e| Failure::Setup(format!("a raw client of the connector: {e:#}")))?;
    let mut twin = twin(env).await?;
    let arguments = Value::Object(arguments.clone());
    let written = twin
        .client
        .call(&call.tool, arguments.clone())
        .await
        .map_err(|e| Failure::Setup(format!("calling the upstream's twin: {e:#}")))?;
    let got = through.call(&call.tool, arguments).await.map_err(|e| {
        Failure::Violated(format!("the raw tools/call through the connector: {e:#}"))
    })?;
    if let Some(why) = as_written::difference(&written, &got) {
        return Err(Failure::Violated(format!(
            "tools/call {} read raw: {why}",
            call.tool
        )));
    }
    let upstream_tool = twin
        .client
        .listed(&call.tool)
        .await
        .map_err(|e| Failure::Setup(format!("tools/list of the upstream's twin: {e:#}")))?;
    let listed = through.listed(&call.tool).await.map_err(|e| {
        Failure::Violated(format!("the raw tools/list through the connector: {e:#}"))
    })?;
    let route = env.replicas()?.route_keys(call.connector.as_deref());
    let keys = RouteKeys::of(route, &call.tool);
    if let Some(why) = as_written::difference(&as_connector_lists(&upstream_tool, keys), &listed) {
        return Err(Failure::Violated(format!(
            "{} as listed, read raw: {why}",
            call.tool
        )));
    }
    summary.push_str(", raw call and listing as the upstream wrote them");
    Ok(())
}
