//! Server CPU and memory from `/proc` (Linux). Parsing is pure and tested;
//! reading returns None where `/proc` is absent.

use std::collections::BTreeMap;
use std::path::Path;

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// utime + stime (clock ticks) from a `/proc/.../stat` line. The comm field
/// may contain spaces and parentheses, so fields are counted after the last ')'.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // after comm: state(0) ppid(1) … utime is field 14 overall → index 11 here
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `VmHWM:  1234 kB` → bytes.
pub fn status_field_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat_cpu_ticks(&s)? as f64 / clock_ticks_per_second())
}

pub fn status_bytes(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_bytes(&s, key)
}

/// CPU seconds of this process's live threads whose name starts with one of
/// `prefixes`, per prefix (each thread counted under the first that
/// matches). Threads that already exited are not counted, which is why the
/// embedded server's runtime is kept alive until after the measurement.
pub fn own_threads_cpu_seconds(prefixes: &[&str]) -> BTreeMap<String, f64> {
    let mut ticks: BTreeMap<String, u64> = prefixes.iter().map(|p| (p.to_string(), 0)).collect();
    if let Ok(dir) = std::fs::read_dir(Path::new("/proc/self/task")) {
        for entry in dir.flatten() {
            let p = entry.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            let Some(prefix) = prefixes
                .iter()
                .find(|pre| comm.trim_end().starts_with(*pre))
            else {
                continue;
            };
            if let Some(t) = std::fs::read_to_string(p.join("stat"))
                .ok()
                .and_then(|s| stat_cpu_ticks(&s))
                && let Some(sum) = ticks.get_mut(*prefix)
            {
                *sum += t;
            }
        }
    }
    let hz = clock_ticks_per_second();
    ticks.into_iter().map(|(k, t)| (k, t as f64 / hz)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks_counts_fields_after_the_last_paren() {
        let line =
            "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 8 0 1 1 1";
        assert_eq!(stat_cpu_ticks(line), Some(22));
    }

    #[test]
    fn status_field_bytes_reads_kilobytes() {
        let s = "Name:\twarrant\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(status_field_bytes(s, "VmHWM:"), Some(2048 * 1024));
        assert_eq!(status_field_bytes(s, "VmSwap:"), None);
    }
}
