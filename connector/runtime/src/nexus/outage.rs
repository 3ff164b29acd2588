//! Riding out a Temporal outage (R-CON-16): which RPC failures are worth retrying, and how long
//! to wait between tries. A restart of the server, a load balancer dropping the connection or a
//! frontend that is briefly overloaded must not end a call whose tool keeps running; a request
//! that Temporal understood and refused must fail at once.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};

/// Whether an RPC that failed with `code` may succeed when sent again unchanged: the server was
/// not reached, dropped the connection (a broken pipe surfaces as `Unknown`), was overloaded,
/// or gave up on its side. Refusals (not found, invalid, unauthenticated, permission denied,
/// precondition, unimplemented, already exists) are final.
pub fn is_transient(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unavailable
            | Unknown
            | Internal
            | ResourceExhausted
            | Aborted
            | Cancelled
            | DeadlineExceeded
    )
}

/// Exponential backoff with jitter between retries (backon): the n-th wait is drawn between half
/// and all of `first * 2^n`, and never exceeds `max`. The jitter keeps connector replicas that
/// lost Temporal together from retrying together.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        // backon's jitter adds up to the whole delay again: from half the bounds, a wait lies in
        // [d/2, d) for the unjittered d. A first delay above the cap counts as the cap.
        let builder = ExponentialBuilder::new()
            .with_min_delay(first.min(max) / 2)
            .with_max_delay(max / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            builder,
            delays: builder.build(),
            max,
        }
    }

    /// The delay before the next retry; each call doubles the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        // The sequence has no end (no count, no total); `max` only if backon ever disagrees.
        self.delays.next().unwrap_or(self.max).min(self.max)
    }

    /// After a success: the next outage starts again from the first delay.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

impl Default for Backoff {
    /// 200 ms, doubling, at most 5 s (each wait jittered down to half): a restarted dev server
    /// is back within seconds, and a caller that waits through a longer outage sends at most
    /// one request every 2.5 to 5 s.
    fn default() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_are_transient_and_refusals_are_final() {
        for code in [
            tonic::Code::Unavailable,
            tonic::Code::Unknown,
            tonic::Code::ResourceExhausted,
            tonic::Code::DeadlineExceeded,
        ] {
            assert!(is_transient(code), "{code:?}");
        }
        for code in [
            tonic::Code::NotFound,
            tonic::Code::InvalidArgument,
            tonic::Code::PermissionDenied,
            tonic::Code::Unauthenticated,
            tonic::Code::FailedPrecondition,
            tonic::Code::AlreadyExists,
            tonic::Code::Unimplemented,
        ] {
            assert!(!is_transient(code), "{code:?}");
        }
    }

    /// Each wait lies between half and all of the unjittered one (`first`, doubling, capped).
    fn assert_jittered(delays: &[Duration], first: Duration, max: Duration) {
        let mut nominal = first.min(max);
        for (n, d) in delays.iter().enumerate() {
            // backon computes in f32: a microsecond of slack either side.
            let slack = Duration::from_micros(1);
            assert!(
                *d + slack >= nominal / 2 && *d <= nominal + slack && *d <= max,
                "wait {n}: {d:?} not within [{:?}, {nominal:?}]",
                nominal / 2
            );
            nominal = (nominal * 2).min(max);
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let (first, max) = (Duration::from_millis(100), Duration::from_millis(350));
        let mut b = Backoff::new(first, max);
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert_jittered(&delays, first, max);
        b.reset();
        assert_jittered(&[b.next_delay()], first, max);

        let mut b = Backoff::default();
        let delays: Vec<_> = (0..20).map(|_| b.next_delay()).collect();
        assert_jittered(&delays, Duration::from_millis(200), Duration::from_secs(5));
        assert!(delays[0] <= Duration::from_millis(200), "{delays:?}");
        assert!(delays[19] >= Duration::from_millis(2499), "{delays:?}");
        // A first delay above the cap is the cap.
        let mut b = Backoff::new(Duration::from_millis(90), Duration::from_millis(50));
        assert_jittered(
            &[b.next_delay()],
            Duration::from_millis(50),
            Duration::from_millis(50),
        );
    }

    #[test]
    fn replicas_do_not_back_off_in_lockstep() {
        let waits = |_| {
            let mut b = Backoff::default();
            (0..10).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        let runs: Vec<_> = (0..5).map(waits).collect();
        assert!(runs.windows(2).any(|w| w[0] != w[1]), "{runs:?}");
    }
}
