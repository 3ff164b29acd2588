# durable-mcp tasks. Every recipe is a thin wrapper: README shows the plain commands too.

# List recipes.
default:
    @just --list

# The whole test suite against a real Temporal dev server (installs the CLI when missing).
test *ARGS:
    ./scripts/test {{ARGS}}

# The main job: the conformance run on the bundled fixtures, with an embedded dev server.
conformance *ARGS:
    ./scripts/conformance {{ARGS}}

# Re-record every result snapshot in fixtures/snapshots after a deliberate change (insta's
# INSTA_UPDATE=always for the tests that record and for the runner; see fixtures/README.md).
snapshots:
    cargo build --workspace --bins --locked
    INSTA_UPDATE=always cargo test --locked -p durable-mcp-conformance --test recorded
    INSTA_UPDATE=always cargo test --locked -p durable-mcp-tests --test it -- whole_results_match_the_recorded_snapshot a_workflow_lists_and_calls_tools_with_results_equal_to_direct_calls_and_replays
    INSTA_UPDATE=always ./scripts/conformance --family fidelity

# The official MCP conformance suite's server scenarios through the durable path (installs the
# pinned suite and Node 22 with npm; docs/conformance.md): `just official --release 0.1.16`.
official *ARGS:
    cargo build --workspace --bins --locked
    ./target/debug/durable-mcp-conformance official {{ARGS}}

# Container images of the connector and the proxy, built offline with the local Docker engine
# (docs/deployment.md): `just images --bin-dir target/debug` packs binaries already built.
images *ARGS:
    ./scripts/build-images {{ARGS}}

# A dev server with the flags durable-mcp needs, for manual use (Ctrl-C stops it).
temporal *ARGS:
    cargo run -q -p durable-mcp-conformance --bin durable-mcp-conformance -- temporal {{ARGS}}

# Format all Rust code.
fmt:
    cargo fmt --all

# Formatting check and clippy with warnings denied.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

# Criterion benchmarks (release build).
bench *ARGS:
    cargo bench -p durable-mcp-benches {{ARGS}}

# The load run (release build): the full path against the bare floor, a direct call and
# temporalio-mcp, with CPU, memory and server RPCs per call. `just load --short` is quick.
load *ARGS:
    cargo build --release --workspace --bins
    ./target/release/durable-mcp-conformance load {{ARGS}}

# The chaos run (release build): a seeded fault campaign at load, checked against what
# durable-mcp promises (docs/reliability.md). `just chaos --short` is the minute CI runs.
chaos *ARGS:
    cargo build --release --workspace --bins
    ./target/release/durable-mcp-conformance chaos {{ARGS}}
