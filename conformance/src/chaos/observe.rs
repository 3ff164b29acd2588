//! What the chaos run reads besides its clients' answers (R-CNF-24): the upstreams' ledger,
//! Temporal's record of open work, each process's memory, and direct calls to a twin of the
//! upstream for the read-only comparison.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use temporalio_protos::temporal::api::workflowservice::v1::{
    CountActivityExecutionsRequest, CountNexusOperationExecutionsRequest,
    CountWorkflowExecutionsRequest, ListActivityExecutionsRequest,
    ListNexusOperationExecutionsRequest,
};

use super::history::{Call, CallKind, End, OpenWork, Runs};
use crate::{
    fixtures::{Ledger, LedgerEvent, SpecSource, UpstreamSpec},
    kit::mcp::stateless_http_client,
    load::procstat,
};

/// What is running in the namespace.
const RUNNING: &str = "ExecutionStatus = 'Running'";

/// The ledger's runs, by call key.
pub fn runs(ledger: &Ledger) -> BTreeMap<String, Runs> {
    let mut runs: BTreeMap<String, Runs> = BTreeMap::new();
    for entry in ledger.read() {
        let Some(key) = entry.key else { continue };
        let r = runs.entry(key).or_default();
        match entry.event {
            LedgerEvent::Called => r.called += 1,
            LedgerEvent::Completed => r.completed_runs.extend(entry.run),
            _ => {}
        }
    }
    runs
}

/// Counts the open Nexus operations, Activities and Workflows once; a few ids of what is open.
async fn open_now(
    connection: &temporalio_client::Connection,
    namespace: &str,
) -> anyhow::Result<OpenWork> {
    let mut service = connection.workflow_service();
    let ns = namespace.to_owned();
    let query = RUNNING.to_owned();
    let nexus = service
        .count_nexus_operation_executions(tonic::Request::new(
            CountNexusOperationExecutionsRequest {
                namespace: ns.clone(),
                query: query.clone(),
            },
        ))
        .await?
        .into_inner()
        .count;
    let activities = service
        .count_activity_executions(tonic::Request::new(CountActivityExecutionsRequest {
            namespace: ns.clone(),
            query: query.clone(),
        }))
        .await?
        .into_inner()
        .count;
    let workflows = service
        .count_workflow_executions(tonic::Request::new(CountWorkflowExecutionsRequest {
            namespace: ns.clone(),
            query: query.clone(),
        }))
        .await?
        .into_inner()
        .count;
    let mut examples = Vec::new();
    if nexus > 0 {
        let listed = service
            .list_nexus_operation_executions(tonic::Request::new(
                ListNexusOperationExecutionsRequest {
                    namespace: ns.clone(),
                    page_size: 5,
                    query: query.clone(),
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        examples.extend(listed.operations.into_iter().map(|o| o.operation_id));
    }
    if activities > 0 {
        let listed = service
            .list_activity_executions(tonic::Request::new(ListActivityExecutionsRequest {
                namespace: ns,
                page_size: 5,
                query,
                ..Default::default()
            }))
            .await?
            .into_inner();
        examples.extend(listed.executions.into_iter().map(|a| a.activity_id));
    }
    Ok(OpenWork {
        nexus_operations: nexus as usize,
        activities: activities as usize,
        workflows: workflows as usize,
        examples,
    })
}

/// Waits (up to `within`) until Temporal holds no open work; answers what it last saw (what
/// is still open when the time is up). Visibility lags the executions by a moment.
pub async fn wait_until_nothing_open(
    connection: &temporalio_client::Connection,
    namespace: &str,
    within: Duration,
) -> OpenWork {
    let deadline = Instant::now() + within;
    let mut last = OpenWork::default();
    loop {
        match open_now(connection, namespace).await {
            Ok(open) if open.nexus_operations + open.activities + open.workflows == 0 => {
                return open;
            }
            Ok(open) => last = open,
            Err(e) => last.examples = vec![format!("(could not ask Temporal: {e})")],
        }
        if Instant::now() >= deadline {
            return last;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Resident memory of `pid` in MiB, if it runs.
pub fn rss_mib(pid: Option<u32>) -> Option<f64> {
    pid.and_then(procstat::sample)
        .map(|s| s.rss_kib as f64 / 1024.0)
}

/// Each read-only call answered with a result, called directly (a fresh rmcp session) on a
/// twin of the upstream: the mock with the same spec, writing no ledger.
pub async fn direct_results(calls: &[Call], dir: &Path) -> BTreeMap<usize, Result<Value, String>> {
    let reads: Vec<&Call> = calls
        .iter()
        .filter(|c| c.kind == CallKind::Read && c.end == End::Ok)
        .collect();
    let mut out = BTreeMap::new();
    if reads.is_empty() {
        return out;
    }
    let twin = async {
        let mut twins = Vec::new();
        for (prefix, file) in [("h_", "spec-http.json"), ("s_", "spec-stdio.json")] {
            let spec = UpstreamSpec::from_file(&dir.join(file))?;
            let server = crate::fixtures::serve_mock_upstream_http_with(
                SpecSource::Inline(spec),
                None,
                "127.0.0.1:0".parse()?,
                None,
            )
            .await?;
            // The protocol the workload's clients speak (2026-07-28, stateless).
            let client = stateless_http_client(&server.url, ()).await?;
            twins.push((prefix, server, client));
        }
        anyhow::Ok(twins)
    };
    let twins = match twin.await {
        Ok(twins) => twins,
        Err(e) => {
            for call in reads {
                out.insert(call.id, Err(format!("no twin of the upstream: {e:#}")));
            }
            return out;
        }
    };
    for call in reads {
        let Some((_, _, client)) = twins.iter().find(|(p, _, _)| call.tool.starts_with(*p)) else {
            continue;
        };
        let arguments = call.arguments.as_object().cloned().unwrap_or_default();
        let params = CallToolRequestParams::new(call.tool.clone()).with_arguments(arguments);
        let direct = client
            .peer()
            .call_tool(params)
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string()));
        out.insert(call.id, direct);
    }
    for (_, server, client) in twins {
        let _ = client.cancel().await;
        server.shutdown().await;
    }
    out
}
