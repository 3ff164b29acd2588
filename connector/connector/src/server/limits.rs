//! Bounds on the work one connector asks of Temporal (R-CON-17): every `tools/list` and every
//! call of an unknown tool used to start one persisted Nexus operation per route, and nothing
//! capped the operations in flight. Listings are cached per route for a short while
//! ([`Listing`]) and the connector holds at most `max_in_flight` operations at once
//! ([`InFlight`]); past that a caller gets an error naming the cap instead of a new operation.
//! Beside the global cap, each caller holds at most its share (R-CON-38), and management calls
//! (local tools), companion tools and `tasks/get` count too: they hold memory and Temporal
//! RPCs as long as an operation does. A call that becomes a task gives its place back, so
//! each caller may also start at most so many calls a minute ([`CallStarts`], R-CON-38).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rmcp::ErrorData as McpError;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::fair::{Counts, Share, Slot};

/// One route's last listing and when it was fetched, and its last failure since (R-CON-17):
/// its tools, or one of its resource, template or prompt lists (R-CON-45).
#[derive(Debug, Clone)]
pub struct Listing<T = Vec<Value>> {
    fetched: Option<(Instant, T)>,
    failed: Option<(Instant, String)>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            fetched: None,
            failed: None,
        }
    }
}

/// The longest a failed listing is answered again without asking the route (R-CON-17).
pub const MAX_FAILURE_BACKOFF: Duration = Duration::from_secs(5);

/// How long a route's failed listing is answered again without asking it: `--list-cache`, at
/// most [`MAX_FAILURE_BACKOFF`] (a `0s` cache asks every time, failed or not).
pub fn failure_backoff(list_cache: Duration) -> Duration {
    list_cache.min(MAX_FAILURE_BACKOFF)
}

impl<T> Listing<T> {
    /// The cached tools when fetched less than `ttl` before `now`.
    pub fn fresh(&self, ttl: Duration, now: Instant) -> Option<&T> {
        match &self.fetched {
            Some((at, tools)) if now.saturating_duration_since(*at) < ttl => Some(tools),
            _ => None,
        }
    }

    /// The last listing that succeeded, however old (R-CON-2: its names stay reserved).
    pub fn last_good(&self) -> Option<&T> {
        self.fetched.as_ref().map(|(_, tools)| tools)
    }

    pub fn store(&mut self, tools: T, now: Instant) {
        self.fetched = Some((now, tools));
        self.failed = None;
    }

    /// Why the last listing failed, when it failed less than `backoff` before `now` and none
    /// succeeded since.
    pub fn recent_failure(&self, backoff: Duration, now: Instant) -> Option<&str> {
        match &self.failed {
            Some((at, why)) if now.saturating_duration_since(*at) < backoff => Some(why),
            _ => None,
        }
    }

    /// Remembers that a listing failed at `now` (its last good listing stays).
    pub fn fail(&mut self, why: String, now: Instant) {
        self.failed = Some((now, why));
    }
}

/// The caps on work the connector holds at once: Temporal operations it started and still
/// waits for, management calls and task look-ups (R-CON-17), overall and per caller (R-CON-38).
#[derive(Debug, Clone)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    max: usize,
    per_share: Arc<Counts<Share>>,
    per_caller: usize,
}

/// One piece of work's places under the caps, held until it drops.
#[derive(Debug)]
pub struct InFlightSlot {
    _permit: OwnedSemaphorePermit,
    _share: Option<Slot<Share>>,
}

impl InFlight {
    /// At most `max` at once, and at most `per_caller` (0: no such cap) for one caller.
    pub fn new(max: usize, per_caller: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            per_share: Arc::default(),
            per_caller,
        }
    }

    /// A slot for one more piece of work, for `share` (no per-caller count without one), held
    /// until the returned slot drops; when the caller's or everyone's are taken, an error that
    /// names the cap and says what to do.
    pub fn try_start(&self, what: &str, share: Option<&Share>) -> Result<InFlightSlot, McpError> {
        let share = self.try_share(what, share)?;
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| over_cap(what, self.max))?;
        Ok(InFlightSlot {
            _permit: permit,
            _share: share,
        })
    }
}

impl InFlight {
    /// A place in `share`'s part only (none without a share), for waiting on work that holds
    /// its own global place, such as a route's listing that many askers share (R-CON-38).
    pub fn try_share(
        &self,
        what: &str,
        share: Option<&Share>,
    ) -> Result<Option<Slot<Share>>, McpError> {
        share
            .map(|share| {
                self.per_share
                    .admit(share, self.per_caller)
                    .ok_or_else(|| over_caller_cap(what, self.per_caller))
            })
            .transpose()
    }
}

/// A caller's allowance of call starts: `tokens` left at `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket of `per_minute` at `now`.
    pub fn full(per_minute: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(per_minute),
            at: now,
        }
    }

    /// Takes one start at `now` when one is left: the bucket holds at most `per_minute` and
    /// refills at `per_minute` a minute, so a caller starts at most a minute's worth at once
    /// and `per_minute` a minute after that.
    pub fn take(&mut self, per_minute: u32, now: Instant) -> bool {
        let rate = f64::from(per_minute) / 60.0;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(per_minute));
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// Whether the bucket is full again at `now` (then it is like a new one and is forgotten).
    fn refilled(&self, per_minute: u32, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens + elapsed * f64::from(per_minute) / 60.0 >= f64::from(per_minute)
    }
}

/// How many tool calls each caller may start a minute (R-CON-38), in memory per replica. The
/// in-flight share does not bound starts: a call that becomes a task (R-CON-17) gives its
/// place back, so a caller could start its share every `--task-after` for ever.
#[derive(Debug)]
pub struct CallStarts {
    buckets: Mutex<HashMap<Share, Bucket>>,
    per_minute: u32,
}

/// What every refusal here says of the refused work (before what to do next); a re-issued
/// call's refusal says instead whether its round runs (R-CON-40).
pub const NOTHING_STARTED: &str = "nothing was started";

/// Past this many callers' buckets, full ones are forgotten.
const BUCKETS_KEPT: usize = 1024;

impl CallStarts {
    /// At most `per_minute` starts a minute per caller; 0 for no such cap.
    pub fn new(per_minute: usize) -> Self {
        Self {
            buckets: Mutex::default(),
            per_minute: u32::try_from(per_minute).unwrap_or(u32::MAX),
        }
    }

    /// Counts one start for `share` (none without one), or the refusal naming the flag.
    pub fn try_start(&self, what: &str, share: Option<&Share>) -> Result<(), McpError> {
        let (Some(share), per_minute) = (share, self.per_minute) else {
            return Ok(());
        };
        if per_minute == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap();
        if buckets.len() >= BUCKETS_KEPT {
            buckets.retain(|_, b| !b.refilled(per_minute, now));
        }
        let bucket = buckets
            .entry(share.clone())
            .or_insert_with(|| Bucket::full(per_minute, now));
        if bucket.take(per_minute, now) {
            Ok(())
        } else {
            Err(over_start_rate(what, per_minute))
        }
    }
}

fn over_start_rate(what: &str, per_minute: u32) -> McpError {
    McpError::internal_error(
        format!(
            "{what} refused: this caller started {per_minute} tool calls in the last minute \
             on this connector, its share (--max-call-starts-per-caller-minute {per_minute}); \
             {NOTHING_STARTED}. Try again in a few seconds, or ask the operator to raise \
             --max-call-starts-per-caller-minute."
        ),
        Some(json!({"maxCallStartsPerCallerMinute": per_minute})),
    )
}

fn over_cap(what: &str, max: usize) -> McpError {
    McpError::internal_error(
        format!(
            "{what} refused: this connector already waits for {max} Temporal operations, its \
             limit (--max-in-flight {max}); {NOTHING_STARTED}. Try again when earlier calls \
             have finished, or raise --max-in-flight."
        ),
        Some(json!({"maxInFlight": max})),
    )
}

fn over_caller_cap(what: &str, max: usize) -> McpError {
    McpError::internal_error(
        format!(
            "{what} refused: this caller already has {max} calls and task look-ups in flight \
             on this connector, its share (--max-in-flight-per-caller {max}); \
             {NOTHING_STARTED}. Try again when earlier calls have finished (a call that became a task no \
             longer counts), or ask the operator to raise --max-in-flight-per-caller."
        ),
        Some(json!({"maxInFlightPerCaller": max})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_answered_for_its_backoff_and_a_success_clears_it() {
        let t0 = Instant::now();
        let backoff = failure_backoff(Duration::from_secs(60));
        assert_eq!(
            backoff, MAX_FAILURE_BACKOFF,
            "a long cache backs off a few seconds"
        );
        assert_eq!(failure_backoff(Duration::ZERO), Duration::ZERO);
        let mut listing = Listing::default();
        listing.store(vec![json!({"name": "a"})], t0);
        listing.fail("down".into(), t0 + Duration::from_secs(1));
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(listing.recent_failure(backoff, at(5)), Some("down"));
        assert_eq!(listing.recent_failure(backoff, at(6)), None, "asked again");
        assert_eq!(
            listing.last_good().unwrap().len(),
            1,
            "the last good one stays"
        );
        assert_eq!(listing.recent_failure(Duration::ZERO, at(1)), None);
        listing.store(vec![], at(2));
        assert_eq!(listing.recent_failure(backoff, at(2)), None);
    }

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
        let cap = InFlight::new(2, 0);
        let a = cap.try_start("calling x", None).unwrap();
        let _b = cap.try_start("calling x", None).unwrap();
        let refused = cap.try_start("calling tool \"x\"", None).unwrap_err();
        assert!(
            refused.message.contains("--max-in-flight 2")
                && refused.message.starts_with("calling tool \"x\" refused"),
            "{}",
            refused.message
        );
        assert_eq!(refused.data.unwrap()["maxInFlight"], 2);
        drop(a);
        assert!(cap.try_start("calling x", None).is_ok());
    }

    #[test]
    fn a_bucket_allows_a_minutes_worth_then_refills_at_its_rate() {
        let t = Instant::now();
        let mut bucket = Bucket::full(60, t);
        assert!(
            (0..60).all(|_| bucket.take(60, t)),
            "a minute's worth at once"
        );
        assert!(!bucket.take(60, t), "then none");
        assert!(!bucket.take(60, t + Duration::from_millis(500)));
        assert!(bucket.take(60, t + Duration::from_secs(1)), "one a second");
        assert!(!bucket.take(60, t + Duration::from_secs(1)));
        // Never more than a minute's worth, however long it rested.
        let rested = t + Duration::from_secs(3600);
        assert!(bucket.refilled(60, rested));
        assert_eq!((0..100).filter(|_| bucket.take(60, rested)).count(), 60);
    }

    #[test]
    fn call_starts_are_capped_per_caller_and_name_the_flag() {
        let starts = CallStarts::new(2);
        let (alice, bob) = (
            Share::Address("10.0.0.1".parse().unwrap()),
            Share::Address("10.0.0.2".parse().unwrap()),
        );
        assert!(starts.try_start("calling x", Some(&alice)).is_ok());
        assert!(starts.try_start("calling x", Some(&alice)).is_ok());
        let refused = starts
            .try_start("calling tool \"x\"", Some(&alice))
            .unwrap_err();
        assert!(
            refused.message.starts_with("calling tool \"x\" refused")
                && refused
                    .message
                    .contains("--max-call-starts-per-caller-minute 2")
                && refused.message.contains("nothing was started"),
            "{}",
            refused.message
        );
        assert_eq!(refused.data.unwrap()["maxCallStartsPerCallerMinute"], 2);
        assert!(
            starts.try_start("calling x", Some(&bob)).is_ok(),
            "bob is served"
        );
        assert!(
            starts.try_start("calling x", None).is_ok(),
            "no share, no cap"
        );
        let unlimited = CallStarts::new(0);
        assert!((0..1000).all(|_| unlimited.try_start("x", Some(&alice)).is_ok()));
    }

    #[test]
    fn one_caller_at_its_share_leaves_the_others_served() {
        let cap = InFlight::new(10, 2);
        let (alice, bob) = (
            Share::Address("10.0.0.1".parse().unwrap()),
            Share::Address("10.0.0.2".parse().unwrap()),
        );
        let first = cap.try_start("calling x", Some(&alice)).unwrap();
        let _second = cap.try_start("calling x", Some(&alice)).unwrap();
        let refused = cap.try_start("reading a task", Some(&alice)).unwrap_err();
        assert!(
            refused.message.contains("--max-in-flight-per-caller 2")
                && refused.message.starts_with("reading a task refused"),
            "{}",
            refused.message
        );
        assert_eq!(refused.data.unwrap()["maxInFlightPerCaller"], 2);
        let _bob = cap
            .try_start("calling x", Some(&bob))
            .expect("bob is served");
        drop(first);
        assert!(cap.try_start("calling x", Some(&alice)).is_ok());
        // A refusal by the global cap gives the caller's place back.
        let full = InFlight::new(1, 5);
        let _only = full.try_start("calling x", Some(&bob)).unwrap();
        assert!(full.try_start("calling x", Some(&alice)).is_err());
        assert_eq!(full.per_share.held(&alice), 0);
    }

    #[test]
    fn waiting_for_a_shared_listing_counts_in_the_callers_share_only() {
        let cap = InFlight::new(1, 2);
        let alice = Share::Address("10.0.0.1".parse().unwrap());
        let _a = cap.try_share("listing the tools", Some(&alice)).unwrap();
        let _b = cap.try_share("listing the tools", Some(&alice)).unwrap();
        let refused = cap
            .try_share("listing the tools", Some(&alice))
            .unwrap_err();
        assert!(
            refused.message.starts_with("listing the tools refused")
                && refused.message.contains("--max-in-flight-per-caller 2"),
            "{}",
            refused.message
        );
        assert!(cap.try_share("listing the tools", None).unwrap().is_none());
        assert!(
            cap.try_start("listing the tools", None).is_ok(),
            "the global place stays for the listing itself"
        );
    }
}
