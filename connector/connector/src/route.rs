//! `--route` values and the merged tool list of all routes.
//!
//! A route names one Nexus service on one endpoint: `{service: my-tools, endpoint:
//! my-tools-endpoint}` (a YAML flow map, easy to type in a shell) or the same as JSON. Both are
//! read by one YAML parser, JSON being YAML's flow style.
//!
//! Two more keys say how the route's tools may become tasks (R-CON-39): `task_support:
//! connector` (the default: any tool may become a task, the connector's own) or `mirror` (the
//! upstream's own `execution.taskSupport` decides, as a transparent gateway would), and
//! `synchronous: true` (every tool) or `synchronous: [name, ...]` (those tools), which never
//! become tasks.
//!
//! Tool names must be unique across routes: a `tools/call` names only the tool, so a name
//! exposed twice could not be routed. The connector never picks: an ambiguous name is left out
//! of the merged list (the other tools stay listed) and reported, so one upstream cannot break
//! the listing of all the others (R-CON-2).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use durable_mcp_contract::listing::tool_name;
use serde_json::Value;

/// What a route looks like, for error messages.
pub const EXPECTED: &str = "expected {service: NAME, endpoint: ENDPOINT}, optionally with \
     task_support: connector|mirror and synchronous: true|[TOOL, ...]";

/// One Nexus service on one Nexus endpoint, and how its tools may become tasks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    pub service: String,
    pub endpoint: String,
    /// The route's `task_support` and `synchronous` keys (R-CON-39).
    pub tasks: RouteTasks,
}

impl Route {
    /// The route to `service` on `endpoint`, its tools' tasks the connector's (the default).
    pub fn new(service: impl Into<String>, endpoint: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            endpoint: endpoint.into(),
            tasks: RouteTasks::default(),
        }
    }
}

/// How a route's tools may become tasks (R-CON-39).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RouteTasks {
    /// `task_support`: whose word decides.
    pub support: TaskSupportSource,
    /// `synchronous`: the tools that never become tasks.
    pub synchronous: Synchronous,
}

/// The route key `task_support`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TaskSupportSource {
    /// Any tool may become a task: the task is the connector's, kept in Temporal, whatever the
    /// upstream lists (only its `required` stands).
    #[default]
    Connector,
    /// The upstream's own `execution.taskSupport` decides, read as MCP 2025-11-25 reads it
    /// (absent means `forbidden`): a transparent gateway.
    Mirror,
}

/// The route key `synchronous`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Synchronous {
    /// No tool is kept synchronous (the key absent, or `false`).
    #[default]
    None,
    /// `true`: every tool of the route.
    All,
    /// The tools named.
    Tools(BTreeSet<String>),
}

impl Synchronous {
    /// Whether the tool `name` is kept synchronous.
    pub fn includes(&self, name: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Tools(names) => names.contains(name),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{service: {}, endpoint: {}}}",
            self.service, self.endpoint
        )
    }
}

/// Why a route, or a set of routes, was refused. Parse errors quote the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("invalid route `{input}`: {reason}; {EXPECTED}")]
    Syntax { input: String, reason: String },
    #[error("invalid route `{input}`: not a map; {EXPECTED}")]
    NotAMap { input: String },
    #[error("invalid route `{input}`: unknown key `{key}`{hint}; {EXPECTED}")]
    UnknownKey {
        input: String,
        key: String,
        hint: &'static str,
    },
    #[error("invalid route `{input}`: missing `{key}`; {EXPECTED}")]
    MissingKey { input: String, key: &'static str },
    #[error("invalid route `{input}`: `{key}` must be a string (quote it); {EXPECTED}")]
    NotAString { input: String, key: &'static str },
    #[error("invalid route `{input}`: `{key}` is empty; {EXPECTED}")]
    Empty { input: String, key: &'static str },
    #[error("invalid route `{input}`: `{key}` {reason}; {EXPECTED}")]
    BadValue {
        input: String,
        key: &'static str,
        reason: &'static str,
    },
    #[error("no route given: pass at least one --route '{{service: NAME, endpoint: ENDPOINT}}'")]
    NoRoutes,
    #[error("route {route} is given twice")]
    Duplicate { route: Route },
}

/// Parses one `--route` value: a YAML flow map or JSON object with `service` and `endpoint`,
/// both non-empty strings, and optionally `task_support` and `synchronous`.
pub fn parse_route(s: &str) -> Result<Route, RouteError> {
    let input = || s.to_owned();
    let value: Value = crate::yaml::from_str(s).map_err(|reason| RouteError::Syntax {
        input: input(),
        reason,
    })?;
    let Value::Object(map) = value else {
        return Err(RouteError::NotAMap { input: input() });
    };
    let (mut service, mut endpoint) = (None, None);
    let mut tasks = RouteTasks::default();
    for (key, v) in map {
        match key.as_str() {
            "service" => service = Some(v),
            "endpoint" => endpoint = Some(v),
            "task_support" => tasks.support = task_support(v).map_err(|e| e.of(s))?,
            "synchronous" => tasks.synchronous = synchronous(v).map_err(|e| e.of(s))?,
            _ => {
                // `{service:a}` is one plain scalar in YAML; the usual cause is a missing space.
                let hint = if key.contains(':') {
                    " (put a space after each colon)"
                } else {
                    ""
                };
                return Err(RouteError::UnknownKey {
                    input: input(),
                    key,
                    hint,
                });
            }
        }
    }
    let field = |v: Option<Value>, key: &'static str| match v {
        None => Err(RouteError::MissingKey {
            input: input(),
            key,
        }),
        Some(Value::Null) => Err(RouteError::Empty {
            input: input(),
            key,
        }),
        Some(Value::String(s)) if s.trim().is_empty() => Err(RouteError::Empty {
            input: input(),
            key,
        }),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RouteError::NotAString {
            input: input(),
            key,
        }),
    };
    Ok(Route {
        service: field(service, "service")?,
        endpoint: field(endpoint, "endpoint")?,
        tasks,
    })
}

/// A route key's value that does not fit, before the input is known.
struct KeyError(&'static str, &'static str);

impl KeyError {
    fn of(self, input: &str) -> RouteError {
        RouteError::BadValue {
            input: input.to_owned(),
            key: self.0,
            reason: self.1,
        }
    }
}

fn task_support(v: Value) -> Result<TaskSupportSource, KeyError> {
    match v.as_str() {
        Some("connector") => Ok(TaskSupportSource::Connector),
        Some("mirror") => Ok(TaskSupportSource::Mirror),
        _ => Err(KeyError("task_support", "must be `connector` or `mirror`")),
    }
}

fn synchronous(v: Value) -> Result<Synchronous, KeyError> {
    match v {
        Value::Bool(true) => Ok(Synchronous::All),
        Value::Bool(false) => Ok(Synchronous::None),
        Value::Array(names) => names
            .into_iter()
            .map(|n| match n {
                Value::String(n) if !n.trim().is_empty() => Ok(n),
                _ => Err(KeyError(
                    "synchronous",
                    "lists a name that is not a tool name",
                )),
            })
            .collect::<Result<_, _>>()
            .map(Synchronous::Tools),
        _ => Err(KeyError(
            "synchronous",
            "must be true, false or a list of tool names",
        )),
    }
}

/// Checks the whole set: at least one route, no service and endpoint given twice (whatever
/// their other keys say).
pub fn check_routes(routes: &[Route]) -> Result<(), RouteError> {
    if routes.is_empty() {
        return Err(RouteError::NoRoutes);
    }
    let mut seen = HashSet::new();
    for r in routes {
        if !seen.insert((&r.service, &r.endpoint)) {
            return Err(RouteError::Duplicate { route: r.clone() });
        }
    }
    Ok(())
}

/// Two routes (or one route twice) expose the same tool name.
/// A tool name exposed more than once: by two routes, or by a route and the connector's own
/// local tools. Every owner is named, in route order (the local tools first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    pub tool: String,
    /// `--temporal-tools`, or `service "a" (endpoint "e")`.
    pub owners: Vec<String>,
    /// Whether one owner is the connector's own local tool set, which keeps the name.
    pub local: bool,
}

impl fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tool {:?} is exposed by {}; tool names must be unique across routes, so ",
            self.tool,
            self.owners.join(" and by ")
        )?;
        if self.local {
            write!(
                f,
                "the routed one is left out (the connector's own tool keeps the name): rename the routed tool"
            )
        } else {
            write!(
                f,
                "the connector lists and calls none of them: rename the tool in all but one service"
            )
        }
    }
}

/// The merged tool list: the tools that can be routed, and the names that cannot.
#[derive(Debug, Default)]
pub struct Merged {
    /// (route, MCP Tool object), in route order.
    pub tools: Vec<(Route, Value)>,
    /// The names left out, with their owners.
    pub ambiguous: Vec<Ambiguous>,
}

fn owner(route: &Route) -> String {
    format!(
        "service {:?} (endpoint {:?})",
        route.service, route.endpoint
    )
}

/// Merges each route's `list_tools` answer into one list of (route, MCP Tool object), in route
/// order. `local` answers the origin of a local tool of that name (e.g. `--temporal-tools`).
///
/// A name two routes expose is left out altogether; a routed name a local tool has is left out
/// of the routed list (the local tool keeps it). Either way it is reported in
/// [`Merged::ambiguous`], and the rest is still listed (R-CON-2). A tool without a string
/// `name` cannot be called through MCP; it is left out with a warning naming its route.
pub fn merge_tool_lists<'a>(
    lists: Vec<(Route, Vec<Value>)>,
    local: impl Fn(&str) -> Option<&'a str>,
) -> Merged {
    let mut owners: HashMap<String, Vec<Route>> = HashMap::new();
    let mut order = Vec::new();
    for (route, tools) in lists {
        for tool in tools {
            let Some(name) = tool_name(&tool) else {
                tracing::warn!(route = %route, "route listed a tool without a name; leaving it out");
                continue;
            };
            let routes = owners.entry(name.to_owned()).or_default();
            if !routes.contains(&route) {
                routes.push(route.clone());
            }
            order.push((route.clone(), tool));
        }
    }
    let mut merged = Merged::default();
    // Names already listed or reported.
    let mut reported = HashSet::new();
    for (route, tool) in order {
        let name = tool_name(&tool).unwrap_or_default().to_owned();
        let routes = &owners[&name];
        let origin = local(&name);
        if routes.len() == 1 && origin.is_none() {
            // A route that lists one name twice: its first listing is the tool.
            if reported.insert(name) {
                merged.tools.push((route, tool));
            }
        } else if reported.insert(name.clone()) {
            merged.ambiguous.push(Ambiguous {
                tool: name,
                owners: origin
                    .map(str::to_owned)
                    .into_iter()
                    .chain(routes.iter().map(owner))
                    .collect(),
                local: origin.is_some(),
            });
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn route(s: &str, e: &str) -> Route {
        Route::new(s, e)
    }

    #[test]
    fn yaml_flow_maps_and_json_parse() {
        let want = route("my-tools", "my-tools-endpoint");
        for s in [
            "{service: my-tools, endpoint: my-tools-endpoint}",
            "{endpoint: my-tools-endpoint, service: my-tools}",
            "  { service : 'my-tools' , endpoint: \"my-tools-endpoint\" }  ",
            r#"{"service":"my-tools","endpoint":"my-tools-endpoint"}"#,
            "service: my-tools\nendpoint: my-tools-endpoint",
        ] {
            assert_eq!(parse_route(s), Ok(want.clone()), "{s}");
        }
        assert_eq!(
            parse_route("{service: 'a b', endpoint: e}"),
            Ok(route("a b", "e"))
        );
    }

    fn err(s: &str) -> String {
        let e = parse_route(s).unwrap_err().to_string();
        assert!(e.contains(&format!("`{s}`")), "quotes the input: {e}");
        assert!(e.ends_with(EXPECTED), "says what is expected: {e}");
        e
    }

    #[test]
    fn bad_routes_are_explained() {
        assert!(err("{service: a}").contains("missing `endpoint`"));
        assert!(err("{endpoint: e}").contains("missing `service`"));
        assert!(err("{service: a, endpoint: e, region: x}").contains("unknown key `region`"));
        assert!(err("{Service: a, endpoint: e}").contains("unknown key `Service`"));
        assert!(err("{service:a, endpoint: e}").contains("put a space after each colon"));
        assert!(err("{service: '', endpoint: e}").contains("`service` is empty"));
        assert!(err("{service: a, endpoint: }").contains("`endpoint` is empty"));
        assert!(err("{service: a, endpoint: ' '}").contains("`endpoint` is empty"));
        assert!(err(r#"{"service":"","endpoint":"e"}"#).contains("`service` is empty"));
        assert!(err("{service: 12, endpoint: e}").contains("`service` must be a string"));
        assert!(err("{service: [a], endpoint: e}").contains("`service` must be a string"));
        assert!(err("{service: null, endpoint: e}").contains("`service` is empty"));
        assert!(
            err("{service: a, endpoint: true}").contains("`endpoint` must be a string (quote it)")
        );
        assert_eq!(
            parse_route("{service: 'true', endpoint: 'null'}"),
            Ok(route("true", "null"))
        );
        assert!(err("my-tools").contains("not a map"));
        assert!(err("[a, b]").contains("not a map"));
        assert!(err("").contains("not a map"));
        assert!(err("{service: a, endpoint: e").contains("at line 1, column 1"));
        assert!(err("{service: a, service: b, endpoint: e}").contains("duplicate mapping key"));
        // YAML 1.1's booleans are plain strings here, as in YAML 1.2.
        assert_eq!(
            parse_route("{service: yes, endpoint: on}"),
            Ok(route("yes", "on"))
        );
    }

    #[test]
    fn routes_say_how_their_tools_may_become_tasks() {
        let tasks = |s: &str| parse_route(s).unwrap().tasks;
        assert_eq!(tasks("{service: a, endpoint: e}"), RouteTasks::default());
        assert_eq!(
            tasks("{service: a, endpoint: e}").support,
            TaskSupportSource::Connector
        );
        assert_eq!(
            tasks("{service: a, endpoint: e, task_support: mirror}").support,
            TaskSupportSource::Mirror
        );
        assert_eq!(
            tasks("{service: a, endpoint: e, task_support: connector}").support,
            TaskSupportSource::Connector
        );
        let all = tasks("{service: a, endpoint: e, synchronous: true}").synchronous;
        assert!(all.includes("anything"));
        let none = tasks("{service: a, endpoint: e, synchronous: false}").synchronous;
        assert_eq!(none, Synchronous::None);
        let some = tasks(r#"{"service":"a","endpoint":"e","synchronous":["x", "y-z"]}"#);
        assert!(some.synchronous.includes("x") && some.synchronous.includes("y-z"));
        assert!(!some.synchronous.includes("w"));
        assert_eq!(some.support, TaskSupportSource::Connector);
    }

    #[test]
    fn bad_task_keys_are_start_up_errors_naming_the_key() {
        for (s, says) in [
            (
                "{service: a, endpoint: e, task_support: forbidden}",
                "`task_support` must be `connector` or `mirror`",
            ),
            (
                "{service: a, endpoint: e, task_support: 1}",
                "`task_support` must be `connector` or `mirror`",
            ),
            (
                "{service: a, endpoint: e, synchronous: yes}",
                "`synchronous` must be true, false or a list of tool names",
            ),
            (
                "{service: a, endpoint: e, synchronous: [x, 1]}",
                "`synchronous` lists a name that is not a tool name",
            ),
            (
                "{service: a, endpoint: e, synchronous: ['']}",
                "`synchronous` lists a name that is not a tool name",
            ),
        ] {
            assert!(err(s).contains(says), "{s}: {}", err(s));
        }
        assert!(err("{service: a, endpoint: e, tasks: mirror}").contains("unknown key `tasks`"));
    }

    #[test]
    fn route_sets_are_checked() {
        assert_eq!(check_routes(&[]), Err(RouteError::NoRoutes));
        assert!(
            RouteError::NoRoutes
                .to_string()
                .contains("at least one --route")
        );
        assert_eq!(
            check_routes(&[route("a", "e"), route("a", "f"), route("b", "e")]),
            Ok(())
        );
        let mut mirrored = route("a", "e");
        mirrored.tasks.support = TaskSupportSource::Mirror;
        let dup = check_routes(&[route("a", "e"), route("b", "e"), mirrored]).unwrap_err();
        assert_eq!(
            dup,
            RouteError::Duplicate {
                route: parse_route("{service: a, endpoint: e, task_support: mirror}").unwrap()
            }
        );
        assert_eq!(
            dup.to_string(),
            "route {service: a, endpoint: e} is given twice"
        );
    }

    fn no_local(_: &str) -> Option<&'static str> {
        None
    }

    #[test]
    fn tool_lists_merge_in_order() {
        let merged = merge_tool_lists(
            vec![
                (
                    route("a", "e"),
                    vec![json!({"name": "t1"}), json!({"name": "t2"})],
                ),
                (
                    route("b", "e"),
                    vec![json!({"name": "t3"}), json!({"description": "nameless"})],
                ),
            ],
            no_local,
        );
        let names: Vec<_> = merged
            .tools
            .iter()
            .map(|(r, t)| (r.service.as_str(), t["name"].as_str().unwrap()))
            .collect();
        assert_eq!(names, [("a", "t1"), ("a", "t2"), ("b", "t3")]);
        assert!(merged.ambiguous.is_empty());
    }

    #[test]
    fn a_name_two_routes_expose_is_left_out_and_names_both() {
        let merged = merge_tool_lists(
            vec![
                (
                    route("alpha", "e1"),
                    vec![json!({"name": "lookup"}), json!({"name": "mine"})],
                ),
                (
                    route("beta", "e2"),
                    vec![json!({"name": "other"}), json!({"name": "lookup"})],
                ),
            ],
            no_local,
        );
        let names: Vec<_> = merged
            .tools
            .iter()
            .map(|(_, t)| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["mine", "other"], "the rest is still listed");
        assert_eq!(
            merged.ambiguous,
            [Ambiguous {
                tool: "lookup".into(),
                owners: vec![
                    "service \"alpha\" (endpoint \"e1\")".into(),
                    "service \"beta\" (endpoint \"e2\")".into()
                ],
                local: false,
            }]
        );
        let msg = merged.ambiguous[0].to_string();
        assert!(
            msg.contains("\"lookup\"") && msg.contains("\"alpha\"") && msg.contains("\"beta\""),
            "{msg}"
        );
    }

    #[test]
    fn a_routed_name_a_local_tool_has_is_left_out_of_the_routed_list() {
        let local = |name: &str| (name == "list_workflows").then_some("--temporal-tools");
        let merged = merge_tool_lists(
            vec![(
                route("up", "e"),
                vec![json!({"name": "list_workflows"}), json!({"name": "echo"})],
            )],
            local,
        );
        assert_eq!(merged.tools.len(), 1);
        assert_eq!(merged.tools[0].1["name"], "echo");
        assert_eq!(merged.ambiguous.len(), 1);
        assert!(merged.ambiguous[0].local);
        let msg = merged.ambiguous[0].to_string();
        assert!(
            msg.contains("--temporal-tools") && msg.contains("\"up\""),
            "{msg}"
        );
    }

    #[test]
    fn one_route_listing_a_name_twice_is_not_ambiguous_with_itself() {
        let merged = merge_tool_lists(
            vec![(
                route("a", "e"),
                vec![json!({"name": "t"}), json!({"name": "t"})],
            )],
            no_local,
        );
        assert!(merged.ambiguous.is_empty());
        assert_eq!(merged.tools.len(), 1, "listed once");
    }

    proptest! {
        #[test]
        fn printed_routes_parse_back(service in "[A-Za-z][A-Za-z0-9_-]{0,20}", endpoint in "[A-Za-z][A-Za-z0-9-]{0,20}") {
            // Plain YAML scalars that are not strings; quoting them works (see the unit tests).
            let reserved = |s: &str| ["null", "true", "false"].contains(&s.to_ascii_lowercase().as_str());
            prop_assume!(!reserved(&service) && !reserved(&endpoint));
            let r = Route::new(service, endpoint);
            prop_assert_eq!(parse_route(&r.to_string()), Ok(r.clone()));
            let json = json!({"service": r.service, "endpoint": r.endpoint}).to_string();
            prop_assert_eq!(parse_route(&json), Ok(r));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,80}") {
            let _ = parse_route(&s);
        }
    }
}
