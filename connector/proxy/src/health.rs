//! The proxy's readiness (R-RUN-5), as plain data for whoever serves it: `durable-mcp-proxy`'s
//! `--health-addr` listener, or a library host's own server ([`crate::Proxy::health`]).
//!
//! Ready when Temporal answers (one cheap RPC, its answer kept for a second), the Nexus and
//! Activity workers poll (started and not shut down), and every upstream's last `tools/list`
//! answered. The report names each upstream's service and its state (listed with how many
//! tools, failing since when, or never listed), nothing more: no command, URL or error text
//! (those are in the log).

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicU8, Ordering},
};

use durable_mcp_runtime::temporal::probe::TemporalProbe;
use serde_json::{Map, Value, json};
use temporalio_client::Connection;

use crate::discovery::{Discovery, DiscoveryState};

/// One of the proxy's two workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerKind {
    /// The Nexus worker (listings and call starts).
    Nexus,
    /// The SDK worker running the tool-call Activity.
    Activity,
}

/// Where a worker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// Nobody reports it (a library host that does not call [`ProxyHealth::set_worker`]):
    /// not part of readiness.
    Untracked = 0,
    Starting = 1,
    Polling = 2,
    Stopped = 3,
}

impl WorkerState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Starting,
            2 => Self::Polling,
            3 => Self::Stopped,
            _ => Self::Untracked,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Untracked => "untracked",
            Self::Starting => "starting",
            Self::Polling => "polling",
            Self::Stopped => "stopped",
        }
    }
}

/// A readiness answer: `ready` (HTTP 200, else 503) and the JSON body saying why.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    pub ready: bool,
    pub body: Value,
}

struct Shared {
    temporal: TemporalProbe,
    upstreams: OnceLock<Vec<(String, Arc<Discovery>)>>,
    nexus: AtomicU8,
    activity: AtomicU8,
}

/// The proxy's health, cheap to clone; see the [module doc](self).
#[derive(Clone)]
pub struct ProxyHealth(Arc<Shared>);

impl ProxyHealth {
    /// Health of a proxy on `connection` whose upstreams are not known yet (until
    /// [`crate::run_proxy_with_health`] builds them) and whose workers are starting.
    pub fn new(connection: Connection) -> Self {
        Self(Arc::new(Shared {
            temporal: TemporalProbe::new(connection),
            upstreams: OnceLock::new(),
            nexus: AtomicU8::new(WorkerState::Starting as u8),
            activity: AtomicU8::new(WorkerState::Starting as u8),
        }))
    }

    /// Health of built upstreams whose workers nobody reports yet.
    pub(crate) fn of_upstreams(
        connection: Connection,
        upstreams: Vec<(String, Arc<Discovery>)>,
    ) -> Self {
        let health = Self::new(connection);
        health.set_worker(WorkerKind::Nexus, WorkerState::Untracked);
        health.set_worker(WorkerKind::Activity, WorkerState::Untracked);
        health.watch(upstreams);
        health
    }

    /// Follows these upstreams' discoveries (the first call wins).
    pub(crate) fn watch(&self, upstreams: Vec<(String, Arc<Discovery>)>) {
        let _ = self.0.upstreams.set(upstreams);
    }

    /// Reports where one of the workers stands.
    pub fn set_worker(&self, kind: WorkerKind, state: WorkerState) {
        let slot = match kind {
            WorkerKind::Nexus => &self.0.nexus,
            WorkerKind::Activity => &self.0.activity,
        };
        slot.store(state as u8, Ordering::SeqCst);
    }

    /// The checks now (Temporal's answer at most a second old).
    pub async fn readiness(&self) -> Readiness {
        let temporal = self.0.temporal.check().await;
        let workers = [&self.0.nexus, &self.0.activity]
            .map(|w| WorkerState::from_u8(w.load(Ordering::SeqCst)));
        let upstreams = self.0.upstreams.get().map(|list| {
            list.iter()
                .map(|(service, d)| (service.clone(), d.state()))
                .collect::<Vec<_>>()
        });
        readiness(
            temporal,
            workers,
            upstreams.as_deref(),
            std::time::SystemTime::now(),
        )
    }
}

/// The report of the checks' results (pure; `now` dates "failing for").
pub fn readiness(
    temporal: Result<(), String>,
    [nexus, activity]: [WorkerState; 2],
    upstreams: Option<&[(String, DiscoveryState)]>,
    now: std::time::SystemTime,
) -> Readiness {
    let workers_ok = [nexus, activity]
        .iter()
        .all(|w| matches!(w, WorkerState::Polling | WorkerState::Untracked));
    let mut listed = Map::new();
    let mut upstreams_ok = upstreams.is_some();
    for (service, state) in upstreams.unwrap_or_default() {
        let entry = match state {
            DiscoveryState::Listed { tools } => json!({"state": "listed", "tools": tools}),
            DiscoveryState::NeverListed => json!({"state": "never listed"}),
            DiscoveryState::Failing { since, kept } => json!({
                "state": "failing",
                "since": humantime::format_rfc3339_seconds(*since).to_string(),
                "failing_for_seconds": now.duration_since(*since).map_or(0, |d| d.as_secs()),
                "serving_last_list": kept,
            }),
        };
        upstreams_ok &= matches!(state, DiscoveryState::Listed { .. });
        listed.insert(service.clone(), entry);
    }
    let ready = temporal.is_ok() && workers_ok && upstreams_ok;
    let temporal = match temporal {
        Ok(()) => json!({"ok": true}),
        Err(why) => json!({"ok": false, "error": why}),
    };
    let upstreams = match upstreams {
        Some(_) => json!({"ok": upstreams_ok, "services": listed}),
        None => json!({"ok": false, "error": "the upstreams are not built yet"}),
    };
    Readiness {
        ready,
        body: json!({
            "status": if ready { "ready" } else { "not ready" },
            "checks": {
                "temporal": temporal,
                "workers": {"ok": workers_ok, "nexus": nexus.name(), "activity": activity.name()},
                "upstreams": upstreams,
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    const POLLING: [WorkerState; 2] = [WorkerState::Polling, WorkerState::Polling];

    #[test]
    fn ready_needs_temporal_polling_workers_and_every_upstream_listed() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let listed = [("good".to_string(), DiscoveryState::Listed { tools: 3 })];
        let ok = readiness(Ok(()), POLLING, Some(&listed), now);
        assert!(ok.ready, "{}", ok.body);
        assert_eq!(
            ok.body["checks"]["upstreams"]["services"]["good"]["tools"],
            3
        );

        let failing = [
            listed[0].clone(),
            (
                "bad".to_string(),
                DiscoveryState::Failing {
                    since: now - Duration::from_secs(30),
                    kept: false,
                },
            ),
        ];
        let not = readiness(Ok(()), POLLING, Some(&failing), now);
        assert!(!not.ready);
        let bad = &not.body["checks"]["upstreams"]["services"]["bad"];
        assert_eq!(bad["state"], "failing");
        assert_eq!(bad["failing_for_seconds"], 30);
        assert_eq!(bad["since"], "1970-01-01T00:16:10Z");

        let never = [("new".to_string(), DiscoveryState::NeverListed)];
        assert!(!readiness(Ok(()), POLLING, Some(&never), now).ready);
        assert!(!readiness(Ok(()), POLLING, None, now).ready);
        assert!(!readiness(Err("down".into()), POLLING, Some(&listed), now).ready);
        for worker in [WorkerState::Starting, WorkerState::Stopped] {
            let r = readiness(Ok(()), [WorkerState::Polling, worker], Some(&listed), now);
            assert!(!r.ready);
            assert_eq!(r.body["checks"]["workers"]["activity"], worker.name());
        }
        let untracked = [WorkerState::Untracked, WorkerState::Untracked];
        assert!(readiness(Ok(()), untracked, Some(&listed), now).ready);
    }
}
