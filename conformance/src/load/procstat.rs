//! CPU time and peak memory of a process, read from `/proc` (Linux): how the load run charges
//! each call's cost to the process that paid it.

use std::time::Duration;

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSample {
    /// User plus system CPU time since the process started.
    pub cpu: Duration,
    /// Peak resident set size (`VmHWM`), in KiB.
    pub peak_rss_kib: u64,
    /// Resident set size now (`VmRSS`), in KiB.
    pub rss_kib: u64,
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`; `None` once the process is gone (or off
/// Linux).
pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ticks = cpu_ticks(&stat)?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ProcSample {
        cpu: Duration::from_secs_f64(ticks as f64 / per_second),
        peak_rss_kib: peak_rss_kib(&status).unwrap_or(0),
        rss_kib: status_kib(&status, "VmRSS:").unwrap_or(0),
    })
}

/// `utime + stime` (fields 14 and 15) in clock ticks. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `VmHWM` from `/proc/<pid>/status`, in KiB.
pub fn peak_rss_kib(status: &str) -> Option<u64> {
    status_kib(status, "VmHWM:")
}

/// A `field:` line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_command_name_with_spaces() {
        let stat =
            "4242 (tokio (x) y) S 1 2 3 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 1000 123 456";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn reads_the_peak_resident_set() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(peak_rss_kib(status), Some(2048));
        assert_eq!(status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(peak_rss_kib("Name: x\n"), None);
    }

    #[test]
    fn samples_this_process() {
        let me = sample(std::process::id()).expect("this process is readable");
        assert!(me.peak_rss_kib > 0);
        assert!(me.rss_kib > 0 && me.rss_kib <= me.peak_rss_kib);
    }
}
