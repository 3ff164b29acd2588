//! Bounds on the Temporal work resources, prompts and completions ask for (R-CON-45, like
//! tools' R-CON-17): each route's resource, template and prompt lists are cached for
//! `--list-cache`, and concurrent askers of one route's list share one listing and its outcome
//! (a failure is answered again for the failure back-off); every reserved operation holds a
//! place under `--max-in-flight`, and a read (`resources/read`, `prompts/get`,
//! `completion/complete`) holds one in its caller's share and counts as one of its call starts
//! (R-CON-38).

use std::{collections::HashMap, sync::Mutex, time::Instant};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;

use super::{
    Connector,
    limits::{Listing, failure_backoff},
};
use crate::{fair::Share, route::Route};
use durable_mcp_contract::{features::Feature, payload};

/// Each route's lists, by (route index, list method): the last one and the one running.
#[derive(Default)]
pub(super) struct FeatureLists(Mutex<HashMap<(usize, &'static str), RouteList>>);

/// One route's one list: its last listing and failure, and the listing running now.
#[derive(Default)]
struct RouteList {
    listing: Listing<Value>,
    running: Option<Flight>,
}

/// A running listing, shared by its askers.
type Flight = Shared<BoxFuture<'static, Result<Value, Reserved>>>;

/// Why a reserved operation had no answer.
#[derive(Clone, Debug)]
pub(super) enum Reserved {
    /// `--max-in-flight` (or the caller's share) is taken: the caller reads why.
    OverCap(McpError),
    /// The operation failed: internal, logged (R-CON-15).
    Failed(String),
}

impl Connector {
    /// Runs a reserved operation on `route` holding a place under `--max-in-flight` (and in
    /// `share`'s part when given) for its time.
    pub(super) async fn run_in_place(
        &self,
        route: &Route,
        operation: &str,
        input: Value,
        share: Option<&Share>,
    ) -> Result<Payload, Reserved> {
        let _slot = self
            .inner
            .in_flight
            .try_start(operation, share)
            .map_err(Reserved::OverCap)?;
        self.run_reserved(route, operation, input)
            .await
            .map_err(Reserved::Failed)
    }

    /// A read's operation: a place in `share`'s part and the global one, and one of the
    /// caller's call starts (R-CON-38).
    pub(super) async fn run_read(
        &self,
        route: &Route,
        feature: Feature,
        input: Value,
        share: Option<&Share>,
    ) -> Result<Payload, Reserved> {
        let slot = self.inner.in_flight.try_start(feature.method, share);
        let _slot = slot.map_err(Reserved::OverCap)?;
        let started = self.inner.call_starts.try_start(feature.method, share);
        started.map_err(Reserved::OverCap)?;
        self.run_reserved(route, feature.operation, input)
            .await
            .map_err(Reserved::Failed)
    }

    /// Route `index`'s `feature` list: from the last `--list-cache` when there is one, else the
    /// route's running listing or a new one.
    pub(super) async fn cached_feature_list(
        &self,
        index: usize,
        feature: Feature,
    ) -> Result<Value, Reserved> {
        let ttl = self.inner.options.list_cache;
        let flight = {
            let mut lists = self.inner.feature_lists.0.lock().unwrap();
            let state = lists.entry((index, feature.method)).or_default();
            let now = Instant::now();
            if let Some(list) = state.listing.fresh(ttl, now) {
                return Ok(list.clone());
            }
            if let Some(why) = state.listing.recent_failure(failure_backoff(ttl), now) {
                return Err(Reserved::Failed(why.to_owned()));
            }
            state
                .running
                .get_or_insert_with(|| self.start_feature_listing(index, feature))
                .clone()
        };
        flight.await
    }

    /// Route `index`'s last good `feature` list, however old, without asking.
    pub(super) fn last_good_list(&self, index: usize, feature: Feature) -> Option<Value> {
        let lists = self.inner.feature_lists.0.lock().unwrap();
        let state = lists.get(&(index, feature.method))?;
        state.listing.last_good().cloned()
    }

    /// Starts one listing of the route's list as its own task, which records its outcome (so
    /// it is recorded even when every asker went away); a list that differs from the route's
    /// last good one moves its version (R-CON-42).
    fn start_feature_listing(&self, index: usize, feature: Feature) -> Flight {
        let this = self.clone();
        let task = tokio::spawn(async move {
            let route = &this.inner.options.routes[index];
            let listing = this.run_in_place(route, feature.operation, json!({}), None);
            let outcome = listing
                .await
                .and_then(|p| payload::to_json(&p).map_err(|e| Reserved::Failed(e.to_string())));
            let mut lists = this.inner.feature_lists.0.lock().unwrap();
            let state = lists.entry((index, feature.method)).or_default();
            state.running = None;
            match &outcome {
                Ok(list) => {
                    this.inner.feature_changes.saw(index, feature, list);
                    state.listing.store(list.clone(), Instant::now());
                }
                Err(Reserved::Failed(why)) => state.listing.fail(why.clone(), Instant::now()),
                Err(Reserved::OverCap(_)) => {}
            }
            outcome
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(Reserved::Failed(format!("the listing task ended: {e}"))))
        }
        .boxed()
        .shared()
    }
}
