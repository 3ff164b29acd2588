//! The smoke run: one durable round trip on a real dev server, narrated step by step.
//!
//! It is the quickest proof that a machine can run everything else: the CLI is found or
//! installed, the server starts with the features we need, a Nexus worker answers, and a
//! standalone Nexus operation completes through it.

use std::time::{Duration, Instant};

use durable_mcp::{
    contract::payload,
    nexus::{
        NexusWorker, NexusWorkerOptions, OperationOutcome, Service, StartOperation, StartOutcome,
        start_fn,
    },
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{DevServer, DevServerOptions, Slice, unique_name};

/// What the smoke run observed.
#[derive(Debug, Clone)]
pub struct SmokeReport {
    pub server_version: String,
    pub address: String,
    pub steps: Vec<(String, Duration)>,
    pub result: serde_json::Value,
}

/// Runs the smoke test, printing each step through `progress` as it completes.
pub async fn run(
    options: DevServerOptions,
    mut progress: impl FnMut(&str, Duration),
) -> anyhow::Result<SmokeReport> {
    let mut steps = Vec::new();
    let mut step = |name: &str, started: Instant, steps: &mut Vec<(String, Duration)>| {
        let took = started.elapsed();
        progress(name, took);
        steps.push((name.to_owned(), took));
    };

    let t = Instant::now();
    let mut server = DevServer::start(options).await?;
    let server_version = server
        .version()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "unknown".into());
    step(
        &format!(
            "started Temporal dev server ({server_version}) at {}",
            server.address()
        ),
        t,
        &mut steps,
    );

    let t = Instant::now();
    let Slice {
        task_queue,
        endpoint,
        connection,
        client,
        ..
    } = Slice::on(&server, "smoke").await?;
    step(
        &format!("created Nexus endpoint {endpoint} -> task queue {task_queue}"),
        t,
        &mut steps,
    );

    let t = Instant::now();
    let service = Service::new("smoke").operation(
        "echo",
        start_fn(|_, input| async move { Ok(StartOutcome::Sync(input)) }),
    );
    let worker = NexusWorker::new(
        connection.clone(),
        NexusWorkerOptions::new(server.namespace(), &task_queue),
        [service],
    )
    .await?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    step("Nexus worker polling", t, &mut steps);

    let t = Instant::now();
    let input = json!({"hello": "durable world"});
    let mut start = StartOperation::new(
        unique_name("smoke-op"),
        &endpoint,
        "smoke",
        "echo",
        payload::to_payload(&input)?,
    );
    start.schedule_to_close = Some(Duration::from_secs(30));
    let (op, _) = client.start(start).await?;
    let outcome = client.wait(&op, &CancellationToken::new()).await?;
    let OperationOutcome::Succeeded(result) = outcome else {
        anyhow::bail!("the round trip did not succeed: {outcome:?}");
    };
    let result = payload::to_json(&result)?;
    anyhow::ensure!(
        result == input,
        "the round trip changed the value: sent {input}, got {result}"
    );
    step(
        &format!(
            "standalone Nexus operation {} round trip returned {result}",
            op.operation_id
        ),
        t,
        &mut steps,
    );

    let t = Instant::now();
    shutdown.shutdown();
    running.await??;
    server.stop().await?;
    step("worker and server stopped", t, &mut steps);
    Ok(SmokeReport {
        server_version,
        address: server.address(),
        steps,
        result,
    })
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn smoke_run_completes_a_round_trip() {
        let mut seen = Vec::new();
        let report = super::run(Default::default(), |step, _| seen.push(step.to_owned()))
            .await
            .unwrap();
        assert_eq!(report.result, serde_json::json!({"hello": "durable world"}));
        assert_eq!(seen.len(), report.steps.len());
        assert!(
            seen[0].contains("CLI 1."),
            "the server version is reported: {seen:?}"
        );
    }
}
