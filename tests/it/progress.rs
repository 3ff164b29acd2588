//! Upstream progress reaches the connector's caller: the mock upstream reports progress, the
//! proxy's activity records it in its heartbeats, and the connector forwards it as MCP
//! `notifications/progress` to a waiting caller and as the status message of a task.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp_conformance::fixtures::{Behavior, Ledger, ToolSpec, UpstreamSpec};
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        CallToolRequest, CallToolResponse, ClientRequest, GetTaskParams, ProgressNotificationParam,
        ServerResult, TaskStatus,
    },
    service::{NotificationContext, PeerRequestOptions},
};
use serde_json::json;

use crate::support::*;

/// A client that keeps every progress notification it gets.
#[derive(Clone, Default)]
struct ProgressRecorder {
    seen: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for ProgressRecorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.lock().unwrap().push(params);
    }
}

/// The standard mock plus `steps`: three progress notifications 2 s apart, then an echo; and
/// `burst`: five progress notifications written back to back, the last just before its result.
fn progress_spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(ToolSpec::read_only(
        "burst",
        "reports progress five times at once, then returns",
        Behavior::Progress { steps: 5, ms: 0 },
    ));
    spec.tools.push(ToolSpec::read_only(
        "steps",
        "reports progress three times, 2 s apart",
        Behavior::Progress { steps: 3, ms: 2000 },
    ));
    spec
}

#[tokio::test]
async fn upstream_progress_reaches_a_waiting_caller_and_a_tasks_status() {
    let env = TestEnv::shared("progress").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = mock_stdio_upstream_with_spec("mock", &progress_spec(), &ledger);
    let _proxy = start_proxy(&env, vec![upstream]);

    // A caller that waits: rmcp sends a progress token with every request.
    let recorder = ProgressRecorder::default();
    let client = serve_in_memory(connector_for(&env, "mock"), recorder.clone())
        .await
        .unwrap();
    let handle = client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(tool_call(
                "steps",
                json!({"key": "p1"}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let sent_token = handle.progress_token.clone();
    let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
        panic!("not a CallToolResult")
    };
    assert_eq!(
        result.structured_content.as_ref().unwrap()["key"],
        json!("p1")
    );
    let seen = recorder.seen.lock().unwrap().clone();
    // At least one update arrives (how many depends on timing: heartbeats reach Temporal at
    // most every 2 s, and the connector looks on the schedule of R-CON-26).
    assert!(!seen.is_empty(), "progress reached the caller: {seen:?}");
    for p in &seen {
        assert_eq!(
            p.progress_token, sent_token,
            "under the caller's own token: {p:?}"
        );
    }
    for pair in seen.windows(2) {
        assert!(
            pair[0].progress < pair[1].progress,
            "progress only grows: {seen:?}"
        );
    }
    for p in &seen {
        assert_eq!(p.total, Some(3.0), "{p:?}");
        let step = p.progress as u32;
        assert_eq!(
            p.message.as_deref(),
            Some(format!("step {step} of 3").as_str())
        );
    }
    client.cancel().await.unwrap();

    // A task: tasks/get shows the upstream's latest progress message while it runs.
    let mut options =
        durable_mcp::connector::server::ConnectorOptions::new(vec![route("mock", &env.endpoint)]);
    options.task_after = Duration::from_millis(300);
    let tasks = task_client_for(durable_mcp::connector::server::Connector::new(
        env.client.clone(),
        options,
    ))
    .await
    .unwrap();
    let started = tasks
        .peer()
        .call_tool_once(tool_call("steps", json!({"key": "p2"})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = started else {
        panic!("expected a task, got {started:?}")
    };
    let mut messages = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = tasks
            .peer()
            .get_task(GetTaskParams::new(&created.task.task_id))
            .await
            .unwrap();
        if got.task.status() != TaskStatus::Working {
            break;
        }
        if let Some(m) = got.task.task.status_message.clone() {
            messages.push(m);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never finished"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("step ") && m.ends_with(" of 3")),
        "{messages:?}"
    );
    tasks.cancel().await.unwrap();
}

/// A client that keeps every log message it gets, with a signal for each.
#[derive(Clone)]
struct LogRecorder {
    seen: Arc<Mutex<Vec<String>>>,
    arrived: tokio::sync::mpsc::UnboundedSender<()>,
}

impl ClientHandler for LogRecorder {
    #[allow(deprecated)] // MCP logging (SEP-2577)
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params.data.as_str().unwrap_or_default().to_owned();
        self.seen.lock().unwrap().push(text);
        let _ = self.arrived.send(());
    }
}

/// A proxy fronting the standard mock over stdio plus `logger`, and a [`LogRecorder`] with its
/// arrivals.
fn logging_upstream(
    env: &TestEnv,
    logger: ToolSpec,
) -> (
    Ledger,
    durable_mcp_conformance::proxy_thread::ProxyThread,
    LogRecorder,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(logger);
    let proxy = start_proxy(
        env,
        vec![mock_stdio_upstream_with_spec("mock", &spec, &ledger)],
    );
    let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel();
    let recorder = LogRecorder {
        seen: Arc::default(),
        arrived,
    };
    (ledger, proxy, recorder, arrivals)
}

/// R-CON-13: the log messages of a long call reach its waiting caller while the tool still
/// runs (read from the call's heartbeats), in order, each once, not only just before the
/// result. The tool logs at once, again 3 s later, and returns 3 s after that.
#[tokio::test]
async fn a_long_calls_log_messages_reach_the_waiting_caller_live() {
    let env = TestEnv::shared("live-logs").await;
    let (ledger, _proxy, recorder, mut arrivals) = logging_upstream(
        &env,
        ToolSpec::read_only(
            "slow_logger",
            "logs at once and 3 s later, returns 3 s after that",
            Behavior::Log {
                levels: vec!["info".into(), "warning".into()],
                every_ms: 3000,
                ms: 3000,
                untied: false,
            },
        ),
    );
    let client = serve_in_memory(connector_for(&env, "mock"), recorder.clone())
        .await
        .unwrap();
    let peer = client.peer().clone();
    let call = tokio::spawn(async move {
        peer.call_tool(tool_call("slow_logger", json!({"key": "live"})))
            .await
    });
    // The first message must come while the tool still runs (it returns 6 s after it): the
    // upstream's ledger has not recorded its end yet.
    let first = tokio::time::timeout(Duration::from_secs(120), arrivals.recv()).await;
    assert!(first.is_ok(), "no log message within 120 s");
    let entries = ledger.read();
    assert!(
        !entries.iter().any(|e| e.tool == "slow_logger"
            && e.event == durable_mcp_conformance::fixtures::LedgerEvent::Completed),
        "the first log message came only once the tool had ended: {:?} {entries:?}",
        recorder.seen.lock().unwrap()
    );
    let result = call.await.unwrap().expect("the call answers");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // Each message once, in order (notifications are handled on tasks of their own: wait for
    // the second, then make sure no third comes).
    let _ = tokio::time::timeout(Duration::from_secs(10), arrivals.recv()).await;
    let _ = tokio::time::timeout(Duration::from_millis(500), arrivals.recv()).await;
    assert_eq!(
        *recorder.seen.lock().unwrap(),
        ["info from slow_logger", "warning from slow_logger"]
    );
    client.cancel().await.unwrap();
}

/// R-PRX-10: a stdio upstream built on the TypeScript or Python SDK writes its log messages
/// with no `_meta.progressToken`. With one call in flight on the connection they are that
/// call's: its waiting caller gets them, in order, before the result, and so does the same
/// caller's next call right after.
#[tokio::test]
async fn a_stdio_upstreams_untied_log_messages_reach_the_one_call_in_flight() {
    use durable_mcp::connector::task_ref::CallerScope;
    let env = TestEnv::shared("untied-logs").await;
    let (_ledger, _proxy, recorder, mut arrivals) = logging_upstream(
        &env,
        ToolSpec::read_only(
            "sdk_logger",
            "logs three times 50 ms apart, naming no request, then answers",
            Behavior::Log {
                levels: vec!["info".into(), "warning".into(), "error".into()],
                every_ms: 50,
                ms: 0,
                untied: true,
            },
        ),
    );
    let mut options = durable_mcp_conformance::kit::mcp::connector_options("mock", &env.endpoint);
    options.caller_scope = CallerScope::Process("sdk-logs".into());
    let connector = durable_mcp::connector::server::Connector::new(env.client.clone(), options);
    let client = serve_in_memory(connector, recorder.clone()).await.unwrap();
    let expected = [
        "info from sdk_logger",
        "warning from sdk_logger",
        "error from sdk_logger",
    ];
    for (round, key) in ["first", "again"].into_iter().enumerate() {
        let result = client
            .peer()
            .call_tool(tool_call("sdk_logger", json!({"key": key})))
            .await
            .unwrap();
        assert_eq!(result.is_error, Some(false), "{result:?}");
        // Notifications are handled on tasks of their own: wait for the three, then make sure
        // no fourth comes.
        for _ in 0..expected.len() {
            let _ = tokio::time::timeout(Duration::from_secs(10), arrivals.recv()).await;
        }
        let _ = tokio::time::timeout(Duration::from_millis(300), arrivals.recv()).await;
        let seen = std::mem::take(&mut *recorder.seen.lock().unwrap());
        assert_eq!(seen, expected, "call {}", round + 1);
    }
    client.cancel().await.unwrap();
}

/// Progress look-ups of a waiting caller's call (R-CON-10, R-CON-26), counted by a dedicated dev
/// server's own RPC counters: a call that reports no progress costs a few look-ups however long
/// it runs, and a short one none (its progress, if any, travels with the result). rmcp sends a
/// progress token with every request, so every call of such a client used to be described
/// every second: seven RPCs for a 7 s call.
#[tokio::test]
async fn a_quiet_call_costs_few_progress_look_ups_and_a_short_one_none() {
    use durable_mcp_conformance::load::metrics;
    init_tracing();
    let (mut server, address) = dedicated_server_with_metrics().await;
    let env = TestEnv::on(&server, "lookups").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let client = serve_in_memory(connector_for(&env, "mock"), ProgressRecorder::default())
        .await
        .unwrap();
    let describes = |c: &metrics::Counters| {
        c.0.get("frontend/DescribeNexusOperationExecution")
            .copied()
            .unwrap_or(0.0)
            + c.0
                .get("frontend/DescribeActivityExecution")
                .copied()
                .unwrap_or(0.0)
    };

    // Warm up (the proxy's first call opens its upstream), then a short call: no look-up.
    for key in ["warm", "short"] {
        let before = metrics::scrape(&address).await.unwrap();
        let started = std::time::Instant::now();
        let result = client
            .peer()
            .call_tool(tool_call("echo", json!({"key": key})))
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let elapsed = started.elapsed();
        let after = metrics::scrape(&address).await.unwrap();
        if key == "short" && elapsed < durable_mcp::connector::progress::FIRST_LOOKUP {
            assert_eq!(
                describes(&after.since(&before)),
                0.0,
                "a call of {elapsed:?} looked its progress up: {:?}",
                after.since(&before)
            );
        }
    }

    // A 7 s call with no progress: look-ups at 2 s (the operation, then its activity) and 6 s
    // (the activity): 3 RPCs, 4 if the loaded machine stretches it past 14 s. One a second
    // was at least 8.
    let before = metrics::scrape(&address).await.unwrap();
    let result = client
        .peer()
        .call_tool(tool_call("slow", json!({"key": "quiet", "sleep_ms": 7000})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let spent = metrics::scrape(&address).await.unwrap().since(&before);
    let n = describes(&spent);
    println!("a quiet 7 s call: {n} describe RPCs");
    assert!(
        (1.0..=4.0).contains(&n),
        "a quiet 7 s call cost {n} describe RPCs: {spent:?}"
    );
    client.cancel().await.unwrap();
    drop(_proxy);
    let _ = server.stop().await;
}

/// R-CON-26: a call that waited in the server's queue before its start is not looked up in its
/// Activity before it has run the first interval there. A proxy of one Nexus slot holds it
/// with an inline call of 1.5 s; a 1 s call sent meanwhile starts only then and ends past
/// the connector's first look-up at 2 s. That look-up finds the operation just started: its
/// Activity's describe, which found nothing (the call reports nothing), cost one RPC for every
/// call queued so on a saturated server.
#[tokio::test]
async fn a_call_queued_before_its_start_is_not_looked_up_in_its_activity_before_it_has_run() {
    use durable_mcp_conformance::fixtures::UpstreamSpec;
    use durable_mcp_conformance::load::metrics;
    init_tracing();
    let (mut server, address) = dedicated_server_with_metrics().await;
    let env = TestEnv::on(&server, "queued").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut spec = UpstreamSpec::standard();
    let hold = Behavior::Sleep { ms: 0 };
    spec.tools.push(ToolSpec::read_only("hold", "sleeps", hold));
    let mut upstream = mock_stdio_upstream_with_spec("mock", &spec, &ledger);
    upstream.overrides = toml::from_str("hold = { execution = \"inline\" }").unwrap();
    let _proxy = env.start_proxy(vec![upstream], 1);
    let client = serve_in_memory(connector_for(&env, "mock"), ProgressRecorder::default())
        .await
        .unwrap();
    // Warm up: the connector knows the tools, the proxy has run a call.
    let warm = client
        .peer()
        .call_tool(tool_call("echo", json!({"key": "warm"})));
    assert_ne!(warm.await.unwrap().is_error, Some(true));
    // The server's counters reach its metrics endpoint a moment after the RPC: let them settle.
    let settle = || tokio::time::sleep(Duration::from_secs(2));
    settle().await;

    let before = metrics::scrape(&address).await.unwrap();
    let peer = client.peer().clone();
    let held = tokio::spawn(async move {
        peer.call_tool(tool_call("hold", json!({"key": "hold", "sleep_ms": 1500})))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = std::time::Instant::now();
    let queued = client
        .peer()
        .call_tool(tool_call(
            "slow",
            json!({"key": "queued", "sleep_ms": 1000}),
        ))
        .await
        .unwrap();
    assert_ne!(queued.is_error, Some(true), "{queued:?}");
    let elapsed = sent.elapsed();
    assert_ne!(held.await.unwrap().unwrap().is_error, Some(true));
    settle().await;
    let spent = metrics::scrape(&address).await.unwrap().since(&before);
    let count = |name: &str| spent.0.get(name).copied().unwrap_or(0.0);
    let (operation, activity) = (
        count("frontend/DescribeNexusOperationExecution"),
        count("frontend/DescribeActivityExecution"),
    );
    println!(
        "a call queued behind a 1.5 s one, run 1 s, ended after {elapsed:?}: \
         {operation} operation and {activity} activity describes"
    );
    assert!(
        elapsed > durable_mcp::connector::progress::FIRST_LOOKUP,
        "the call ended before the first look-up ({elapsed:?}): nothing was checked"
    );
    assert_eq!(activity, 0.0, "its Activity was looked up: {spent:?}");
    assert!(operation <= 1.0, "{spent:?}");
    client.cancel().await.unwrap();
    let _ = server.stop().await;
}

/// R-PRX-9: progress written just before the result is never lost to the race between rmcp's
/// per-notification handler tasks and the answer, nor to an early notification: every one of
/// 30 short calls brings all five of its updates to the caller, in order.
#[tokio::test]
async fn progress_written_just_before_the_result_is_never_lost() {
    let env = TestEnv::shared("progress").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = mock_stdio_upstream_with_spec("mock", &progress_spec(), &ledger);
    let _proxy = start_proxy(&env, vec![upstream]);
    let recorder = ProgressRecorder::default();
    let client = serve_in_memory(connector_for(&env, "mock"), recorder.clone())
        .await
        .unwrap();
    for n in 0..30 {
        let handle = client
            .peer()
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(tool_call(
                    "burst",
                    json!({"key": format!("burst-{n}")}),
                ))),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        let token = handle.progress_token.clone();
        let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
            panic!("not a CallToolResult")
        };
        assert_eq!(result.is_error, Some(false), "call {n}: {result:?}");
        // This client's rmcp also hands each notification to a task of its own: wait for them.
        let seen_for_call = || {
            let seen = recorder.seen.lock().unwrap();
            seen.iter()
                .filter(|p| p.progress_token == token)
                .map(|p| p.progress)
                .collect::<Vec<_>>()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while seen_for_call().len() < 5 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut got = seen_for_call();
        got.sort_by(f64::total_cmp);
        assert_eq!(got, [1.0, 2.0, 3.0, 4.0, 5.0], "call {n}");
    }
    client.cancel().await.unwrap();
}

/// R-CON-26, R-CON-10: a call of a tool listed `io.durable-mcp/inline` is not followed live,
/// yet when the proxy runs it in an Activity after all (here: the proxy restarted with the
/// tool back on the Activity path while the connector kept the listing it had), the caller
/// still gets every progress notification, replayed with the result, under its own token.
#[tokio::test]
async fn a_call_listed_inline_that_ran_in_an_activity_gets_its_progress_with_its_result() {
    use durable_mcp::contract::listing::INLINE_META_KEY;
    let env = TestEnv::shared("progress-inline-listed").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut upstream = mock_stdio_upstream_with_spec("mock", &progress_spec(), &ledger);
    let on_activity = upstream.clone();
    upstream.overrides = toml::from_str("steps = { execution = \"inline\" }").unwrap();
    let inline_proxy = start_proxy(&env, vec![upstream]);
    let recorder = ProgressRecorder::default();
    let client = serve_in_memory(connector_for(&env, "mock"), recorder.clone())
        .await
        .unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    let steps = tools.iter().find(|t| t.name == "steps").unwrap();
    let listed = serde_json::to_value(steps).unwrap();
    assert_eq!(listed["_meta"][INLINE_META_KEY], json!(true), "{listed}");

    // The same task queue, now without the override: `steps` runs in an Activity.
    drop(inline_proxy);
    let _proxy = start_proxy(&env, vec![on_activity]);
    let handle = client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(tool_call(
                "steps",
                json!({"key": "listed-inline"}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let sent_token = handle.progress_token.clone();
    let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
        panic!("not a CallToolResult")
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // rmcp hands each notification to a task of its own: wait for them.
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen = recorder.seen.lock().unwrap().clone();
        if seen.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let progress: Vec<f64> = seen.iter().map(|p| p.progress).collect();
    assert_eq!(progress, [1.0, 2.0, 3.0], "{seen:?}");
    assert!(seen.iter().all(|p| p.progress_token == sent_token));
    client.cancel().await.unwrap();
}

/// R-CON-13: clones of one `Connector` (a library host serving several clients) keep each
/// client's log level: one client raising its level to `error` leaves another at `info`.
/// (Each clone's keyed calls, R-CON-5, are its own too; over a pipe another client's cancel of
/// the same request id shows nothing, since a request's token ends only with its own client's
/// cancel, so no test shows that part.)
#[tokio::test]
#[allow(deprecated)] // MCP logging (SEP-2577)
async fn clones_of_a_connector_keep_their_clients_log_levels_apart() {
    let env = TestEnv::shared("clone-levels").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut spec = UpstreamSpec::standard();
    spec.tools.push(ToolSpec::read_only(
        "logger",
        "logs at info, waits 1 s, returns",
        Behavior::Log {
            levels: vec!["info".into()],
            every_ms: 0,
            ms: 1000,
            untied: false,
        },
    ));
    let _proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_spec("mock", &spec, &ledger)],
    );
    let connector = connector_for(&env, "mock");
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let listener = LogRecorder {
        seen: Arc::default(),
        arrived,
    };
    let first = client_for(connector.clone()).await.unwrap();
    let second = serve_in_memory(connector, listener.clone()).await.unwrap();
    let level = rmcp::model::SetLevelRequestParams::new(rmcp::model::LoggingLevel::Error);
    first.peer().set_level(level).await.unwrap();
    let result = second
        .peer()
        .call_tool(tool_call("logger", json!({"key": "apart"})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let _ = tokio::time::timeout(Duration::from_secs(5), arrivals.recv()).await;
    assert_eq!(
        *listener.seen.lock().unwrap(),
        ["info from logger"],
        "the second client stays at info whatever the first one set"
    );
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
}
