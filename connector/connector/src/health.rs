//! `/readyz` of the HTTP connector (R-RUN-4): ready when Temporal answers and every route's
//! Nexus endpoint exists. The checks' answer is kept for a second ([`PROBE_TTL`]), so a flood of
//! probes costs one round of RPCs a second. The body names what failed and nothing more: the
//! unknown endpoints by name (operators named them), no service, tool or server message.
//!
//! A library host that serves its own HTTP mounts [`Readiness::check`], plain data.

use std::sync::Arc;

use durable_mcp_runtime::nexus::OperationClient;
use durable_mcp_runtime::temporal::probe::{Cached, PROBE_TIMEOUT, PROBE_TTL, TemporalProbe};
use serde_json::{Value, json};
use temporalio_client::Connection;
use temporalio_protos::temporal::api::operatorservice::v1::ListNexusEndpointsRequest;

use crate::route::Route;

/// Where the readiness check is served.
pub const READY_PATH: &str = "/readyz";

/// What a route's endpoint turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointState {
    Known,
    /// The server lists no endpoint of that name.
    Unknown,
    /// The server would not list endpoints (a hosted namespace may refuse): trusted.
    Unchecked,
}

/// A readiness answer: `ready` (200, else 503) and the JSON body saying why.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub ready: bool,
    pub body: Value,
}

/// The report of the checks' results (pure): ready when Temporal answered and no endpoint is
/// unknown. While Temporal does not answer, endpoints are not asked about.
pub fn report(temporal: Result<(), String>, endpoints: &[(String, EndpointState)]) -> Report {
    let count = |state: EndpointState| endpoints.iter().filter(|(_, s)| *s == state).count();
    let unknown: Vec<&str> = endpoints
        .iter()
        .filter(|(_, s)| *s == EndpointState::Unknown)
        .map(|(name, _)| name.as_str())
        .collect();
    let ready = temporal.is_ok() && unknown.is_empty();
    let temporal = match temporal {
        Ok(()) => json!({"ok": true}),
        Err(why) => json!({"ok": false, "error": why}),
    };
    let mut endpoints = json!({
        "ok": unknown.is_empty(),
        "known": count(EndpointState::Known),
        "unchecked": count(EndpointState::Unchecked),
        "unknown": unknown,
    });
    if let (false, Some(fields)) = (unknown.is_empty(), endpoints.as_object_mut()) {
        fields.insert("error".into(), json!(
            "no Nexus endpoint of this name: create it (temporal operator nexus endpoint create) or fix --route"
        ));
    }
    let body = json!({
        "status": if ready { "ready" } else { "not ready" },
        "checks": {"temporal": temporal, "endpoints": endpoints},
    });
    Report { ready, body }
}

/// The connector's readiness checks, cheap to clone.
#[derive(Clone)]
pub struct Readiness {
    temporal: TemporalProbe,
    connection: Connection,
    endpoints: Arc<Vec<String>>,
    cached: Arc<Cached<Report>>,
}

impl Readiness {
    /// Checks `client`'s Temporal connection and the endpoints of `routes`.
    pub fn new(client: &OperationClient, routes: &[Route]) -> Self {
        let mut endpoints: Vec<String> = routes.iter().map(|r| r.endpoint.clone()).collect();
        endpoints.sort();
        endpoints.dedup();
        Self {
            temporal: TemporalProbe::new(client.connection().clone()),
            connection: client.connection().clone(),
            endpoints: Arc::new(endpoints),
            cached: Arc::new(Cached::new(PROBE_TTL)),
        }
    }

    /// Runs the checks (or answers the last ones, when younger than [`PROBE_TTL`]).
    pub async fn check(&self) -> Report {
        self.cached.get_or(|| self.check_now()).await
    }

    async fn check_now(&self) -> Report {
        let temporal = self.temporal.check().await;
        let mut endpoints = Vec::new();
        if temporal.is_ok() {
            let states = self
                .endpoints
                .iter()
                .map(|name| endpoint_state(&self.connection, name));
            let states = futures::future::join_all(states).await;
            endpoints = self.endpoints.iter().cloned().zip(states).collect();
        }
        report(temporal, &endpoints)
    }
}

/// Whether the server lists a Nexus endpoint named `name`; any error leaves it unchecked.
async fn endpoint_state(connection: &Connection, name: &str) -> EndpointState {
    let request = ListNexusEndpointsRequest {
        page_size: 10,
        name: name.to_owned(),
        ..Default::default()
    };
    let mut operator = connection.operator_service();
    let listed = operator.list_nexus_endpoints(tonic::Request::new(request));
    match tokio::time::timeout(PROBE_TIMEOUT, listed).await {
        Ok(Ok(answer)) => {
            let known = answer
                .into_inner()
                .endpoints
                .iter()
                .any(|e| e.spec.as_ref().is_some_and(|s| s.name == name));
            if known {
                EndpointState::Known
            } else {
                EndpointState::Unknown
            }
        }
        _ => EndpointState::Unchecked,
    }
}

/// The axum handler's answer: 200 or 503 with the report's body.
pub async fn readyz(readiness: Readiness) -> (axum::http::StatusCode, axum::Json<Value>) {
    let report = readiness.check().await;
    answer(report.ready, report.body)
}

/// A readiness answer over HTTP: 200 when ready, else 503, with `body` as JSON.
pub fn answer(ready: bool, body: Value) -> (axum::http::StatusCode, axum::Json<Value>) {
    let status = if ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(states: &[(&str, EndpointState)]) -> Vec<(String, EndpointState)> {
        states
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect()
    }

    #[test]
    fn ready_needs_temporal_and_no_unknown_endpoint() {
        let good = endpoints(&[("a", EndpointState::Known), ("b", EndpointState::Unchecked)]);
        let ok = report(Ok(()), &good);
        assert!(ok.ready);
        assert_eq!(ok.body["status"], "ready");
        assert_eq!(ok.body["checks"]["endpoints"]["known"], 1);
        assert_eq!(ok.body["checks"]["endpoints"]["unchecked"], 1);

        let down = report(Err("Temporal answered Unavailable".into()), &[]);
        assert!(!down.ready);
        assert_eq!(down.body["checks"]["temporal"]["ok"], false);
        assert_eq!(
            down.body["checks"]["temporal"]["error"],
            "Temporal answered Unavailable"
        );

        let missing = report(Ok(()), &endpoints(&[("gone", EndpointState::Unknown)]));
        assert!(!missing.ready);
        assert_eq!(missing.body["status"], "not ready");
        assert_eq!(
            missing.body["checks"]["endpoints"]["unknown"],
            json!(["gone"])
        );
        assert!(missing.body["checks"]["endpoints"]["error"].is_string());
    }
}
