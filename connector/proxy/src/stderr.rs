//! A stdio upstream's stderr in the proxy's log, bounded (R-PRX-11): every byte is read, so the
//! child never blocks on a full pipe, but a line is cut at [`MAX_LINE`] bytes (what is read past
//! it is counted, never held) and at most [`LINES_PER_WINDOW`] lines are logged per
//! [`WINDOW`]; the rest are counted and said in one line when logging resumes or the stream ends.
//! One huge line or a flood of lines costs the proxy a fixed buffer and a bounded log.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::time::Instant;

/// The longest stderr line logged, in bytes; the rest of a longer line is dropped.
pub const MAX_LINE: usize = 4096;
/// At most this many stderr lines are logged per [`WINDOW`], per upstream process.
pub const LINES_PER_WINDOW: u32 = 100;
pub const WINDOW: Duration = Duration::from_secs(10);

/// What is logged for a stream of stderr bytes: pure, apart from the clock it is given.
#[derive(Debug)]
pub struct Lines {
    line: Vec<u8>,
    /// Bytes of the current line past [`MAX_LINE`].
    cut: usize,
    window_start: Option<Instant>,
    logged: u32,
    dropped: u64,
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            line: Vec::with_capacity(256),
            cut: 0,
            window_start: None,
            logged: 0,
            dropped: 0,
        }
    }
}

impl Lines {
    /// Takes the next bytes read at `now`; returns the lines to log.
    pub fn push(&mut self, bytes: &[u8], now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (text, ends) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = MAX_LINE - self.line.len();
            self.line.extend_from_slice(&text[..text.len().min(room)]);
            self.cut += text.len().saturating_sub(room);
            if ends {
                self.end_line(now, &mut out);
            }
        }
        out
    }

    /// The stream ended: its last line, unterminated, and what was dropped.
    pub fn finish(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        if !self.line.is_empty() || self.cut > 0 {
            self.end_line(now, &mut out);
        }
        if self.dropped > 0 {
            out.push(self.dropped_note());
        }
        out
    }

    fn end_line(&mut self, now: Instant, out: &mut Vec<String>) {
        let mut text = String::from_utf8_lossy(&self.line).into_owned();
        if self.cut > 0 {
            text.push_str(&format!(" [{} more bytes cut]", self.cut));
        }
        self.line.clear();
        self.cut = 0;
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start) >= WINDOW {
            self.window_start = Some(now);
            self.logged = 0;
            if self.dropped > 0 {
                out.push(self.dropped_note());
            }
        }
        if self.logged < LINES_PER_WINDOW {
            self.logged += 1;
            out.push(text);
        } else {
            self.dropped += 1;
        }
    }

    fn dropped_note(&mut self) -> String {
        let note = format!(
            "[{} stderr lines not logged: over {LINES_PER_WINDOW} lines per {WINDOW:?}]",
            self.dropped
        );
        self.dropped = 0;
        note
    }
}

/// Reads `stderr` to its end, passing each line to log to `log`.
pub async fn forward(mut stderr: impl AsyncRead + Unpin, mut log: impl FnMut(String)) {
    let mut lines = Lines::default();
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = stderr.read(&mut buf).await {
        lines
            .push(&buf[..n], Instant::now())
            .into_iter()
            .for_each(&mut log);
    }
    lines.finish(Instant::now()).into_iter().for_each(log);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_and_says_how_much() {
        let now = Instant::now();
        let mut lines = Lines::default();
        let mut huge = vec![b'x'; 3 * MAX_LINE + 7];
        assert!(lines.push(&huge, now).is_empty(), "no end of line yet");
        huge.truncate(10);
        huge.push(b'\n');
        let out = lines.push(&huge, now);
        assert_eq!(out.len(), 1);
        assert!(out[0].starts_with(&"x".repeat(MAX_LINE)));
        assert!(out[0].ends_with(&format!(" [{} more bytes cut]", 2 * MAX_LINE + 17)));
        assert_eq!(lines.push(b"short\n", now), ["short"]);
    }

    #[test]
    fn lines_past_the_rate_are_counted_and_said_once() {
        let start = Instant::now();
        let mut lines = Lines::default();
        let flood = "l\n".repeat(LINES_PER_WINDOW as usize + 50);
        assert_eq!(
            lines.push(flood.as_bytes(), start).len(),
            LINES_PER_WINDOW as usize
        );
        let later = lines.push(b"again\n", start + WINDOW);
        assert_eq!(later.len(), 2);
        assert!(
            later[0].starts_with("[50 stderr lines not logged"),
            "{later:?}"
        );
        assert_eq!(later[1], "again");
        lines.push(flood.as_bytes(), start + WINDOW);
        let end = lines.finish(start + WINDOW);
        assert_eq!(end.len(), 1);
        assert!(end[0].starts_with("[51 stderr lines not logged"), "{end:?}");
    }

    /// An upstream that floods stderr with one huge line and many short ones: the proxy logs a
    /// bounded amount, each line at most `MAX_LINE` bytes and a note.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_flooding_upstreams_stderr_is_bounded() {
        let script = "head -c 5000000 /dev/zero | tr '\\0' x; echo; yes line | head -n 20000";
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", &format!("({script}) >&2")])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut logged = Vec::new();
        forward(stderr, |line| logged.push(line)).await;
        child.wait().await.unwrap();
        assert!(
            logged.len() <= LINES_PER_WINDOW as usize * 2 + 2,
            "{}",
            logged.len()
        );
        assert!(logged.iter().all(|l| l.len() <= MAX_LINE + 64));
        assert!(
            logged[0].ends_with(" more bytes cut]"),
            "{}",
            &logged[0][MAX_LINE..]
        );
        assert!(logged.last().unwrap().contains("stderr lines not logged"));
    }
}
