//! Talking to a running dev server: connecting, readiness, namespaces and Nexus endpoints.
//!
//! Every call opens its own [`Connection`] on the caller's tokio runtime. A connection owns
//! tasks on the runtime that created it, and [`super::shared`] hands one server to many tests,
//! each on its own runtime; caching a connection here would break every test after the first.

use std::time::{Duration, Instant};

use temporalio_client::{
    Connection, ConnectionOptions, RetryOptions,
    tonic::{Code, Request},
};
use temporalio_protos::temporal::api::{
    nexus::v1::{
        Endpoint, EndpointSpec, EndpointTarget,
        endpoint_target::{Variant, Worker},
    },
    operatorservice::v1::{
        CreateNexusEndpointRequest, DeleteNexusEndpointRequest, ListNexusEndpointsRequest,
    },
    workflowservice::v1::{DescribeNamespaceRequest, RegisterNamespaceRequest},
};
use url::Url;

use super::HarnessError;

/// How long a fresh namespace gets to become visible before `create_namespace` gives up.
const NAMESPACE_VISIBLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Retention for namespaces the harness creates: test data is worthless after a day.
const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

fn identity() -> String {
    format!("durable-mcp-conformance@{}", std::process::id())
}

/// Options for a server the harness started: plain gRPC on loopback.
pub(crate) fn local_options(url: &Url) -> ConnectionOptions {
    ConnectionOptions::new(url.clone())
        .identity(identity())
        .connect_timeout(Duration::from_secs(5))
        .build()
}

/// Connects with the client's normal retry policy.
pub(crate) async fn connect(options: &ConnectionOptions) -> Result<Connection, HarnessError> {
    Connection::connect(options.clone())
        .await
        .map_err(|e| HarnessError::Connect {
            address: options.target.to_string(),
            message: e.to_string(),
        })
}

/// Why a server never became ready.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// The process (or container) stopped; carries its exit status.
    Exited(String),
    /// Time ran out; carries the last probe error.
    TimedOut(String),
}

/// One readiness probe: a connection (which itself calls `GetSystemInfo`) plus
/// `DescribeNamespace(namespace)`, both with short timeouts and almost no retries, so the
/// outer loop stays responsive to the process exiting.
async fn probe(url: &Url, namespace: &str) -> Result<(), String> {
    let retry = RetryOptions::builder()
        .max_retries(1)
        .max_elapsed_time(Some(Duration::from_millis(500)))
        .build();
    let opts = ConnectionOptions::new(url.clone())
        .identity(identity())
        .connect_timeout(Duration::from_secs(1))
        .retry_options(retry)
        .build();
    let conn = Connection::connect(opts).await.map_err(|e| e.to_string())?;
    let req = DescribeNamespaceRequest {
        namespace: namespace.to_owned(),
        ..Default::default()
    };
    conn.workflow_service()
        .describe_namespace(Request::new(req))
        .await
        .map(drop)
        .map_err(|s| format!("DescribeNamespace({namespace}): {s}"))
}

/// Polls until the server answers, the deadline passes, or `exited` reports that the server
/// is gone (checked before every probe, so a crash is reported at once, not after the
/// timeout).
pub(crate) async fn wait_ready(
    url: &Url,
    namespace: &str,
    timeout: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::from("no probe completed");
    loop {
        if let Some(status) = exited() {
            return Err(NotReady::Exited(status));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NotReady::TimedOut(last_error));
        }
        // Keep watching the process while a probe is in flight: if something else holds the
        // port, the probe talks to *that* and may hang until its timeout although our server
        // died at once.
        let probe_deadline = Instant::now() + left.min(Duration::from_secs(5));
        let attempt = probe(url, namespace);
        tokio::pin!(attempt);
        let outcome = loop {
            tokio::select! {
                result = &mut attempt => break Some(result),
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if let Some(status) = exited() {
                        return Err(NotReady::Exited(status));
                    }
                    if Instant::now() >= probe_deadline {
                        break None;
                    }
                }
            }
        };
        match outcome {
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) => last_error = e,
            None => last_error = "probe timed out".to_owned(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Registers `name` unless it exists, then waits until `DescribeNamespace` finds it.
pub(crate) async fn create_namespace(
    options: &ConnectionOptions,
    name: &str,
) -> Result<(), HarnessError> {
    let conn = connect(options).await?;
    let mut svc = conn.workflow_service();
    let req = RegisterNamespaceRequest {
        namespace: name.to_owned(),
        description: "created by the durable-mcp test harness".to_owned(),
        workflow_execution_retention_period: Some(prost_wkt_types::Duration {
            seconds: RETENTION.as_secs() as i64,
            nanos: 0,
        }),
        ..Default::default()
    };
    match svc.register_namespace(Request::new(req)).await {
        Ok(_) => {}
        Err(s) if s.code() == Code::AlreadyExists => {}
        Err(s) => return Err(HarnessError::rpc(format!("RegisterNamespace({name})"), s)),
    }

    let deadline = Instant::now() + NAMESPACE_VISIBLE_TIMEOUT;
    loop {
        let req = DescribeNamespaceRequest {
            namespace: name.to_owned(),
            ..Default::default()
        };
        match svc.describe_namespace(Request::new(req)).await {
            Ok(_) => return Ok(()),
            Err(s) if s.code() == Code::NotFound && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(s) if s.code() == Code::NotFound => {
                return Err(HarnessError::Timeout {
                    what: format!("namespace {name:?} to become visible"),
                    timeout: NAMESPACE_VISIBLE_TIMEOUT,
                });
            }
            Err(s) => return Err(HarnessError::rpc(format!("DescribeNamespace({name})"), s)),
        }
    }
}

/// The spec the harness registers: route to workers polling `task_queue` in `namespace`.
pub(crate) fn endpoint_spec(name: &str, namespace: &str, task_queue: &str) -> EndpointSpec {
    EndpointSpec {
        name: name.to_owned(),
        description: None,
        target: Some(EndpointTarget {
            variant: Some(Variant::Worker(Worker {
                namespace: namespace.to_owned(),
                task_queue: task_queue.to_owned(),
            })),
        }),
    }
}

/// Creates a Nexus endpoint. If one with that name exists and routes to the same place, that is
/// success; if it routes elsewhere, that is a [`HarnessError::Conflict`] (silently reusing it
/// would send a test's Nexus calls to another test's worker).
pub(crate) async fn create_nexus_endpoint(
    options: &ConnectionOptions,
    name: &str,
    namespace: &str,
    task_queue: &str,
) -> Result<(), HarnessError> {
    let conn = connect(options).await?;
    let mut svc = conn.operator_service();
    let spec = endpoint_spec(name, namespace, task_queue);
    let req = CreateNexusEndpointRequest {
        spec: Some(spec.clone()),
    };
    match svc.create_nexus_endpoint(Request::new(req)).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => {
            let existing = find_nexus_endpoint(&conn, name).await?.and_then(|e| e.spec);
            match existing {
                Some(found) if found.target == spec.target => Ok(()),
                Some(found) => Err(HarnessError::Conflict {
                    what: format!("Nexus endpoint {name:?}"),
                    detail: format!("it targets {:?}, wanted {:?}", found.target, spec.target),
                }),
                None => Err(HarnessError::rpc(format!("CreateNexusEndpoint({name})"), s)),
            }
        }
        Err(s) => Err(HarnessError::rpc(format!("CreateNexusEndpoint({name})"), s)),
    }
}

/// The endpoint called `name`, if the server has one.
async fn find_nexus_endpoint(
    conn: &Connection,
    name: &str,
) -> Result<Option<Endpoint>, HarnessError> {
    let req = ListNexusEndpointsRequest {
        page_size: 10,
        name: name.to_owned(),
        ..Default::default()
    };
    Ok(conn
        .operator_service()
        .list_nexus_endpoints(Request::new(req))
        .await
        .map_err(|s| HarnessError::rpc(format!("ListNexusEndpoints({name})"), s))?
        .into_inner()
        .endpoints
        .into_iter()
        .find(|e| e.spec.as_ref().is_some_and(|s| s.name == name)))
}

/// Deletes the endpoint called `name`; one that does not exist is fine. A run against a
/// server the user owns leaves nothing behind (R-CNF-5).
pub(crate) async fn delete_nexus_endpoint(
    options: &ConnectionOptions,
    name: &str,
) -> Result<(), HarnessError> {
    let conn = connect(options).await?;
    let Some(endpoint) = find_nexus_endpoint(&conn, name).await? else {
        return Ok(());
    };
    let req = DeleteNexusEndpointRequest {
        id: endpoint.id,
        version: endpoint.version,
    };
    match conn
        .operator_service()
        .delete_nexus_endpoint(Request::new(req))
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Ok(()),
        Err(s) => Err(HarnessError::rpc(format!("DeleteNexusEndpoint({name})"), s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_spec_targets_worker_queue() {
        let spec = endpoint_spec("ep-1", "ns", "tq");
        assert_eq!(spec.name, "ep-1");
        match spec.target.and_then(|t| t.variant) {
            Some(Variant::Worker(w)) => {
                assert_eq!((w.namespace.as_str(), w.task_queue.as_str()), ("ns", "tq"));
            }
            other => panic!("unexpected target {other:?}"),
        }
    }
}
