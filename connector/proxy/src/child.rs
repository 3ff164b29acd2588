//! How a stdio upstream's process is started (R-PRX-11).
//!
//! A stdio upstream is often third-party code (`npx some-server`): it must not see the other
//! upstreams' secrets, the Temporal API key or TLS key paths that sit in the proxy's environment,
//! and it must not outlive the proxy. So a child gets a minimal environment (as MCP hosts give
//! theirs) plus its own `env`, runs in a process group of its own, and is started under a tiny
//! watchdog that kills the whole group, grandchildren included, as soon as the proxy is gone,
//! however it went (a SIGKILL included). Dropping the connection kills the group as well. The
//! watchdog is a child subreaper: a descendant that left the group (`setsid`) is adopted by it
//! once its parent dies, and killed with the rest.

use std::{
    collections::BTreeMap,
    ffi::{OsStr, OsString},
    path::Path,
};

/// The proxy's variables a child gets without `inherit_env`: what programs need to find
/// their tools, home, user, locale and temporary directory, and nothing that holds a secret.
pub const PASSED_THROUGH: &[&str] = &[
    "HOME", "LANG", "LC_ALL", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR", "USER",
];

/// The environment of a child: the variables of `parent` named in [`PASSED_THROUGH`] (all of
/// them with `inherit`), then the upstream's own `env`, which wins.
pub fn child_environment(
    inherit: bool,
    own: &BTreeMap<String, String>,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> BTreeMap<OsString, OsString> {
    let mut vars: BTreeMap<OsString, OsString> = parent
        .into_iter()
        .filter(|(name, _)| inherit || PASSED_THROUGH.iter().any(|p| OsStr::new(p) == name))
        .collect();
    vars.extend(own.iter().map(|(k, v)| (k.into(), v.into())));
    vars
}

/// The command for a stdio upstream: only the environment [`child_environment`] gives, its
/// stdio piped, a new process group, and (on Linux) the watchdog. Spawn it and keep the child
/// in a [`Group`], whose drop kills every process in the group. The process that builds it is
/// made non-dumpable first ([`refuse_inspection`]), so that a program hosting the proxy as a
/// library is closed to its upstreams without a call of its own.
pub fn command(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    inherit_env: bool,
    cwd: Option<&Path>,
) -> tokio::process::Command {
    use std::process::Stdio;
    refuse_inspection();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(child_environment(inherit_env, env, std::env::vars_os()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // On Linux the watchdog must outlive the group's kill to stop what left the group
        // (see [`Group`]); elsewhere the group's leader is the server itself.
        .kill_on_drop(!cfg!(target_os = "linux"));
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    watchdog::install(&mut cmd);
    cmd
}

/// Makes this process non-dumpable, so that processes of the same user without
/// `CAP_SYS_PTRACE`, a stdio upstream among them, cannot read its `/proc/<pid>/environ` or
/// memory: an upstream that looks up its grandparent (the watchdog's parent) finds nothing
/// there (R-PRX-11). Core dumps of this process are off from then on. The proxy binary calls it
/// first thing, and [`command`] before every stdio upstream starts, so a program that runs the
/// proxy as a library needs no call of its own (one earlier closes it sooner). An upstream running
/// as root (or with `CAP_SYS_PTRACE`) can read any process of the machine: isolate such
/// upstreams by user or container.
pub fn refuse_inspection() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain prctl on this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
    }
}

/// Overwrites `secret` wherever it appears in this process's own command line (the memory the
/// kernel shows as `/proc/<pid>/cmdline`, readable by every local process, non-dumpable or
/// not, a stdio upstream among them: its grandparent is the proxy, R-PRX-11). Called with
/// `--api-key`'s value once the flags are parsed (the parsed copy stays). A no-op off Linux.
pub fn hide_in_own_command_line(secret: &str) {
    #[cfg(target_os = "linux")]
    if let Some((start, end)) = watchdog::region(48) {
        // SAFETY: [start, end) is this process's argument area, which it owns and no Rust
        // value borrows (std copied the arguments at start-up).
        let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
        overwrite_all(area, secret.as_bytes());
    }
}

/// Overwrites every occurrence of `secret` in `area` with `*`.
fn overwrite_all(area: &mut [u8], secret: &[u8]) {
    if secret.is_empty() {
        return;
    }
    let mut at = 0;
    while let Some(found) = area[at..].windows(secret.len()).position(|w| w == secret) {
        let from = at + found;
        area[from..from + secret.len()].fill(b'*');
        at = from + secret.len();
    }
}

/// A started stdio upstream. Dropping it kills its whole process group (a `killpg`), so
/// grandchildren (`npx`, `sh -c` wrappers) go with it; `kill_on_drop` alone would only reach
/// the group's leader. On Linux the watchdog has stepped out of the group: it sees the server
/// die, then kills every descendant it adopted, those that left the group included.
#[derive(Debug)]
pub struct Group(tokio::process::Child);

impl Group {
    pub fn new(child: tokio::process::Child) -> Self {
        Self(child)
    }

    pub fn child_mut(&mut self) -> &mut tokio::process::Child {
        &mut self.0
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.id() {
            // SAFETY: a plain syscall; the group is the one `command` made (its leader's pid).
            unsafe {
                libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod watchdog {
    //! The watchdog is the process the proxy starts; it forks the upstream server and waits.
    //! It is the leader of the group. When the server exits, it kills what the server left in
    //! the group and exits with the server's status; it ignores the polite signals meant for the server (SIGTERM, SIGINT, SIGHUP), and kills the
    //! group when its parent, the proxy, is gone. The server dies with the watchdog
    //! (`PR_SET_PDEATHSIG`), so even a SIGKILL of the watchdog alone leaves no server behind.
    //!
    //! It runs between fork and exec, so it uses only async-signal-safe calls and allocates
    //! nothing.

    /// How often the watchdog looks for its parent and its server.
    const POLL: libc::timespec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };

    pub(super) fn install(cmd: &mut tokio::process::Command) {
        let proxy = std::process::id() as libc::pid_t;
        let environ = [region(48), region(50)];
        // SAFETY: `run` makes only async-signal-safe calls and never allocates.
        unsafe {
            cmd.pre_exec(move || {
                run(proxy, environ);
                Ok(())
            });
        }
    }

    /// Where the kernel reads this process's `/proc/<pid>/cmdline` (`field` 48: the arguments
    /// it was started with, `--api-key` among them) or `/proc/<pid>/environ` (50: its
    /// environment) from: the start and end addresses in `/proc/self/stat`. Read before the
    /// fork, since the watchdog must not allocate.
    pub(super) fn region(field: usize) -> Option<(usize, usize)> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces and parentheses: count from its end.
        let after_name = stat.get(stat.rfind(')')? + 1..)?;
        let mut fields = after_name.split_whitespace().skip(field - 3);
        let start: usize = fields.next()?.parse().ok()?;
        let end: usize = fields.next()?.parse().ok()?;
        (start < end).then_some((start, end))
    }

    /// The watchdog is a fork of the proxy that never execs, so `/proc/<watchdog>/environ`
    /// and `/proc/<watchdog>/cmdline` (readable even when not dumpable) would show the proxy's
    /// whole environment and command line to the upstream, its child (R-PRX-11): the
    /// watchdog's copies of both regions are overwritten, and the watchdog made non-dumpable
    /// (its other `/proc` files then need `CAP_SYS_PTRACE`). The proxy's own copies are
    /// untouched.
    unsafe fn forget_the_environment(regions: [Option<(usize, usize)>; 2]) {
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
            for (start, end) in regions.into_iter().flatten() {
                std::ptr::write_bytes(start as *mut u8, 0, end - start);
            }
        }
    }

    /// Returns in the server process (which goes on to exec); never returns in the watchdog.
    unsafe fn run(proxy: libc::pid_t, environ: [Option<(usize, usize)>; 2]) {
        unsafe {
            libc::setpgid(0, 0);
            // Before the server is forked, so that it never sees a watchdog that still has it.
            forget_the_environment(environ);
            // Orphans among the server's descendants, those that left its group with `setsid`
            // included, become the watchdog's children, so that it can stop them.
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
            let watchdog = libc::getpid();
            let server = libc::fork();
            if server < 0 {
                // No watchdog: the server still runs in its own group, killed with it.
                return;
            }
            if server == 0 {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0 as libc::c_ulong);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() != watchdog {
                    libc::_exit(1);
                }
                return;
            }
            // Out of the server's group (into the proxy's), so that the proxy's kill of the group
            // leaves the watchdog to stop what left it; the proxy still gets the server's status.
            let outside = libc::setpgid(0, libc::getpgid(proxy)) == 0;
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(signal, libc::SIG_IGN);
            }
            // The pipes belong to the server, and the proxy's spawn waits for the end of its
            // exec-status pipe: hold none of them.
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
                for fd in 0..4096 {
                    libc::close(fd);
                }
            }
            let status = watch(proxy, server);
            if !outside {
                libc::kill(0, libc::SIGKILL);
            }
            stop_every_descendant(watchdog);
            libc::_exit(status);
        }
    }

    /// Waits until the server exits (its exit status, as a shell gives it) or the proxy is gone
    /// (1).
    unsafe fn watch(proxy: libc::pid_t, server: libc::pid_t) -> i32 {
        unsafe {
            loop {
                let mut status = 0;
                let reaped = libc::waitpid(server, &mut status, libc::WNOHANG);
                if reaped == server {
                    return if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    };
                }
                if reaped < 0 || libc::getppid() != proxy {
                    return 1;
                }
                libc::nanosleep(&POLL, std::ptr::null_mut());
            }
        }
    }

    /// Kills the server's group, then every child of the watchdog (adopted orphans), reaping
    /// them, until it has no child left: a killed process's own children are adopted before it
    /// can be reaped, so each round reaches one generation further.
    unsafe fn stop_every_descendant(watchdog: libc::pid_t) {
        unsafe {
            loop {
                libc::kill(-watchdog, libc::SIGKILL);
                kill_children_of(watchdog);
                let mut status = 0;
                if libc::waitpid(-1, &mut status, 0) < 0 && *libc::__errno_location() != libc::EINTR
                {
                    return;
                }
            }
        }
    }

    /// SIGKILLs every process whose parent is `parent`, found by walking `/proc` with raw
    /// system calls into buffers on the stack (nothing allocated).
    unsafe fn kill_children_of(parent: libc::pid_t) {
        unsafe {
            let dir = libc::open(
                c"/proc".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if dir < 0 {
                return;
            }
            let mut entries = [0u8; 4096];
            loop {
                let n = libc::syscall(
                    libc::SYS_getdents64,
                    dir,
                    entries.as_mut_ptr(),
                    entries.len(),
                );
                if n <= 0 {
                    break;
                }
                let mut at = 0;
                // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
                while at + 19 < n as usize {
                    let len = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
                    if len == 0 || at + len > n as usize {
                        break;
                    }
                    if let Some(pid) = pid_of_name(&entries[at + 19..at + len])
                        && parent_of(pid) == Some(parent)
                    {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    at += len;
                }
            }
            libc::close(dir);
        }
    }

    /// The parent of `pid`, from `/proc/<pid>/stat`.
    unsafe fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
        let mut path = *b"/proc/0000000000/stat\0";
        let mut digits = [0u8; 10];
        let mut n = pid as u32;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            path[6 + i] = digits[len - 1 - i];
        }
        path[6 + len..6 + len + 6].copy_from_slice(b"/stat\0");
        let mut stat = [0u8; 256];
        // SAFETY: a NUL-terminated path and a buffer on the stack.
        let read = unsafe {
            let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let read = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
            libc::close(fd);
            read
        };
        ppid_in_stat(stat.get(..usize::try_from(read).ok()?)?)
    }

    /// A `/proc` entry's name as a pid (entries that are not processes give none); `name` ends
    /// at its NUL or runs on into padding.
    pub(super) fn pid_of_name(name: &[u8]) -> Option<libc::pid_t> {
        let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        let name = &name[..end];
        if name.is_empty() || name.len() > 9 || !name.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            name.iter()
                .fold(0, |n, d| n * 10 + libc::pid_t::from(d - b'0')),
        )
    }

    /// The parent pid (field 4) of a `/proc/<pid>/stat` line; the command name (field 2) may
    /// hold spaces and parentheses, so the fields are counted from its last `)`.
    pub(super) fn ppid_in_stat(stat: &[u8]) -> Option<libc::pid_t> {
        let after = stat.iter().rposition(|b| *b == b')')? + 1;
        let mut fields = stat[after..]
            .split(|b| *b == b' ')
            .filter(|f| !f.is_empty());
        fields.next()?; // the state
        pid_of_name(fields.next()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library host that never called [`refuse_inspection`] is closed all the same once it
    /// builds a stdio upstream's command (R-PRX-11).
    #[cfg(target_os = "linux")]
    #[test]
    fn building_a_stdio_command_makes_the_process_non_dumpable() {
        let _cmd = command("true", &[], &BTreeMap::new(), false, None);
        // SAFETY: a plain prctl query on this process.
        let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE) };
        assert_eq!(dumpable, 0);
    }

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/p"),
            ("TEMPORAL_API_KEY", "secret"),
            ("OTHER_UPSTREAM_TOKEN", "secret"),
            ("LANG", "C.UTF-8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    #[test]
    fn a_child_gets_the_minimal_environment_and_its_own() {
        let own = BTreeMap::from([
            ("API_KEY".to_owned(), "mine".to_owned()),
            ("PATH".to_owned(), "/opt/bin".to_owned()),
        ]);
        let vars = child_environment(false, &own, parent());
        let names: Vec<_> = vars.keys().map(|k| k.to_str().unwrap()).collect();
        assert_eq!(names, ["API_KEY", "HOME", "LANG", "PATH"]);
        assert_eq!(vars[OsStr::new("PATH")], "/opt/bin", "its own env wins");
    }

    /// `sh -c script` started as a stdio upstream is.
    #[cfg(target_os = "linux")]
    fn sh(script: &str) -> Group {
        let mut cmd = command(
            "sh",
            &["-c".into(), script.into()],
            &BTreeMap::new(),
            false,
            None,
        );
        Group::new(cmd.spawn().expect("sh runs"))
    }

    /// The upstream's parent is the watchdog, a fork of the proxy: reading the parent's
    /// `/proc/<pid>/environ` must show none of the proxy's variables (here the test process's,
    /// which has every `CARGO_*` variable cargo sets), only NUL bytes.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_upstream_cannot_read_the_proxys_environment_through_its_parent() {
        assert!(
            std::env::vars_os().any(|(name, _)| name == "CARGO_PKG_NAME"),
            "the test needs a variable the child does not get"
        );
        // Run as root the read succeeds and must find only NULs; otherwise the non-dumpable
        // watchdog's file cannot even be opened. Either way no variable comes out.
        let script = r#"tr '\0' '\n' < /proc/$PPID/environ 2>/dev/null; echo end"#;
        use tokio::io::AsyncReadExt as _;
        let mut group = sh(script);
        let mut out = Vec::new();
        let mut stdout = group.child_mut().stdout.take().unwrap();
        stdout.read_to_end(&mut out).await.unwrap();
        group.child_mut().wait().await.unwrap();
        let seen = String::from_utf8_lossy(&out);
        let read: Vec<&str> = seen.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(read.last(), Some(&"end"), "the script ran to its end");
        assert_eq!(read.len(), 1, "the parent's environment leaked: {read:?}");
    }

    /// A grandchild that leaves the process group (`setsid`) is still stopped with the
    /// upstream: the watchdog adopts it as a subreaper and kills it (R-PRX-11).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_grandchild_that_leaves_the_group_is_stopped_with_the_upstream() {
        use tokio::io::AsyncBufReadExt as _;
        let mut group = sh("setsid sleep 1000 & echo $!; exec sleep 1000");
        let stdout = group.child_mut().stdout.take().unwrap();
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .unwrap();
        let escaped: libc::pid_t = line.trim().parse().expect("the script prints a pid");
        let alive = || {
            std::fs::read_to_string(format!("/proc/{escaped}/stat"))
                .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").starts_with(" Z"))
        };
        // It is in a session (so a group) of its own once setsid ran.
        let own_session = || unsafe { libc::getsid(escaped) } == escaped;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !own_session() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(own_session(), "the grandchild left the group");
        drop(group);
        while alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let survived = alive();
        if survived {
            unsafe { libc::kill(escaped, libc::SIGKILL) };
        }
        assert!(!survived, "the grandchild {escaped} outlived its upstream");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn proc_entries_and_stat_lines_are_read_without_allocating() {
        assert_eq!(watchdog::pid_of_name(b"1234\0\0\0"), Some(1234));
        assert_eq!(watchdog::pid_of_name(b"self\0"), None);
        assert_eq!(watchdog::pid_of_name(b""), None);
        assert_eq!(
            watchdog::ppid_in_stat(b"42 (a) b) (c) S 7 42 42 0 -1"),
            Some(7)
        );
        assert_eq!(watchdog::ppid_in_stat(b"42 no parenthesis"), None);
        let own = std::fs::read(format!("/proc/{}/stat", std::process::id())).unwrap();
        assert_eq!(
            watchdog::ppid_in_stat(&own),
            Some(std::os::unix::process::parent_id() as libc::pid_t)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_environ_and_argument_regions_are_found() {
        let (start, end) = watchdog::region(50).expect("/proc/self/stat has fields 50-51");
        assert!(end > start);
        let (start, end) = watchdog::region(48).expect("/proc/self/stat has fields 48-49");
        assert!(end > start);
    }

    #[test]
    fn a_secret_is_overwritten_wherever_it_appears() {
        let mut area = b"proxy\0--api-key\0k3y\0--x=k3y\0".to_vec();
        overwrite_all(&mut area, b"k3y");
        assert_eq!(area, b"proxy\0--api-key\0***\0--x=***\0");
        overwrite_all(&mut area, b"");
    }

    #[test]
    fn inherit_env_passes_everything_and_its_own_still_wins() {
        let own = BTreeMap::from([("TEMPORAL_API_KEY".to_owned(), "its own".to_owned())]);
        let vars = child_environment(true, &own, parent());
        assert_eq!(vars.len(), 5);
        assert_eq!(vars[OsStr::new("OTHER_UPSTREAM_TOKEN")], "secret");
        assert_eq!(vars[OsStr::new("TEMPORAL_API_KEY")], "its own");
    }
}
