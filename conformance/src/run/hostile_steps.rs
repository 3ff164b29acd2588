//! The hostile callers' steps of the `security` scenarios: a listing loop, connections from one
//! address past its cap, the proxy's peak memory after a hostile upstream had its go, and a
//! Temporal principal planting another Workflow's ciphertext in one of its own.

use std::{net::SocketAddr, time::Duration};

use rmcp::model::{ClientRequest, ListToolsRequest, ServerResult};
use tokio::{io::AsyncReadExt as _, net::TcpStream};

use super::{Failure, StepEnv, proxy_process::Proxy, setup};
use crate::scenario::{ChurnSubscriptions, Connections, ListTools, PlantCiphertext, ProxyMemory};

/// How long a connection over a cap has to be told so (the connector answers at accept).
const REFUSAL_WAIT: Duration = Duration::from_millis(500);

/// `list_tools`: `times` listings, each sent to the connector (rmcp's client cache bypassed).
pub(crate) async fn run_list_tools(env: &StepEnv<'_>, step: &ListTools) -> Result<String, Failure> {
    let client = env
        .replicas()?
        .get(step.connector.as_deref())
        .map_err(setup)?;
    let started = std::time::Instant::now();
    let (mut listed, mut refused) = (0, 0);
    let served = step.refused_after.unwrap_or(step.times);
    let refusal = step.refusal_contains.as_deref().unwrap_or("");
    for i in 1..=step.times {
        let request = ClientRequest::ListToolsRequest(ListToolsRequest {
            method: Default::default(),
            params: None,
            extensions: Default::default(),
        });
        let violated = |what: String| {
            Err(Failure::Violated(format!(
                "listing {i} of {}: {what}",
                step.times
            )))
        };
        match client.peer().send_request(request).await {
            Ok(ServerResult::ListToolsResult(list)) if !list.tools.is_empty() && i <= served => {
                listed = list.tools.len();
            }
            Err(e) if i > served && e.to_string().contains(refusal) => refused += 1,
            Ok(other) => return violated(format!("expected the tools, got {other:?}")),
            Err(e) if i <= served => return violated(format!("failed: {e}")),
            Err(e) => return violated(format!("expected a refusal containing {refusal:?}: {e}")),
        }
    }
    Ok(format!(
        "{served} listings of {listed} tools, {refused} refused, in {} ms",
        started.elapsed().as_millis()
    ))
}

/// `connections`: opens the connections one by one from `from`; one the connector answers at
/// once (and closes) is refused, one it holds without a word is served and kept open.
pub(crate) async fn run_connections(
    env: &mut StepEnv<'_>,
    step: &Connections,
) -> Result<String, Failure> {
    let url: url::Url = env
        .replicas()?
        .url(step.connector.as_deref())
        .map_err(setup)?
        .parse()
        .map_err(setup)?;
    let host: std::net::IpAddr = url
        .host_str()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .parse()
        .map_err(setup)?;
    let to = SocketAddr::new(host, url.port().unwrap_or(80));
    let (mut served, mut refusals) = (0, Vec::new());
    for _ in 0..step.count {
        let mut stream = connect_from(step.from, to)
            .await
            .map_err(|e| Failure::Setup(format!("connecting from {} to {to}: {e}", step.from)))?;
        let answer = match &step.forwarded_for {
            Some(client) => through_a_proxy(&mut stream, client).await,
            None => refused(&mut stream).await,
        };
        match answer {
            Some(answer) => refusals.push(answer),
            None => {
                served += 1;
                env.held.push(stream);
            }
        }
    }
    let seen = format!("{served} served, {} refused", refusals.len());
    if served != step.served || refusals.len() != step.refused {
        return Err(Failure::Violated(format!(
            "expected {} served and {} refused of {} connections from {}, saw {seen}",
            step.served, step.refused, step.count, step.from
        )));
    }
    if let Some(want) = &step.refusal_contains
        && let Some(answer) = refusals
            .iter()
            .find(|a| !a.starts_with("HTTP/1.1 503") || !a.contains(want.as_str()))
    {
        return Err(Failure::Violated(format!(
            "expected a 503 naming {want:?}, saw {answer:?}"
        )));
    }
    Ok(seen)
}

async fn connect_from(from: std::net::IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = if from.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// A request as a reverse proxy at this connection's address sends it for `client`: `None`
/// when it is served (200, the connection kept open), else the answer (R-CON-50).
async fn through_a_proxy(stream: &mut TcpStream, client: &str) -> Option<String> {
    use tokio::io::AsyncWriteExt as _;
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: {client}\r\n\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()).await {
        return Some(format!("(write failed: {e})"));
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // One small answer: read its head, then as much body as it says.
    while !complete_answer(&answer) {
        match tokio::time::timeout(REFUSAL_WAIT * 4, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            Ok(Ok(_)) | Ok(Err(_)) | Err(_) => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (!answer.starts_with("HTTP/1.1 200")).then_some(answer)
}

/// Whether `answer` holds a whole HTTP answer: its head and the `Content-Length` bytes after.
fn complete_answer(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    body.len() >= length
}

/// What the connector said before closing the connection, when it spoke first (a refusal).
async fn refused(stream: &mut TcpStream) -> Option<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(REFUSAL_WAIT, stream.read(&mut buf)).await {
        Err(_) => return None,
        Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
        Ok(Err(e)) => return Some(format!("(reset: {e})")),
    }
    let _ = tokio::time::timeout(REFUSAL_WAIT, stream.read_to_end(&mut answer)).await;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// `proxy_memory`: the proxy process's `VmHWM` (peak resident set) against the bound.
pub(crate) fn run_proxy_memory(env: &StepEnv<'_>, step: &ProxyMemory) -> Result<String, Failure> {
    let Proxy::Process(child) = &env.proxy else {
        return Err(Failure::Setup(
            "proxy_memory needs a running proxy process".into(),
        ));
    };
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.pid())).map_err(setup)?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| Failure::Setup("no VmHWM in the proxy's /proc status".into()))?;
    let mib = kib / 1024;
    if mib >= step.peak_below_mib {
        return Err(Failure::Violated(format!(
            "the proxy's peak resident memory is {mib} MiB, not below {} MiB",
            step.peak_below_mib
        )));
    }
    Ok(format!("the proxy's peak resident memory is {mib} MiB"))
}

/// `plant_ciphertext`: a Temporal principal without codec access (the runner's own Temporal
/// connection) reads the input Workflow `from` was started with, as stored, and starts
/// Workflow `into` (same type and task queue) with it (R-OPS-7).
pub(crate) async fn run_plant_ciphertext(
    env: &StepEnv<'_>,
    step: &PlantCiphertext,
) -> Result<String, Failure> {
    use temporalio_protos::temporal::api::{
        common::v1::WorkflowExecution,
        history::v1::history_event::Attributes,
        workflowservice::v1::{GetWorkflowExecutionHistoryRequest, StartWorkflowExecutionRequest},
    };
    let [from, into] = [&step.from, &step.into].map(|s| env.fill(s));
    let namespace = env.client.namespace().to_owned();
    let mut service = env.client.connection().workflow_service();
    let history = service
        .get_workflow_execution_history(tonic::Request::new(GetWorkflowExecutionHistoryRequest {
            namespace: namespace.clone(),
            execution: Some(WorkflowExecution {
                workflow_id: from.clone(),
                run_id: String::new(),
            }),
            ..Default::default()
        }))
        .await
        .map_err(|e| Failure::Setup(format!("reading {from}'s history: {e}")))?
        .into_inner();
    let first = history.history.and_then(|h| h.events.into_iter().next());
    let Some(Attributes::WorkflowExecutionStartedEventAttributes(started)) =
        first.and_then(|e| e.attributes)
    else {
        return Err(Failure::Setup(format!("{from} has no start event")));
    };
    service
        .start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace,
            workflow_id: into.clone(),
            workflow_type: started.workflow_type,
            task_queue: started.task_queue,
            input: started.input,
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        }))
        .await
        .map_err(|e| Failure::Setup(format!("starting {into}: {e}")))?;
    Ok(format!("{from}'s stored input planted into {into}"))
}

/// `churn_subscriptions`: subscribes to each URI and unsubscribes again, through one raw
/// session of the replica; counts the subscribes refused.
pub(crate) async fn churn_subscriptions(
    env: &StepEnv<'_>,
    step: &ChurnSubscriptions,
) -> Result<String, Failure> {
    let mut client = env.raw_client(step.connector.as_deref()).await?;
    let mut refused = 0;
    for n in 1..=step.count {
        let uri = step.uri.replace("{n}", &n.to_string());
        let params = serde_json::json!({"uri": uri});
        let subscribed = client
            .exchange("resources/subscribe", params.clone())
            .await
            .map_err(|e| Failure::Setup(format!("resources/subscribe {uri}: {e:#}")))?;
        if subscribed.get("error").is_some() {
            refused += 1;
        }
        client
            .exchange("resources/unsubscribe", params)
            .await
            .map_err(|e| Failure::Setup(format!("resources/unsubscribe {uri}: {e:#}")))?;
    }
    Ok(format!(
        "{} subscribed to and unsubscribed from, {refused} of the subscribes refused",
        step.count
    ))
}
