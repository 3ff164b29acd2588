//! R-CON-12 where a call's answer does not come back on its own POST: what a caller reads once
//! its call continued as a task (`tasks/get`'s `result` with the tasks extension, the companion
//! `task_result` without it), and what a resumed event stream (`Last-Event-ID`) carries, is what
//! the upstream wrote. Read raw over Streamable HTTP (no MCP SDK, which would hide a `1.0`),
//! compared field for field with a direct call to the same upstream: integers stay integers,
//! unknown keys and `_meta` survive, and only the durable layer's namespaced `_meta` keys may be
//! added. Also R-CON-29: a task's times are Temporal's.

use std::time::Duration;

use durable_mcp::connector::server::{
    Connector, ConnectorOptions,
    companion::{TASK_ID_META, TASK_RESULT},
};
use durable_mcp_conformance::fixtures::{
    self, RawHttpClient, SpecSource, ToolSpec, UpstreamSpec, as_written,
};
use rmcp::model::TASKS_EXTENSION_ID;
use serde_json::{Value, json};

use crate::support::*;

/// The Nexus service name the proxy serves the upstream under.
const UPSTREAM_SERVICE: &str = "written";
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
        instructions: None,
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
    let upstream = fixtures::serve_mock_upstream_http(
        SpecSource::Inline(spec()),
        None,
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .expect("the mock upstream over HTTP");
    let proxy = start_proxy(
        env,
        vec![http_upstream(UPSTREAM_SERVICE, &upstream.url).unwrap()],
    );
    let mut options = ConnectorOptions::new(vec![route(UPSTREAM_SERVICE, &env.endpoint)]);
    options.task_after = Duration::from_millis(200);
    options.companion_tools = companion_tools;
    let (server, stop) = serve_connector_http(
        Connector::new(env.client.clone(), options),
        loopback_http_options(),
    )
    .await
    .unwrap();
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

#[tokio::test]
async fn a_call_that_became_a_task_is_read_as_the_upstream_wrote_it() {
    let env = TestEnv::shared("task-fidelity").await;
    let rig = rig(&env, true).await;
    let mut direct = RawHttpClient::initialize(&rig.upstream.url).await.unwrap();
    let upstream_wrote = direct.call(TOOL, json!({})).await.unwrap();
    assert!(
        upstream_wrote["content"][0]["annotations"]["priority"].is_u64(),
        "the direct call is read raw: {upstream_wrote}"
    );

    // With the tasks extension: the call answers a task, and tasks/get carries the result.
    let mut tasks = tasks_client(&rig).await;
    let created = tasks.call(TOOL, json!({})).await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    let task_id = created["taskId"].as_str().expect("a task ID").to_owned();
    let done = task_until_done(&mut tasks, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    if let Some(why) = as_written::difference(&upstream_wrote, &done["result"]) {
        panic!("tasks/get's result: {why}");
    }

    // Without it, with companion tools: the call answers its task ID, and task_result the
    // call's own result.
    let mut plain = RawHttpClient::initialize(&rig.connector_url).await.unwrap();
    let continued = plain.call(TOOL, json!({})).await.unwrap();
    let task_id = continued["_meta"][TASK_ID_META]
        .as_str()
        .unwrap_or_else(|| panic!("a companion task ID: {continued}"))
        .to_owned();
    let result = plain
        .call(TASK_RESULT, json!({"task_id": task_id}))
        .await
        .unwrap();
    if let Some(why) = as_written::difference(&upstream_wrote, &result) {
        panic!("{TASK_RESULT}'s answer: {why}");
    }
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

/// The complete events in `text` (each ended by a blank line): their `id` and their `data` as
/// JSON, when they have them.
fn complete_events(text: &str) -> Vec<(Option<String>, Option<Value>)> {
    let mut events: Vec<&str> = text.split("\n\n").collect();
    events.pop(); // not ended yet
    events
        .into_iter()
        .map(|event| {
            let id = event
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .map(|id| id.trim().to_owned());
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (id, serde_json::from_str(&data.join("\n")).ok())
        })
        .collect()
}

/// Reads `response`'s event stream until `found` finds what it looks for in the complete events
/// so far (at most `within` per chunk); what was read and what was found.
async fn read_events_until<T>(
    response: &mut reqwest::Response,
    within: Duration,
    found: impl Fn(Vec<(Option<String>, Option<Value>)>) -> Option<T>,
) -> (String, T) {
    let mut read = String::new();
    loop {
        let chunk = tokio::time::timeout(within, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("nothing more within {within:?}: {read}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended first: {read}"));
        read.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(it) = found(complete_events(&read)) {
            return (read, it);
        }
    }
}

/// R-CON-12 for resumed streams: a session client that lost its POST's event stream mid-call
/// and resumes it (`GET` with `Last-Event-ID`, as SSE clients do) gets the answer as the
/// upstream wrote it, not rmcp's typed view of it (`1.0`, unknown keys dropped).
#[tokio::test]
async fn a_resumed_stream_carries_the_answer_as_the_upstream_wrote_it() {
    let env = TestEnv::shared("replay-fidelity").await;
    let rig = rig(&env, false).await;
    let mut direct = RawHttpClient::initialize(&rig.upstream.url).await.unwrap();
    let upstream_wrote = direct.call(TOOL, json!({})).await.unwrap();
    let client = RawHttpClient::initialize(&rig.connector_url).await.unwrap();
    let session = client.session().expect("a session").to_owned();
    let http = reqwest::Client::new();
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": TOOL, "arguments": {}}});
    let mut stream = http
        .post(&rig.connector_url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert!(stream.status().is_success(), "{}", stream.status());
    // Read up to the stream's first event id, then lose the stream while the call runs.
    let (seen, last_event_id) = read_events_until(&mut stream, Duration::from_secs(30), |events| {
        events.into_iter().find_map(|(id, _)| id)
    })
    .await;
    assert!(
        !seen.contains("slow hello"),
        "the answer came before the stream was lost: {seen}"
    );
    drop(stream);

    let mut replay = http
        .get(&rig.connector_url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .header("last-event-id", &last_event_id)
        .send()
        .await
        .unwrap();
    assert!(replay.status().is_success(), "{}", replay.status());
    let (_, answer) = read_events_until(&mut replay, Duration::from_secs(60), |events| {
        events
            .into_iter()
            .filter_map(|(_, data)| data)
            .find(|m| m["id"] == 41 && m.get("method").is_none())
    })
    .await;
    let result = &answer["result"];
    assert!(
        result["content"][0]["annotations"]["priority"].is_u64(),
        "{answer}"
    );
    if let Some(why) = as_written::difference(&upstream_wrote, result) {
        panic!("the resumed stream's answer: {why}");
    }
}
