//! Resource subscriptions through the durable path (R-CON-49, R-PRX-34): connector -> Temporal
//! -> proxy -> the mock upstream over stdio. A caller subscribes to one resource; the upstream
//! updates it (the mock's `touch_resource` tool) and the caller gets
//! `notifications/resources/updated` for it, never for a resource it did not subscribe to;
//! after `resources/unsubscribe` it gets none. The same through server-everything, a legacy
//! (2025-11-25) upstream that updates its subscribed resources by itself.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp::connector::server::{Connector, ConnectorOptions};
use durable_mcp_conformance::fixtures::{Ledger, ToolSpec, UpstreamSpec};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::{route_notices::StatelessPipe, support::*};

/// The resource subscribed to, and one that is not (both served by the mock's template).
const WATCHED: &str = "mock://items/1";
const OTHER: &str = "mock://items/2";
/// A resource no route serves.
const UNKNOWN: &str = "nothing://here";

/// A proxy in front of the mock serving resources with `subscribe` and a `touch_resource`
/// tool, and a connector's options for it that ask the versions every second.
struct Touching {
    options: ConnectorOptions,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
}

impl Touching {
    fn start(env: &TestEnv) -> Self {
        let touch: ToolSpec = serde_json::from_value(json!({
            "name": "touch_resource",
            "description": "Tells the resource's subscribers it was updated.",
            "annotations": {"idempotentHint": true},
            "behavior": {"kind": "touch_resource"}
        }))
        .unwrap();
        let spec = UpstreamSpec {
            name: "touching".into(),
            tools: vec![touch],
            instructions: None,
        };
        let file = temp_path("touching-spec.json");
        std::fs::write(&file, serde_json::to_vec(&spec).unwrap()).unwrap();
        let args = vec![
            "--spec".into(),
            file.to_string_lossy().into_owned(),
            "--resources-and-prompts".into(),
        ];
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let upstream = mock_stdio_upstream_with_args("touching", args, &ledger).unwrap();
        let mut options = connector_options("touching", &env.endpoint);
        options.resource_poll = Duration::from_secs(1);
        Self {
            _proxy: start_proxy(env, vec![upstream]),
            options,
        }
    }
}

/// A client that keeps the URIs of the `notifications/resources/updated` it gets.
#[derive(Clone, Default)]
struct Updates(Arc<Mutex<Vec<String>>>);

impl Updates {
    fn of(&self, uri: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|u| *u == uri).count()
    }
}

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.uri);
    }
}

/// Calls `touch_resource` for `uri`; how many upstream subscribers the mock told.
async fn touch(client: &McpClient<Updates>, uri: &str) -> Value {
    let args = json!({"uri": uri}).as_object().cloned().unwrap();
    let call = CallToolRequestParams::new("touch_resource").with_arguments(args);
    let result = client.peer().call_tool(call).await.unwrap();
    let result = serde_json::to_value(result).unwrap();
    result["structuredContent"]["told"].clone()
}

#[tokio::test]
#[allow(deprecated)] // resources/subscribe is what a session caller sends
async fn a_session_caller_subscribed_to_a_resource_learns_of_its_updates_until_it_unsubscribes() {
    let env = TestEnv::shared("resource-subscribe").await;
    let mock = Touching::start(&env);
    let updates = Updates::default();
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let client = serve_in_memory(connector, updates.clone()).await.unwrap();
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.and_then(|r| r.subscribe), Some(true));

    // One route declares resources, but a URI it does not serve is not found all the same.
    let unknown = rmcp::model::SubscribeRequestParams::new(UNKNOWN);
    let refused = client.peer().subscribe(unknown).await.unwrap_err();
    assert!(format!("{refused:?}").contains("-32002"), "{refused:?}");
    let subscribe = rmcp::model::SubscribeRequestParams::new(WATCHED);
    client.peer().subscribe(subscribe).await.unwrap();
    // The proxy subscribed upstream before the caller's subscribe was answered.
    assert_eq!(touch(&client, OTHER).await, 0, "nobody subscribed upstream");
    assert_eq!(touch(&client, WATCHED).await, 1, "the proxy's subscription");
    eventually(
        Duration::from_secs(30),
        "the caller gets notifications/resources/updated for the resource",
        || updates.of(WATCHED) > 0,
    )
    .await;
    assert_eq!(updates.of(OTHER), 0, "{:?}", updates.0.lock().unwrap());

    let unsubscribe = rmcp::model::UnsubscribeRequestParams::new(WATCHED);
    client.peer().unsubscribe(unsubscribe).await.unwrap();
    let told = updates.of(WATCHED);
    touch(&client, WATCHED).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(updates.of(WATCHED), told, "no update after unsubscribing");
    client.cancel().await.unwrap();
}

/// A library host serving two clients from clones of one connector: each client's
/// subscriptions are its own (R-CON-49).
#[tokio::test]
#[allow(deprecated)] // resources/subscribe is what a session caller sends
async fn clones_of_a_connector_keep_their_clients_subscriptions_apart() {
    let env = TestEnv::shared("resource-subscribe-clones").await;
    let mock = Touching::start(&env);
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let (a, b) = (Updates::default(), Updates::default());
    let first = serve_in_memory(connector.clone(), a.clone()).await.unwrap();
    let second = serve_in_memory(connector, b.clone()).await.unwrap();
    let subscribe = rmcp::model::SubscribeRequestParams::new(WATCHED);
    first.peer().subscribe(subscribe).await.unwrap();
    // The other client unsubscribes from what it never subscribed to: the first one's stays.
    let unsubscribe = rmcp::model::UnsubscribeRequestParams::new(WATCHED);
    second.peer().unsubscribe(unsubscribe).await.unwrap();
    touch(&first, WATCHED).await;
    eventually(
        Duration::from_secs(30),
        "the first client gets the update",
        || a.of(WATCHED) > 0,
    )
    .await;
    assert_eq!(b.of(WATCHED), 0, "the second client subscribed to nothing");
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
}

#[tokio::test]
async fn a_stateless_listener_learns_of_the_resources_it_subscribed_to() {
    let env = TestEnv::shared("resource-listen").await;
    let mock = Touching::start(&env);
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let mut caller = StatelessPipe::serve(connector);
    // No listing first: the listen asks the routes' capabilities and lists before its ack.
    let listen = json!({"notifications": {"resourceSubscriptions": [WATCHED, UNKNOWN]}});
    caller.send(2, "subscriptions/listen", listen).await;
    let acknowledged = caller.next().await;
    assert_eq!(
        acknowledged["params"]["notifications"]["resourceSubscriptions"],
        json!([WATCHED]),
        "only what a route serves is acknowledged: {acknowledged}"
    );
    // Once the stream's subscription exists (the baseline token), one hint: an update between
    // the acknowledgement and the baseline is not lost.
    let hint = caller.next().await;
    assert_eq!(hint["method"], "notifications/resources/updated", "{hint}");
    assert_eq!(hint["params"]["uri"], WATCHED, "{hint}");
    for (id, uri) in [(3, OTHER), (4, WATCHED)] {
        let call = json!({"name": "touch_resource", "arguments": {"uri": uri}});
        caller.send(id, "tools/call", call).await;
    }
    let mut seen = Vec::new();
    let notice = loop {
        let message = caller.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
        seen.push(message);
    };
    assert_eq!(notice["params"]["uri"], WATCHED, "{notice} after {seen:?}");
    assert_eq!(
        notice["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 2,
        "{notice}"
    );
}

/// server-everything's `toggle-subscriber-updates` sends `notifications/resources/updated` for
/// each subscribed URI at once and then every 5 s.
const EVERYTHING_UPDATE_PERIOD: Duration = Duration::from_secs(5);

/// The legacy path of R-PRX-34: server-everything speaks 2025-11-25 (it refuses
/// `server/discover`), so the proxy subscribes with `resources/subscribe`, and the upstream's
/// own periodic updates reach the session caller through the connector's polling (R-CON-49).
#[tokio::test]
#[allow(deprecated)] // resources/subscribe is what a session caller sends
async fn a_session_caller_learns_of_a_legacy_upstreams_resource_updates_until_it_unsubscribes() {
    use durable_mcp_conformance::fixtures::everything;
    let Some(entry) = everything::entry_or_skip().await else {
        return;
    };
    let (watched, other) = (
        "demo://resource/dynamic/text/1",
        "demo://resource/dynamic/text/2",
    );
    // A legacy upstream: the proxy's probe of 2026-07-28 fails and it takes the legacy path.
    let mut direct = everything::RawStdioClient::start(&entry).await.unwrap();
    assert_eq!(direct.initialize["protocolVersion"], "2025-11-25");
    let discover = direct.exchange("server/discover", json!({})).await.unwrap();
    assert!(
        discover.response.get("error").is_some(),
        "{}",
        discover.response
    );
    drop(direct);

    let env = TestEnv::shared("resource-subscribe-everything").await;
    let upstream = durable_mcp_conformance::harness::upstream(
        "everything-subscribe",
        durable_mcp::proxy::TransportConfig::stdio(
            "node",
            vec![entry.to_string_lossy().into_owned(), "stdio".into()],
        ),
    );
    let _proxy = start_proxy(&env, vec![upstream]);
    let mut options = connector_options("everything-subscribe", &env.endpoint);
    options.resource_poll = Duration::from_secs(1);
    let updates = Updates::default();
    let client = serve_in_memory(Connector::new(env.client.clone(), options), updates.clone())
        .await
        .unwrap();
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.and_then(|r| r.subscribe), Some(true));

    let subscribe = rmcp::model::SubscribeRequestParams::new(watched);
    client.peer().subscribe(subscribe).await.unwrap();
    let toggle = CallToolRequestParams::new("toggle-subscriber-updates");
    client.peer().call_tool(toggle).await.unwrap();
    // One update at once and one a period later, each seen within a poll or two.
    eventually(
        EVERYTHING_UPDATE_PERIOD * 2 + Duration::from_secs(5),
        "the caller gets two of the upstream's periodic updates of the resource",
        || updates.of(watched) >= 2,
    )
    .await;
    assert_eq!(updates.of(other), 0, "{:?}", updates.0.lock().unwrap());

    let unsubscribe = rmcp::model::UnsubscribeRequestParams::new(watched);
    client.peer().unsubscribe(unsubscribe).await.unwrap();
    let told = updates.of(watched);
    // The upstream keeps updating the resource; a period and two polls later none reached us.
    tokio::time::sleep(EVERYTHING_UPDATE_PERIOD + Duration::from_secs(2)).await;
    assert_eq!(updates.of(watched), told, "no update after unsubscribing");
    client.cancel().await.unwrap();
}

/// The messages of a stateless HTTP response stream, read until `until` says stop (within 30 s).
async fn read_stream(
    mut response: reqwest::Response,
    until: impl Fn(&[Value]) -> bool,
) -> (reqwest::Response, Vec<Value>) {
    let mut text = String::new();
    let mut messages = Vec::new();
    while !until(&messages) {
        let chunk = tokio::time::timeout(Duration::from_secs(30), response.chunk())
            .await
            .unwrap_or_else(|_| panic!("the stream goes on within 30 s: {messages:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream stays open: {messages:?}"));
        text.push_str(&String::from_utf8_lossy(&chunk));
        messages = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
    }
    (response, messages)
}

/// Over HTTP, a stateless listen to a fresh connector (no listing asked the routes'
/// capabilities before) is acknowledged with what the routes declare (R-CON-42, R-CON-49).
#[tokio::test]
async fn over_http_a_fresh_connector_acknowledges_a_listen_with_what_its_routes_declare() {
    let env = TestEnv::shared("resource-listen-http").await;
    let mock = Touching::start(&env);
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let listen = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "notifications": {"resourceSubscriptions": [WATCHED], "resourcesListChanged": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        },
    }});
    let response = reqwest::Client::new()
        .post(format!("http://{}/mcp", server.local_addr))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .json(&listen)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let acknowledged = |m: &Value| m["method"] == "notifications/subscriptions/acknowledged";
    let (_stream, messages) = read_stream(response, |m| m.iter().any(acknowledged)).await;
    let ack = messages.iter().find(|m| acknowledged(m)).unwrap();
    let granted = &ack["params"]["notifications"];
    assert_eq!(granted["resourceSubscriptions"], json!([WATCHED]), "{ack}");
    assert_eq!(granted["resourcesListChanged"], true, "{ack}");
    shutdown.cancel();
}
