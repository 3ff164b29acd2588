//! R-RUN-4, R-RUN-5: `/healthz` and `/readyz` of the HTTP connector and of the proxy's
//! `--health-addr` listener, against a dev server that stops and comes back.

use std::time::Duration;

use durable_mcp_conformance::fixtures::Ledger;
use durable_mcp_conformance::harness::{DevServer, DevServerOptions, mock_upstream_bin};
use durable_mcp_conformance::kit::process::spawn_announcing;
use serde_json::Value;

use crate::support::*;

/// `GET base+path`: the status and the body (JSON when it parses, else a string).
async fn get(base: &str, path: &str) -> (u16, Value) {
    let answer = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Polls `/readyz` until it answers `status` (within 30 s); its body.
async fn readyz_until(base: &str, status: u16) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = get(base, "/readyz").await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz still answers {got} {body}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn connector_readyz_follows_temporal_and_names_an_unknown_endpoint() {
    init_tracing();
    let mut server = DevServer::start(DevServerOptions {
        db_file: Some(temp_path("temporal.db")),
        ..Default::default()
    })
    .await
    .expect("dedicated dev server with a db file");
    let env = TestEnv::on(&server, "readyz").await;
    let (good, stop_good) =
        serve_connector_http(connector_for(&env, "mock"), loopback_http_options())
            .await
            .unwrap();
    let base = format!("http://{}", good.local_addr);
    let body = readyz_until(&base, 200).await;
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["checks"]["endpoints"]["known"], 1, "{body}");

    // A route whose endpoint does not exist: 503, naming the endpoint, not the service.
    let options = connector_options("secret-service-name", "no-such-endpoint");
    let missing = durable_mcp::connector::server::Connector::new(env.client.clone(), options);
    let (bad, stop_bad) = serve_connector_http(missing, loopback_http_options())
        .await
        .unwrap();
    let bad_base = format!("http://{}", bad.local_addr);
    let body = readyz_until(&bad_base, 503).await;
    assert_eq!(
        body["checks"]["endpoints"]["unknown"][0], "no-such-endpoint",
        "{body}"
    );
    assert_eq!(body["checks"]["temporal"]["ok"], true, "{body}");
    assert!(!body.to_string().contains("secret-service-name"), "{body}");
    stop_bad.cancel();

    // Temporal down: 503 naming the Temporal check; /healthz stays 200.
    server.stop().await.unwrap();
    let body = readyz_until(&base, 503).await;
    assert_eq!(body["checks"]["temporal"]["ok"], false, "{body}");
    assert!(body["checks"]["temporal"]["error"].is_string(), "{body}");
    assert_eq!(
        get(&base, "/healthz").await,
        (200, Value::String("ok".into()))
    );

    // Back: ready again.
    server.restart().await.unwrap();
    let body = readyz_until(&base, 200).await;
    assert_eq!(body["checks"]["temporal"]["ok"], true, "{body}");
    assert_eq!(get(&base, "/healthz").await.0, 200);
    stop_good.cancel();
}

/// `durable-mcp-proxy --health-addr 127.0.0.1:0` with `upstreams` (TOML tables) on `env`;
/// the child and its health base URL.
async fn proxy_with_health(env: &TestEnv, upstreams: &str) -> (tokio::process::Child, String) {
    let config = format!(
        "[worker]\ntask_queue = \"{}\"\n\n[temporal]\naddress = \"{}\"\nnamespace = \"{}\"\n\n{upstreams}",
        env.task_queue, env.address, env.namespace
    );
    let path = temp_path("proxy.toml");
    std::fs::write(&path, config).unwrap();
    let mut command = tokio::process::Command::new(workspace_bin("durable-mcp-proxy").unwrap());
    command
        .arg("--config")
        .arg(&path)
        .args(["--health-addr", "127.0.0.1:0"]);
    // durable_mcp_cli::health_server::HEALTH_LISTENING.
    let announced = "durable-mcp-proxy health on ";
    let (child, seen) = spawn_announcing(command, announced).await.unwrap();
    let base = seen.last().unwrap()[announced.len()..].trim().to_owned();
    (child, base)
}

#[tokio::test]
async fn proxy_readyz_says_ready_for_a_good_upstream_and_names_one_that_cannot_start() {
    init_tracing();
    let env = TestEnv::shared("proxy-readyz").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let good = format!(
        "[[upstream]]\nservice = \"good\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"--ledger\", \"{}\"]\n",
        mock_upstream_bin().unwrap().display(),
        ledger.path().display()
    );
    let (_proxy, base) = proxy_with_health(&env, &good).await;
    assert_eq!(
        get(&base, "/healthz").await,
        (200, Value::String("ok".into()))
    );
    let body = readyz_until(&base, 200).await;
    assert_eq!(body["checks"]["workers"]["nexus"], "polling", "{body}");
    assert_eq!(body["checks"]["workers"]["activity"], "polling", "{body}");
    assert_eq!(
        body["checks"]["upstreams"]["services"]["good"]["state"], "listed",
        "{body}"
    );

    let broken = "/nonexistent/durable-mcp-no-such-server";
    let both = format!(
        "{good}\n[[upstream]]\nservice = \"broken\"\ntransport = \"stdio\"\ncommand = \"{broken}\"\n"
    );
    let env = TestEnv::shared("proxy-readyz-broken").await;
    let (_proxy, base) = proxy_with_health(&env, &both).await;
    let body = readyz_until(&base, 503).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut body = body;
    while body["checks"]["upstreams"]["services"]["broken"]["state"] != "failing" {
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        body = get(&base, "/readyz").await.1;
    }
    assert_eq!(body["status"], "not ready", "{body}");
    assert!(
        body["checks"]["upstreams"]["services"]["broken"]["since"].is_string(),
        "{body}"
    );
    assert_eq!(
        body["checks"]["upstreams"]["services"]["good"]["state"], "listed",
        "{body}"
    );
    assert!(
        !body.to_string().contains(broken),
        "no command in the report: {body}"
    );
    assert_eq!(get(&base, "/healthz").await.0, 200);
}
