//! `durable-mcp-conformance load --short` once, to keep the load run working: every path runs
//! through its real processes on a real dev server. Its figures are printed, never asserted
//! (speed belongs to benchmarks), and so are its errors: a call that failed and said so (a
//! timeout on a loaded machine) is not lost. What is asserted is that no call was lost (never
//! run, no error reported) or run twice (R-CNF-13), that every path produced its rows (the
//! peer may be skipped, with its reason, without Python), that the inline path's and the
//! default configuration's targets were judged, that the Activity path costs no more frontend
//! RPCs per call, by RPC, than the kept release run (`--baseline`: counts, not time, so a
//! debug run is judged too; R-CNF-17), and that the connector was read with 50 MCP tasks in
//! flight (R-CNF-16).

const BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-conformance");

#[test]
fn load_short_runs_every_path_and_loses_no_call() {
    let json = std::env::temp_dir().join(format!("durable-mcp-load-{}.json", std::process::id()));
    let out = std::process::Command::new(BIN)
        .args(["load", "--short", "--json"])
        .arg(&json)
        .arg("--baseline")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../benches/baseline/load.json"
        ))
        .output()
        .expect("the conformance binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "load --short failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("--json wrote the report")).unwrap();
    let _ = std::fs::remove_file(&json);
    let rows = report["rows"].as_array().unwrap();
    for row in rows {
        assert_eq!(row["lost"], 0, "{row}");
        assert_eq!(row["duplicated"], 0, "{row}");
    }
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s[0].as_str())
        .collect();
    for path in [
        "direct",
        "floor",
        "full-http",
        "full-stdio",
        "peer",
        "inline-http",
    ] {
        let ran = rows.iter().filter(|r| r["path"] == path).count();
        if path == "peer" && skipped.contains(&"peer") {
            eprintln!("skipped: the peer row ({})", report["skipped"]);
            continue;
        }
        assert_eq!(ran, 2, "{path} has a row per concurrency level:\n{stdout}");
    }
    // The inline path's and the default configuration's targets are judged (R-CNF-17), each
    // met, missed or not measured; the Activity path's RPCs per call against the kept release
    // run must not have grown (an RPC added to every call), its time is not judged (a debug
    // run's is no measure of a release one's).
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 8, "{targets:?}\n{stdout}");
    let by_rpc = &targets[6];
    assert!(
        by_rpc["target"].as_str().unwrap().contains("by RPC"),
        "{by_rpc}"
    );
    assert_eq!(by_rpc["met"], true, "{by_rpc}\n{stdout}");
    assert!(
        stdout.contains("INLINE RATIOS") && stdout.contains("TARGETS"),
        "{stdout}"
    );
    // The connector's memory with tasks in flight (R-CNF-16): every call became a task, none
    // was lost or run twice after the cancel.
    let tasks = &report["tasks_run"];
    assert!(
        tasks.is_object(),
        "no tasks run: {}\n{stdout}",
        report["tasks_failed"]
    );
    assert_eq!(tasks["tasks"], 50, "{tasks}");
    assert_eq!(tasks["created"], 50, "every call becomes a task: {tasks}");
    assert_eq!(tasks["tally"]["lost"], 0, "{tasks}");
    assert_eq!(tasks["tally"]["duplicated"], 0, "{tasks}");
    assert!(tasks["idle_rss_mib"].as_f64().unwrap() > 0.0, "{tasks}");
    assert!(
        tasks["in_flight_rss_mib"].as_f64().unwrap() > 0.0,
        "{tasks}"
    );
}
