//! Tool discovery, outside Activities: the upstream's `tools/list` at startup, on every
//! `list_tools` operation, and whenever the upstream sends `notifications/tools/list_changed`. Success replaces the catalog; failure keeps the last good list and
//! backs off (capped exponential), so a dead upstream is not hammered.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::watch;
use tracing::warn;

use super::{errors::Backoff, upstream::UpstreamClient};
use durable_mcp_contract::listing::tool_name;

/// How long one discovery may take: it runs inside a sync Nexus handler (~8 s deadline).
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The least time between two re-listings caused by `notifications/tools/list_changed`.
pub const LIST_CHANGED_FLOOR: Duration = Duration::from_millis(200);

/// Why no tool list can be given.
#[derive(Debug, Clone, thiserror::Error)]
#[error("upstream {service:?} has not answered tools/list yet: {reason}")]
pub struct DiscoveryError {
    pub service: String,
    pub reason: String,
}

#[derive(Default)]
struct State {
    tools: Option<Arc<Vec<serde_json::Value>>>,
    /// The upstream's `instructions` when it last listed (R-PRX-31).
    instructions: Option<String>,
    /// The waits after consecutive failures; `None` until the first (a success clears it).
    waits: Option<durable_mcp_runtime::nexus::outage::Backoff>,
    retry_at: Option<Instant>,
    last_error: Option<String>,
    /// When the failures that have not been followed by a success began.
    failing_since: Option<std::time::SystemTime>,
}

/// Where an upstream's discovery stands, for readiness (R-RUN-5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryState {
    /// Not asked yet.
    NeverListed,
    /// Its last `tools/list` answered, with this many tools.
    Listed { tools: usize },
    /// Its `tools/list` has failed since `since`; `kept` says whether an older list is served.
    Failing {
        since: std::time::SystemTime,
        kept: bool,
    },
}

/// The tool catalog of one upstream.
pub struct Discovery {
    client: Arc<UpstreamClient>,
    backoff: Backoff,
    state: Mutex<State>,
    /// The upstream's tool-list changes as seen when the catalog was made, never updated:
    /// [`Self::follow_changes`] starts from a clone of it, so a notification that arrives
    /// before it runs (the first listing, say) is still followed.
    changes: watch::Receiver<u64>,
}

impl Discovery {
    pub fn new(client: Arc<UpstreamClient>) -> Self {
        Self {
            changes: client.tool_list_changes(),
            client,
            backoff: Backoff::discovery(),
            state: Mutex::default(),
        }
    }

    /// The last good list, if any.
    pub fn current(&self) -> Option<Arc<Vec<serde_json::Value>>> {
        self.state.lock().unwrap().tools.clone()
    }

    /// The `instructions` the upstream gave with its last good list (R-PRX-31).
    pub fn instructions(&self) -> Option<String> {
        self.state.lock().unwrap().instructions.clone()
    }

    /// Where discovery stands: listed, failing since when, or never tried.
    pub fn state(&self) -> DiscoveryState {
        let state = self.state.lock().unwrap();
        match (state.failing_since, &state.tools) {
            (Some(since), tools) => DiscoveryState::Failing {
                since,
                kept: tools.is_some(),
            },
            (None, Some(tools)) => DiscoveryState::Listed { tools: tools.len() },
            (None, None) => DiscoveryState::NeverListed,
        }
    }

    /// The upstream's client, for calls that run inline (R-PRX-30).
    pub fn client(&self) -> &Arc<UpstreamClient> {
        &self.client
    }

    /// The last good definition of one tool.
    pub fn tool(&self, name: &str) -> Option<serde_json::Value> {
        let tools = self.current()?;
        tools.iter().find(|t| tool_name(t) == Some(name)).cloned()
    }

    /// Refreshes whenever the upstream sends `notifications/tools/list_changed`, until
    /// `shutdown`: every one since the catalog was made, including those sent before this
    /// runs. The upstream just spoke, so a backoff from earlier failures is skipped.
    pub async fn follow_changes(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut changes = self.changes.clone();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            // A chatty upstream gets at most one re-listing per LIST_CHANGED_FLOOR: notifications that
            // arrive meanwhile are folded into the next one.
            tokio::time::sleep(LIST_CHANGED_FLOOR).await;
            changes.borrow_and_update();
            tracing::info!(service = %self.client.service(), "upstream tool list changed; refreshing");
            self.state.lock().unwrap().retry_at = None;
            if let Err(e) = self.refresh().await {
                warn!(error = %e, "refreshing after tools/list_changed failed; keeping the last good list");
            }
        }
    }

    /// Asks the upstream again unless it is backing off; answers the freshest good list.
    /// Takes at most [`DISCOVERY_TIMEOUT`], connecting included.
    pub async fn refresh(&self) -> Result<Arc<Vec<serde_json::Value>>, DiscoveryError> {
        self.refresh_within(DISCOVERY_TIMEOUT).await
    }

    /// [`Self::refresh`] with its own bound on the time taken.
    pub async fn refresh_within(
        &self,
        timeout: Duration,
    ) -> Result<Arc<Vec<serde_json::Value>>, DiscoveryError> {
        {
            let state = self.state.lock().unwrap();
            if let Some(at) = state.retry_at
                && Instant::now() < at
            {
                return state.tools.clone().ok_or_else(|| self.error(&state));
            }
        }
        match self.client.list_tools(timeout).await {
            Ok(tools) => {
                let tools = Arc::new(tools);
                let instructions = self.client.instructions();
                let mut state = self.state.lock().unwrap();
                *state = State {
                    tools: Some(tools.clone()),
                    instructions,
                    ..State::default()
                };
                Ok(tools)
            }
            Err(e) => {
                let mut state = self.state.lock().unwrap();
                let backoff = self.backoff;
                let delay = state
                    .waits
                    .get_or_insert_with(|| backoff.start())
                    .next_delay();
                state.retry_at = Some(Instant::now() + delay);
                state.last_error = Some(e.to_string());
                state
                    .failing_since
                    .get_or_insert_with(std::time::SystemTime::now);
                warn!(service = %self.client.service(), error = %e, retry_in = ?delay,
                      keeping_last_list = state.tools.is_some(), "tool discovery failed");
                crate::metrics::global().discovery_failed(self.client.service());
                state.tools.clone().ok_or_else(|| self.error(&state))
            }
        }
    }

    fn error(&self, state: &State) -> DiscoveryError {
        DiscoveryError {
            service: self.client.service().to_owned(),
            reason: state
                .last_error
                .clone()
                .unwrap_or_else(|| "no attempt yet".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TransportConfig;

    /// A notification sent after the catalog was made but before its follower first ran (as
    /// when the follower is spawned and the first listing is quick) is followed, not lost.
    #[tokio::test]
    async fn a_change_announced_before_the_follower_runs_is_followed() {
        let transport = TransportConfig::Stdio {
            command: "/nonexistent/durable-mcp-upstream".into(),
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
            inherit_env: false,
            discover_wait: None,
        };
        let client = Arc::new(UpstreamClient::new("gone", transport));
        let discovery = Arc::new(Discovery::new(client.clone()));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let following = tokio::spawn(discovery.clone().follow_changes(shutdown.clone()));
        // On this single-threaded runtime the spawned follower has not run yet.
        client.announce_tools_changed();
        let refreshed = tokio::time::timeout(Duration::from_secs(10), async {
            while discovery.state() == DiscoveryState::NeverListed {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            refreshed.is_ok(),
            "the early notification was lost: {:?}",
            discovery.state()
        );
        shutdown.cancel();
        following.await.unwrap();
    }
}
