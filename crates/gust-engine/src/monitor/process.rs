//! A local process's CPU time and resident memory, from `/proc` (Linux).
//!
//! CPU is `utime + stime` from `/proc/PID/stat` in clock ticks (`sysconf(_SC_CLK_TCK)`
//! through rustix); the monitor turns it into a percentage of one core over each
//! interval, like `top`. RSS is `VmRSS` from `/proc/PID/status`.

use std::io;

/// One reading of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcReading {
    /// User + system CPU time since the process started, in seconds.
    pub cpu_s: f64,
    pub rss_bytes: u64,
}

/// `utime + stime` (clock ticks) from the text of `/proc/PID/stat`. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted from the
/// last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After the comm: state (3), ppid (4), … utime (14), stime (15).
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The command name (field 2 of `/proc/PID/stat`, without its parentheses).
pub fn comm(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    stat.get(open + 1..close)
}

/// `VmRSS` in bytes from the text of `/proc/PID/status` (the kernel writes kB).
pub fn rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => value.checked_mul(1024),
        Some(_) => None,
    }
}

/// Clock ticks per second for `/proc` CPU times.
pub fn ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// Reads `pid` now.
pub fn read(pid: u32, ticks_per_s: u64) -> io::Result<ProcReading> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("unreadable {what}"));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let ticks = cpu_ticks(&stat).ok_or_else(|| bad("/proc/PID/stat"))?;
    // A kernel thread or a zombie has no VmRSS line: it uses no user memory.
    let rss = rss_bytes(&status).unwrap_or(0);
    Ok(ProcReading {
        cpu_s: ticks as f64 / ticks_per_s as f64,
        rss_bytes: rss,
    })
}

/// The command name of `pid`, for labels; `None` if it is gone.
pub fn name(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    comm(&stat).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (tricky ) name) S 1 4242 4242 0 -1 4194560 1530 0 0 0 \
                        250 75 0 0 20 0 9 0 12345 123456789 2048 18446744073709551615";

    #[test]
    fn reads_cpu_ticks_after_a_comm_with_spaces_and_parens() {
        assert_eq!(cpu_ticks(STAT), Some(325));
        assert_eq!(comm(STAT), Some("tricky ) name"));
    }

    #[test]
    fn refuses_a_truncated_stat() {
        assert_eq!(cpu_ticks("4242 (x) S 1 2 3"), None);
        assert_eq!(cpu_ticks("no parens at all"), None);
    }

    #[test]
    fn reads_vm_rss_in_bytes() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t9\n";
        assert_eq!(rss_bytes(status), Some(1234 * 1024));
        assert_eq!(rss_bytes("Name:\tkthreadd\n"), None);
        assert_eq!(rss_bytes("VmRSS:\t 12 MB\n"), None);
    }

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id(), ticks_per_second()).unwrap();
        assert!(me.rss_bytes > 0);
        assert!(me.cpu_s >= 0.0);
        assert!(name(std::process::id()).is_some());
    }
}
