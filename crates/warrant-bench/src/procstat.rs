//! Server CPU and memory from `/proc` (Linux). Parsing is pure and tested;
//! reading returns None where `/proc` is absent.

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

/// One thread of a process: its id, its name (`comm`, at most 15 bytes:
/// the kernel truncates longer names) and the CPU it has used so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadCpu {
    pub tid: u32,
    pub name: String,
    pub cpu_seconds: f64,
}

/// The live threads of process `pid`, from `/proc/<pid>/task/*/{comm,stat}`;
/// `None` where that directory cannot be read (no `/proc`, process gone).
/// Threads that already exited are not listed, and their CPU is not counted
/// anywhere.
pub fn threads(pid: u32) -> Option<Vec<ThreadCpu>> {
    let dir = std::fs::read_dir(Path::new(&format!("/proc/{pid}/task"))).ok()?;
    let hz = clock_ticks_per_second();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let p = entry.path();
        // A thread that exits between the listing and these reads is skipped.
        let (Ok(comm), Some(ticks)) = (
            std::fs::read_to_string(p.join("comm")),
            std::fs::read_to_string(p.join("stat"))
                .ok()
                .and_then(|s| stat_cpu_ticks(&s)),
        ) else {
            continue;
        };
        out.push(ThreadCpu {
            tid,
            name: comm.trim_end_matches('\n').to_string(),
            cpu_seconds: ticks as f64 / hz,
        });
    }
    Some(out)
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

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_lists_its_named_threads() {
        // std names a thread from inside it, before running its closure:
        // once the closure says it runs, the name is in place.
        let (ready, started) = std::sync::mpsc::channel::<()>();
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("procstat-probe".into())
            .spawn(move || {
                let _ = ready.send(());
                wait.recv()
            })
            .unwrap();
        started.recv().unwrap();
        let found = threads(std::process::id()).expect("/proc is readable");
        assert!(
            found.iter().any(|t| t.name == "procstat-probe"),
            "{found:?}"
        );
        assert!(found.iter().all(|t| t.cpu_seconds >= 0.0 && t.tid > 0));
        drop(stop);
        let _ = t.join();
    }

    #[test]
    fn status_field_bytes_reads_kilobytes() {
        let s = "Name:\twarrant\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(status_field_bytes(s, "VmHWM:"), Some(2048 * 1024));
        assert_eq!(status_field_bytes(s, "VmSwap:"), None);
    }
}
