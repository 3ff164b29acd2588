//! What an upstream tells its callers beside its tools, through the proxy and the connector:
//! its `instructions` (R-PRX-31, R-NXC-7, R-CON-41).

use durable_mcp::inbound::server::{Connector, ConnectorOptions};
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
