//! A program on a pseudo-terminal, as a person runs it: Claude Code declares the tasks
//! extension only when interactive. The driver types into it and reads its screen, as a
//! terminal (vt100) draws what it prints.

use std::{
    io::{Read, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    process::Stdio,
    sync::{Arc, Mutex},
};

use anyhow::Context;

use super::screen::Screen;

/// A child on a pseudo-terminal of its own, in its own session; killed (its whole process
/// group) when dropped.
pub struct Pty {
    child: tokio::process::Child,
    master: std::fs::File,
    terminal: Arc<Mutex<vt100::Parser>>,
}

impl Pty {
    /// Spawns `command` with a `cols` x `rows` terminal as its stdin, stdout and stderr.
    pub fn spawn(mut command: std::process::Command, cols: u16, rows: u16) -> anyhow::Result<Self> {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two descriptors it opened into the given integers.
        let opened = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        anyhow::ensure!(opened == 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned by nobody else.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        // The child must not inherit the master side.
        // SAFETY: setting FD_CLOEXEC on a descriptor this function owns.
        unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        command
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut command = tokio::process::Command::from(command);
        let child = command
            .kill_on_drop(true)
            .spawn()
            .context("spawning on a pty")?;
        let master = std::fs::File::from(master);
        let terminal = Arc::new(Mutex::new(vt100::Parser::new(
            rows.try_into().context("no rows")?,
            cols.try_into().context("no columns")?,
            0,
        )));
        let mut reader = master.try_clone()?;
        let sink = terminal.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .process(&buffer[..n]);
            }
        });
        Ok(Self {
            child,
            master,
            terminal,
        })
    }

    /// Types `bytes`.
    pub fn type_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.master.write_all(bytes)?;
        self.master.flush()
    }

    /// What the screen shows now.
    pub fn screen(&self) -> Screen {
        let terminal = self.terminal.lock().unwrap_or_else(|e| e.into_inner());
        let (_, cols) = terminal.screen().size();
        Screen::new(terminal.screen().rows(0, cols.get()).collect())
    }

    /// Whether the program still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: signalling the process group this child leads (setsid above).
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_program_on_the_pty_sees_a_terminal_and_reads_what_is_typed() {
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            "test -t 0 && echo tty; stty size; read line; echo got:$line",
        ]);
        let mut pty = Pty::spawn(command, 120, 40).unwrap();
        pty.type_bytes(b"hello\r").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let printed = |pty: &Pty| pty.screen().tail(40);
        while !printed(&pty).contains("got:hello") && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let out = printed(&pty);
        assert!(
            out.contains("tty") && out.contains("40 120") && out.contains("got:hello"),
            "{out}"
        );
    }
}
