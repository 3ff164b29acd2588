//! The load driver: `concurrency` callers in a closed loop until `calls` calls are done, each
//! call timed on its own; and the latency statistics of a row.

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// Upper bound for one call: a hung call counts as an error instead of stalling the run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one row of calls observed.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Latencies of the calls that returned their own answer.
    pub latencies: Vec<Duration>,
    /// Indexes of the calls that reported an error or returned someone else's answer.
    pub failed: Vec<usize>,
    /// Indexes of the calls that got neither an answer nor an error within [`CALL_TIMEOUT`].
    pub unanswered: Vec<usize>,
    /// The first failure's message, for the report.
    pub first_error: Option<String>,
    /// From the first call's start to the last call's end.
    pub wall: Duration,
}

/// Runs `calls` calls, `concurrency` at a time; `call(i)` must answer `Ok(())` only when call
/// `i` got its own answer.
pub async fn drive<F, Fut>(concurrency: usize, calls: usize, call: F) -> Samples
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let call = Arc::new(call);
    let next = Arc::new(AtomicUsize::new(0));
    let out = Arc::new(Mutex::new(Samples::default()));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (call, next, out) = (call.clone(), next.clone(), out.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    break;
                }
                let at = Instant::now();
                let result = tokio::time::timeout(CALL_TIMEOUT, call(i)).await;
                let took = at.elapsed();
                let mut out = out.lock().unwrap();
                match result {
                    Ok(Ok(())) => out.latencies.push(took),
                    Ok(Err(e)) => {
                        out.failed.push(i);
                        out.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                    Err(_) => {
                        out.unanswered.push(i);
                        out.first_error
                            .get_or_insert_with(|| format!("no answer within {CALL_TIMEOUT:?}"));
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let mut samples = std::mem::take(&mut *out.lock().unwrap());
    samples.wall = started.elapsed();
    samples.latencies.sort();
    samples
}

/// The `p`-th percentile (0..=100) of sorted latencies, nearest rank; zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&ms, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&ms, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&ms[..1], 90.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[tokio::test]
    async fn every_call_runs_once_and_failures_are_counted() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let samples = drive(4, 10, move |i| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(i);
                anyhow::ensure!(i != 3, "call 3 fails");
                Ok(())
            }
        })
        .await;
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(samples.latencies.len(), 9);
        assert_eq!(samples.failed, vec![3]);
        assert!(samples.first_error.unwrap().contains("call 3"));
    }
}
