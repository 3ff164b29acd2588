//! The connector's flag values: durations within bounds, counts and routes. Each parser's error
//! is the text after clap's "invalid value '...' for '--flag': ", so it never names the flag.

use std::time::Duration;

use durable_mcp_connector::{
    route::{Route, parse_route},
    task_ref::MAX_OPERATION_ID_PREFIX_LEN,
};

/// The longest `--default-timeout`: a year (Temporal's own limits are far above any tool's).
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest of the other durations (`--list-cache`, `--task-after`, ...).
pub const HOUR: Duration = Duration::from_secs(3600);

/// The largest count a flag takes: far above any deployment, and below what a semaphore holds
/// (a larger `--max-in-flight` or `--http-max-connections` made the connector panic).
pub const MAX_COUNT: usize = 1_000_000_000;

/// A duration (`30s`, `5m`, `2h`) between `min` and `max`; clap names the flag in its error.
pub fn duration_within(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{e}; write it like 30s, 5m or 2h"))?;
    if d < min || d > max {
        return Err(format!(
            "must be between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// `--default-timeout`: from a second to [`MAX_TOOL_TIMEOUT`].
pub fn tool_timeout(s: &str) -> Result<Duration, String> {
    duration_within(s, Duration::from_secs(1), MAX_TOOL_TIMEOUT)
}

/// `--list-cache`, `--task-after`, `--shutdown-grace`: from zero to an hour.
pub fn up_to_an_hour(s: &str) -> Result<Duration, String> {
    duration_within(s, Duration::ZERO, HOUR)
}

/// `--http-header-timeout`: from a second to an hour.
pub fn second_to_hour(s: &str) -> Result<Duration, String> {
    duration_within(s, Duration::from_secs(1), HOUR)
}

/// A count of at least 1, at most [`MAX_COUNT`].
pub fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > MAX_COUNT => Err(format!("must be at most {MAX_COUNT}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

/// A count that may be 0 (no cap), at most the same bound as [`parse_positive`].
pub fn parse_count_or_zero(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Ok(0),
        _ => parse_positive(s),
    }
}

/// `--operation-id-prefix`: at most [`MAX_OPERATION_ID_PREFIX_LEN`] bytes, which every task
/// ID carries so that any replica can name the operation (R-CON-6); a longer one would make
/// task IDs longer than the 128 characters hosts keep.
pub fn operation_id_prefix(s: &str) -> Result<String, String> {
    if s.len() > MAX_OPERATION_ID_PREFIX_LEN {
        return Err(format!(
            "is {} bytes; at most {MAX_OPERATION_ID_PREFIX_LEN} bytes, so that task IDs, which carry it, stay within the 128 characters hosts accept",
            s.len()
        ));
    }
    Ok(s.to_owned())
}

/// `--route`: a YAML flow map or JSON object naming a service and its endpoint.
pub fn parse_route_arg(s: &str) -> Result<Route, String> {
    parse_route(s).map_err(|e| e.to_string())
}

/// `--trusted-proxy`: a CIDR range or one address, never every address (R-CON-50).
pub fn trusted_proxy(s: &str) -> Result<durable_mcp_connector::forwarded::IpNet, String> {
    durable_mcp_connector::forwarded::parse_trusted_proxy(s)
}

/// `--trusted-proxy-header`: `x-forwarded-for` or `forwarded` (RFC 7239).
pub fn forwarded_header(
    s: &str,
) -> Result<durable_mcp_connector::forwarded::ForwardedHeader, String> {
    use durable_mcp_connector::forwarded::ForwardedHeader;
    match s.to_ascii_lowercase().as_str() {
        "x-forwarded-for" => Ok(ForwardedHeader::XForwardedFor),
        "forwarded" => Ok(ForwardedHeader::Forwarded),
        _ => Err("must be x-forwarded-for or forwarded, the header the proxy writes".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn durations_parse_within_their_bounds_or_say_why_not() {
        let within = |s: &str, min: Duration, max: Duration| duration_within(s, min, max);
        let cases: &[(&str, Duration, Duration, Result<Duration, &str>)] = &[
            ("30s", SEC, HOUR, Ok(Duration::from_secs(30))),
            ("5m", Duration::ZERO, HOUR, Ok(Duration::from_secs(300))),
            ("0s", Duration::ZERO, HOUR, Ok(Duration::ZERO)),
            ("1h", SEC, HOUR, Ok(HOUR)),
            ("0s", SEC, HOUR, Err("must be between 1s and 1h")),
            ("2h", Duration::ZERO, HOUR, Err("must be between 0s and 1h")),
            ("soon", SEC, HOUR, Err("; write it like 30s, 5m or 2h")),
            ("5", SEC, HOUR, Err("; write it like 30s, 5m or 2h")),
        ];
        for (s, min, max, want) in cases {
            match (within(s, *min, *max), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{s}"),
                (Err(got), Err(want)) => assert!(got.ends_with(want), "{s}: {got}"),
                (got, want) => panic!("{s}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn each_duration_flag_has_its_bounds() {
        assert_eq!(tool_timeout("1s"), Ok(SEC));
        assert_eq!(tool_timeout("365days"), Ok(MAX_TOOL_TIMEOUT));
        assert!(
            tool_timeout("0s")
                .unwrap_err()
                .starts_with("must be between 1s and")
        );
        assert!(tool_timeout("366days").is_err());
        assert_eq!(up_to_an_hour("0s"), Ok(Duration::ZERO));
        assert_eq!(
            up_to_an_hour("61m"),
            Err("must be between 0s and 1h".into())
        );
        assert_eq!(
            second_to_hour("0s"),
            Err("must be between 1s and 1h".into())
        );
        assert_eq!(second_to_hour("30s"), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn counts_are_bounded_and_only_some_may_be_zero() {
        let too_many = (MAX_COUNT + 1).to_string();
        type Want = Result<usize, &'static str>;
        let cases: &[(&str, Want, Want)] = &[
            // (text, parse_positive, parse_count_or_zero)
            ("1", Ok(1), Ok(1)),
            ("512", Ok(512), Ok(512)),
            ("1000000000", Ok(MAX_COUNT), Ok(MAX_COUNT)),
            ("0", Err("must be at least 1"), Ok(0)),
            (
                &too_many,
                Err("must be at most 1000000000"),
                Err("must be at most 1000000000"),
            ),
            ("-1", Err("not a count: "), Err("not a count: ")),
            ("many", Err("not a count: "), Err("not a count: ")),
            ("", Err("not a count: "), Err("not a count: ")),
        ];
        let check =
            |got: Result<usize, String>, want: &Result<usize, &str>, s: &str| match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{s:?}"),
                (Err(got), Err(want)) => assert!(got.starts_with(want), "{s:?}: {got}"),
                (got, want) => panic!("{s:?}: got {got:?}, want {want:?}"),
            };
        for (s, positive, or_zero) in cases {
            check(parse_positive(s), positive, s);
            check(parse_count_or_zero(s), or_zero, s);
        }
    }

    #[test]
    fn routes_parse_or_say_why_not() {
        let route = parse_route_arg("{service: my-tools, endpoint: my-tools-endpoint}").unwrap();
        assert_eq!(
            route,
            parse_route("{service: my-tools, endpoint: my-tools-endpoint}").unwrap()
        );
        let err = parse_route_arg("not a route").unwrap_err();
        assert_eq!(err, parse_route("not a route").unwrap_err().to_string());
    }
}
