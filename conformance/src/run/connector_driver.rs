//! In-process connector replicas, each driven by a real rmcp client over an in-memory pipe or
//! over Streamable HTTP (`durable_mcp::connector::http::serve_connector_http` on a loopback port).
//!
//! The replicas of a scenario share one signing key (so any of them can serve any task of the
//! same caller) unless one asks for its own, and route to the scenario's proxy (or native tool
//! service); each has its own
//! caller scope.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use durable_mcp::{
    connector::local::LocalTools,
    connector::{
        server::{Connector, ConnectorOptions},
        task_ref::{CallerScope, SigningKey},
    },
    nexus::OperationClient,
    temporal::codec::RemoteCodec,
    temporal_tools::{NamespacePolicy, TemporalToolset},
};
use rmcp::{
    ClientHandler, RoleClient,
    model::{ClientConfig, ProgressNotificationParam},
    service::{NotificationContext, RunningService},
};
use tokio_util::sync::CancellationToken;

use super::as_written_check::RawClient;
use crate::{
    fixtures::{RawHttpClient, codec::CodecServer},
    kit::mcp::{
        client_config, loopback_http_options, raw_pipe_client, serve_connector_http,
        serve_in_memory, session_http_client, stateless_http_client,
    },
    scenario::{ConnectorDef, ConnectorTransport, ListKind},
};

/// The MCP client of one replica.
pub(crate) type McpClient = RunningService<RoleClient, ScenarioClient>;

/// A replica's client: its capabilities, and every `notifications/progress` it received (the
/// `progress_at_least` expectation reads them).
#[derive(Clone)]
pub(crate) struct ScenarioClient {
    info: ClientConfig,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// The level of every `notifications/message` it received (the `logs` expectation).
    pub logs: Arc<Mutex<Vec<String>>>,
    /// Its answer to every `elicitation/create` (`ConnectorDef::elicitation`).
    elicitation: Option<serde_json::Value>,
    /// Its answers to `sampling/createMessage` and `roots/list` (`ConnectorDef::sampling`,
    /// `ConnectorDef::roots`).
    sampling: Option<serde_json::Value>,
    roots: Option<serde_json::Value>,
    /// How many `notifications/{tools,resources,prompts}/list_changed` it got (R-CON-42).
    changes: Arc<[AtomicUsize; 3]>,
}

/// The scenario's `answer` to a request of `what`, as the result type the client returns.
fn scenario_answer<T: serde::de::DeserializeOwned>(
    answer: &Option<serde_json::Value>,
    what: &str,
) -> Result<T, rmcp::ErrorData> {
    serde_json::from_value(answer.clone().unwrap_or_default()).map_err(|e| {
        rmcp::ErrorData::invalid_params(format!("the scenario's {what} answer: {e}"), None)
    })
}

impl ScenarioClient {
    /// The client of a replica defined by `def`: its capabilities and its answers.
    fn of(def: &ConnectorDef) -> Self {
        let mut info = client_config(def.tasks);
        if def.elicitation.is_some() {
            info = crate::kit::mcp::elicitation_client_config(def.tasks);
        }
        if def.sampling.is_some() {
            info.capabilities.sampling = serde_json::from_value(serde_json::json!({})).ok();
        }
        if def.roots.is_some() {
            info.capabilities.roots = serde_json::from_value(serde_json::json!({})).ok();
        }
        ScenarioClient {
            info,
            progress: Arc::default(),
            logs: Arc::default(),
            elicitation: def.elicitation.clone(),
            sampling: def.sampling.clone(),
            roots: def.roots.clone(),
            changes: Arc::default(),
        }
    }

    /// How many `notifications/<kind>/list_changed` it got so far.
    pub fn changes(&self, kind: ListKind) -> usize {
        self.changes[kind as usize].load(Ordering::SeqCst)
    }

    fn changed(&self, kind: ListKind) {
        self.changes[kind as usize].fetch_add(1, Ordering::SeqCst);
    }
}

impl ClientHandler for ScenarioClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        scenario_answer(&self.elicitation, "elicitation")
    }

    #[allow(deprecated)] // sampling (SEP-2577 deprecates it; R-CON-43 still relays it)
    async fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        scenario_answer(&self.sampling, "sampling")
    }

    #[allow(deprecated)] // roots (SEP-2577 deprecates them; R-CON-43 still relays them)
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        scenario_answer(&self.roots, "roots")
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Tools);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Resources);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Prompts);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; R-CON-13 still serves it)
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level).unwrap_or_default();
        self.logs
            .lock()
            .unwrap()
            .push(level.as_str().unwrap_or_default().to_owned());
    }
}

/// The scenario's connector replicas, by name.
pub(crate) struct Replicas {
    defs: Vec<ConnectorDef>,
    client: OperationClient,
    endpoint: String,
    /// The Nexus service every replica routes to.
    service: String,
    /// The signing key of each replica: the shared one, or its own (`own_key`).
    keys: HashMap<String, SigningKey>,
    running: HashMap<String, Replica>,
    /// The encrypting codec server of the replicas with `codec = true` (R-PAY-6, R-OPS-7).
    codec: Option<CodecServer>,
}

/// One running replica: its client, what stops an HTTP server, and how a raw client reaches it.
struct Replica {
    client: McpClient,
    server: Option<CancellationToken>,
    raw: RawTarget,
}

/// How a raw JSON-RPC client (no MCP SDK) reaches a replica: its HTTP URL, or, for a pipe
/// replica, the same connector served once more over a fresh in-memory pipe.
enum RawTarget {
    Url(String),
    Pipe(Connector),
}

impl Replica {
    async fn stop(self) {
        let _ = self.client.cancel().await;
        if let Some(server) = self.server {
            server.cancel();
        }
    }
}

impl Replicas {
    /// The Temporal operations toolset of replica `def`, limited to the run's namespace
    /// (R-OPS-2), encoding through the runner's codec server and decoding what it shows when
    /// `def` says so (R-OPS-7).
    fn temporal_tools(&self, def: &ConnectorDef) -> anyhow::Result<Arc<dyn LocalTools>> {
        let namespace = self.client.namespace().to_owned();
        let codec = match (&self.codec, def.codec) {
            (Some(server), true) => Some(RemoteCodec::new(&server.url, namespace.clone())?),
            _ => None,
        };
        let mut tools = TemporalToolset::new(
            self.client.connection().clone(),
            namespace.clone(),
            NamespacePolicy::default_only(&namespace),
            codec,
        );
        if def.temporal_tools_decode {
            tools = tools.with_decoding();
        }
        Ok(Arc::new(tools))
    }

    /// Starts every replica in `defs`.
    pub async fn start(
        defs: &[ConnectorDef],
        client: OperationClient,
        endpoint: &str,
        service: &str,
    ) -> anyhow::Result<Self> {
        let shared = SigningKey::try_generate()?;
        let mut keys = HashMap::new();
        for def in defs {
            let key = if def.own_key {
                SigningKey::try_generate()?
            } else {
                shared.clone()
            };
            keys.insert(def.name.clone(), key);
        }
        let codec = match defs.iter().any(|d| d.codec) {
            true => Some(CodecServer::start(([127, 0, 0, 1], 0).into(), None, None).await?),
            false => None,
        };
        let mut replicas = Self {
            codec,
            defs: defs.to_vec(),
            client,
            endpoint: endpoint.to_owned(),
            service: service.to_owned(),
            keys,
            running: HashMap::new(),
        };
        for def in defs {
            let client = replicas.connect(def).await?;
            replicas.running.insert(def.name.clone(), client);
        }
        Ok(replicas)
    }

    async fn connect(&self, def: &ConnectorDef) -> anyhow::Result<Replica> {
        let mut options = ConnectorOptions::new(vec![def.route_to(&self.service, &self.endpoint)?]);
        options.task_after = Duration::from_millis(def.task_after_ms);
        options.signing_key = self
            .keys
            .get(&def.name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no signing key for {:?}", def.name))?;
        options.caller_scope = CallerScope::Process(def.caller.clone());
        options.companion_tools = def.companion_tools;
        if let Some(ms) = def.list_cache_ms {
            options.list_cache = Duration::from_millis(ms);
        }
        if let Some(ms) = def.list_changed_poll_ms {
            options.list_changed_poll = Duration::from_millis(ms);
        }
        if let Some(cap) = def.limits.max_in_flight_per_caller {
            options.max_in_flight_per_caller = cap;
        }
        // The Temporal operations toolset, limited to the run's namespace (R-OPS-2).
        let local = match def.temporal_tools {
            true => Some(self.temporal_tools(def)?),
            false => None,
        };
        let connector = Connector::with_local_tools(self.client.clone(), options, local);
        let info = ScenarioClient::of(def);
        if def.transport == ConnectorTransport::Pipe {
            let raw = RawTarget::Pipe(connector.clone());
            return Ok(Replica {
                client: serve_in_memory(connector, info).await?,
                server: None,
                raw,
            });
        }
        let mut http = loopback_http_options();
        if let Some(cap) = def.limits.http_max_connections_per_address {
            http.limits.max_per_address = cap;
        }
        http.trusted_proxies = trusted_proxies(&def.limits.trusted_proxies)?;
        let (server, stop) = serve_connector_http(connector, http).await?;
        let client = if def.transport == ConnectorTransport::HttpStateless {
            stateless_http_client(&server.url, info).await?
        } else {
            session_http_client(&server.url, info).await?
        };
        Ok(Replica {
            client,
            server: Some(stop),
            raw: RawTarget::Url(server.url.clone()),
        })
    }

    /// The client of replica `name`, or of the first replica.
    pub fn get(&self, name: Option<&str>) -> anyhow::Result<&McpClient> {
        self.replica(name).map(|r| &r.client)
    }

    /// A raw JSON-RPC client (no MCP SDK, no capabilities) of replica `name`, or of the first:
    /// a session of its own over HTTP, or the same connector served over a fresh pipe.
    pub async fn raw_client(&self, name: Option<&str>) -> anyhow::Result<RawClient> {
        match &self.replica(name)?.raw {
            RawTarget::Url(url) => Ok(RawClient::Http(Box::new(
                RawHttpClient::initialize(url).await?,
            ))),
            RawTarget::Pipe(connector) => Ok(RawClient::Lines(Box::new(
                raw_pipe_client(connector.clone()).await?,
            ))),
        }
    }

    /// The connector of pipe replica `name` (or of the first), to serve over a fresh pipe.
    pub fn pipe_connector(&self, name: Option<&str>) -> anyhow::Result<Connector> {
        match &self.replica(name)?.raw {
            RawTarget::Pipe(connector) => Ok(connector.clone()),
            RawTarget::Url(_) => anyhow::bail!("the connector is served over HTTP, not a pipe"),
        }
    }

    /// The URL of replica `name` (or of the first), served over HTTP.
    pub fn url(&self, name: Option<&str>) -> anyhow::Result<&str> {
        match &self.replica(name)?.raw {
            RawTarget::Url(url) => Ok(url),
            RawTarget::Pipe(_) => anyhow::bail!("the connector is not served over HTTP"),
        }
    }

    /// A fresh session client of replica `name` (or of the first), with the replica's client
    /// capabilities, whose connections come from `from`, its requests carrying
    /// `forwarded_for` as `X-Forwarded-For` when given (R-CON-50).
    pub async fn client_from(
        &self,
        name: Option<&str>,
        from: std::net::IpAddr,
        forwarded_for: Option<&str>,
    ) -> anyhow::Result<McpClient> {
        let url = self.url(name)?.to_owned();
        let def = self.def(name)?;
        let info = ScenarioClient::of(def);
        crate::kit::mcp::session_http_client_from(&url, (from, forwarded_for), info).await
    }

    /// The extra `--route` keys of the replica `name` (the first when `None`), if any.
    pub(crate) fn route_keys(
        &self,
        name: Option<&str>,
    ) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.def(name).ok()?.route.as_ref()
    }

    fn def(&self, name: Option<&str>) -> anyhow::Result<&ConnectorDef> {
        match name {
            Some(n) => self.defs.iter().find(|d| d.name == n),
            None => self.defs.first(),
        }
        .ok_or_else(|| anyhow::anyhow!("no connector named {name:?}"))
    }

    fn replica(&self, name: Option<&str>) -> anyhow::Result<&Replica> {
        let name = match name {
            Some(n) => n,
            None => self
                .defs
                .first()
                .map(|d| d.name.as_str())
                .ok_or_else(|| anyhow::anyhow!("the scenario has no connectors"))?,
        };
        self.running
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("no connector named {name:?}"))
    }

    /// Stops replica `name` (its client and server) and starts a fresh one with the same
    /// options: nothing of the old one's memory survives.
    pub async fn restart(&mut self, name: &str) -> anyhow::Result<()> {
        let def = self
            .defs
            .iter()
            .find(|d| d.name == name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no connector named {name:?}"))?;
        if let Some(old) = self.running.remove(name) {
            old.stop().await;
        }
        let fresh = self.connect(&def).await?;
        self.running.insert(def.name, fresh);
        Ok(())
    }

    /// Closes every client.
    pub async fn stop(self) {
        for (_, replica) in self.running {
            replica.stop().await;
        }
    }
}

/// A replica's `--trusted-proxy` ranges (R-CON-50), read as the flag reads them.
fn trusted_proxies(
    ranges: &[String],
) -> anyhow::Result<durable_mcp::connector::forwarded::TrustedProxies> {
    use durable_mcp::connector::forwarded::{TrustedProxies, parse_trusted_proxy};
    let nets = ranges
        .iter()
        .map(|r| parse_trusted_proxy(r).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    Ok(TrustedProxies::new(nets, Default::default()))
}
