//! Resources, resource templates, prompts and completions of every route (R-CON-45), through
//! the reserved operations of R-NXC-8.
//!
//! - Capabilities: each route's `upstream_capabilities` (asked at `initialize` and `discover`,
//!   reused for the list cache's time, R-CON-17); the connector declares `resources`,
//!   `prompts` and `completions` only when a route declares them. A route that cannot answer
//!   (a worker stopped or not running yet) keeps its last good declaration, and declares none
//!   while it never answered. Resources and prompts
//!   are declared with `listChanged: true`: their changes reach callers (R-CON-42).
//! - Lists: every declaring route's list, items in route order, in the connector's own pages
//!   (`paging`, R-CON-47). An item offered by
//!   more than one route (a resource's `uri`, a template's `uriTemplate`, a prompt's `name`)
//!   is left out, like an ambiguous tool (R-CON-2), and reading it is refused naming the
//!   routes. With one route answering, its result is passed as written (`_meta`, `ttlMs`,
//!   `cacheScope`); with several, the first one's other fields are kept and `ttlMs` is the
//!   least any route gave.
//! - Reads: with one route declaring the capability (`completions` for `completion/complete`)
//!   and every route's declaration known, to it without listing; else `resources/read` goes to the route listing the URI, else to
//!   the one route whose template matches it; `prompts/get` to the route listing the prompt;
//!   `completion/complete` by its `ref` the same way, from the lists cached per route
//!   (`feature_cache`). The answer, or the upstream's JSON-RPC error, is passed as written.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{PromptsCapability, ResourcesCapability},
    service::RequestContext,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;
use tokio_util::sync::CancellationToken;

use super::{
    Connector, Typed, as_written, call::jsonrpc_error, feature_cache::Reserved, internal::internal,
};
use crate::{fair::Share, route::Route};
use durable_mcp_contract::{
    features::{
        self, COMPLETE, Feature, GET_PROMPT, LIST_PROMPTS, LIST_RESOURCE_TEMPLATES, LIST_RESOURCES,
        READ_RESOURCE, UPSTREAM_CAPABILITIES,
    },
    jsonrpc_error::JsonRpcError,
    payload,
};
use durable_mcp_runtime::nexus::{OperationOutcome, StartOperation};

/// Each route's declared capabilities, from the last time they were asked, and the asking
/// running now, which concurrent askers share.
#[derive(Default)]
pub(super) struct Declared(Mutex<Asked>);

#[derive(Default)]
struct Asked {
    probed: Option<Probed>,
    running: Option<DeclaredFlight>,
}

/// One route's declared capabilities: its last good answer, `None` while it never answered.
type RouteDeclared = Option<Map<String, Value>>;

/// When the routes' capabilities were asked, and each route's declaration.
type Probed = (Instant, Vec<RouteDeclared>);

/// A running asking of the routes' capabilities, shared by its askers (the over-cap refusal
/// when an asking could not run).
type DeclaredFlight = Shared<BoxFuture<'static, Result<Vec<RouteDeclared>, McpError>>>;

impl Declared {
    /// The union of the routes' declared capabilities, as last asked.
    pub(super) fn union(&self) -> Map<String, Value> {
        let mut union = Map::new();
        if let Some((_, routes)) = &self.0.lock().unwrap().probed {
            for declared in routes.iter().flatten() {
                for (k, v) in declared {
                    union.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        union
    }

    /// Whether any route's declared capabilities, as last asked, satisfy `test`.
    pub(super) fn any(&self, test: impl Fn(&Map<String, Value>) -> bool) -> bool {
        let asked = self.0.lock().unwrap();
        asked
            .probed
            .as_ref()
            .is_some_and(|(_, routes)| routes.iter().flatten().any(test))
    }

    /// Whether route `index`'s declared capabilities, as last asked, satisfy `test`.
    pub(super) fn of_route(
        &self,
        index: usize,
        test: impl Fn(&Map<String, Value>) -> bool,
    ) -> bool {
        let asked = self.0.lock().unwrap();
        let declared = asked
            .probed
            .as_ref()
            .and_then(|(_, r)| r.get(index)?.as_ref());
        declared.is_some_and(test)
    }

    /// When the routes' capabilities were last asked.
    fn asked_at(&self) -> Option<Instant> {
        self.0.lock().unwrap().probed.as_ref().map(|(at, _)| *at)
    }
}

/// The routes' declarations after an asking (R-CON-45): each route's answer, or where it
/// failed its last good one (none while it never answered), so a route that cannot answer
/// for a moment does not seem to declare nothing.
fn after_asking(previous: &[RouteDeclared], answers: Vec<RouteDeclared>) -> Vec<RouteDeclared> {
    answers
        .into_iter()
        .enumerate()
        .map(|(i, answer)| answer.or_else(|| previous.get(i).cloned().flatten()))
        .collect()
}

/// The routes declaring a capability (with their indexes), and whether every route's
/// declaration is known.
type Declaring = (Vec<(usize, Route)>, bool);

/// The one route a read goes to without listing (R-CON-45): the only route declaring the
/// capability, when every route's declaration is known (a route that never answered may
/// offer the URI or prompt).
fn only_route(declaring: &Declaring) -> Option<&Route> {
    match (&declaring.0[..], declaring.1) {
        ([(_, route)], true) => Some(route),
        _ => None,
    }
}

/// The key that tells one list's items apart.
fn item_key(items: &str) -> &'static str {
    match items {
        "resourceTemplates" => "uriTemplate",
        "prompts" => "name",
        _ => "uri",
    }
}

/// The lists of several routes merged (see the module's rule): the merged result, and each
/// key offered by more than one route with the services offering it.
pub fn merge_lists(
    items: &str,
    lists: Vec<(Route, Value)>,
) -> (Value, HashMap<String, Vec<String>>) {
    let key = item_key(items);
    let mut owners: HashMap<String, Vec<String>> = HashMap::new();
    for (route, list) in &lists {
        for item in list
            .get(items)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(k) = item.get(key).and_then(Value::as_str) {
                owners
                    .entry(k.to_owned())
                    .or_default()
                    .push(route.service.clone());
            }
        }
    }
    owners.retain(|_, services| services.len() > 1);
    let ttl = lists
        .iter()
        .filter_map(|(_, l)| l.get("ttlMs").and_then(Value::as_u64))
        .min();
    let mut merged = match lists.first() {
        Some((_, Value::Object(first))) => first.clone(),
        _ => Map::new(),
    };
    let mut all = Vec::new();
    for (_, list) in &lists {
        for item in list
            .get(items)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !item
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|k| owners.contains_key(k))
            {
                all.push(item.clone());
            }
        }
    }
    if let (Some(ttl), true) = (ttl, lists.len() > 1) {
        merged.insert("ttlMs".into(), ttl.into());
    }
    merged.insert(items.into(), Value::Array(all));
    (Value::Object(merged), owners)
}

pub use durable_mcp_contract::features::template_matches;

impl Connector {
    /// Runs a reserved operation on `route` with `input`, for its payload.
    pub(super) async fn run_reserved(
        &self,
        route: &Route,
        operation: &str,
        input: Value,
    ) -> Result<Payload, String> {
        let timeout = self.inner.options.list_timeout;
        let input = payload::to_payload(&input).map_err(|e| e.to_string())?;
        let mut start = StartOperation::new(
            self.operation_id("-reserved"),
            &route.endpoint,
            &route.service,
            operation,
            input,
        );
        start.schedule_to_close = Some(timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let client = &self.inner.client;
        let (op, _) = client
            .start_until(start, deadline)
            .await
            .map_err(|e| e.to_string())?;
        match client
            .wait_until(&op, &CancellationToken::new(), deadline)
            .await
            .map_err(|e| e.to_string())?
        {
            OperationOutcome::Succeeded(p) => Ok(p),
            other => Err(super::catalog::did_not_succeed(operation, &other, timeout)),
        }
    }

    /// Each route's declared capabilities, asked again when older than the list cache.
    pub(super) async fn declared(&self) -> Result<Vec<RouteDeclared>, McpError> {
        match self.declared_or_asking() {
            Ok(routes) => Ok(routes),
            Err(asking) => asking.await,
        }
    }

    /// The routes' capabilities while fresh, else the running asking (a new one if none runs).
    fn declared_or_asking(&self) -> Result<Vec<RouteDeclared>, DeclaredFlight> {
        let ttl = self.inner.options.list_cache;
        let mut asked = self.inner.declared.0.lock().unwrap();
        if let Some((at, routes)) = &asked.probed
            && at.elapsed() < ttl
        {
            return Ok(routes.clone());
        }
        Err(asked
            .running
            .get_or_insert_with(|| self.ask_declared())
            .clone())
    }

    /// Asks every route's capabilities as its own task, which records the answers (unless an
    /// asking was refused for the in-flight cap: then nothing new is known, and the askers
    /// read the refusal rather than a partial map).
    fn ask_declared(&self) -> DeclaredFlight {
        let this = self.clone();
        let task = tokio::spawn(async move {
            let routes = &this.inner.options.routes;
            let asks = routes
                .iter()
                .map(|route| this.run_in_place(route, UPSTREAM_CAPABILITIES, json!({}), None));
            let answers = futures::future::join_all(asks).await;
            let refused = answers.iter().find_map(|a| match a {
                Err(Reserved::OverCap(e)) => Some(e.clone()),
                _ => None,
            });
            let answers: Vec<_> = answers
                .into_iter()
                .map(|asked| match asked.map(|p| payload::to_json(&p)) {
                    Ok(Ok(Value::Object(declared))) => Some(declared),
                    _ => None,
                })
                .collect();
            let mut asked = this.inner.declared.0.lock().unwrap();
            asked.running = None;
            if let Some(refused) = refused {
                return Err(refused);
            }
            let previous = asked.probed.as_ref().map(|(_, r)| r.as_slice());
            let declared = after_asking(previous.unwrap_or_default(), answers);
            asked.probed = Some((Instant::now(), declared.clone()));
            Ok(declared)
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(internal("asking the routes' capabilities", e)))
        }
        .boxed()
        .shared()
    }

    /// The routes that declared `capability`, with their indexes, and whether every route's
    /// declaration is known.
    async fn declaring(&self, capability: &str) -> Result<Declaring, McpError> {
        let declared = self.declared().await?;
        let every_known = declared.iter().all(Option::is_some);
        let routes = self
            .inner
            .options
            .routes
            .iter()
            .zip(declared)
            .enumerate()
            .filter(|(_, (_, d))| d.as_ref().is_some_and(|d| d.contains_key(capability)))
            .map(|(i, (r, _))| (i, r.clone()))
            .collect();
        Ok((routes, every_known))
    }

    /// A feature list of every declaring route, merged, and the keys left out as ambiguous.
    /// Each route's list is compared with its last good one (R-CON-42).
    pub(super) async fn merged_list(
        &self,
        feature: Feature,
    ) -> Result<(Value, HashMap<String, Vec<String>>, Vec<(Route, Value)>), McpError> {
        let items = feature.items.unwrap_or_default();
        let (routes, _) = self.declaring(feature.capability).await?;
        let asks = routes
            .iter()
            .map(|(index, _)| self.cached_feature_list(*index, feature));
        let mut lists = Vec::new();
        for ((_, route), listed) in routes.iter().zip(futures::future::join_all(asks).await) {
            match listed {
                Ok(list) => lists.push((route.clone(), list)),
                Err(Reserved::OverCap(e)) => return Err(e),
                Err(Reserved::Failed(why)) => tracing::warn!(service = %route.service,
                    method = feature.method, "listing failed: {why}; its items are left out"),
            }
        }
        if lists.is_empty() && !routes.is_empty() {
            return Err(internal(feature.method, "no route could be listed"));
        }
        let (merged, ambiguous) = merge_lists(items, lists.clone());
        Ok((merged, ambiguous, lists))
    }

    /// The route a read of `key` (a URI or a prompt name) goes to: the one route declaring
    /// the capability without listing (when every route's declaration is known), else by the
    /// routes' (cached) lists.
    /// `asked` is the request's own feature, for the error when no route offers `key`.
    pub(super) async fn route_for(
        &self,
        feature: Feature,
        key: &str,
        asked: Feature,
    ) -> Result<Route, McpError> {
        if let Some(route) = only_route(&self.declaring(feature.capability).await?) {
            return Ok(route.clone());
        }
        let by_name = match feature.capability {
            "prompts" => LIST_PROMPTS,
            _ => LIST_RESOURCES,
        };
        let (_, ambiguous, lists) = self.merged_list(by_name).await?;
        if let Some(services) = ambiguous.get(key) {
            return Err(McpError::invalid_params(
                format!(
                    "{key:?} is offered by more than one service ({}); it is left out (R-CON-45)",
                    services.join(", ")
                ),
                Some(json!({"ambiguous": true, "services": services})),
            ));
        }
        let items = by_name.items.unwrap_or_default();
        let field = item_key(items);
        let listing = |list: &Value| {
            list.get(items)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|i| i.get(field).is_some_and(|v| *v == key))
        };
        if let Some((route, _)) = lists.iter().find(|(_, l)| listing(l)) {
            return Ok(route.clone());
        }
        if by_name == LIST_RESOURCES {
            let (_, _, templates) = self.merged_list(LIST_RESOURCE_TEMPLATES).await?;
            let matching: Vec<&Route> = templates
                .iter()
                .filter(|(_, l)| {
                    l.get("resourceTemplates")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t.get("uriTemplate").and_then(Value::as_str))
                        .any(|t| t == key || template_matches(t, key))
                })
                .map(|(r, _)| r)
                .collect();
            if let [route] = matching[..] {
                return Ok(route.clone());
            }
        }
        Err(not_offered(asked, key))
    }

    /// A read (`resources/read`, `prompts/get`, `completion/complete`): the route's answer as
    /// written, or its JSON-RPC error. Finding the route waits in `share`'s part; the read holds
    /// a place of its own and counts as a call start (R-CON-38).
    async fn feature_read(
        &self,
        feature: Feature,
        params: &Value,
        share: Option<&Share>,
    ) -> Result<Value, McpError> {
        let key = match feature {
            f if f == READ_RESOURCE => params.get("uri").and_then(Value::as_str),
            f if f == GET_PROMPT => params.get("name").and_then(Value::as_str),
            _ => params
                .pointer("/ref/name")
                .and_then(Value::as_str)
                .or_else(|| params.pointer("/ref/uri").and_then(Value::as_str)),
        }
        .unwrap_or_default();
        let as_feature = match params.pointer("/ref/type").and_then(Value::as_str) {
            Some("ref/prompt") => GET_PROMPT,
            Some(_) => READ_RESOURCE,
            None => feature,
        };
        let route = {
            let _waiting = self.inner.in_flight.try_share(feature.method, share)?;
            match only_route(&self.declaring(feature.capability).await?) {
                Some(route) if feature == COMPLETE => route.clone(),
                _ => self.route_for(as_feature, key, feature).await?,
            }
        };
        let p = match self.run_read(&route, feature, params.clone(), share).await {
            Ok(p) => p,
            Err(Reserved::OverCap(e)) => return Err(e),
            Err(Reserved::Failed(why)) => return Err(internal(feature.method, why)),
        };
        if let Some(error) = JsonRpcError::from_payload(&p) {
            return Err(jsonrpc_error(
                error.map_err(|why| internal(feature.method, why))?,
            ));
        }
        payload::to_json(&p).map_err(|e| internal(feature.method, e))
    }
}

impl Typed {
    /// The answer to one feature request: rmcp's typed view for the protocol work, and the
    /// routes' JSON as written kept beside it (R-CON-12).
    pub(super) async fn feature_answer<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<T, McpError> {
        let feature = features::for_method(method)
            .ok_or_else(|| McpError::internal_error(format!("{method} is no feature"), None))?;
        // What no route declares, the connector does not declare either, nor serve.
        if self.declaring(feature.capability).await?.0.is_empty() {
            return Err(not_served(feature));
        }
        let share = super::scope::request_share(context);
        let written = match feature.items {
            Some(items) => {
                let _waiting = self
                    .inner
                    .in_flight
                    .try_share(feature.method, share.as_ref())?;
                let merged = self.merged_list(feature).await?.0;
                let cursor = params.get("cursor").and_then(Value::as_str);
                super::paging::page(items, merged, cursor, super::paging::PAGE_SIZE)?
            }
            None => self.feature_read(feature, &params, share.as_ref()).await?,
        };
        let typed = super::result_type::typed_result(&written).map_err(|e| {
            McpError::internal_error(format!("the {method} answer is not valid MCP: {e}"), None)
        })?;
        as_written::keep(
            self.written.as_ref(),
            context,
            as_written::feature_written(written),
        );
        Ok(typed)
    }
}

impl Typed {
    /// What must run before rmcp acknowledges a `subscriptions/listen` (it acknowledges before
    /// [`rmcp::ServerHandler::listen`] runs), over stdio and HTTP alike: the stream offers
    /// resource and prompt changes only when a route declares them, which a fresh replica
    /// learns here, not from a listing (R-CON-42).
    /// A stream's resource subscriptions are acknowledged only where the routes' lists show
    /// the URI served by a route that supports subscriptions (R-CON-49), so they are listed here
    /// (from the list cache when fresh), within the same budget.
    pub(crate) async fn before_listen(&self, requested: &rmcp::model::SubscriptionFilter) {
        self.probe_declared().await;
        let asks_resources = requested
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| !uris.is_empty());
        if asks_resources && self.serves_subscriptions() {
            let budget = self.inner.options.list_timeout.min(PROBE_BUDGET);
            let listing = async {
                let _ = self.merged_list(LIST_RESOURCES).await;
                let _ = self.merged_list(LIST_RESOURCE_TEMPLATES).await;
            };
            let _ = tokio::time::timeout(budget, listing).await;
        }
    }

    /// Asks the routes' capabilities before `initialize` or `discover` answers. Once any answer
    /// is known it is declared at once, and an older one than the list cache is asked again in
    /// the background; the first time, the answer is waited for at most [`PROBE_BUDGET`] (the
    /// asking goes on by itself).
    pub(super) async fn probe_declared(&self) {
        let known = self.inner.declared.asked_at().is_some();
        if let Err(asking) = self.connector.declared_or_asking()
            && !known
        {
            let budget = self.inner.options.list_timeout.min(PROBE_BUDGET);
            let _ = tokio::time::timeout(budget, asking).await;
        }
    }
}

/// How long a probe of the routes' capabilities may hold `initialize` back.
const PROBE_BUDGET: Duration = Duration::from_secs(3);

/// Declares the routes' `resources`, `prompts` and `completions` (R-CON-45), resources and
/// prompts with `listChanged: true` (the connector tells of their changes, R-CON-42), resources
/// with `subscribe: true` only when it serves subscriptions (`subscribe`, R-CON-49).
pub(super) fn declare(
    capabilities: &mut rmcp::model::ServerCapabilities,
    union: Map<String, Value>,
    subscribe: bool,
) {
    for (key, declared) in union {
        match key.as_str() {
            "resources" => {
                let declared = serde_json::from_value(declared).ok();
                capabilities.resources = declared.map(|mut r: ResourcesCapability| {
                    r.list_changed = Some(true);
                    r.subscribe = subscribe.then_some(true);
                    r
                });
            }
            "prompts" => {
                let declared = serde_json::from_value(declared).ok();
                capabilities.prompts = declared.map(|mut p: PromptsCapability| {
                    p.list_changed = Some(true);
                    p
                });
            }
            "completions" => capabilities.completions = serde_json::from_value(declared).ok(),
            _ => {}
        }
    }
}

/// The error for a read of `key` no route offers: a resource is not found (-32002, with its
/// `uri`); a prompt's name or a completion's reference is invalid params (-32602).
fn not_offered(asked: Feature, key: &str) -> McpError {
    if asked == READ_RESOURCE {
        let message = format!("no route offers resource {key:?}");
        return McpError::new(
            rmcp::model::ErrorCode(-32002),
            message,
            Some(json!({"uri": key})),
        );
    }
    let what = if asked == COMPLETE {
        "the completion's reference"
    } else {
        "prompt"
    };
    McpError::invalid_params(
        format!("no route offers {what} {key:?}; list the prompts or resources for the names"),
        Some(json!({"name": key})),
    )
}

/// The error for a feature request when no route declares its capability (R-CON-45): method
/// not found, as the connector then declares no such capability at `initialize` or
/// `server/discover`.
fn not_served(feature: Feature) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!(
            "{} is not served: no route declares the {} capability, so the connector does not \
             either; its server/discover (or initialize) answer lists what it serves",
            feature.method, feature.capability
        ),
        Some(json!({"method": feature.method})),
    )
}

/// A request's params as JSON, for the route.
pub(super) fn params(request: &impl serde::Serialize) -> Result<Value, McpError> {
    serde_json::to_value(request)
        .map_err(|e| McpError::invalid_params(format!("params cannot be read: {e}"), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(s: &str) -> Route {
        Route::new(s, "e")
    }

    #[test]
    fn a_feature_no_route_declares_is_method_not_found_naming_the_capability() {
        for feature in [LIST_PROMPTS, GET_PROMPT, READ_RESOURCE, COMPLETE] {
            let e = not_served(feature);
            assert_eq!(e.code.0, -32601, "{}", feature.method);
            assert!(e.message.contains(feature.capability), "{}", e.message);
            assert_eq!(e.data.unwrap()["method"], feature.method);
        }
    }

    #[test]
    fn a_route_that_fails_keeps_its_last_declaration_and_no_read_skips_the_unknown() {
        let resources = |yes: bool| {
            let mut d = Map::new();
            if yes {
                d.insert("resources".into(), json!({}));
            }
            Some(d)
        };
        let kept = after_asking(
            &[resources(true), resources(true)],
            vec![resources(true), None],
        );
        assert_eq!(kept, vec![resources(true), resources(true)]);
        let never = after_asking(&[], vec![resources(true), None]);
        assert_eq!(never, vec![resources(true), None]);
        let (a, b) = (
            route("{service: a, endpoint: e}"),
            route("{service: b, endpoint: e}"),
        );
        assert_eq!(only_route(&(vec![(0, a.clone())], true)), Some(&a));
        assert_eq!(
            only_route(&(vec![(0, a.clone())], false)),
            None,
            "b may offer it"
        );
        assert_eq!(only_route(&(vec![(0, a), (1, b)], true)), None);
    }

    #[test]
    fn a_uri_two_routes_offer_is_left_out_and_named() {
        let a = json!({"resources": [{"uri": "x://1"}, {"uri": "x://shared"}], "ttlMs": 9});
        let b = json!({"resources": [{"uri": "x://shared"}, {"uri": "y://2", "_meta": {"k": 1}}],
                       "ttlMs": 4});
        let (merged, ambiguous) = merge_lists("resources", vec![(route("a"), a), (route("b"), b)]);
        assert_eq!(
            merged,
            json!({"resources": [{"uri": "x://1"}, {"uri": "y://2", "_meta": {"k": 1}}],
                   "ttlMs": 4})
        );
        assert_eq!(ambiguous["x://shared"], vec!["a", "b"]);
    }

    #[test]
    fn one_routes_list_is_passed_as_written() {
        let a = json!({"prompts": [{"name": "p"}], "ttlMs": 9, "cacheScope": "shared",
                       "_meta": {"m": 1}});
        let (merged, ambiguous) = merge_lists("prompts", vec![(route("a"), a.clone())]);
        assert_eq!(merged, a);
        assert!(ambiguous.is_empty());
    }

    #[test]
    fn resources_and_prompts_are_declared_with_list_changed_and_subscribe_when_served() {
        let mut capabilities = rmcp::model::ServerCapabilities::default();
        let union = json!({"resources": {"subscribe": true}, "prompts": {}, "completions": {}});
        declare(&mut capabilities, union.as_object().unwrap().clone(), false);
        assert_eq!(
            serde_json::to_value(&capabilities).unwrap(),
            json!({"resources": {"listChanged": true}, "prompts": {"listChanged": true},
                   "completions": {}})
        );
        let union = json!({"resources": {}});
        declare(&mut capabilities, union.as_object().unwrap().clone(), true);
        assert_eq!(
            serde_json::to_value(&capabilities.resources).unwrap(),
            json!({"listChanged": true, "subscribe": true})
        );
    }

    #[test]
    fn an_unknown_resource_is_not_found_and_an_unknown_prompt_or_reference_invalid_params() {
        assert_eq!(not_offered(READ_RESOURCE, "a://x").code.0, -32002);
        assert_eq!(not_offered(GET_PROMPT, "p").code.0, -32602);
        let completion = not_offered(COMPLETE, "a://x");
        assert_eq!(completion.code.0, -32602);
        assert!(completion.message.contains("\"a://x\""), "{completion:?}");
    }

    #[test]
    fn templates_match_their_literal_text_in_order() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/7/data"
        ));
        assert!(template_matches("file:///{+path}", "file:///a/b.txt"));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/7/meta"
        ));
        assert!(!template_matches("test://a/{id}", "other://a/1"));
        assert!(template_matches("plain://x", "plain://x"));
        assert!(!template_matches("plain://x", "plain://xy"));
    }
}
