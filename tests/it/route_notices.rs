//! What an upstream tells its callers beside its tools, through the proxy and the connector:
//! its `instructions` (R-PRX-31, R-NXC-7, R-CON-41), and that its tools changed (R-CON-42).

use durable_mcp::connector::server::{Connector, ConnectorOptions};
use durable_mcp_conformance::fixtures::{Ledger, UpstreamSpec};

use crate::support::*;

/// The standard mock's spec, named `name`, with `instructions`.
fn instructed(name: &str, instructions: Option<&str>) -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    spec.name = name.into();
    spec.instructions = instructions.map(str::to_owned);
    spec
}

#[tokio::test]
async fn upstream_instructions_reach_the_connectors_callers_merged_per_route() {
    let env = TestEnv::shared("route-instructions").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let alpha = instructed("alpha", Some("Call echo before slow.\nNever call crash."));
    let _proxy = start_proxy(
        &env,
        vec![
            mock_stdio_upstream_with_spec("alpha", &alpha, &ledger),
            mock_stdio_upstream_with_spec("beta", &instructed("beta", None), &ledger),
            mock_stdio_upstream_with_spec("gamma", &instructed("gamma", Some("G.")), &ledger),
        ],
    );

    // One route: the upstream's text as it wrote it.
    let one = client_for(connector_for(&env, "alpha")).await.unwrap();
    let info = one.peer_info().expect("the connector answered initialize");
    assert_eq!(
        info.instructions.as_deref(),
        Some("Call echo before slow.\nNever call crash.")
    );
    one.cancel().await.unwrap();

    // Several routes: one section per route that has instructions, in route order.
    let routes = ["gamma", "beta", "alpha"]
        .iter()
        .map(|s| route(s, &env.endpoint))
        .collect();
    let many = client_for(Connector::new(
        env.client.clone(),
        ConnectorOptions::new(routes),
    ))
    .await
    .unwrap();
    let info = many.peer_info().expect("the connector answered initialize");
    assert_eq!(
        info.instructions.as_deref(),
        Some("## gamma\nG.\n\n## alpha\nCall echo before slow.\nNever call crash.")
    );
    many.cancel().await.unwrap();

    // A route whose upstream gives none: no instructions at all.
    let none = client_for(connector_for(&env, "beta")).await.unwrap();
    assert_eq!(none.peer_info().unwrap().instructions, None);
    none.cancel().await.unwrap();
}

/// A client that counts the `notifications/tools/list_changed` it gets.
#[derive(Clone, Default)]
struct ChangeCounter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for ChangeCounter {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ChangeCounter {
    /// Waits (at most 30 s) until `who` got a `notifications/tools/list_changed`.
    async fn wait_for_one(&self, who: &str) {
        let what = format!("{who} gets notifications/tools/list_changed");
        eventually(std::time::Duration::from_secs(30), &what, || {
            self.0.load(std::sync::atomic::Ordering::SeqCst) > 0
        })
        .await;
    }
}

/// A proxy in front of the standard mock as `mock`, whose tools change when
/// [`ChangingMock::add_a_tool`] rewrites its spec file, and a connector's options for it that
/// re-list every second.
struct ChangingMock {
    spec_file: std::path::PathBuf,
    options: ConnectorOptions,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
}

impl ChangingMock {
    fn start(env: &TestEnv) -> Self {
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let spec_file = temp_path("spec.json");
        std::fs::write(&spec_file, serde_json::to_vec(&Self::base()).unwrap()).unwrap();
        let args = vec!["--spec".into(), spec_file.to_string_lossy().into_owned()];
        let upstream = mock_stdio_upstream_with_args("mock", args, &ledger).unwrap();
        let mut options = connector_options("mock", &env.endpoint);
        options.list_cache = std::time::Duration::from_secs(1);
        options.list_changed_poll = std::time::Duration::from_secs(1);
        Self {
            _proxy: start_proxy(env, vec![upstream]),
            spec_file,
            options,
        }
    }

    /// The standard mock, with instructions.
    fn base() -> UpstreamSpec {
        instructed("mock", Some("The mock changes."))
    }

    /// The upstream gains a tool `added` (the mock announces it, as a real server would).
    fn add_a_tool(&self) {
        let mut changed = Self::base();
        let mut added = changed.tools[0].clone();
        added.name = "added".into();
        changed.tools.push(added);
        std::fs::write(&self.spec_file, serde_json::to_vec(&changed).unwrap()).unwrap();
    }
}

#[tokio::test]
async fn a_session_caller_learns_that_the_upstreams_tools_changed_without_reconnecting() {
    let env = TestEnv::shared("route-list-changed").await;
    let mock = ChangingMock::start(&env);
    let options = mock.options.clone();
    let counter = ChangeCounter::default();
    let client = serve_in_memory(Connector::new(env.client.clone(), options), counter.clone())
        .await
        .unwrap();
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.tools.and_then(|t| t.list_changed), Some(true));
    let before = client.peer().list_all_tools().await.unwrap();
    assert!(!before.iter().any(|t| t.name == "added"));

    mock.add_a_tool();
    counter.wait_for_one("the caller").await;
    let after = client.peer().list_all_tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "added"), "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    client.cancel().await.unwrap();
}

/// A raw 2026-07-28 request (no `initialize`): its version, capabilities and client in `_meta`.
fn stateless(id: u64, method: &str, mut params: serde_json::Value) -> String {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    });
    let request =
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    format!("{request}\n")
}

/// A connector served on a pipe, spoken to with raw 2026-07-28 requests, line by line.
pub(crate) struct StatelessPipe {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl StatelessPipe {
    pub(crate) fn serve(connector: Connector) -> Self {
        use tokio::io::AsyncBufReadExt;
        let (read, write) = tokio::io::split(pipe(connector, 1 << 20));
        let lines = tokio::io::BufReader::new(read).lines();
        Self { lines, write }
    }

    /// Sends request `id`.
    pub(crate) async fn send(&mut self, id: u64, method: &str, params: serde_json::Value) {
        use tokio::io::AsyncWriteExt;
        let line = stateless(id, method, params);
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next message the connector writes (within 30 s).
    pub(crate) async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("the connector writes within 30 s")
            .unwrap()
            .expect("the connector keeps the pipe open");
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test]
async fn a_stateless_listener_learns_that_the_upstreams_tools_changed() {
    let env = TestEnv::shared("route-listen").await;
    let mock = ChangingMock::start(&env);
    let options = mock.options.clone();
    let mut caller = StatelessPipe::serve(Connector::new(env.client.clone(), options));

    caller.send(1, "tools/list", serde_json::json!({})).await;
    let listed = caller.next().await;
    assert_eq!(listed["id"], 1, "{listed}");
    let before = listed["result"]["tools"].as_array().unwrap().len();
    let listen = serde_json::json!({"notifications": {"toolsListChanged": true}});
    caller.send(2, "subscriptions/listen", listen).await;
    let acknowledged = caller.next().await;
    assert_eq!(
        acknowledged["method"], "notifications/subscriptions/acknowledged",
        "{acknowledged}"
    );
    assert_eq!(
        acknowledged["params"]["notifications"]["toolsListChanged"],
        true
    );

    mock.add_a_tool();
    let notice = caller.next().await;
    assert_eq!(
        notice["method"], "notifications/tools/list_changed",
        "{notice}"
    );
    assert_eq!(
        notice["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 2,
        "{notice}"
    );
    caller.send(3, "tools/list", serde_json::json!({})).await;
    let relisted = caller.next().await;
    assert_eq!(
        relisted["result"]["tools"].as_array().unwrap().len(),
        before + 1
    );
}

#[tokio::test]
async fn over_http_a_session_learns_of_changes_and_discover_carries_the_instructions() {
    let env = TestEnv::shared("route-notices-http").await;
    let mock = ChangingMock::start(&env);
    let connector = Connector::new(env.client.clone(), mock.options.clone());
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", server.local_addr);
    let counter = ChangeCounter::default();
    let session = session_http_client(&url, counter.clone()).await.unwrap();
    let before = session.peer().list_all_tools().await.unwrap();
    // A stateless caller's server/discover carries the route's instructions.
    let stateless = stateless_http_client(&url, ()).await.unwrap();
    assert_eq!(
        stateless.peer_info().unwrap().instructions.as_deref(),
        Some("The mock changes.")
    );
    mock.add_a_tool();
    counter.wait_for_one("the HTTP session").await;
    let after = session.peer().list_all_tools().await.unwrap();
    assert_eq!(after.len(), before.len() + 1);
    let _ = session.cancel().await;
    let _ = stateless.cancel().await;
    shutdown.cancel();
}
