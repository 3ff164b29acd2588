//! Bounds on the work one connector asks of Temporal (R-CON-17): every `tools/list` and every
//! call of an unknown tool used to start one persisted Nexus operation per route, and nothing
//! capped the operations in flight. Listings are cached per route for a short while
//! ([`Listing`]) and the connector holds at most `max_in_flight` operations at once
//! ([`InFlight`]); past that a caller gets an error naming the cap instead of a new operation.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use rmcp::ErrorData as McpError;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One route's last listing and when it was fetched.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    fetched: Option<(Instant, Vec<Value>)>,
}

impl Listing {
    /// The cached tools when fetched less than `ttl` before `now`.
    pub fn fresh(&self, ttl: Duration, now: Instant) -> Option<&Vec<Value>> {
        match &self.fetched {
            Some((at, tools)) if now.saturating_duration_since(*at) < ttl => Some(tools),
            _ => None,
        }
    }

    pub fn store(&mut self, tools: Vec<Value>, now: Instant) {
        self.fetched = Some((now, tools));
    }
}

/// The cap on operations the connector has started and still waits for.
#[derive(Debug, Clone)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    max: usize,
}

impl InFlight {
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one more operation, held until the returned permit drops; when all `max` are
    /// taken, an error that names the cap and says what to do.
    pub fn try_start(&self, what: &str) -> Result<OwnedSemaphorePermit, McpError> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| over_cap(what, self.max))
    }
}

fn over_cap(what: &str, max: usize) -> McpError {
    McpError::internal_error(
        format!(
            "{what} refused: this connector already waits for {max} Temporal operations, its \
             limit (--max-in-flight {max}); nothing was started. Try again when earlier calls \
             have finished, or raise --max-in-flight."
        ),
        Some(json!({"maxInFlight": max})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_fresh_for_its_ttl_only() {
        let t0 = Instant::now();
        let mut listing = Listing::default();
        assert!(listing.fresh(Duration::from_secs(5), t0).is_none());
        listing.store(vec![json!({"name": "a"})], t0);
        let ttl = Duration::from_secs(5);
        assert_eq!(
            listing
                .fresh(ttl, t0 + Duration::from_secs(4))
                .unwrap()
                .len(),
            1
        );
        assert!(listing.fresh(ttl, t0 + ttl).is_none());
        assert!(
            listing.fresh(Duration::ZERO, t0).is_none(),
            "a zero ttl never caches"
        );
    }

    #[test]
    fn the_cap_refuses_with_its_number_and_frees_slots_on_drop() {
        let cap = InFlight::new(2);
        let a = cap.try_start("calling x").unwrap();
        let _b = cap.try_start("calling x").unwrap();
        let refused = cap.try_start("calling tool \"x\"").unwrap_err();
        assert!(
            refused.message.contains("--max-in-flight 2")
                && refused.message.starts_with("calling tool \"x\" refused"),
            "{}",
            refused.message
        );
        assert_eq!(refused.data.unwrap()["maxInFlight"], 2);
        drop(a);
        assert!(cap.try_start("calling x").is_ok());
    }
}
