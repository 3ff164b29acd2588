//! Whether Temporal answers, for the binaries' `/readyz` (R-RUN-4, R-RUN-5): one cheap RPC
//! (`GetSystemInfo`) bounded by [`PROBE_TIMEOUT`], its answer kept for [`PROBE_TTL`] so that a
//! flood of probes costs one RPC a second, and concurrent probes share one RPC.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use temporalio_client::Connection;
use temporalio_protos::temporal::api::workflowservice::v1::GetSystemInfoRequest;

/// The longest one reachability RPC may take before Temporal counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a probe's answer is reused.
pub const PROBE_TTL: Duration = Duration::from_secs(1);

/// A value computed at most once per `ttl`; callers that arrive while it is computed wait for
/// that computation instead of starting their own.
pub struct Cached<T> {
    ttl: Duration,
    last: tokio::sync::Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Cached<T> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The kept value while it is younger than the ttl, else what `compute` gives (kept).
    pub async fn get_or<F: Future<Output = T>>(&self, compute: impl FnOnce() -> F) -> T {
        let mut last = self.last.lock().await;
        if let Some((at, value)) = last.as_ref()
            && at.elapsed() < self.ttl
        {
            return value.clone();
        }
        let value = compute().await;
        *last = Some((Instant::now(), value.clone()));
        value
    }
}

/// Whether the Temporal frontend behind a connection answers.
#[derive(Clone)]
pub struct TemporalProbe {
    connection: Connection,
    cached: Arc<Cached<Result<(), String>>>,
}

impl TemporalProbe {
    pub fn new(connection: Connection) -> Self {
        Self {
            connection,
            cached: Arc::new(Cached::new(PROBE_TTL)),
        }
    }

    /// `Ok` when the frontend answered `GetSystemInfo` within [`PROBE_TIMEOUT`] (at most
    /// [`PROBE_TTL`] ago); else why not: the gRPC status code or the timeout, never the
    /// server's message (it is shown to unauthenticated probes).
    pub async fn check(&self) -> Result<(), String> {
        self.cached.get_or(|| reach(&self.connection)).await
    }
}

async fn reach(connection: &Connection) -> Result<(), String> {
    let mut service = connection.workflow_service();
    let call = service.get_system_info(tonic::Request::new(GetSystemInfoRequest::default()));
    match tokio::time::timeout(PROBE_TIMEOUT, call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("Temporal answered {:?}", status.code())),
        Err(_) => Err(format!(
            "Temporal did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_cached_value_is_computed_once_per_ttl() {
        let cached = Cached::new(Duration::from_millis(200));
        let runs = AtomicUsize::new(0);
        let compute = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            runs.load(Ordering::SeqCst)
        };
        assert_eq!(cached.get_or(compute).await, 1);
        assert_eq!(cached.get_or(compute).await, 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(cached.get_or(compute).await, 2);
    }
}
