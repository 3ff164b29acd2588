//! R-RUN-8: `scripts/build-images` builds both binaries' container images offline, and one
//! `tools/call` goes through both: the connector image (over `docker run -i` stdio) and the
//! proxy image (a worker fronting the HTTP mock upstream on the host), against the dev server,
//! each running as the image's unprivileged user. Skipped (R-HAR-6) without a Docker engine.

use std::{path::PathBuf, process::Command, time::Duration};

use durable_mcp_conformance::fixtures::{SpecSource, UpstreamSpec, serve_mock_upstream_http};
use durable_mcp_conformance::kit::process::connector_route;
use durable_mcp_conformance::skip::{Need, skip};
use rmcp::ServiceExt as _;
use serde_json::json;

use crate::support::{TestEnv, temp_path, tool_call, workspace_bin};

/// The UID the images run as (`scripts/build-images`).
const IMAGE_UID: &str = "10001";
/// The label `scripts/lib.sh`'s `stop_docker` removes leftovers by.
const LABEL: &str = "durable-mcp.harness=images";

/// `docker ARGS`: its stdout when it succeeded, else its stderr.
fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("running docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Removes the named containers and the built images when the test ends, however it ends.
struct Cleanup {
    containers: Vec<String>,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.containers {
            let _ = docker(&["rm", "-f", "-v", name]);
        }
        for image in &self.images {
            let _ = docker(&["rmi", "-f", image]);
        }
    }
}

/// Runs `scripts/build-images` on the binaries this test run uses; returns the two image tags.
fn build_images(tag: &str) -> (String, String) {
    let bins = workspace_bin("durable-mcp-connector").expect("the connector binary");
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/build-images"
    ))
    .arg("--bin-dir")
    .arg(bins.parent().unwrap())
    .args(["--tag", tag])
    .output()
    .expect("scripts/build-images runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/build-images failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let connector = format!("durable-mcp/connector:{tag}");
    let proxy = format!("durable-mcp/proxy:{tag}");
    assert!(
        stdout.contains(&connector) && stdout.contains(&proxy),
        "{stdout}"
    );
    (connector, proxy)
}

/// The UIDs the processes of container `name` run as, from the host's view.
fn container_uids(name: &str) -> Vec<String> {
    // `docker top` needs the PID column to match the container's processes.
    let top = docker(&["top", name, "-o", "pid,uid"]);
    let top = top.unwrap_or_else(|e| panic!("docker top: {e}"));
    top.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

/// A proxy config fronting the HTTP upstream at `url` as `mock`, on the env's task queue.
fn proxy_config(env: &TestEnv, url: &str) -> PathBuf {
    let quoted = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let text = format!(
        "[worker]\ntask_queue = {}\n[temporal]\naddress = {}\nnamespace = {}\n\
         [[upstream]]\nservice = \"mock\"\ntransport = \"http\"\nurl = {}\n",
        quoted(&env.task_queue),
        quoted(&env.address),
        quoted(&env.namespace),
        quoted(url),
    );
    let path = temp_path("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn both_images_build_offline_and_serve_a_call_as_a_non_root_user() {
    if let Err(e) = docker(&["info"]) {
        let reason = e.lines().last().unwrap_or_default().to_owned();
        skip(Need::Docker, &format!("no Docker engine answers: {reason}"));
        return;
    }
    let env = TestEnv::shared("images").await;
    let tag = format!("it-{}", uuid::Uuid::new_v4().simple());
    let proxy_name = format!("durable-mcp-it-proxy-{tag}");
    let connector_name = format!("durable-mcp-it-connector-{tag}");
    let mut cleanup = Cleanup {
        containers: vec![proxy_name.clone(), connector_name.clone()],
        images: vec![],
    };
    let (connector_image, proxy_image) = build_images(&tag);
    cleanup.images = vec![connector_image.clone(), proxy_image.clone()];

    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(UpstreamSpec::standard()),
        None,
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config = proxy_config(&env, &upstream.url);
    let mount = format!("{}:/etc/durable-mcp/proxy.toml:ro", config.display());
    docker(&[
        "run",
        "-d",
        "--name",
        &proxy_name,
        "--label",
        LABEL,
        "--network",
        "host",
        "-v",
        &mount,
        &proxy_image,
        "--config",
        "/etc/durable-mcp/proxy.toml",
    ])
    .unwrap_or_else(|e| panic!("the proxy image does not start: {e}"));

    let mut connector = tokio::process::Command::new("docker");
    connector.args([
        "run",
        "-i",
        "--rm",
        "--name",
        &connector_name,
        "--label",
        LABEL,
        "--network",
        "host",
        &connector_image,
        "--address",
        &env.address,
        "--namespace",
        &env.namespace,
        "--route",
        &connector_route("mock", &env.endpoint),
    ]);
    let transport = rmcp::transport::TokioChildProcess::new(connector).unwrap();
    let client = tokio::time::timeout(Duration::from_secs(60), ().serve(transport))
        .await
        .expect("the connector image answers initialize")
        .expect("MCP handshake with the connector image");
    let call = client
        .peer()
        .call_tool(tool_call("echo", json!({"via": "images"})));
    let echo = tokio::time::timeout(Duration::from_secs(60), call).await;
    let logs = || docker(&["logs", &proxy_name]).unwrap_or_else(|e| e);
    let echo = echo
        .unwrap_or_else(|_| panic!("no answer within 60 s; proxy logs:\n{}", logs()))
        .unwrap_or_else(|e| panic!("{e}; proxy logs:\n{}", logs()));
    assert_eq!(
        echo.structured_content,
        Some(json!({"via": "images"})),
        "{echo:?}"
    );

    for name in [&proxy_name, &connector_name] {
        let uids = container_uids(name);
        assert!(!uids.is_empty(), "{name} runs no process");
        assert!(
            uids.iter().all(|u| u == IMAGE_UID),
            "{name} runs as {uids:?}"
        );
    }
    client.cancel().await.unwrap();
    drop(cleanup);
}
