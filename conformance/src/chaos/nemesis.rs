//! The nemesis: applies the planned faults ([`super::schedule`]) to the run's processes and its
//! relay, each on a task of its own so they overlap, and records when each began and when what
//! it broke served again (R-CNF-24).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{
    history::{FaultKind, FaultRecord},
    relay::Mode,
    schedule::Planned,
    topology::{Proc, Topology},
};

/// How long a restarted proxy may take to say it is ready before its heal is taken as done.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// How long a killed process is started again, as a supervisor would, while it stops at
/// start-up (both binaries stop when Temporal cannot be reached then, R-RUN-2: a connector's
/// heal may fall inside a server kill).
const RESTART_WITHIN: Duration = Duration::from_secs(90);

/// The pause between two starts of a process that stopped at start-up.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// What the nemesis did so far (read by the progress lines while it runs).
#[derive(Default)]
pub struct Record {
    pub faults: Vec<FaultRecord>,
    /// Planned faults not applied, and why (their target was still busy, or missing).
    pub skipped: Vec<(Planned, String)>,
}

/// Applies `plan` (times from `zero`), each fault on a task of its own; returns once every
/// fault healed.
pub async fn unleash(
    topology: &Topology,
    plan: &[Planned],
    zero: Instant,
    record: Arc<Mutex<Record>>,
) {
    let mut faults = tokio::task::JoinSet::new();
    for planned in plan.iter().cloned() {
        let at = zero + Duration::from_millis(planned.at_ms);
        tokio::time::sleep_until(at.into()).await;
        let target = Target::of(topology, &planned);
        let record = record.clone();
        faults.spawn(async move {
            let started_ms = zero.elapsed().as_millis() as u64;
            match target.apply(&planned).await {
                Ok(()) => {
                    let index = {
                        let mut r = record.lock().unwrap();
                        r.faults.push(FaultRecord {
                            kind: planned.kind,
                            target: planned.target,
                            started_ms,
                            healed_ms: None,
                        });
                        r.faults.len() - 1
                    };
                    let healed_ms = match target.heal(&planned).await {
                        Ok(()) => Some(zero.elapsed().as_millis() as u64),
                        Err(e) => {
                            eprintln!(
                                "chaos: healing {} {} failed: {e:#}",
                                planned.kind, planned.target
                            );
                            None
                        }
                    };
                    record.lock().unwrap().faults[index].healed_ms = healed_ms;
                }
                Err(why) => record.lock().unwrap().skipped.push((planned, why)),
            }
        });
    }
    while faults.join_next().await.is_some() {}
}

/// What one fault acts on.
enum Target {
    Proc(super::topology::Shared<Proc>),
    Relay(Arc<super::relay::Relay>),
    Server(super::topology::Shared<crate::DevServer>),
}

impl Target {
    fn of(t: &Topology, planned: &Planned) -> Self {
        match planned.kind {
            FaultKind::KillProxy | FaultKind::StopProxy | FaultKind::KillStdioUpstream => {
                Target::Proc(t.proxies[planned.target].clone())
            }
            FaultKind::KillConnector => Target::Proc(t.connectors[planned.target].clone()),
            FaultKind::KillUpstream => Target::Proc(t.upstream.clone()),
            FaultKind::RelayStall | FaultKind::RelayReset | FaultKind::RelayBlackhole => {
                Target::Relay(t.relay.clone())
            }
            FaultKind::KillServer => Target::Server(t.server.clone()),
        }
    }

    /// Applies the fault and holds it; answers once the hold is over (the heal follows).
    /// `Err`: not applied, and why.
    async fn apply(&self, planned: &Planned) -> Result<(), String> {
        let hold = Duration::from_millis(planned.hold_ms);
        match (self, planned.kind) {
            (Target::Proc(p), kind) => {
                let mut p = p
                    .try_lock()
                    .map_err(|_| "its target was still busy".to_owned())?;
                match kind {
                    FaultKind::KillStdioUpstream => {
                        let pid = p.pid().ok_or("the proxy was not running")?;
                        let child =
                            stdio_child(pid).ok_or("the proxy had no stdio upstream running")?;
                        // SAFETY: a plain syscall on a process of our own tree.
                        unsafe { libc::kill(child as libc::pid_t, libc::SIGKILL) };
                    }
                    FaultKind::StopProxy => {
                        if !p.signal(libc::SIGSTOP) {
                            return Err("the proxy was not running".into());
                        }
                    }
                    _ => p.kill(),
                }
                // Held through the hold: no other fault takes it meanwhile.
                tokio::time::sleep(hold).await;
            }
            (Target::Relay(relay), kind) => {
                if relay.mode() != Mode::Pass {
                    return Err("the relay was already faulted".into());
                }
                relay.set(match kind {
                    FaultKind::RelayStall => Mode::Stall,
                    FaultKind::RelayReset => Mode::Reset,
                    _ => Mode::Blackhole,
                });
                tokio::time::sleep(hold).await;
            }
            (Target::Server(server), _) => {
                let mut server = server
                    .try_lock()
                    .map_err(|_| "the server was still busy".to_owned())?;
                server.kill().map_err(|e| e.to_string())?;
                tokio::time::sleep(hold).await;
            }
        }
        Ok(())
    }

    /// Ends the fault: starts what was killed (waiting until it serves), continues what was
    /// stopped, lets the relay pass.
    async fn heal(&self, planned: &Planned) -> anyhow::Result<()> {
        match (self, planned.kind) {
            (Target::Proc(_), FaultKind::KillStdioUpstream) => Ok(()),
            (Target::Proc(p), FaultKind::StopProxy) => {
                p.lock().await.signal(libc::SIGCONT);
                Ok(())
            }
            (Target::Proc(p), kind) => {
                let mut p = p.lock().await;
                restart(&mut p).await?;
                if kind == FaultKind::KillProxy {
                    ready(&p.announced).await;
                }
                Ok(())
            }
            (Target::Relay(relay), _) => {
                relay.set(Mode::Pass);
                Ok(())
            }
            (Target::Server(server), _) => Ok(server.lock().await.start_again().await?),
        }
    }
}

/// Starts `p` again until it stays up (for up to [`RESTART_WITHIN`]), as systemd's
/// `Restart=on-failure` or a Kubernetes pod would; the last failure when it never does.
async fn restart(p: &mut Proc) -> anyhow::Result<()> {
    let deadline = Instant::now() + RESTART_WITHIN;
    loop {
        match p.start().await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(RESTART_PAUSE).await,
        }
    }
}

/// Waits (up to [`READY_WITHIN`]) until the proxy whose health listener is at `base` says its
/// workers poll (R-RUN-5's `checks.workers`): it serves again. Its upstreams' state is not
/// waited for: another fault may hold an upstream down meanwhile.
async fn ready(base: &str) {
    let url = format!("{}/readyz", base.trim_end_matches('/'));
    let deadline = Instant::now() + READY_WITHIN;
    let client = reqwest::Client::new();
    while Instant::now() < deadline {
        let answer = client
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(answer) = answer
            && let Ok(body) = answer.json::<serde_json::Value>().await
            && body["checks"]["workers"]["ok"] == true
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every process of the machine: its pid, command name and parent's pid, from `/proc`.
pub fn process_table() -> std::collections::HashMap<u32, (String, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The name is parenthesised and may hold ") ": the state and parent follow the last.
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, (name.to_owned(), ppid)))
        })
        .collect()
}

/// The pid of the mock upstream a proxy (`ancestor`) runs over stdio (under its watchdog,
/// R-PRX-11), if one runs.
fn stdio_child(ancestor: u32) -> Option<u32> {
    let processes = process_table();
    let descends = |mut pid: u32| {
        for _ in 0..8 {
            match processes.get(&pid) {
                Some((_, parent)) if *parent == ancestor => return true,
                Some((_, parent)) => pid = *parent,
                None => return false,
            }
        }
        false
    };
    processes
        .iter()
        .find(|(pid, (name, _))| name.starts_with("durable-mcp-moc") && descends(**pid))
        .map(|(pid, _)| *pid)
}
