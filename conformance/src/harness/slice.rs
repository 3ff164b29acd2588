//! One user's slice of a dev server: its own task queue and Nexus endpoint, a connection and an
//! operation client, and the proxy started on that queue. Tests, benches, the smoke run and
//! third-party mode all set up the durable path through here, so it is the same path whoever
//! runs it (R-HAR-2).

use std::collections::BTreeMap;

use durable_mcp::{
    nexus::OperationClient,
    proxy::{ProxyOptions, TransportConfig, UpstreamConfig},
};
use temporalio_client::Connection;

use super::{DevServer, HarnessError, unique_name};
use crate::proxy_thread::{Connect, ProxyThread};

/// A task queue and a Nexus endpoint targeting it, unique on the server, with a connection.
pub struct Slice {
    pub address: String,
    /// How the proxy connects (TLS and API key for an existing server).
    pub connection_options: temporalio_client::ConnectionOptions,
    pub namespace: String,
    pub task_queue: String,
    pub endpoint: String,
    pub connection: Connection,
    pub client: OperationClient,
}

impl Slice {
    /// Creates `tq-<label>-<random>` and the endpoint `ep-<label>-<random>` on `server`, and
    /// connects on the calling runtime. `label` must be ASCII letters, digits and hyphens.
    pub async fn on(server: &DevServer, label: &str) -> Result<Self, HarnessError> {
        let task_queue = unique_name(&format!("tq-{label}"));
        let endpoint = unique_name(&format!("ep-{label}"));
        Self::named(server, &task_queue, &endpoint).await
    }

    /// [`Slice::on`] with names the caller chose (and can delete the endpoint by, R-CNF-5).
    pub async fn named(
        server: &DevServer,
        task_queue: &str,
        endpoint: &str,
    ) -> Result<Self, HarnessError> {
        let (task_queue, endpoint) = (task_queue.to_owned(), endpoint.to_owned());
        server
            .create_nexus_endpoint(&endpoint, server.namespace(), &task_queue)
            .await?;
        let connection = server.connect().await?;
        let client = OperationClient::new(connection.clone(), server.namespace());
        Ok(Self {
            address: server.address(),
            connection_options: server.connection_options(),
            namespace: server.namespace().to_owned(),
            task_queue,
            endpoint,
            connection,
            client,
        })
    }

    /// The options of a proxy on this slice's task queue (no codec), in the process or as a
    /// child.
    pub fn proxy_options(&self, max_concurrent_calls: usize) -> ProxyOptions {
        ProxyOptions {
            namespace: self.namespace.clone(),
            task_queue: self.task_queue.clone(),
            max_concurrent_calls,
            codec: None,
            // Proxies of one test process share their state key, as workers given one
            // MCP_PROXY_STATE_KEY do (R-PRX-35).
            state_keys: test_state_keys(),
            max_watched_resources: durable_mcp::proxy::resource_versions::MAX_WATCHED_URIS,
        }
    }

    /// Runs the proxy for `upstreams` on this slice's task queue until the returned handle is
    /// stopped or dropped.
    pub fn start_proxy(
        &self,
        upstreams: Vec<UpstreamConfig>,
        max_concurrent_calls: usize,
    ) -> ProxyThread {
        ProxyThread::start_with(
            Connect::Options(Box::new(self.connection_options.clone())),
            self.proxy_options(max_concurrent_calls),
            upstreams,
        )
    }
}

/// The state keys every proxy this process runs shares (a random key, made once).
pub fn test_state_keys() -> durable_mcp::proxy::state_key::StateKeys {
    static KEY: std::sync::OnceLock<durable_mcp::proxy::state_key::StateKey> =
        std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| {
        let text = test_state_key_base64();
        durable_mcp::proxy::state_key::StateKey::from_base64(&text).expect("a 32-byte key")
    });
    durable_mcp::proxy::state_key::StateKeys::shared(key.clone(), Vec::new())
}

/// This process's test state key in base64, for a proxy run as a child
/// (`MCP_PROXY_STATE_KEY`): the same as [`test_state_keys`].
pub fn test_state_key_base64() -> String {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        use base64::Engine as _;
        let bytes: Vec<u8> = uuid::Uuid::new_v4()
            .as_bytes()
            .iter()
            .chain(uuid::Uuid::new_v4().as_bytes())
            .copied()
            .collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    })
    .clone()
}

/// An upstream fronted as `service` with the proxy's default options and no overrides.
pub fn upstream(service: &str, transport: TransportConfig) -> UpstreamConfig {
    UpstreamConfig {
        service: service.to_owned(),
        transport,
        activity_options: Default::default(),
        overrides: BTreeMap::new(),
    }
}
