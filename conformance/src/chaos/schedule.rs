//! The nemesis's plan: which fault, on what, when and for how long, drawn from a seed
//! (R-CNF-24). A pure function of its inputs, so `--seed S` with the same duration, pace and
//! kinds replays the same faults.

use std::time::Duration;

use proptest::{
    prelude::RngExt as _,
    test_runner::{RngAlgorithm, TestRng},
};
use serde::{Deserialize, Serialize};

use super::history::FaultKind;

/// One planned fault, in ms since the run began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub at_ms: u64,
    pub kind: FaultKind,
    /// Which proxy worker or connector replica (0 or 1); 0 for the rest.
    pub target: usize,
    /// How long it lasts before the heal begins (a killed process is started again, a stopped
    /// one continued, the relay passes again).
    pub hold_ms: u64,
}

impl std::fmt::Display for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>8.1} s  {:<20} target {}  hold {:.1} s",
            self.at_ms as f64 / 1000.0,
            self.kind.name(),
            self.target,
            self.hold_ms as f64 / 1000.0
        )
    }
}

/// What the schedule is drawn from.
#[derive(Debug, Clone)]
pub struct Pace {
    /// Faults begin during this long.
    pub duration: Duration,
    /// One fault begins every this long on average (each gap drawn from half to one and a half
    /// of it), so holds of a few seconds overlap.
    pub every: Duration,
    pub kinds: Vec<FaultKind>,
    /// The proxy's heartbeat timeout: a stopped worker stays stopped past it.
    pub heartbeat: Duration,
}

/// A generator seeded from `seed` for one purpose (`stream`), so the nemesis and each
/// workload client draw apart and each replays alone.
pub fn rng(seed: u64, stream: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&stream.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// How often a kind is drawn, against the others: the server's restart is the heaviest.
fn weight(kind: FaultKind) -> u32 {
    match kind {
        FaultKind::KillProxy | FaultKind::KillConnector => 3,
        FaultKind::KillServer => 1,
        _ => 2,
    }
}

/// How long a kind holds, in ms (the heartbeat's for a stopped worker).
fn hold_range(kind: FaultKind, heartbeat_ms: u64) -> (u64, u64) {
    match kind {
        FaultKind::KillProxy => (500, 4_000),
        FaultKind::StopProxy => (heartbeat_ms + 1_000, heartbeat_ms + 4_000),
        FaultKind::KillConnector | FaultKind::KillUpstream => (500, 3_000),
        FaultKind::KillStdioUpstream => (0, 0),
        FaultKind::RelayStall => (500, 8_000),
        FaultKind::RelayReset => (200, 2_000),
        FaultKind::RelayBlackhole => (500, 6_000),
        FaultKind::KillServer => (1_000, 4_000),
    }
}

/// What a fault occupies: faults on one thing do not overlap (a killed proxy is not also
/// stopped; the relay has one mode).
fn resource(kind: FaultKind, target: usize) -> (u8, usize) {
    match kind {
        FaultKind::KillProxy | FaultKind::StopProxy | FaultKind::KillStdioUpstream => (0, target),
        FaultKind::KillConnector => (1, target),
        FaultKind::KillUpstream => (2, 0),
        FaultKind::RelayStall | FaultKind::RelayReset | FaultKind::RelayBlackhole => (3, 0),
        FaultKind::KillServer => (4, 0),
    }
}

/// How long after its hold a thing stays busy: a process is being started again (the server
/// takes longest).
fn restart_allowance_ms(kind: FaultKind) -> u64 {
    match kind {
        FaultKind::KillServer => 15_000,
        FaultKind::KillProxy | FaultKind::KillConnector | FaultKind::KillUpstream => 3_000,
        _ => 500,
    }
}

/// The faults for `seed` at `pace`, in time order.
pub fn schedule(seed: u64, pace: &Pace) -> Vec<Planned> {
    if pace.kinds.is_empty() || pace.every.is_zero() {
        return Vec::new();
    }
    let mut rng = rng(seed, 0);
    let every = pace.every.as_millis() as u64;
    let heartbeat = pace.heartbeat.as_millis() as u64;
    let total: u32 = pace.kinds.iter().map(|k| weight(*k)).sum();
    let mut busy_until: std::collections::HashMap<(u8, usize), u64> = Default::default();
    let mut planned = Vec::new();
    let mut at = rng.random_range(every / 2..=every * 3 / 2);
    while at < pace.duration.as_millis() as u64 {
        // A kind by weight, then a free target of it; a busy pick tries the other kinds.
        let mut draw = rng.random_range(0..total);
        let first = pace
            .kinds
            .iter()
            .position(|k| {
                let w = weight(*k);
                let hit = draw < w;
                draw = draw.saturating_sub(w);
                hit
            })
            .unwrap_or(0);
        let start_target = rng.random_range(0..2usize);
        let free = (0..pace.kinds.len())
            .map(|i| pace.kinds[(first + i) % pace.kinds.len()])
            .find_map(|kind| {
                (0..kind.targets())
                    .map(|t| (start_target + t) % kind.targets())
                    .find(|t| busy_until.get(&resource(kind, *t)).is_none_or(|b| *b <= at))
                    .map(|t| (kind, t))
            });
        let (lo, hi) = free.map_or((0, 0), |(k, _)| hold_range(k, heartbeat));
        let hold = rng.random_range(lo..=hi);
        if let Some((kind, target)) = free {
            busy_until.insert(
                resource(kind, target),
                at + hold + restart_allowance_ms(kind),
            );
            planned.push(Planned {
                at_ms: at,
                kind,
                target,
                hold_ms: hold,
            });
        }
        at += rng.random_range(every / 2..=every * 3 / 2);
    }
    planned
}

/// How many faults began while another was still holding.
pub fn overlapping(planned: &[Planned]) -> usize {
    planned
        .iter()
        .enumerate()
        .filter(|(i, p)| planned[..*i].iter().any(|q| q.at_ms + q.hold_ms > p.at_ms))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(secs: u64, every_ms: u64, kinds: &[FaultKind]) -> Pace {
        Pace {
            duration: Duration::from_secs(secs),
            every: Duration::from_millis(every_ms),
            kinds: kinds.to_vec(),
            heartbeat: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_draws_another() {
        let p = pace(600, 2_500, &FaultKind::ALL);
        let a = schedule(42, &p);
        assert_eq!(a, schedule(42, &p));
        assert_ne!(a, schedule(43, &p));
        // Ten minutes at one fault every 2.5 s: about 240, each kind drawn.
        assert!((200..=280).contains(&a.len()), "{}", a.len());
        for kind in FaultKind::ALL {
            assert!(a.iter().any(|f| f.kind == kind), "no {kind}");
        }
        assert!(a.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        assert!(
            a.iter()
                .all(|f| f.at_ms < 600_000 && f.target < f.kind.targets())
        );
    }

    #[test]
    fn faults_overlap_but_never_on_one_thing_at_once() {
        let a = schedule(7, &pace(600, 2_500, &FaultKind::ALL));
        assert!(
            overlapping(&a) > a.len() / 4,
            "{} of {}",
            overlapping(&a),
            a.len()
        );
        for (i, f) in a.iter().enumerate() {
            for g in &a[..i] {
                if resource(g.kind, g.target) == resource(f.kind, f.target) {
                    assert!(
                        g.at_ms + g.hold_ms + restart_allowance_ms(g.kind) <= f.at_ms,
                        "{g} and {f} hit one thing at once"
                    );
                }
            }
        }
    }

    #[test]
    fn only_the_kinds_asked_for_and_a_stop_outlasts_the_heartbeat() {
        let a = schedule(
            1,
            &pace(120, 1_000, &[FaultKind::StopProxy, FaultKind::RelayReset]),
        );
        assert!(!a.is_empty());
        for f in &a {
            match f.kind {
                FaultKind::StopProxy => assert!(f.hold_ms > 5_000, "{f}"),
                FaultKind::RelayReset => {}
                other => panic!("{other} was not asked for"),
            }
        }
        assert!(schedule(1, &pace(120, 1_000, &[])).is_empty());
    }
}
