//! R-CON-29: a task's times are Temporal's, read raw over Streamable HTTP from a connector in
//! front of the proxy and a slow mock tool.

use std::time::Duration;

use durable_mcp::inbound::server::{Connector, ConnectorOptions};
use durable_mcp_conformance::fixtures::{self, RawHttpClient, SpecSource, ToolSpec, UpstreamSpec};
use rmcp::model::TASKS_EXTENSION_ID;
use serde_json::{Value, json};

use crate::support::*;

const SERVICE: &str = "written";
const TOOL: &str = "slow_annotated";

/// What the upstream writes: an integer annotation (rmcp's typed model makes it `1.0`), an
/// unknown annotation key, an unknown result key and the tool's own `_meta`.
fn written() -> Value {
    json!({
        "content": [{"type": "text", "text": "slow hello",
            "annotations": {"priority": 1, "audience": ["user"], "x-weight": 2}}],
        "x-extra": {"n": 2},
        "_meta": {"example.com/count": 7}
    })
}

/// One read-only tool answering [`written`] after 1.5 s: well past the connector's
/// `task_after`, so every call through it continues as a task.
fn spec() -> UpstreamSpec {
    let tool: ToolSpec = serde_json::from_value(json!({
        "name": TOOL,
        "annotations": {"readOnlyHint": true},
        "behavior": {"kind": "written", "result": written(), "ms": 1500}
    }))
    .unwrap();
    UpstreamSpec {
        name: "written-upstream".into(),
        tools: vec![tool],
    }
}

/// `tasks/get` until the task is no longer working (at most a minute); the last answer.
async fn task_until_done(client: &mut RawHttpClient, task_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = client
            .request("tasks/get", json!({"taskId": task_id}))
            .await
            .unwrap();
        if got["status"] != "working" {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never finished: {got}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The mock upstream over HTTP, the proxy in front of it, and a connector over HTTP whose calls
/// become tasks after 200 ms for callers with the tasks extension (and, with `companion_tools`,
/// companion tasks for the others, who otherwise wait for the result).
struct Rig {
    upstream: fixtures::HttpUpstream,
    connector_url: String,
    _proxy: durable_mcp_conformance::proxy_thread::ProxyThread,
    _stop: tokio_util::sync::DropGuard,
}

async fn rig(env: &TestEnv, companion_tools: bool) -> Rig {
    let upstream = fixtures::serve_http(
        SpecSource::Inline(spec()),
        None,
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .expect("the mock upstream over HTTP");
    let proxy = start_proxy(env, vec![http_upstream(SERVICE, &upstream.url)]);
    let mut options = ConnectorOptions::new(vec![route(env, SERVICE)]);
    options.task_after = Duration::from_millis(200);
    options.companion_tools = companion_tools;
    let (server, stop) = serve_connector_http(
        Connector::new(env.client.clone(), options),
        loopback_http_options(),
    )
    .await;
    Rig {
        upstream,
        connector_url: server.url,
        _proxy: proxy,
        _stop: stop.drop_guard(),
    }
}

/// A raw session with the connector that declared the tasks extension.
async fn tasks_client(rig: &Rig) -> RawHttpClient {
    RawHttpClient::initialize_with(
        &rig.connector_url,
        json!({"extensions": {TASKS_EXTENSION_ID: {}}}),
    )
    .await
    .unwrap()
}

/// R-CON-29: a task's `createdAt` and `lastUpdatedAt` are Temporal's (the operation's schedule
/// and its last state change), not the connector's clock: the task's creation and every
/// `tasks/get` agree on `createdAt`, a second read a while later gives the same times, and
/// `createdAt <= lastUpdatedAt`.
#[tokio::test]
async fn task_times_come_from_temporal_and_hold_still() {
    let env = TestEnv::shared("task-times").await;
    let rig = rig(&env, false).await;
    let mut tasks = tasks_client(&rig).await;
    let created = tasks.call(TOOL, json!({})).await.unwrap();
    let task_id = created["taskId"].as_str().expect("a task ID").to_owned();
    let times = |task: &Value| {
        let time = |key: &str| {
            let text = task[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {task}"));
            humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{key} {text}: {e}"))
        };
        (time("createdAt"), time("lastUpdatedAt"))
    };
    let (created_at, updated_at) = times(&created);
    assert!(created_at <= updated_at, "{created}");

    // Read while it works, twice, more than a second apart (the old clock had seconds).
    let working = tasks
        .request("tasks/get", json!({"taskId": task_id}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = task_until_done(&mut tasks, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(times(&working).0, created_at, "createdAt holds: {working}");
    let (done_created, done_updated) = times(&done);
    assert_eq!(done_created, created_at, "createdAt holds: {done}");
    assert!(
        done_updated >= times(&working).1 && done_updated >= done_created,
        "lastUpdatedAt moves forward only: {working} then {done}"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = tasks
        .request("tasks/get", json!({"taskId": task_id}))
        .await
        .unwrap();
    assert_eq!(
        times(&again),
        (done_created, done_updated),
        "a closed task's times hold still: {done} then {again}"
    );
}
