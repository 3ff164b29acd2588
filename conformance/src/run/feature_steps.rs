//! The steps for what an upstream offers beside its tools and for list changes (R-PRX-32,
//! R-CON-42, R-CON-45, R-CON-47): `request` (a resource, prompt or completion request read raw
//! through a connector, compared with a twin of the upstream or a snapshot), `add_tool` and
//! `more_resources` (the mock changes), and `list_changed` (a session caller is told).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use serde_json::{Value, json};

use super::{
    Failure, StepEnv,
    as_written_check::{RawClient, twin},
    checks::check_snapshot,
    setup,
};
use crate::{
    fixtures::as_written,
    scenario::{AddTool, Expect, ExpectedOutcome, ListChanged, ListKind, Listen, RequestStep},
};

/// Sends `request`'s request through the step's replica (every page of a list, folded) and
/// checks the answer as `expect` says.
pub(crate) async fn run_request(
    env: &StepEnv<'_>,
    request: &RequestStep,
    expect: &Expect,
) -> Result<String, Failure> {
    let mut through = env.raw_client(request.connector.as_deref()).await?;
    let got = answer(&mut through, request).await.map_err(|e| {
        Failure::Violated(format!("{} through the connector: {e:#}", request.method))
    })?;
    let mut summary = match (&got.get("error"), expect.outcome) {
        (None, ExpectedOutcome::Result) => "result".to_owned(),
        (Some(error), ExpectedOutcome::Error) => {
            check_error(error, expect)?;
            "error".to_owned()
        }
        _ => {
            return Err(Failure::Violated(format!(
                "expected {}, the connector answered {got}",
                expect.outcome
            )));
        }
    };
    if expect.matches_upstream_as_written {
        let mut twin = twin(env).await?;
        let written = answer(&mut twin.client, request).await.map_err(|e| {
            Failure::Setup(format!("{} to the upstream's twin: {e:#}", request.method))
        })?;
        if let Some(why) = as_written::difference(&written, &got) {
            return Err(Failure::Violated(format!(
                "{} read raw: {why}",
                request.method
            )));
        }
        summary.push_str(", as the upstream wrote it");
    }
    if let Some(result) = got.get("result") {
        check_snapshot(env.options, expect, result, &mut summary)?;
    }
    Ok(summary)
}

/// `expect.error_code` and `expect.message_contains` against a JSON-RPC error.
fn check_error(error: &Value, expect: &Expect) -> Result<(), Failure> {
    if let Some(code) = expect.error_code
        && error["code"] != json!(code)
    {
        return Err(Failure::Violated(format!(
            "expected error {code}, got {error}"
        )));
    }
    if let Some(text) = &expect.message_contains
        && !error["message"].as_str().unwrap_or_default().contains(text)
    {
        return Err(Failure::Violated(format!(
            "expected an error saying {text:?}, got {error}"
        )));
    }
    Ok(())
}

/// The answer (`{"result": ...}` or `{"error": ...}`) to `request` from `client`; a list's
/// pages folded: the first page's fields, every page's items, no `nextCursor`.
async fn answer(client: &mut RawClient, request: &RequestStep) -> anyhow::Result<Value> {
    let params = Value::Object(request.params.clone());
    let mut first = client.exchange(&request.method, params.clone()).await?;
    let Some(items) = request.items() else {
        return Ok(first);
    };
    let mut cursor = first["result"]
        .as_object_mut()
        .and_then(|r| r.remove("nextCursor"));
    let mut pages = 1;
    while let Some(Value::String(next)) = cursor {
        anyhow::ensure!(pages < 100, "more than 100 pages");
        pages += 1;
        let mut params = params.clone();
        params["cursor"] = json!(next);
        let page = client.exchange(&request.method, params).await?;
        let more = page["result"][items]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(listed) = first["result"][items].as_array_mut() {
            listed.extend(more);
        }
        cursor = page["result"].get("nextCursor").cloned();
    }
    Ok(first)
}

/// Rewrites the stdio mock's spec file with a copy of `add.like` named `add.name`.
pub(crate) fn add_tool(env: &mut StepEnv<'_>, add: &AddTool) -> Result<String, Failure> {
    let file = env
        .spec_file
        .clone()
        .ok_or_else(|| Failure::Setup("add_tool needs a stdio upstream".into()))?;
    let mut tool = env
        .spec
        .tool(&add.like)
        .cloned()
        .ok_or_else(|| Failure::Setup(format!("no tool {:?}", add.like)))?;
    tool.name = add.name.clone();
    env.spec.tools.push(tool);
    env.spec.write_json(&file).map_err(setup)?;
    Ok(format!("the upstream gained tool {}", add.name))
}

/// Writes the mock's `--more-resources` file.
pub(crate) fn more_resources(env: &StepEnv<'_>, resources: &[Value]) -> Result<String, Failure> {
    let file = env
        .more_resources
        .as_ref()
        .ok_or_else(|| Failure::Setup("more_resources needs resources_and_prompts".into()))?;
    let bytes = serde_json::to_vec(resources).map_err(setup)?;
    std::fs::write(file, bytes).map_err(setup)?;
    Ok(format!(
        "the upstream lists {} more resource(s)",
        resources.len()
    ))
}

/// Waits until the replica's client was told `wait.kind`'s list changed `wait.count` times,
/// then (with `then_lists`) lists that kind and looks for the item.
pub(crate) async fn list_changed(env: &StepEnv<'_>, wait: &ListChanged) -> Result<String, Failure> {
    let replicas = env.replicas()?;
    let client = replicas.get(wait.connector.as_deref()).map_err(setup)?;
    let within = Duration::from_millis(wait.within_ms.unwrap_or(30_000));
    let started = Instant::now();
    let listener = match (wait.stateless, &env.listener) {
        (true, Some(told)) => Some(told.clone()),
        (true, None) => return Err(Failure::Setup("no listen step opened a stream".into())),
        (false, _) => None,
    };
    let who = if wait.stateless {
        "the stateless listener"
    } else {
        "the caller"
    };
    let told = loop {
        let told = match &listener {
            Some(told) => told[wait.kind as usize].load(Ordering::SeqCst),
            None => client.service().changes(wait.kind),
        };
        if told >= wait.count || started.elapsed() > within {
            break told;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if told < wait.count {
        return Err(Failure::Violated(format!(
            "{who} got {told} notifications/{}/list_changed within {} ms, not {}",
            wait.kind.as_str(),
            within.as_millis(),
            wait.count
        )));
    }
    let mut summary = format!(
        "{who} told {told}x notifications/{}/list_changed after {} ms",
        wait.kind.as_str(),
        started.elapsed().as_millis()
    );
    if let Some(item) = &wait.then_lists {
        let peer = client.peer();
        let listed = match wait.kind {
            ListKind::Tools => peer.list_all_tools().await.map(|l| {
                l.into_iter()
                    .map(|t| t.name.to_string())
                    .collect::<Vec<_>>()
            }),
            ListKind::Resources => peer
                .list_all_resources()
                .await
                .map(|l| l.into_iter().map(|r| r.uri).collect()),
            ListKind::Prompts => peer
                .list_all_prompts()
                .await
                .map(|l| l.into_iter().map(|p| p.name).collect()),
        }
        .map_err(|e| Failure::Violated(format!("listing {} again: {e}", wait.kind.as_str())))?;
        if !listed.contains(item) {
            return Err(Failure::Violated(format!(
                "{} listed after the change: {listed:?}, without {item:?}",
                wait.kind.as_str()
            )));
        }
        summary.push_str(&format!(", then lists {item}"));
    }
    Ok(summary)
}

/// How many `notifications/{tools,resources,prompts}/list_changed` a listener got.
pub(crate) type Told = Arc<[AtomicUsize; 3]>;

/// The `subscriptions/listen` params naming `kinds` (`toolsListChanged`, ...).
fn listen_params(kinds: &[ListKind]) -> Value {
    let mut asked = serde_json::Map::new();
    for kind in kinds {
        asked.insert(format!("{}ListChanged", kind.as_str()), json!(true));
    }
    json!({"notifications": asked, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "durable-mcp-conformance", "version": "0"},
    }})
}

/// The kind a `notifications/<kind>/list_changed` of stream `id` names, if `message` is one.
fn told_kind(message: &Value, id: u64) -> Option<ListKind> {
    if message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] != json!(id) {
        return None;
    }
    [ListKind::Tools, ListKind::Resources, ListKind::Prompts]
        .into_iter()
        .find(|k| message["method"] == format!("notifications/{}/list_changed", k.as_str()))
}

/// Opens a 2026-07-28 `subscriptions/listen` stream on a fresh pipe to the replica, waits for its
/// acknowledgement, and counts the list changes that reach it until the scenario ends.
pub(crate) async fn listen(env: &mut StepEnv<'_>, step: &Listen) -> Result<String, Failure> {
    const ID: u64 = 7;
    let connector = env
        .replicas()?
        .pipe_connector(step.connector.as_deref())
        .map_err(setup)?;
    let (read, mut write) = tokio::io::split(crate::kit::mcp::pipe(connector, 1 << 20));
    let request = json!({"jsonrpc": "2.0", "id": ID, "method": "subscriptions/listen",
        "params": listen_params(&step.kinds)});
    let line = format!("{request}\n");
    write.write_all(line.as_bytes()).await.map_err(setup)?;
    let mut lines = tokio::io::BufReader::new(read).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| Failure::Violated("subscriptions/listen: no answer within 30 s".into()))?
        .map_err(setup)?
        .unwrap_or_default();
    let acknowledged: Value = serde_json::from_str(&first).unwrap_or(Value::Null);
    if acknowledged["method"] != "notifications/subscriptions/acknowledged" {
        return Err(Failure::Violated(format!(
            "subscriptions/listen: expected notifications/subscriptions/acknowledged, got {first}"
        )));
    }
    let told: Told = Arc::default();
    let counting = told.clone();
    let listening = tokio::spawn(async move {
        let _write = write; // the stream stays open while the pipe's write half lives
        while let Ok(Some(line)) = lines.next_line().await {
            let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(kind) = told_kind(&message, ID) {
                counting[kind as usize].fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    env.background.push(listening.abort_handle());
    env.listener = Some(told);
    Ok(format!(
        "listening, acknowledged: {}",
        acknowledged["params"]
    ))
}
