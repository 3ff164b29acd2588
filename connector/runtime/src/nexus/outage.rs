//! Riding out a Temporal outage (R-CON-16): which RPC failures are worth retrying, and how long
//! to wait between tries. A restart of the server, a load balancer dropping the connection or a
//! frontend that is briefly overloaded must not end a call whose tool keeps running; a request
//! that Temporal understood and refused must fail at once.

use std::time::Duration;

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

/// Exponential backoff between retries: from `first`, doubling, at most `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    first: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            next: first,
            first,
            max,
        }
    }

    /// The delay before the next retry; each call doubles the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// After a success: the next outage starts again from the first delay.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

impl Default for Backoff {
    /// 200 ms, doubling, at most 5 s: a restarted dev server is back within seconds, and a
    /// caller that waits through a longer outage sends at most one request every 5 s.
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

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let delays: Vec<_> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}
