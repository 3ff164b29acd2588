//! R-CON-17: the connector's listings are cached per route, so a burst of `tools/list` and of
//! calls of unknown tools starts one `list_tools` operation, and the operations in flight are
//! capped by `max_in_flight` with an error naming the cap. Counted on the real server: the
//! route's Nexus handler counts the `list_tools` operations it is asked to run.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use durable_mcp::{
    connector::server::{Connector, ConnectorOptions},
    contract::{listing::LIST_TOOLS, payload},
    nexus::{Service, StartOutcome, start_fn},
};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::support::*;

/// A tool service whose `list_tools` counts its operations: `hold` (counted in `holds`) runs
/// until cancelled, `quick` answers at once.
fn counting_service(lists: Arc<AtomicUsize>, holds: Arc<AtomicUsize>) -> Service {
    let listing = json!([
        {"name": "hold", "inputSchema": {"type": "object"}},
        {"name": "quick", "inputSchema": {"type": "object"}},
    ]);
    Service::new("tools")
        .operation(
            LIST_TOOLS,
            start_fn(move |_ctx, _input| {
                lists.fetch_add(1, Ordering::SeqCst);
                let listing = listing.clone();
                async move { Ok(StartOutcome::Sync(payload::to_payload(&listing).unwrap())) }
            }),
        )
        .operation(
            "hold",
            start_fn(move |_ctx, _input| {
                holds.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok(StartOutcome::Async {
                        token: "never-completed".into(),
                    })
                }
            }),
        )
        .operation(
            "quick",
            start_fn(|_ctx, _input| async move {
                let result = json!({"content": [{"type": "text", "text": "done"}]});
                Ok(StartOutcome::Sync(payload::to_payload(&result).unwrap()))
            }),
        )
}

#[tokio::test]
async fn a_burst_of_listings_and_unknown_tools_starts_one_list_operation() {
    let env = TestEnv::shared("connector-list-cache").await;
    let lists = Arc::new(AtomicUsize::new(0));
    let holds = Arc::new(AtomicUsize::new(0));
    let _worker = env
        .nexus_worker(vec![counting_service(lists.clone(), holds)])
        .await;
    let mut options = ConnectorOptions::new(vec![route("tools", &env.endpoint)]);
    // Long enough that the whole burst below falls in one cache period on a loaded machine.
    options.list_cache = Duration::from_secs(600);
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();

    // Concurrent listings share one operation, later ones reuse its answer.
    let burst = (0..5).map(|_| client.peer().list_all_tools());
    for listed in futures::future::join_all(burst).await {
        assert_eq!(listed.unwrap().len(), 2);
    }
    for _ in 0..5 {
        assert_eq!(client.peer().list_all_tools().await.unwrap().len(), 2);
    }
    // Unknown tools are answered from the cached listing.
    for i in 0..5 {
        let err = client
            .peer()
            .call_tool(CallToolRequestParams::new(format!("no_such_tool_{i}")))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown tool"), "{err}");
    }
    assert_eq!(
        lists.load(Ordering::SeqCst),
        1,
        "one list_tools operation for 10 listings and 5 unknown tools"
    );

    // Without a cache every listing asks the route again.
    let mut options = ConnectorOptions::new(vec![route("tools", &env.endpoint)]);
    options.list_cache = Duration::ZERO;
    let uncached = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    // Its initialize asked for the routes' instructions (R-CON-41): count from here.
    let before = lists.load(Ordering::SeqCst);
    for _ in 0..3 {
        uncached.peer().list_all_tools().await.unwrap();
    }
    assert_eq!(lists.load(Ordering::SeqCst) - before, 3);
    client.cancel().await.unwrap();
    uncached.cancel().await.unwrap();
}

/// A worker serving [`counting_service`] on `env`, its `hold` counter, and connector options
/// routing to it with a listing cache longer than any test.
async fn holding_route(env: &TestEnv) -> (WorkerGuard, Arc<AtomicUsize>, ConnectorOptions) {
    let holds = Arc::new(AtomicUsize::new(0));
    let worker = env
        .nexus_worker(vec![counting_service(Default::default(), holds.clone())])
        .await;
    let mut options = ConnectorOptions::new(vec![route("tools", &env.endpoint)]);
    options.list_cache = Duration::from_secs(600);
    (worker, holds, options)
}

#[tokio::test]
async fn calls_past_max_in_flight_are_refused_with_the_cap_named() {
    let env = TestEnv::shared("connector-in-flight").await;
    let (_worker, holds, mut options) = holding_route(&env).await;
    options.max_in_flight = 2;
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    client.peer().list_all_tools().await.unwrap();

    // Two calls wait (their operations never complete): the cap is reached.
    let holding: Vec<_> = (0..2)
        .map(|_| {
            let peer = client.peer().clone();
            tokio::spawn(async move { peer.call_tool(tool_call("hold", json!({}))).await })
        })
        .collect();
    eventually(
        Duration::from_secs(60),
        "both holding calls started",
        || holds.load(Ordering::SeqCst) == 2,
    )
    .await;
    let refused = client
        .peer()
        .call_tool(tool_call("quick", json!({})))
        .await
        .expect_err("a third call is refused while two wait")
        .to_string();
    assert!(
        refused.contains("--max-in-flight 2") && refused.contains("nothing was started"),
        "{refused}"
    );

    // A caller that gives up frees its slot.
    holding[0].abort();
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match client.peer().call_tool(tool_call("quick", json!({}))).await {
                Ok(result) => break result,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("a call succeeds once a slot is free");
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(format!("{:?}", done.content).contains("done"), "{done:?}");
    holding[1].abort();
    client.cancel().await.unwrap();
}

/// A session client over Streamable HTTP whose connections come from `local` (any 127.x
/// address reaches a loopback connector on Linux), so it counts as its own address.
pub(crate) async fn http_client_from(local: [u8; 4], url: &str) -> McpClient {
    use rmcp::{
        ServiceExt as _,
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(local))
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    ().serve(transport).await.unwrap()
}

/// An HTTP connector with `options` and two session clients of it from two addresses.
pub(crate) async fn alice_and_bob(
    env: &TestEnv,
    options: ConnectorOptions,
) -> (
    durable_mcp::connector::http::HttpServerHandle,
    tokio_util::sync::CancellationToken,
    McpClient,
    McpClient,
) {
    let connector = Connector::new(env.client.clone(), options);
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let alice = http_client_from([127, 0, 0, 1], &server.url).await;
    let bob = http_client_from([127, 0, 0, 2], &server.url).await;
    (server, shutdown, alice, bob)
}

/// Ends [`alice_and_bob`]'s sessions and server.
pub(crate) async fn part(
    alice: McpClient,
    bob: McpClient,
    shutdown: tokio_util::sync::CancellationToken,
    server: durable_mcp::connector::http::HttpServerHandle,
) {
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    shutdown.cancel();
    server.wait().await.unwrap();
}

/// Bob, from another address than a refused caller's, gets his call answered.
async fn bob_is_served(bob: &McpClient) {
    let served = bob
        .peer()
        .call_tool(tool_call("quick", json!({})))
        .await
        .expect("bob, from another address, is served");
    assert!(
        format!("{:?}", served.content).contains("done"),
        "{served:?}"
    );
}

/// R-CON-38: without auth, each address holds at most `--max-in-flight-per-caller`; one at its
/// share is refused with the flag named while another address is still served, and `tasks/get`-
/// like work (here a companion tool) counts against the share too.
#[tokio::test]
async fn one_address_at_its_in_flight_share_leaves_another_served() {
    let env = TestEnv::shared("connector-in-flight-share").await;
    let (_worker, holds, mut options) = holding_route(&env).await;
    options.max_in_flight_per_caller = 1;
    options.companion_tools = true;
    options.task_after = Duration::from_secs(600);
    let (server, shutdown, alice, bob) = alice_and_bob(&env, options).await;
    alice.peer().list_all_tools().await.unwrap();

    let before = holds.load(Ordering::SeqCst);
    let peer = alice.peer().clone();
    let holding = tokio::spawn(async move { peer.call_tool(tool_call("hold", json!({}))).await });
    eventually(Duration::from_secs(60), "alice's call started", || {
        holds.load(Ordering::SeqCst) == before + 1
    })
    .await;
    for refused_call in [
        tool_call("quick", json!({})),
        tool_call("task_status", json!({"task_id": "x"})),
    ] {
        let refused = alice
            .peer()
            .call_tool(refused_call)
            .await
            .expect_err("alice is at her share")
            .to_string();
        assert!(
            refused.contains("--max-in-flight-per-caller 1")
                && refused.contains("nothing was started"),
            "{refused}"
        );
    }
    bob_is_served(&bob).await;

    holding.abort();
    part(alice, bob, shutdown, server).await;
}

/// R-CON-38: a call that became a task holds no in-flight place, so starts are capped per
/// caller too: one address over `--max-call-starts-per-caller-minute` is refused with the
/// flag named and nothing started, while another address is still served.
#[tokio::test]
async fn one_address_over_its_call_starts_leaves_another_served() {
    let env = TestEnv::shared("connector-call-starts").await;
    let (_worker, holds, mut options) = holding_route(&env).await;
    options.max_call_starts_per_caller_minute = 2;
    let (server, shutdown, alice, bob) = alice_and_bob(&env, options).await;
    alice.peer().list_all_tools().await.unwrap();
    for _ in 0..2 {
        alice
            .peer()
            .call_tool(tool_call("quick", json!({})))
            .await
            .expect("within alice's starts");
    }
    let before = holds.load(Ordering::SeqCst);
    let refused = alice
        .peer()
        .call_tool(tool_call("hold", json!({})))
        .await
        .expect_err("alice started her share this minute")
        .to_string();
    assert!(
        refused.contains("--max-call-starts-per-caller-minute 2")
            && refused.contains("nothing was started"),
        "{refused}"
    );
    assert_eq!(holds.load(Ordering::SeqCst), before, "nothing started");
    bob_is_served(&bob).await;
    part(alice, bob, shutdown, server).await;
}
