//! R-CON-45, R-CON-17: resource requests are bounded like tool calls. Each route's resource
//! list is listed once per `--list-cache` however many reads and listings ask at once, and a
//! read holds a place under `--max-in-flight`. Counted on the real server: the routes' Nexus
//! handlers count the reserved operations they are asked to run.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use durable_mcp::{
    connector::server::{Connector, ConnectorOptions},
    contract::{
        features::{LIST_RESOURCE_TEMPLATES, LIST_RESOURCES, READ_RESOURCE, UPSTREAM_CAPABILITIES},
        payload,
    },
    nexus::{Service, StartOutcome, start_fn},
};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

use crate::{
    connector_limits::{alice_and_bob, part},
    support::*,
};

/// How many of each reserved operation the routes were asked to run.
#[derive(Clone, Default)]
struct Counts {
    capabilities: Arc<AtomicUsize>,
    lists: Arc<AtomicUsize>,
    templates: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
}

/// A sync operation answering `answer` that counts itself in `count`.
fn counted(
    count: &Arc<AtomicUsize>,
    answer: Value,
) -> Arc<dyn durable_mcp::nexus::OperationHandler> {
    let count = count.clone();
    start_fn(move |_ctx, _input| {
        count.fetch_add(1, Ordering::SeqCst);
        let answer = payload::to_payload(&answer).unwrap();
        async move { Ok(StartOutcome::Sync(answer)) }
    })
}

/// A service declaring resources, listing `<name>://1` and `<name>://hold`: reading the first
/// answers at once, reading the second never completes.
fn resource_service(name: &str, counts: &Counts) -> Service {
    let listed = json!({"resources": [{"uri": format!("{name}://1"), "name": "one"},
                                      {"uri": format!("{name}://hold"), "name": "hold"}]});
    let reads = counts.reads.clone();
    let read = start_fn(move |_ctx, input| {
        reads.fetch_add(1, Ordering::SeqCst);
        let asked: Value = payload::to_json(&input).unwrap();
        async move {
            let uri = asked["uri"].as_str().unwrap_or_default().to_owned();
            if uri.ends_with("://hold") {
                return Ok(StartOutcome::Async {
                    token: "never-completed".into(),
                });
            }
            let read = json!({"contents": [{"uri": uri, "text": "one"}]});
            Ok(StartOutcome::Sync(payload::to_payload(&read).unwrap()))
        }
    });
    Service::new(name)
        .operation(
            UPSTREAM_CAPABILITIES,
            counted(&counts.capabilities, json!({"resources": {}})),
        )
        .operation(LIST_RESOURCES.operation, counted(&counts.lists, listed))
        .operation(
            LIST_RESOURCE_TEMPLATES.operation,
            counted(&counts.templates, json!({"resourceTemplates": []})),
        )
        .operation(READ_RESOURCE.operation, read)
}

/// A connector's options over routes `a` and `b` with a list cache longer than any test.
fn two_routes(env: &TestEnv) -> ConnectorOptions {
    let mut options =
        ConnectorOptions::new(vec![route("a", &env.endpoint), route("b", &env.endpoint)]);
    options.list_cache = Duration::from_secs(600);
    options
}

fn read(uri: &str) -> ReadResourceRequestParams {
    ReadResourceRequestParams::new(uri)
}

#[tokio::test]
async fn a_burst_of_reads_and_listings_lists_each_route_once() {
    let env = TestEnv::shared("feature-list-cache").await;
    let counts = Counts::default();
    let services = vec![
        resource_service("a", &counts),
        resource_service("b", &counts),
    ];
    let _worker = env.nexus_worker(services).await;
    let client = client_for(Connector::new(env.client.clone(), two_routes(&env)))
        .await
        .unwrap();

    let reads = (0..10).map(|i| {
        let peer = client.peer().clone();
        let uri = if i % 2 == 0 { "a://1" } else { "b://1" };
        async move { peer.read_resource(read(uri)).await }
    });
    let lists = (0..5).map(|_| client.peer().list_all_resources());
    let (reads, lists) = tokio::join!(
        futures::future::join_all(reads),
        futures::future::join_all(lists)
    );
    for answer in reads {
        assert_eq!(answer.unwrap().contents.len(), 1);
    }
    for listed in lists {
        assert_eq!(listed.unwrap().len(), 4);
    }
    assert_eq!(counts.reads.load(Ordering::SeqCst), 10);
    assert_eq!(
        counts.lists.load(Ordering::SeqCst),
        2,
        "one resources list per route for 10 reads and 5 listings"
    );
    assert_eq!(
        counts.templates.load(Ordering::SeqCst),
        0,
        "listed URIs need no templates"
    );
    assert_eq!(
        counts.capabilities.load(Ordering::SeqCst),
        2,
        "the capabilities are asked once per route"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn reads_past_max_in_flight_are_refused_with_the_cap_named() {
    let env = TestEnv::shared("feature-in-flight").await;
    let counts = Counts::default();
    let services = vec![
        resource_service("a", &counts),
        resource_service("b", &counts),
    ];
    let _worker = env.nexus_worker(services).await;
    let mut options = two_routes(&env);
    options.max_in_flight = 2;
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    client.peer().list_all_resources().await.unwrap();

    // Two reads wait (their operations never complete): the cap is reached.
    let holding: Vec<_> = ["a://hold", "b://hold"]
        .into_iter()
        .map(|uri| {
            let peer = client.peer().clone();
            tokio::spawn(async move { peer.read_resource(read(uri)).await })
        })
        .collect();
    eventually(
        Duration::from_secs(60),
        "both holding reads started",
        || counts.reads.load(Ordering::SeqCst) == 2,
    )
    .await;
    let refused = client
        .peer()
        .read_resource(read("a://1"))
        .await
        .expect_err("a third read is refused while two wait")
        .to_string();
    assert!(
        refused.contains("--max-in-flight 2") && refused.contains("nothing was started"),
        "{refused}"
    );
    for read in holding {
        read.abort();
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn with_one_route_declaring_resources_a_read_lists_nothing() {
    let env = TestEnv::shared("feature-one-route").await;
    let counts = Counts::default();
    let _worker = env.nexus_worker(vec![resource_service("a", &counts)]).await;
    let mut options = ConnectorOptions::new(vec![route("a", &env.endpoint)]);
    options.list_cache = Duration::from_secs(600);
    let client = client_for(Connector::new(env.client.clone(), options))
        .await
        .unwrap();
    for _ in 0..3 {
        let answer = client.peer().read_resource(read("a://1")).await.unwrap();
        assert_eq!(answer.contents.len(), 1);
    }
    assert_eq!(counts.lists.load(Ordering::SeqCst), 0);
    assert_eq!(counts.templates.load(Ordering::SeqCst), 0);
    client.cancel().await.unwrap();
}

/// R-CON-38: a read counts in its caller's share: an address at `--max-in-flight-per-caller`
/// is refused naming the flag while another address is served.
#[tokio::test]
async fn an_address_at_its_in_flight_share_has_its_read_refused_and_another_is_served() {
    let env = TestEnv::shared("feature-in-flight-share").await;
    let counts = Counts::default();
    let _worker = env.nexus_worker(vec![resource_service("a", &counts)]).await;
    let mut options = ConnectorOptions::new(vec![route("a", &env.endpoint)]);
    options.list_cache = Duration::from_secs(600);
    options.max_in_flight_per_caller = 1;
    let (server, shutdown, alice, bob) = alice_and_bob(&env, options).await;
    let peer = alice.peer().clone();
    let holding = tokio::spawn(async move { peer.read_resource(read("a://hold")).await });
    eventually(Duration::from_secs(60), "alice's read started", || {
        counts.reads.load(Ordering::SeqCst) == 1
    })
    .await;
    let refused = alice
        .peer()
        .read_resource(read("a://1"))
        .await
        .expect_err("alice is at her share")
        .to_string();
    assert!(
        refused.contains("--max-in-flight-per-caller 1") && refused.contains("nothing was started"),
        "{refused}"
    );
    bob.peer().read_resource(read("a://1")).await.unwrap();
    holding.abort();
    part(alice, bob, shutdown, server).await;
}

/// R-CON-38: each read counts as one of its caller's call starts.
#[tokio::test]
async fn an_address_over_its_call_starts_has_its_read_refused_and_another_is_served() {
    let env = TestEnv::shared("feature-call-starts").await;
    let counts = Counts::default();
    let _worker = env.nexus_worker(vec![resource_service("a", &counts)]).await;
    let mut options = ConnectorOptions::new(vec![route("a", &env.endpoint)]);
    options.list_cache = Duration::from_secs(600);
    options.max_call_starts_per_caller_minute = 2;
    let (server, shutdown, alice, bob) = alice_and_bob(&env, options).await;
    for _ in 0..2 {
        alice.peer().read_resource(read("a://1")).await.unwrap();
    }
    let refused = alice
        .peer()
        .read_resource(read("a://1"))
        .await
        .expect_err("alice started her minute's worth")
        .to_string();
    assert!(
        refused.contains("--max-call-starts-per-caller-minute 2"),
        "{refused}"
    );
    assert_eq!(
        counts.reads.load(Ordering::SeqCst),
        2,
        "nothing was started"
    );
    bob.peer().read_resource(read("a://1")).await.unwrap();
    part(alice, bob, shutdown, server).await;
}
