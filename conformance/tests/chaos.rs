//! `durable-mcp-conformance chaos --short` once, as CI runs it (R-CNF-24): a minute of every
//! fault kind at load through the real binaries on a real dev server, then the checker. What
//! is asserted is the checker's verdict (every promise kept: no call lost or run twice, every
//! unknown outcome explained, nothing left open) and that the run exercised what it claims
//! (faults of every kind applied, calls of every kind made); figures are printed, never
//! asserted. The run is bounded: it is killed, and fails, past four minutes.

use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-conformance");
/// `--short` stays within three minutes; a minute more before the test gives up on it.
const LIMIT: Duration = Duration::from_secs(240);

#[test]
fn chaos_short_keeps_every_promise_under_every_fault() {
    let json = std::env::temp_dir().join(format!("durable-mcp-chaos-{}.json", std::process::id()));
    let mut child = std::process::Command::new(BIN)
        .args(["chaos", "--short", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the conformance binary runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("chaos --short still ran after {} s", LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    println!("{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("--json wrote the report")).unwrap();
    let _ = std::fs::remove_file(&json);
    assert!(status.success(), "chaos --short failed:\n{stdout}");
    assert_eq!(report["kind"], "chaos");
    let chaos = &report["chaos"];
    let checks = chaos["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 8, "{checks:?}");
    assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    assert_eq!(
        (&chaos["lost"], &chaos["duplicated"]),
        (&0.into(), &0.into())
    );
    // Every kind of fault was applied and every kind of call made (a minute at the default
    // pace plans about 24 faults; the seed varies, so only what any seed gives is asserted).
    let applied: usize = chaos["recovery"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r["applied"].as_u64().unwrap() as usize)
        .sum();
    assert!(applied >= 10, "only {applied} faults applied:\n{stdout}");
    let kinds = chaos["outcomes"].as_object().unwrap();
    assert!(kinds.len() >= 6, "call kinds made: {:?}", kinds.keys());
}
