//! In-process connector replicas, each driven by a real rmcp client over an in-memory pipe.
//!
//! The replicas of a scenario share one signing key (so any of them can serve any task of the
//! same caller) unless one asks for its own, and route to the scenario's proxy; each has its own
//! caller scope.

use std::{collections::HashMap, time::Duration};

use durable_mcp::{
    inbound::{
        route::Route,
        server::{Connector, ConnectorOptions},
        task_ref::{CallerScope, SigningKey},
    },
    nexus::OperationClient,
};
use rmcp::{
    RoleClient, ServiceExt,
    model::{ClientCapabilities, ClientConfig, Implementation},
    service::RunningService,
};

use super::SERVICE;
use crate::scenario::ConnectorDef;

/// The MCP client of one replica.
pub(crate) type McpClient = RunningService<RoleClient, ClientConfig>;

/// The scenario's connector replicas, by name.
pub(crate) struct Replicas {
    defs: Vec<ConnectorDef>,
    client: OperationClient,
    endpoint: String,
    /// The signing key of each replica: the shared one, or its own (`own_key`).
    keys: HashMap<String, SigningKey>,
    running: HashMap<String, McpClient>,
}

impl Replicas {
    /// Starts every replica in `defs`.
    pub async fn start(
        defs: &[ConnectorDef],
        client: OperationClient,
        endpoint: &str,
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
        let mut replicas = Self {
            defs: defs.to_vec(),
            client,
            endpoint: endpoint.to_owned(),
            keys,
            running: HashMap::new(),
        };
        for def in defs {
            let client = replicas.connect(def).await?;
            replicas.running.insert(def.name.clone(), client);
        }
        Ok(replicas)
    }

    async fn connect(&self, def: &ConnectorDef) -> anyhow::Result<McpClient> {
        let mut options = ConnectorOptions::new(vec![Route {
            service: SERVICE.into(),
            endpoint: self.endpoint.clone(),
        }]);
        options.task_after = Duration::from_millis(def.task_after_ms);
        options.signing_key = self
            .keys
            .get(&def.name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no signing key for {:?}", def.name))?;
        options.caller_scope = CallerScope::Process(def.caller.clone());
        let connector = Connector::new(self.client.clone(), options);
        let (server_side, client_side) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            match connector.serve(tokio::io::split(server_side)).await {
                Ok(running) => {
                    let _ = running.waiting().await;
                }
                Err(e) => tracing::warn!(error = %e, "connector replica did not start"),
            }
        });
        let capabilities = if def.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        let info = ClientConfig::new(
            capabilities,
            Implementation::new("durable-mcp-conformance", env!("CARGO_PKG_VERSION")),
        );
        Ok(info.serve(tokio::io::split(client_side)).await?)
    }

    /// The client of replica `name`, or of the first replica.
    pub fn get(&self, name: Option<&str>) -> anyhow::Result<&McpClient> {
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
            let _ = old.cancel().await;
        }
        let fresh = self.connect(&def).await?;
        self.running.insert(def.name, fresh);
        Ok(())
    }

    /// Closes every client.
    pub async fn stop(self) {
        for (_, c) in self.running {
            let _ = c.cancel().await;
        }
    }
}
