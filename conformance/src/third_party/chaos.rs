//! `--chaos`: the chaos run's nemesis around someone else's server (R-CNF-25). Each tool the
//! fidelity check calls is called a few more times through the durable path, and each call is
//! cut while a worker runs it: a stdio server's process is SIGKILLed (the proxy starts another
//! on the next attempt), an HTTP server's connection is reset, stalled or blackholed through
//! the runner's relay. One `chaos/<tool>` line per tool says what its annotations promise and
//! what was seen: how each cut call ended and how many attempts its Activity made.

use std::{sync::Arc, time::Duration};

use proptest::prelude::RngExt as _;
use rmcp::model::JsonObject;
use serde_json::Value;

use super::{DurablePath, Status, Upstream};
use crate::chaos::relay::{Mode, Relay};

/// Calls cut per tool.
pub const CALLS_PER_TOOL: usize = 3;

/// How a tool's calls are cut.
pub enum Cutter {
    /// SIGKILL the stdio server the in-process proxy runs.
    Kill,
    /// Through the relay in front of the HTTP server.
    Relay(Arc<Relay>),
}

/// One tool to cut: its arguments, its direct result, and whether it runs once at most.
pub struct ChaosTool {
    pub name: String,
    pub args: JsonObject,
    pub direct: Result<Value, String>,
    /// The retry policy the proxy infers allows one attempt (destructive, not idempotent).
    pub one_attempt: bool,
}

/// How one cut call ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Cut {
    /// What was done to it: `killed`, `reset`, `stalled 3 s`, `blackholed 2 s`, or that it had
    /// ended before the cut came.
    pub how: String,
    /// The result, or the durable layer's failure.
    pub outcome: Result<Value, String>,
    /// Attempts its Activity made (each a run of the tool, or its start).
    pub attempts: Option<i32>,
}

/// What the tool's annotations promise under a cut.
pub fn promise(one_attempt: bool) -> &'static str {
    if one_attempt {
        "one attempt (destructive, not idempotent): a cut call is never run again, and may end \
         with an unknown outcome (ToolCallOutcomeUnknown)"
    } else {
        "retried: a cut call is tried again and ends with its result"
    }
}

/// The line for a tool: a promise kept passes; a one-attempt tool attempted twice, a retried
/// tool left without a result, or a call without an outcome fails.
pub fn verdict(tool: &ChaosTool, cuts: &[Cut]) -> (Status, String) {
    let mut seen = Vec::new();
    let mut broken = Vec::new();
    for (i, cut) in cuts.iter().enumerate() {
        let attempts = cut.attempts.map_or("?".into(), |a| a.to_string());
        let ended = match (&cut.outcome, &tool.direct) {
            (Ok(r), Ok(d)) if r == d => "the direct result".to_owned(),
            (Ok(_), _) => "a result unlike the direct one (see fidelity)".to_owned(),
            (Err(e), _) => e.clone(),
        };
        seen.push(format!(
            "call {} {}: {ended}, {attempts} attempt(s)",
            i + 1,
            cut.how
        ));
        if tool.one_attempt && cut.attempts.is_some_and(|a| a > 1) {
            broken.push(format!("call {} ran {attempts} attempts", i + 1));
        }
        if !tool.one_attempt && cut.outcome.is_err() {
            broken.push(format!("call {} ended without its result", i + 1));
        }
    }
    let detail = format!(
        "promises: {}; saw: {}",
        promise(tool.one_attempt),
        seen.join("; ")
    );
    match broken.is_empty() {
        true => (Status::Pass, detail),
        false => (
            Status::Fail(format!("{}; {detail}", broken.join(", "))),
            detail,
        ),
    }
}

/// Cuts `CALLS_PER_TOOL` calls of `tool`, drawing when (0 to 300 ms after a worker picked the
/// call up) and, over HTTP, how, from `rng`.
pub async fn cut_calls(
    path: &DurablePath,
    cutter: &Cutter,
    tool: &ChaosTool,
    rng: &mut proptest::test_runner::TestRng,
) -> Vec<Cut> {
    let mut cuts = Vec::new();
    for i in 0..CALLS_PER_TOOL {
        let after = Duration::from_millis(rng.random_range(0..=300));
        let how = std::sync::Mutex::new(String::new());
        let cut = async {
            tokio::time::sleep(after).await;
            *how.lock().unwrap() = apply(cutter, i).await;
        };
        let (outcome, attempts) = path.call_cut(&tool.name, &tool.args, cut).await;
        let how = how.into_inner().unwrap_or_default();
        cuts.push(Cut {
            how: if how.is_empty() {
                "(it ended before the cut)".into()
            } else {
                how
            },
            outcome,
            attempts,
        });
    }
    cuts
}

/// Cuts the call in flight; says how. Over HTTP the kinds take turns (reset, stall,
/// blackhole).
async fn apply(cutter: &Cutter, i: usize) -> String {
    match cutter {
        Cutter::Kill => {
            let servers = stdio_servers();
            for pid in &servers {
                // SAFETY: a plain syscall on a process of this run's own tree.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            match servers.is_empty() {
                true => "(no server process to kill)".into(),
                false => "killed (SIGKILL)".into(),
            }
        }
        Cutter::Relay(relay) => {
            let (mode, hold, how) = match i % 3 {
                0 => (Mode::Reset, Duration::from_millis(300), "reset".to_owned()),
                1 => (
                    Mode::Stall,
                    Duration::from_secs(3),
                    "stalled 3 s".to_owned(),
                ),
                _ => (
                    Mode::Blackhole,
                    Duration::from_secs(2),
                    "blackholed 2 s".to_owned(),
                ),
            };
            relay.set(mode);
            tokio::time::sleep(hold).await;
            relay.set(Mode::Pass);
            how
        }
    }
}

/// The stdio servers an in-process proxy runs: each is the child of a watchdog, a fork of this
/// process that never execs (R-PRX-11), so its parent runs this process's executable under
/// another pid. A direct client's server and the dev server are this process's own children:
/// not these.
fn stdio_servers() -> Vec<u32> {
    let me = std::process::id();
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let Some(mine) = exe(me) else {
        return Vec::new();
    };
    let table = crate::chaos::nemesis::process_table();
    table
        .iter()
        .filter(|(_, (_, parent))| {
            *parent != me
                && table.get(parent).is_some_and(|(_, grand)| *grand == me)
                && exe(*parent).as_ref() == Some(&mine)
        })
        .map(|(pid, _)| *pid)
        .collect()
}

/// The relay in front of an HTTP server at a loopback `url`, and that server as the proxy
/// reaches it through the relay; why not, for a server elsewhere.
pub async fn relayed(upstream: &Upstream) -> Result<(Arc<Relay>, Upstream), String> {
    let Upstream::Http { url, headers } = upstream else {
        return Err("not an HTTP server".into());
    };
    let mut parsed = url::Url::parse(url).map_err(|e| format!("URL {url:?}: {e}"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if !loopback {
        return Err(format!(
            "{url} is not on this machine: the runner cuts connections through a relay on \
             loopback only"
        ));
    }
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| format!("{url} names no port"))?;
    let target: std::net::SocketAddr = match parsed.host() {
        Some(url::Host::Ipv6(ip)) => (ip, port).into(),
        _ => ([127, 0, 0, 1], port).into(),
    };
    let relay = Relay::start(target).await.map_err(|e| e.to_string())?;
    parsed
        .set_port(Some(relay.addr.port()))
        .map_err(|()| format!("{url}: cannot change its port"))?;
    if matches!(parsed.host(), Some(url::Host::Ipv6(_))) {
        return Err("the relay listens on 127.0.0.1; give the server's IPv4 address".into());
    }
    let through = Upstream::Http {
        url: parsed.to_string(),
        headers: headers.clone(),
    };
    Ok((Arc::new(relay), through))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(one_attempt: bool) -> ChaosTool {
        ChaosTool {
            name: "t".into(),
            args: JsonObject::new(),
            direct: Ok(json!({"content": []})),
            one_attempt,
        }
    }

    fn cut(outcome: Result<Value, String>, attempts: i32) -> Cut {
        Cut {
            how: "killed (SIGKILL)".into(),
            outcome,
            attempts: Some(attempts),
        }
    }

    #[test]
    fn a_one_attempt_tool_passes_unknown_and_fails_attempted_twice() {
        let unknown = Err("failed (ToolCallOutcomeUnknown): the outcome is unknown".to_owned());
        let (status, detail) = verdict(&tool(true), &[cut(unknown.clone(), 1)]);
        assert_eq!(status, Status::Pass, "{detail}");
        assert!(detail.contains("one attempt") && detail.contains("ToolCallOutcomeUnknown"));
        let (status, _) = verdict(
            &tool(true),
            &[cut(unknown, 1), cut(Ok(json!({"content": []})), 2)],
        );
        assert!(matches!(status, Status::Fail(why) if why.contains("call 2 ran 2 attempts")));
    }

    #[test]
    fn a_retried_tool_must_end_with_its_result() {
        let (status, detail) = verdict(&tool(false), &[cut(Ok(json!({"content": []})), 2)]);
        assert_eq!(status, Status::Pass);
        assert!(
            detail.contains("the direct result, 2 attempt(s)"),
            "{detail}"
        );
        let (status, _) = verdict(
            &tool(false),
            &[cut(Err("failed (UpstreamTimeout)".into()), 5)],
        );
        assert!(matches!(status, Status::Fail(why) if why.contains("without its result")));
    }

    #[tokio::test]
    async fn only_a_server_on_this_machine_is_relayed() {
        let elsewhere = Upstream::http("https://mcp.example.com/mcp", &[]).unwrap();
        assert!(
            relayed(&elsewhere)
                .await
                .err()
                .unwrap()
                .contains("loopback")
        );
        let local = Upstream::http(
            "http://127.0.0.1:3001/mcp",
            &["Authorization:Bearer x".into()],
        )
        .unwrap();
        let (relay, through) = relayed(&local).await.unwrap();
        let Upstream::Http { url, headers } = through else {
            panic!()
        };
        assert_eq!(url, format!("http://127.0.0.1:{}/mcp", relay.addr.port()));
        assert_eq!(headers["Authorization"], "Bearer x");
    }
}
