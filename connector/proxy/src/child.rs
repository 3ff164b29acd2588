//! How a stdio upstream's process is started (R-PRX-11).
//!
//! A stdio upstream is often third-party code (`npx some-server`): it must not see the other
//! upstreams' secrets, the Temporal API key or TLS key paths that sit in the proxy's environment,
//! and it must not outlive the proxy. So a child gets a minimal environment (as MCP hosts give
//! theirs) plus its own `env`, runs in a process group of its own, and is started under a tiny
//! watchdog that kills the whole group, grandchildren included, as soon as the proxy is gone,
//! however it went (a SIGKILL included). Dropping the connection kills the group as well.

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
/// in a [`Group`], whose drop kills every process in the group.
pub fn command(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    inherit_env: bool,
    cwd: Option<&Path>,
) -> tokio::process::Command {
    use std::process::Stdio;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(child_environment(inherit_env, env, std::env::vars_os()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
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
/// first thing; a program that runs the proxy as a library calls it too. An upstream running
/// as root (or with `CAP_SYS_PTRACE`) can read any process of the machine: isolate such
/// upstreams by user or container.
pub fn refuse_inspection() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain prctl on this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
    }
}

/// A started stdio upstream. Dropping it kills its whole process group (a `killpg`), so
/// grandchildren (`npx`, `sh -c` wrappers) go with it; `kill_on_drop` alone would only reach
/// the group's leader.
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
        let environ = environ_region();
        // SAFETY: `run` makes only async-signal-safe calls and never allocates.
        unsafe {
            cmd.pre_exec(move || {
                run(proxy, environ);
                Ok(())
            });
        }
    }

    /// Where the kernel reads this process's `/proc/<pid>/environ` from: the start and end
    /// addresses of the environment it was started with (fields 50 and 51 of
    /// `/proc/self/stat`). Read before the fork, since the watchdog must not allocate.
    pub(super) fn environ_region() -> Option<(usize, usize)> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces and parentheses: count from its end.
        let after_name = stat.get(stat.rfind(')')? + 1..)?;
        let mut fields = after_name.split_whitespace().skip(50 - 3);
        let start: usize = fields.next()?.parse().ok()?;
        let end: usize = fields.next()?.parse().ok()?;
        (start < end).then_some((start, end))
    }

    /// The watchdog is a fork of the proxy that never execs, so `/proc/<watchdog>/environ`
    /// would show the proxy's whole environment to the upstream, its child (R-PRX-11): the
    /// watchdog's copy of that region is overwritten, and the watchdog made non-dumpable (its
    /// `/proc` files then need `CAP_SYS_PTRACE`). The proxy's own copy is untouched.
    unsafe fn forget_the_environment(environ: Option<(usize, usize)>) {
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
            if let Some((start, end)) = environ {
                std::ptr::write_bytes(start as *mut u8, 0, end - start);
            }
        }
    }

    /// Returns in the server process (which goes on to exec); never returns in the watchdog.
    unsafe fn run(proxy: libc::pid_t, environ: Option<(usize, usize)>) {
        unsafe {
            libc::setpgid(0, 0);
            // Before the server is forked, so that it never sees a watchdog that still has it.
            forget_the_environment(environ);
            let watchdog = libc::getpid();
            let server = libc::fork();
            if server < 0 {
                // No watchdog: the server still runs in its own group, killed with it.
                return;
            }
            if server == 0 {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() != watchdog {
                    libc::_exit(1);
                }
                return;
            }
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_IGN);
            }
            // The pipes belong to the server, and the proxy's spawn waits for the end of its
            // exec-status pipe: hold none of them.
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
                for fd in 0..4096 {
                    libc::close(fd);
                }
            }
            loop {
                let mut status = 0;
                let reaped = libc::waitpid(server, &mut status, libc::WNOHANG);
                if reaped == server {
                    // What the server left behind goes with it. The watchdog steps out of the
                    // group first (into the proxy's), so that the proxy still gets the
                    // server's status; with the proxy gone, the status matters to nobody.
                    if libc::setpgid(0, libc::getpgid(proxy)) == 0 {
                        libc::kill(-watchdog, libc::SIGKILL);
                    } else {
                        libc::kill(0, libc::SIGKILL);
                    }
                    libc::_exit(if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    });
                }
                if reaped < 0 || libc::getppid() != proxy {
                    libc::kill(0, libc::SIGKILL);
                    libc::_exit(1);
                }
                libc::nanosleep(&POLL, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut cmd = command(
            "sh",
            &["-c".into(), script.into()],
            &BTreeMap::new(),
            false,
            None,
        );
        use tokio::io::AsyncReadExt as _;
        let mut group = Group::new(cmd.spawn().expect("sh runs"));
        let mut out = Vec::new();
        let mut stdout = group.child_mut().stdout.take().unwrap();
        stdout.read_to_end(&mut out).await.unwrap();
        group.child_mut().wait().await.unwrap();
        let seen = String::from_utf8_lossy(&out);
        let read: Vec<&str> = seen.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(read.last(), Some(&"end"), "the script ran to its end");
        assert_eq!(read.len(), 1, "the parent's environment leaked: {read:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_environ_region_is_found() {
        let (start, end) = watchdog::environ_region().expect("/proc/self/stat has fields 50-51");
        assert!(end > start);
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
