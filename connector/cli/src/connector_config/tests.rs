//! Tables of flag combinations and what each rule makes of them.

use std::{net::SocketAddr, time::Duration};

use clap::{CommandFactory, Parser};

use super::*;

const ROUTE: &str = "{service: s, endpoint: e}";
/// A scope for each Temporal tool family.
const ALL_SCOPES: &str = "read=r,write=w,admin=a";
/// 32 bytes, base64: a usable signing key.
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// Command-line arguments after the program name.
type Args = &'static [&'static str];
/// What a rule should give: a value, or the start of (or a text in) its error.
type Want<T> = Result<T, &'static str>;

/// The flags of `durable-mcp-connector ARGS`, or clap's error text.
fn parse(args: &[&str]) -> Result<ConnectorFlags, String> {
    ConnectorFlags::try_parse_from(std::iter::once(&"durable-mcp-connector").chain(args))
        .map_err(|e| e.to_string())
}

/// The flags of `durable-mcp-connector --route ROUTE ARGS`.
fn routed(args: &[&str]) -> ConnectorFlags {
    let mut all = vec!["--route", ROUTE];
    all.extend_from_slice(args);
    parse(&all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn auth(resource: &str) -> AuthConfig {
    AuthConfig::parse(&format!(
        "auth: {{resource: '{resource}', issuer: 'https://login.example.com/'}}"
    ))
    .unwrap()
}

fn key() -> SigningKey {
    SigningKey::from_base64(KEY).unwrap()
}

/// Arguments, and Ok or the texts clap's error must contain.
type ClapCase<'a> = (&'a [&'a str], Result<(), &'a [&'a str]>);

/// Asserts what clap makes of each case.
fn assert_clap(cases: &[ClapCase]) {
    for (args, want) in cases {
        match (parse(args), want) {
            (Ok(_), Ok(())) => {}
            (Err(got), Err(texts)) => {
                for text in *texts {
                    assert!(got.contains(text), "{args:?}: {text:?} not in {got}");
                }
            }
            (Ok(_), Err(_)) => panic!("{args:?} parsed"),
            (Err(got), Ok(())) => panic!("{args:?}: {got}"),
        }
    }
}

#[test]
fn clap_enforces_which_flag_needs_which() {
    let with_auth = |scopes| {
        [
            "--temporal-tools",
            "--auth-config",
            "a.yaml",
            "--temporal-tools-scopes",
            scopes,
        ]
    };
    assert_clap(&[
        (&["--route", ROUTE], Ok(())),
        (&["--temporal-tools"], Ok(())),
        (&[], Err(&["--route <ROUTE>"])),
        (
            &["--route", ROUTE, "--allowed-namespaces", "a"],
            Err(&["--temporal-tools"]),
        ),
        (&["--temporal-tools", "--allowed-namespaces", "*"], Ok(())),
        (
            &["--temporal-tools", "--temporal-tools-scopes", ALL_SCOPES],
            Err(&["--auth-config"]),
        ),
        (
            &with_auth(ALL_SCOPES)[1..],
            Err(&["required", "--temporal-tools"]),
        ),
        (&with_auth(ALL_SCOPES), Ok(())),
        (
            &["--route", ROUTE, "--codec-auth", "Bearer t"],
            Err(&["--codec-endpoint"]),
        ),
        (
            &[
                "--route",
                ROUTE,
                "--codec-endpoint",
                "https://c",
                "--codec-auth",
                "t",
            ],
            Ok(()),
        ),
    ]);
}

#[test]
fn clap_refuses_values_it_cannot_read() {
    assert_clap(&[
        (&["--route", "{service: s}"], Err(&["--route"])),
        (
            &["--route", "{service: s, endpoint: e, task_support: never}"],
            Err(&["--route", "`task_support` must be `connector` or `mirror`"]),
        ),
        (
            &["--route", "{service: s, endpoint: e, synchronous: 1}"],
            Err(&["--route", "`synchronous` must be true, false or a list"]),
        ),
        (
            &[
                "--temporal-tools",
                "--auth-config",
                "a",
                "--temporal-tools-scopes",
                "x",
            ],
            Err(&["--temporal-tools-scopes"]),
        ),
        (
            &["--route", ROUTE, "--transport", "ftp"],
            Err(&["--transport", "stdio, http"]),
        ),
        (&["--route", ROUTE, "--addr", "localhost"], Err(&["--addr"])),
        (
            &["--route", ROUTE, "--http-max-connections-per-address", "0"],
            Ok(()),
        ),
    ]);
}

#[test]
fn absurd_durations_and_counts_are_startup_errors_naming_the_flag() {
    let parse = |args: &[&str]| {
        let mut all = vec!["--route", ROUTE];
        all.extend_from_slice(args);
        parse(&all).map(|_| ())
    };
    assert_eq!(parse(&["--default-timeout", "10m"]), Ok(()));
    for (flag, value) in [
        ("--default-timeout", "1000000years"),
        ("--default-timeout", "0s"),
        ("--task-after", "2days"),
        ("--list-cache", "5years"),
        ("--list-changed-poll", "2h"),
        ("--list-changed-poll", "often"),
        ("--shutdown-grace", "99999h"),
        ("--http-header-timeout", "0s"),
        ("--default-timeout", "soon"),
        (
            "--operation-id-prefix",
            "an-operation-id-prefix-of-33-bytes",
        ),
    ] {
        let err = parse(&[flag, value]).unwrap_err();
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
    for flag in [
        "--max-in-flight",
        "--max-sessions-per-caller",
        "--http-max-connections",
    ] {
        let err = parse(&[flag, "0"]).unwrap_err();
        assert!(err.contains(flag) && err.contains("at least 1"), "{err}");
        let err = parse(&[flag, &usize::MAX.to_string()]).unwrap_err();
        assert!(err.contains(flag) && err.contains("at most"), "{err}");
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let flags = routed(&[]);
    assert_eq!(flags.transport, Transport::Stdio);
    assert_eq!(flags.connector_name, "durable-mcp");
    assert_eq!(flags.default_timeout, Duration::from_secs(300));
    assert_eq!(flags.list_cache, Duration::from_secs(5));
    assert_eq!(flags.list_changed_poll, Duration::from_secs(60));
    assert_eq!(flags.resource_poll, Duration::from_secs(5));
    assert_eq!(flags.task_after, Duration::from_secs(2));
    assert_eq!(flags.shutdown_grace, Duration::from_secs(5));
    assert_eq!(flags.http_header_timeout, Duration::from_secs(30));
    assert_eq!(flags.addr, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
    assert_eq!(
        flags.max_in_flight,
        durable_mcp_connector::server::DEFAULT_MAX_IN_FLIGHT
    );
    assert_eq!(
        flags.max_sessions_per_caller,
        durable_mcp_connector::auth::MAX_SESSIONS_PER_CALLER
    );
    assert_eq!(
        flags.http_max_connections,
        durable_mcp_connector::listener::DEFAULT_MAX_CONNECTIONS
    );
    assert_eq!(flags.http_max_connections_per_address, None);
    assert_eq!(
        flags.max_requests_per_session_minute,
        durable_mcp_connector::session_requests::DEFAULT_REQUESTS_PER_SESSION_MINUTE
    );
    assert!(!flags.temporal_tools && !flags.companion_tools && !flags.allow_unauthenticated);
    assert!(flags.codec_endpoint.is_none() && flags.auth_config.is_none());
}

#[test]
fn the_codec_credential_comes_from_its_env_var_and_is_never_shown() {
    let command = ConnectorFlags::command();
    let arg = command
        .get_arguments()
        .find(|a| a.get_id() == "codec_auth")
        .unwrap();
    assert_eq!(
        arg.get_env(),
        Some(std::ffi::OsStr::new("TEMPORAL_CODEC_AUTH"))
    );
    assert!(arg.is_hide_env_values_set());
}

#[test]
fn inbound_auth_is_for_http_only() {
    assert_eq!(auth_needs_http(Transport::Http), Ok(()));
    assert_eq!(
        auth_needs_http(Transport::Stdio),
        Err("--auth-config needs --transport http (stdio has no inbound authentication)".into())
    );
    // Refused before the file is read.
    let err = load_auth_config(Path::new("/nonexistent/auth.yaml"), Transport::Stdio);
    assert!(
        err.unwrap_err()
            .to_string()
            .starts_with("--auth-config needs")
    );
    let err = load_auth_config(Path::new("/nonexistent/auth.yaml"), Transport::Http);
    assert!(
        err.unwrap_err()
            .to_string()
            .starts_with("--auth-config /nonexistent/auth.yaml: ")
    );
}

#[test]
fn the_mcp_path_comes_from_auth_resource_or_the_flag() {
    // (path of auth.resource, --http-path, the path, or the start of the error)
    let cases: &[(Option<&str>, Option<&str>, Want<&str>)] = &[
        (None, None, Ok("/mcp")),
        (None, Some("/tools"), Ok("/tools")),
        (Some("/a/mcp"), None, Ok("/a/mcp")),
        (Some("/a/mcp"), Some("/a/mcp"), Ok("/a/mcp")),
        (
            Some("/a/mcp"),
            Some("/b"),
            Err(
                "--http-path \"/b\" differs from the path of auth.resource (\"/a/mcp\"); drop \
                 --http-path or make them agree",
            ),
        ),
        (
            None,
            Some("mcp"),
            Err("--http-path: MCP path \"mcp\" must start with '/'"),
        ),
        (
            None,
            Some("/healthz"),
            Err("--http-path: MCP path \"/healthz\" collides"),
        ),
        (
            Some("/.well-known/x"),
            None,
            Err("the path of auth.resource in --auth-config: MCP path \"/.well-known/x\""),
        ),
        (
            Some("/healthz"),
            Some("/healthz"),
            Err("--http-path: MCP path \"/healthz\""),
        ),
    ];
    for (auth_path, flag, want) in cases {
        match (http_path(*auth_path, *flag), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, *want),
            (Err(got), Err(want)) => assert!(got.starts_with(want), "{got}"),
            (got, want) => panic!("{auth_path:?} {flag:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_codec_needs_a_safe_url_and_a_sendable_credential() {
    // (--codec-endpoint, --codec-auth, codec or the start of the error)
    let cases: &[(Option<&str>, Option<&str>, Want<bool>)] = &[
        (None, None, Ok(false)),
        (Some("https://codec.example.com"), None, Ok(true)),
        (
            Some("https://codec.example.com"),
            Some("Bearer t"),
            Ok(true),
        ),
        (Some("http://127.0.0.1:8081"), None, Ok(true)),
        (
            Some("http://codec.example.com"),
            None,
            Err("--codec-endpoint"),
        ),
        (
            Some("ftp://codec.example.com"),
            None,
            Err("--codec-endpoint"),
        ),
        (Some("not a url"), None, Err("--codec-endpoint")),
        (
            Some("https://codec.example.com"),
            Some("a\nb"),
            Err("--codec-endpoint"),
        ),
    ];
    for (endpoint, auth, want) in cases {
        match (remote_codec(*endpoint, *auth), want) {
            (Ok(got), Ok(want)) => assert_eq!(got.is_some(), *want, "{endpoint:?}"),
            (Err(got), Err(want)) => assert!(got.to_string().starts_with(want), "{got}"),
            (Ok(_), Err(_)) => panic!("{endpoint:?} {auth:?} accepted"),
            (Err(got), Ok(_)) => panic!("{endpoint:?} {auth:?}: {got}"),
        }
    }
}

#[test]
fn only_loopback_http_goes_without_authentication() {
    // (args, authenticated, allowed)
    let cases: &[(Args, bool, bool)] = &[
        (&[], false, true),
        (&["--addr", "0.0.0.0:80"], false, true), // stdio listens nowhere
        (&["--transport", "http"], false, true),
        (&["--transport", "http", "--addr", "[::1]:80"], false, true),
        (
            &["--transport", "http", "--addr", "0.0.0.0:80"],
            false,
            false,
        ),
        (&["--transport", "http", "--addr", "0.0.0.0:80"], true, true),
        (
            &[
                "--transport",
                "http",
                "--addr",
                "10.0.0.1:80",
                "--allow-unauthenticated",
            ],
            false,
            true,
        ),
    ];
    for (args, authenticated, allowed) in cases {
        let got = check_exposure(&routed(args), *authenticated);
        assert_eq!(got.is_ok(), *allowed, "{args:?} {authenticated}: {got:?}");
        if let Err(e) = got {
            assert!(e.starts_with("refusing to serve MCP without authentication on 0.0.0.0:80"));
        }
    }
}

#[test]
fn with_inbound_auth_every_temporal_tool_family_needs_a_scope() {
    // (args, authenticated, missing families named in the error)
    let cases: &[(Args, bool, Option<&str>)] = &[
        (&["--temporal-tools"], false, None),
        (&["--route", ROUTE], true, None),
        (&["--temporal-tools"], true, Some("read, write, admin")),
        (
            &[
                "--temporal-tools",
                "--auth-config",
                "a",
                "--temporal-tools-scopes",
                "read=r",
            ],
            true,
            Some("write, admin"),
        ),
        (
            &[
                "--temporal-tools",
                "--auth-config",
                "a",
                "--temporal-tools-scopes",
                ALL_SCOPES,
            ],
            true,
            None,
        ),
    ];
    for (args, authenticated, missing) in cases {
        let got = check_family_scopes(&parse(args).unwrap(), *authenticated);
        match missing {
            None => assert_eq!(got, Ok(()), "{args:?}"),
            Some(names) => assert_eq!(
                got.unwrap_err(),
                format!(
                    "--temporal-tools with --auth-config needs an OAuth scope for every tool \
                     family; --temporal-tools-scopes does not name {names}. Give all three, \
                     e.g. --temporal-tools-scopes \
                     read=temporal.read,write=temporal.write,admin=temporal.admin"
                )
            ),
        }
    }
}

#[test]
fn http_needs_a_signing_key_and_previous_keys_need_a_current_one() {
    use Transport::{Http, Stdio};
    // (current key, previous keys, transport, Ok(keys signed with?) or the start of the error)
    let cases: &[(bool, usize, Transport, Want<Option<usize>>)] = &[
        (true, 0, Http, Ok(Some(0))),
        (true, 2, Http, Ok(Some(2))),
        (true, 1, Stdio, Ok(Some(1))),
        (false, 0, Stdio, Ok(None)),
        (
            false,
            0,
            Http,
            Err("--transport http needs MCP_TASK_SIGNING_KEY: "),
        ),
        (
            false,
            1,
            Http,
            Err("--transport http needs MCP_TASK_SIGNING_KEY: "),
        ),
        (
            false,
            1,
            Stdio,
            Err("MCP_TASK_SIGNING_KEYS_PREVIOUS is set but MCP_TASK_SIGNING_KEY is not"),
        ),
    ];
    for (current, previous, transport, want) in cases {
        let got = signing_keys(
            current.then(key),
            (0..*previous).map(|_| key()).collect(),
            *transport,
        );
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got.map(|(_, p)| p.len()), *want),
            (Err(got), Err(want)) => assert!(got.starts_with(want), "{got}"),
            (got, want) => panic!("{current} {previous} {transport:?}: {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_temporal_tools_use_the_connection_namespace_unless_widened() {
    let only =
        |names: &[&str]| NamespacePolicy::Only(names.iter().map(|n| n.to_string()).collect());
    // (args, policy or error)
    let cases: &[(Args, Result<Option<NamespacePolicy>, PolicyError>)] = &[
        (&["--route", ROUTE], Ok(None)),
        (&["--temporal-tools"], Ok(Some(only(&["default"])))),
        (
            &[
                "--temporal-tools",
                "--allowed-namespaces",
                "default,payments",
            ],
            Ok(Some(only(&["default", "payments"]))),
        ),
        (
            &["--temporal-tools", "--allowed-namespaces", "*"],
            Ok(Some(NamespacePolicy::Any)),
        ),
        (
            &["--temporal-tools", "--allowed-namespaces", "payments"],
            Err(PolicyError::MissingDefault {
                list: "payments".into(),
                default: "default".into(),
            }),
        ),
        (
            &["--temporal-tools", "--allowed-namespaces", " , "],
            Err(PolicyError::Empty),
        ),
    ];
    for (args, want) in cases {
        assert_eq!(
            &namespace_policy(&parse(args).unwrap(), "default"),
            want,
            "{args:?}"
        );
    }
}

#[test]
fn routes_carry_how_their_tools_may_become_tasks() {
    use durable_mcp_connector::route::{Synchronous, TaskSupportSource};
    let flags = parse(&[
        "--route",
        "{service: a, endpoint: e, task_support: mirror}",
        "--route",
        "{service: b, endpoint: e, synchronous: [slow]}",
    ])
    .unwrap();
    let options = connector_options(&flags, false, None);
    assert_eq!(options.routes[0].tasks.support, TaskSupportSource::Mirror);
    assert_eq!(options.routes[0].tasks.synchronous, Synchronous::None);
    assert_eq!(
        options.routes[1].tasks.support,
        TaskSupportSource::Connector
    );
    assert!(options.routes[1].tasks.synchronous.includes("slow"));
    // The same service and endpoint twice is a duplicate, whatever else the routes say.
    let twice = parse(&[
        "--route",
        ROUTE,
        "--route",
        "{service: s, endpoint: e, synchronous: true}",
    ])
    .unwrap();
    let err = check_flags(twice).err().unwrap().to_string();
    assert!(err.contains("is given twice"), "{err}");
}

#[test]
fn connector_options_carry_the_flags() {
    let flags = routed(&[
        "--connector-name",
        "prod",
        "--operation-id-prefix",
        "p",
        "--default-timeout",
        "1m",
        "--list-cache",
        "0s",
        "--list-changed-poll",
        "0s",
        "--resource-poll",
        "2s",
        "--max-in-flight",
        "7",
        "--task-after",
        "3s",
        "--companion-tools",
    ]);
    let options = connector_options(&flags, true, Some((key(), vec![key()])));
    assert_eq!(options.routes, flags.routes);
    assert_eq!(options.connector_name, "prod");
    assert_eq!(options.operation_id_prefix, "p");
    assert_eq!(options.default_timeout, Duration::from_secs(60));
    assert_eq!(options.list_cache, Duration::ZERO);
    assert_eq!(options.list_changed_poll, Duration::ZERO);
    assert_eq!(options.resource_poll, Duration::from_secs(2));
    assert_eq!(options.max_in_flight, 7);
    assert_eq!(options.task_after, Duration::from_secs(3));
    assert!(options.companion_tools && options.require_verified_caller);
    assert_eq!(options.previous_signing_keys.len(), 1);
    assert_eq!(
        options.caller_scope,
        CallerScope::Unauthenticated("stdio".into())
    );

    // The longest prefix task IDs carry, and the error past it naming the flag and the limit.
    let longest = "p".repeat(durable_mcp_connector::task_ref::MAX_OPERATION_ID_PREFIX_LEN);
    let options = connector_options(&routed(&["--operation-id-prefix", &longest]), false, None);
    assert_eq!(options.operation_id_prefix, longest);
    let Err(err) = parse(&["--operation-id-prefix", &format!("{longest}é")]) else {
        panic!("a 34-byte prefix was taken");
    };
    assert!(
        err.contains("--operation-id-prefix") && err.contains("at most 32 bytes"),
        "{err}"
    );

    // Unset flags keep the library's defaults: a fresh 8-character prefix per process.
    let defaults = ConnectorOptions::new(Vec::new());
    let options = connector_options(&routed(&[]), false, None);
    assert_eq!(options.operation_id_prefix.len(), 8);
    assert_eq!(options.list_timeout, defaults.list_timeout);
    assert!(!options.require_verified_caller && options.previous_signing_keys.is_empty());
}

#[test]
fn anonymous_callers_share_a_scope_named_by_the_flag_or_the_transport() {
    let cases = [
        (None, Transport::Stdio, "stdio"),
        (None, Transport::Http, "http"),
        (Some("team-a"), Transport::Stdio, "team-a"),
        (Some("team-a"), Transport::Http, "team-a"),
    ];
    for (name, transport, scope) in cases {
        assert_eq!(
            anonymous_scope(name, transport),
            CallerScope::Unauthenticated(scope.into())
        );
    }
}

#[test]
fn routed_tool_names_are_checked_only_beside_the_temporal_tools() {
    let cases: &[(Args, bool)] = &[
        (&["--route", ROUTE], false),
        (&["--temporal-tools"], false),
        (&["--temporal-tools", "--route", ROUTE], true),
    ];
    for (args, checks) in cases {
        assert_eq!(
            checks_routed_tool_names(&parse(args).unwrap()),
            *checks,
            "{args:?}"
        );
    }
}

#[test]
fn one_address_gets_a_sixteenth_of_the_connections_unless_set() {
    for (args, per_address) in [
        (&[][..], 64),
        (&["--http-max-connections", "4096"][..], 256),
        (&["--http-max-connections", "10"][..], 1),
        (&["--http-max-connections-per-address", "0"][..], 0),
        (
            &[
                "--http-max-connections",
                "4096",
                "--http-max-connections-per-address",
                "1000",
            ][..],
            1000,
        ),
    ] {
        let mut all = vec!["--transport", "http"];
        all.extend_from_slice(args);
        let options = http_options(&routed(&all), "/mcp".into(), None);
        assert_eq!(options.limits.max_per_address, per_address, "{args:?}");
    }
    let options = http_options(&routed(&["--transport", "http"]), "/mcp".into(), None);
    assert_eq!(
        options.requests_per_session_minute,
        durable_mcp_connector::session_requests::DEFAULT_REQUESTS_PER_SESSION_MINUTE
    );
    let flags = routed(&["--max-requests-per-session-minute", "0"]);
    assert_eq!(
        http_options(&flags, "/mcp".into(), None).requests_per_session_minute,
        0,
        "0 is no cap"
    );
}

#[test]
fn http_options_carry_the_flags_and_the_public_host() {
    let flags = routed(&[
        "--transport",
        "http",
        "--addr",
        "127.0.0.1:0",
        "--allowed-host",
        "a.example",
        "--allowed-host",
        "b.example:8443",
        "--shutdown-grace",
        "1s",
        "--http-header-timeout",
        "2s",
        "--http-max-connections",
        "3",
        "--http-max-connections-per-address",
        "0",
    ]);
    let options = http_options(&flags, "/tools".into(), None);
    assert_eq!(options.addr, "127.0.0.1:0".parse::<SocketAddr>().unwrap());
    assert_eq!(options.allowed_hosts, ["a.example", "b.example:8443"]);
    assert_eq!(options.path, "/tools");
    assert_eq!(options.shutdown_grace, Duration::from_secs(1));
    assert_eq!(
        options.limits,
        ConnectionLimits {
            header_read: Duration::from_secs(2),
            max_connections: 3,
            max_per_address: 0,
            first_request: Duration::from_secs(5),
            proven_by_verified_caller: false,
        }
    );
    assert!(options.auth.is_none());

    let config = auth("https://mcp.example.com/mcp");
    let options = http_options(&flags, "/mcp".into(), Some(&config));
    assert_eq!(
        options.allowed_hosts,
        ["a.example", "b.example:8443", "mcp.example.com"]
    );
    assert!(options.auth.is_none(), "the binary adds the authenticator");
    assert!(
        options.limits.proven_by_verified_caller,
        "under auth only a verified caller's request proves a connection"
    );
}

#[test]
fn trusted_proxies_and_their_header_reach_the_http_options() {
    use durable_mcp_connector::forwarded::{ForwardedHeader, TrustedProxies};
    let options = http_options(&routed(&["--transport", "http"]), "/mcp".into(), None);
    assert_eq!(
        options.trusted_proxies,
        TrustedProxies::default(),
        "none by default"
    );
    let flags = routed(&[
        "--transport",
        "http",
        "--trusted-proxy",
        "10.0.0.0/8",
        "--trusted-proxy",
        "192.0.2.7",
        "--trusted-proxy-header",
        "Forwarded",
    ]);
    let trusted = http_options(&flags, "/mcp".into(), None).trusted_proxies;
    for (ip, trusts) in [
        ("10.1.2.3", true),
        ("192.0.2.7", true),
        ("192.0.2.8", false),
    ] {
        assert_eq!(trusted.trusts(ip.parse().unwrap()), trusts, "{ip}");
    }
    let nets = ["10.0.0.0/8", "192.0.2.7"].map(parse_trusted);
    assert_eq!(
        trusted,
        TrustedProxies::new(nets.to_vec(), ForwardedHeader::Forwarded)
    );
    for (args, says) in [
        (
            &["--trusted-proxy", "0.0.0.0/0"][..],
            "trusts every address",
        ),
        (&["--trusted-proxy", "lb.internal"][..], "not a CIDR range"),
        (
            &["--trusted-proxy-header", "forwarded"][..],
            "--trusted-proxy",
        ),
        (
            &[
                "--trusted-proxy",
                "10.0.0.1",
                "--trusted-proxy-header",
                "x-real-ip",
            ][..],
            "x-forwarded-for or forwarded",
        ),
    ] {
        let mut all = vec!["--route", ROUTE, "--transport", "http"];
        all.extend_from_slice(args);
        let err = parse(&all)
            .err()
            .unwrap_or_else(|| panic!("{args:?} parsed"));
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

fn parse_trusted(net: &str) -> durable_mcp_connector::forwarded::IpNet {
    durable_mcp_connector::forwarded::parse_trusted_proxy(net).unwrap()
}

#[test]
fn the_public_host_keeps_a_port_other_than_the_scheme_default() {
    let cases = [
        ("https://mcp.example.com/mcp", "mcp.example.com"),
        ("https://mcp.example.com:443/mcp", "mcp.example.com"),
        ("https://mcp.example.com:8443/mcp", "mcp.example.com:8443"),
    ];
    for (resource, host) in cases {
        assert_eq!(
            public_host(&auth(resource)).as_deref(),
            Some(host),
            "{resource}"
        );
    }
}

#[test]
fn checks_before_connecting_run_in_order_and_settle_the_path() {
    let checked = check_flags(routed(&[])).unwrap();
    assert_eq!(checked.http_path, "/mcp");
    assert!(checked.auth.is_none() && checked.codec.is_none());

    // (args, the start of the first error)
    let cases: &[(Args, &str)] = &[
        (
            &["--auth-config", "/nonexistent.yaml"],
            "--auth-config needs --transport http",
        ),
        (
            &["--transport", "http", "--auth-config", "/nonexistent.yaml"],
            "--auth-config /nonexistent.yaml: ",
        ),
        (
            &["--http-path", "/healthz", "--codec-endpoint", "x"],
            "--http-path: ",
        ),
        (
            &[
                "--codec-endpoint",
                "http://codec.example.com",
                "--route",
                ROUTE,
            ],
            "--codec-endpoint",
        ),
        (&["--route", ROUTE], "route "),
        (
            &[
                "--transport",
                "http",
                "--addr",
                "0.0.0.0:1",
                "--route",
                ROUTE,
            ],
            "route ",
        ),
        (
            &["--transport", "http", "--addr", "0.0.0.0:1"],
            "refusing to serve MCP without authentication",
        ),
    ];
    for (args, want) in cases {
        let err = check_flags(routed(args)).err().unwrap().to_string();
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
}

#[test]
fn over_http_without_auth_the_temporal_tools_change_nothing_unless_told() {
    // (args, authenticated, write and admin tools served)
    let cases: &[(Args, bool, bool)] = &[
        (&["--temporal-tools"], false, true),
        (&["--temporal-tools", "--transport", "http"], false, false),
        (
            &[
                "--temporal-tools",
                "--transport",
                "http",
                "--temporal-tools-unauthenticated-writes",
            ],
            false,
            true,
        ),
        (
            &[
                "--temporal-tools",
                "--transport",
                "http",
                "--auth-config",
                "a",
                "--temporal-tools-scopes",
                ALL_SCOPES,
            ],
            true,
            true,
        ),
    ];
    for (args, authenticated, writes) in cases {
        let flags = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(
            serves_temporal_writes(&flags, *authenticated),
            *writes,
            "{args:?}"
        );
    }
    assert_clap(&[
        (
            &["--route", ROUTE, "--temporal-tools-unauthenticated-writes"],
            Err(&["--temporal-tools"]),
        ),
        (
            &[
                "--temporal-tools",
                "--temporal-tools-unauthenticated-writes",
                "--auth-config",
                "a",
            ],
            Err(&["cannot be used with"]),
        ),
    ]);
}

#[test]
fn decoding_what_the_temporal_tools_show_is_opted_in_and_scoped() {
    assert_clap(&[
        (
            &["--temporal-tools", "--temporal-tools-decode"],
            Err(&["--codec-endpoint"]),
        ),
        (
            &[
                "--route",
                ROUTE,
                "--codec-endpoint",
                "https://c",
                "--temporal-tools-decode",
            ],
            Err(&["--temporal-tools"]),
        ),
        (
            &[
                "--temporal-tools",
                "--codec-endpoint",
                "https://c",
                "--temporal-tools-decode",
            ],
            Ok(()),
        ),
    ]);
    let with_auth = |scopes: &'static str| {
        parse(&[
            "--temporal-tools",
            "--codec-endpoint",
            "https://c",
            "--temporal-tools-decode",
            "--auth-config",
            "a",
            "--temporal-tools-scopes",
            scopes,
        ])
        .unwrap()
    };
    let err = check_family_scopes(&with_auth(ALL_SCOPES), true).unwrap_err();
    assert!(
        err.starts_with("--temporal-tools-decode with --auth-config needs")
            && err.contains("decode=SCOPE"),
        "{err}"
    );
    assert_eq!(
        check_family_scopes(&with_auth("read=r,write=w,admin=a,decode=d"), true),
        Ok(())
    );
}

#[test]
fn decoding_over_http_without_auth_needs_its_own_opt_in() {
    const DECODE: &[&str] = &[
        "--temporal-tools",
        "--codec-endpoint",
        "https://c",
        "--temporal-tools-decode",
    ];
    // (extra args, authenticated, refused)
    let cases: &[(&[&str], bool, bool)] = &[
        (&[], false, false),
        (&["--transport", "http"], false, true),
        (
            &[
                "--transport",
                "http",
                "--temporal-tools-unauthenticated-decode",
            ],
            false,
            false,
        ),
        (
            &[
                "--transport",
                "http",
                "--auth-config",
                "a",
                "--temporal-tools-scopes",
                "read=r,write=w,admin=a,decode=d",
            ],
            true,
            false,
        ),
    ];
    for (more, authenticated, refused) in cases {
        let args: Vec<&str> = DECODE.iter().chain(more.iter()).copied().collect();
        let flags = parse(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let got = check_unauthenticated_decode(&flags, *authenticated);
        assert_eq!(got.is_err(), *refused, "{args:?}: {got:?}");
        if let Err(e) = got {
            assert!(
                e.contains("--temporal-tools-unauthenticated-decode")
                    && e.contains("--auth-config"),
                "{e}"
            );
        }
    }
    assert_clap(&[
        (
            &[
                "--temporal-tools",
                "--temporal-tools-unauthenticated-decode",
            ],
            Err(&["--temporal-tools-decode"]),
        ),
        (
            &[
                "--temporal-tools",
                "--codec-endpoint",
                "https://c",
                "--temporal-tools-decode",
                "--temporal-tools-unauthenticated-decode",
                "--auth-config",
                "a",
            ],
            Err(&["cannot be used with"]),
        ),
    ]);
}
