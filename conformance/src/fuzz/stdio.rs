//! The wire fuzzer over stdio (R-CNF-26): the runner starts the server, opens its session with
//! `initialize`, then writes each case as one line. A request must get the line of its
//! response; after anything else, the server must still answer a `ping`. Server requests to
//! the client are refused (-32601) so that nothing waits on the fuzzer.

use std::{process::Stdio, time::Duration};

use anyhow::Context as _;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    process::{Child, ChildStdin},
    sync::mpsc,
};

use super::cases::Case;
use super::judge::{Finding, answers, malformed, method_of, request_id};

/// How long a `subscriptions/listen` is read before the fuzzer cancels it.
const LONG_LIVED_READ: Duration = Duration::from_secs(2);
use crate::kit::process::ChildLog;

/// What the server wrote on stdout: a message, or a line that is no JSON.
type Line = Result<Value, String>;

/// How to start a stdio server: its program, arguments and environment.
#[derive(Debug, Clone)]
pub struct Command {
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Command {
    /// What `command` would run (its program, arguments and set variables).
    pub fn of(command: &std::process::Command) -> Self {
        Self {
            program: command.get_program().to_owned(),
            args: command.get_args().map(ToOwned::to_owned).collect(),
            env: command
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
                .collect(),
        }
    }

    /// `PROGRAM ARGS`, for reports (the environment is left out: it may hold secrets).
    pub fn describe(&self) -> String {
        let mut words = vec![self.program.to_string_lossy().into_owned()];
        words.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
    }
}

/// A stdio MCP server under fuzz, started by the runner.
pub struct StdioTarget {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Line>,
    /// Its stderr, for panics.
    pub log: ChildLog,
}

impl StdioTarget {
    /// Starts `command` and opens its session.
    pub async fn start(command: &Command, timeout: Duration) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(&command.program)
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", command.describe()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log = ChildLog::default();
        let kept = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                kept.push(line);
            }
        });
        let (send, lines) = mpsc::channel(1024);
        tokio::spawn(read_lines(BufReader::new(stdout), send));
        let mut target = Self {
            child,
            stdin,
            lines,
            log,
        };
        target.initialize(timeout).await?;
        Ok(target)
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    async fn initialize(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let init = json!({"jsonrpc": "2.0", "id": "fuzz-init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "durable-mcp-fuzz", "version": "0"}}});
        self.write(init.to_string().as_bytes()).await?;
        if let Some(finding) = self.await_answer(&json!("fuzz-init"), timeout).await {
            anyhow::bail!("the server did not answer initialize: {finding}");
        }
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.write(initialized.to_string().as_bytes()).await
    }

    async fn write(&mut self, line: &[u8]) -> anyhow::Result<()> {
        let mut bytes: Vec<u8> = line
            .iter()
            .map(|b| if *b == b'\n' { b' ' } else { *b })
            .collect();
        bytes.push(b'\n');
        self.stdin.write_all(&bytes).await?;
        Ok(self.stdin.flush().await?)
    }

    /// Sends `case` and judges what came back, waiting at most `timeout`.
    pub async fn send(&mut self, case: &Case, timeout: Duration) -> Option<Finding> {
        if let Err(e) = self.write(&case.body).await {
            return Some(Finding::NoAnswer(format!("the server's stdin closed: {e}")));
        }
        let id = match request_id(&case.body) {
            Some(id) => id,
            None => {
                // No answer is due; the server must still answer a ping.
                let ping = format!("fuzz-ping-{}", case.index);
                let message = json!({"jsonrpc": "2.0", "id": ping, "method": "ping"});
                if let Err(e) = self.write(message.to_string().as_bytes()).await {
                    return Some(Finding::NoAnswer(format!("the server's stdin closed: {e}")));
                }
                json!(ping)
            }
        };
        if method_of(&case.body).as_deref() == Some("subscriptions/listen") {
            return self.await_listen(&id, case.index, timeout).await;
        }
        self.await_answer(&id, timeout).await
    }

    /// A `subscriptions/listen` stays open (its response comes when it ends): an answer within
    /// [`LONG_LIVED_READ`] is judged, else the listen is cancelled and the server must still
    /// answer a `ping`.
    async fn await_listen(&mut self, id: &Value, index: u64, timeout: Duration) -> Option<Finding> {
        match self.await_answer(id, LONG_LIVED_READ.min(timeout)).await {
            Some(Finding::Hang) => {}
            answered => return answered,
        }
        let ping = format!("fuzz-ping-{index}");
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the fuzzer read enough"}});
        let message = json!({"jsonrpc": "2.0", "id": ping, "method": "ping"});
        for line in [cancel, message] {
            if let Err(e) = self.write(line.to_string().as_bytes()).await {
                return Some(Finding::NoAnswer(format!("the server's stdin closed: {e}")));
            }
        }
        self.await_answer(&json!(ping), timeout).await
    }

    /// Reads lines until the response to `id`; a line that is no JSON-RPC is a finding.
    async fn await_answer(&mut self, id: &Value, timeout: Duration) -> Option<Finding> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Err(_) => return Some(Finding::Hang),
                Ok(None) => return Some(Finding::NoAnswer("the server closed its stdout".into())),
                Ok(Some(line)) => line,
            };
            let message = match line {
                Err(why) => return Some(Finding::Malformed(why)),
                Ok(message) => message,
            };
            if let Some(why) = malformed(&message) {
                return Some(Finding::Malformed(why));
            }
            if answers(&message, id) {
                return None;
            }
            if let (Some(method), Some(their)) = (message.get("method"), message.get("id")) {
                let refusal = json!({"jsonrpc": "2.0", "id": their, "error": {"code": -32601,
                    "message": format!("the fuzzer answers no {method}")}});
                let _ = self.write(refusal.to_string().as_bytes()).await;
            }
        }
    }

    /// Whether the server is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Forwards stdout's lines as messages (or as the line, when it is no JSON).
async fn read_lines(stdout: BufReader<tokio::process::ChildStdout>, send: mpsc::Sender<Line>) {
    let mut lines = stdout.split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = serde_json::from_slice(&line).map_err(|_| {
            let text = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
            format!("a stdout line that is no JSON: {text}")
        });
        if send.send(parsed).await.is_err() {
            return;
        }
    }
}
