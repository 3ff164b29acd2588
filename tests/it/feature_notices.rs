//! A change of an upstream's resources reaches the connector's callers (R-CON-42): a session
//! gets `notifications/resources/list_changed`, and a 2026-07-28 stateless listener that asked
//! for `resourcesListChanged` gets it on its `subscriptions/listen` stream.

use std::sync::atomic::{AtomicUsize, Ordering};

use durable_mcp::connector::server::{Connector, ConnectorOptions};
use durable_mcp_conformance::fixtures::Ledger;
use serde_json::json;

use crate::{route_notices::StatelessPipe, support::*};

/// A proxy in front of the mock serving resources as `featured`, whose resources change when
/// [`ChangingResources::add_a_resource`] writes its `--more-resources` file, and a connector's
/// options for it that re-list every second.
struct ChangingResources {
    file: std::path::PathBuf,
    options: ConnectorOptions,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
}

/// The resource the change adds.
const ADDED: &str = "mock://added/1";

impl ChangingResources {
    fn start(env: &TestEnv) -> Self {
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let file = temp_path("more-resources.json");
        std::fs::write(&file, "[]").unwrap();
        let args = vec![
            "--resources-and-prompts".into(),
            "--more-resources".into(),
            file.to_string_lossy().into_owned(),
        ];
        let upstream = mock_stdio_upstream_with_args("featured", args, &ledger).unwrap();
        let mut options = connector_options("featured", &env.endpoint);
        options.list_cache = std::time::Duration::from_secs(1);
        options.list_changed_poll = std::time::Duration::from_secs(1);
        Self {
            _proxy: start_proxy(env, vec![upstream]),
            file,
            options,
        }
    }

    fn add_a_resource(&self) {
        let added = json!([{"uri": ADDED, "name": "added"}]);
        std::fs::write(&self.file, added.to_string()).unwrap();
    }
}

/// A client that counts the `notifications/resources/list_changed` it gets.
#[derive(Clone, Default)]
struct ResourceChanges(std::sync::Arc<AtomicUsize>);

impl rmcp::ClientHandler for ResourceChanges {
    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_session_caller_learns_that_the_upstreams_resources_changed() {
    let env = TestEnv::shared("feature-list-changed").await;
    let mock = ChangingResources::start(&env);
    let counter = ResourceChanges::default();
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let client = serve_in_memory(connector, counter.clone()).await.unwrap();
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.and_then(|r| r.list_changed), Some(true));
    assert_eq!(caps.prompts.and_then(|p| p.list_changed), Some(true));
    let before = client.peer().list_all_resources().await.unwrap();
    assert!(!before.iter().any(|r| r.uri == ADDED), "{before:?}");

    mock.add_a_resource();
    eventually(
        std::time::Duration::from_secs(30),
        "the caller gets notifications/resources/list_changed",
        || counter.0.load(Ordering::SeqCst) > 0,
    )
    .await;
    let after = client.peer().list_all_resources().await.unwrap();
    assert!(after.iter().any(|r| r.uri == ADDED), "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_stateless_listener_learns_that_the_upstreams_resources_changed() {
    let env = TestEnv::shared("feature-listen").await;
    let mock = ChangingResources::start(&env);
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let mut caller = StatelessPipe::serve(connector);
    // The first request of a fresh replica: the stream offers resources all the same.
    let listen = json!({"notifications": {"resourcesListChanged": true}});
    caller.send(2, "subscriptions/listen", listen).await;
    let acknowledged = caller.next().await;
    assert_eq!(
        acknowledged["params"]["notifications"]["resourcesListChanged"], true,
        "{acknowledged}"
    );
    // A listing before the change, which a first listing is not (the change is from it).
    caller.send(1, "resources/list", json!({})).await;
    let listed = caller.next().await;
    assert_eq!(listed["id"], 1, "{listed}");
    assert!(
        !listed["result"]["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["uri"] == ADDED)),
        "{listed}"
    );

    mock.add_a_resource();
    let notice = caller.next().await;
    assert_eq!(
        notice["method"], "notifications/resources/list_changed",
        "{notice}"
    );
    assert_eq!(
        notice["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 2,
        "{notice}"
    );
}
