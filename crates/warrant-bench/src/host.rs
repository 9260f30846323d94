//! Facts about the machine a measurement ran on, so two figures are only
//! compared when their hosts are comparable: the CPU, how many cores, the
//! frequency governor and turbo (the reference measured up to 43 % between
//! powersave and performance+turbo), the kernel, the data dir's filesystem
//! and what one fsync costs there (the floor under every durable commit).
//!
//! The parsers are pure and tested on sample file contents; `collect` only
//! reads files and treats anything unreadable as unknown.

use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// fsync samples taken by [`collect`]: enough for a median and a rough p99
/// while costing well under a second on any disk that a CA should run on.
const FSYNC_SAMPLES: usize = 20;
const FSYNC_BLOCK: usize = 4096;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostFacts {
    pub cpu_model: Option<String>,
    /// What this process may use (`available_parallelism`: affinity, cgroup).
    pub cores_available: Option<usize>,
    /// Online CPUs of the machine (`/sys/devices/system/cpu/online`).
    pub cores_online: Option<usize>,
    /// Every distinct `scaling_governor` of the CPUs; empty when unreadable
    /// (a VM or container often exposes none).
    pub governors: Vec<String>,
    /// true: turbo/boost on; false: off; None: not readable.
    pub boost: Option<bool>,
    pub kernel: Option<String>,
    pub data_dir: PathBuf,
    pub data_dir_fs: Option<String>,
    pub fsync_median_us: Option<u64>,
    pub fsync_p99_us: Option<u64>,
}

/// The facts about this machine, the data dir's filesystem and an fsync
/// measured in `dir` (which must exist and be writable for the fsync figure).
pub(crate) fn collect(dir: &Path) -> HostFacts {
    HostFacts::collect(dir)
}

impl HostFacts {
    pub fn collect(data_dir: &Path) -> HostFacts {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let governors = governors_in(Path::new("/sys/devices/system/cpu"));
        let boost = read("/sys/devices/system/cpu/intel_pstate/no_turbo")
            .and_then(|s| parse_flag(&s).map(|no_turbo| !no_turbo))
            .or_else(|| read("/sys/devices/system/cpu/cpufreq/boost").and_then(|s| parse_flag(&s)));
        let abs = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        let fsync = measure_fsync(data_dir, FSYNC_SAMPLES);
        HostFacts {
            cpu_model: read("/proc/cpuinfo").and_then(|s| parse_cpu_model(&s)),
            cores_available: std::thread::available_parallelism().ok().map(|n| n.get()),
            cores_online: read("/sys/devices/system/cpu/online").and_then(|s| parse_cpu_list(&s)),
            governors,
            boost,
            kernel: read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()),
            data_dir_fs: read("/proc/self/mounts").and_then(|m| fs_type_of(&m, &abs)),
            data_dir: abs,
            fsync_median_us: fsync.as_ref().map(|s| percentile(s, 0.5)),
            fsync_p99_us: fsync.as_ref().map(|s| percentile(s, 0.99)),
        }
    }

    /// Conditions that make figures from this host hard to compare.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let not_perf: Vec<&str> = self
            .governors
            .iter()
            .map(String::as_str)
            .filter(|g| *g != "performance")
            .collect();
        if !not_perf.is_empty() {
            w.push(format!(
                "CPU governor {} (not performance): figures may swing by up to 43 % \
                 (the reference's powersave vs performance+turbo)",
                not_perf.join(",")
            ));
        }
        w
    }

    /// A few human lines for the text reports.
    pub fn text(&self) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        let num = |v: Option<usize>| v.map_or("?".into(), |n| n.to_string());
        let us = |v: Option<u64>| v.map_or("?".into(), |n| n.to_string());
        let mut t = format!(
            "host: {} · {} cores available / {} online · governor {} · boost {} · kernel {}\n\
             data dir {} on {} · fsync (4 KiB, fdatasync) median {} µs p99 {} µs\n",
            opt(&self.cpu_model),
            num(self.cores_available),
            num(self.cores_online),
            if self.governors.is_empty() {
                "unknown".to_string()
            } else {
                self.governors.join(",")
            },
            match self.boost {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            },
            opt(&self.kernel),
            self.data_dir.display(),
            opt(&self.data_dir_fs),
            us(self.fsync_median_us),
            us(self.fsync_p99_us),
        );
        for w in self.warnings() {
            t.push_str(&format!("WARNING: {w}\n"));
        }
        t
    }
}

/// `model name` of the first CPU (x86), else `Model` / `Hardware` (ARM boards).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware", "cpu model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// The number of CPUs in a kernel CPU list such as `0-3,8-11,14`.
pub fn parse_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

/// `1`/`0` of a sysfs flag.
pub fn parse_flag(s: &str) -> Option<bool> {
    match s.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Distinct values, sorted, of a list of governor file contents.
pub fn distinct_governors<I: IntoIterator<Item = String>>(values: I) -> Vec<String> {
    let mut v: Vec<String> = values
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn governors_in(cpu_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(cpu_dir) else {
        return Vec::new();
    };
    let values = entries.flatten().filter_map(|e| {
        let name = e.file_name();
        let name = name.to_str()?;
        let is_cpu = name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !is_cpu {
            return None;
        }
        std::fs::read_to_string(e.path().join("cpufreq/scaling_governor")).ok()
    });
    distinct_governors(values)
}

/// Undoes the octal escapes (`\040` for a space) of `/proc/self/mounts`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|_| b[i] == b'\\')
            .and_then(|o| std::str::from_utf8(o).ok())
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The filesystem type of the longest mount point containing `path` (an
/// absolute path), from the text of `/proc/self/mounts`. Later lines win a
/// tie, as a later mount hides an earlier one on the same point.
pub fn fs_type_of(mounts: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(_dev), Some(point), Some(fs)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let point = unescape_mount(point);
        if !path.starts_with(Path::new(&point)) {
            continue;
        }
        let len = Path::new(&point).components().count();
        if best.as_ref().is_none_or(|(l, _)| len >= *l) {
            best = Some((len, fs.to_string()));
        }
    }
    best.map(|(_, fs)| fs)
}

/// The `q` quantile (nearest rank) of samples; 0 for none.
pub fn percentile(samples: &[u64], q: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// `n` times: write 4 KiB at the start of a temp file in `dir` and
/// fdatasync it, timing each in µs. None when the file cannot be written.
fn measure_fsync(dir: &Path, n: usize) -> Option<Vec<u64>> {
    let path = dir.join(format!(".warrant-fsync-probe-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&path).ok()?;
        let block = [0x5au8; FSYNC_BLOCK];
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let start = Instant::now();
            std::io::Seek::rewind(&mut f).ok()?;
            f.write_all(&block).ok()?;
            f.sync_data().ok()?;
            samples.push(start.elapsed().as_micros() as u64);
        }
        Some(samples)
    })();
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_from_x86_and_arm_cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(
            parse_cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz")
        );
        let pi = "processor\t: 0\nBogoMIPS\t: 108.00\n\nRevision\t: d04170\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n";
        assert_eq!(
            parse_cpu_model(pi).as_deref(),
            Some("Raspberry Pi 5 Model B Rev 1.0")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-3\n"), Some(4));
        assert_eq!(parse_cpu_list("0-3,8-11,14"), Some(9));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn flags_and_governors() {
        assert_eq!(parse_flag("1\n"), Some(true));
        assert_eq!(parse_flag("0"), Some(false));
        assert_eq!(parse_flag("on"), None);
        let g = distinct_governors(
            ["powersave\n", "performance\n", "powersave\n", ""]
                .iter()
                .map(|s| s.to_string()),
        );
        assert_eq!(g, vec!["performance", "powersave"]);
    }

    #[test]
    fn the_longest_mount_point_names_the_filesystem() {
        let mounts = "overlay / overlay rw 0 0\n\
            proc /proc proc rw 0 0\n\
            /dev/sda1 /work ext4 rw 0 0\n\
            tmpfs /work/tmp tmpfs rw 0 0\n\
            /dev/sdb1 /mnt/my\\040disk xfs rw 0 0\n";
        let fs = |p: &str| fs_type_of(mounts, Path::new(p));
        assert_eq!(fs("/work/tmp/x").as_deref(), Some("tmpfs"));
        assert_eq!(fs("/work/data").as_deref(), Some("ext4"));
        // /work/tmpfoo is not under /work/tmp: components, not string prefixes.
        assert_eq!(fs("/work/tmpfoo").as_deref(), Some("ext4"));
        assert_eq!(fs("/etc").as_deref(), Some("overlay"));
        assert_eq!(fs("/mnt/my disk/db").as_deref(), Some("xfs"));
        // A later mount on the same point hides the earlier one.
        let stacked = "a / ext4 rw 0 0\nb / btrfs rw 0 0\n";
        assert_eq!(
            fs_type_of(stacked, Path::new("/x")).as_deref(),
            Some("btrfs")
        );
        assert_eq!(fs_type_of("", Path::new("/x")), None);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<u64> = (1..=20).rev().collect();
        assert_eq!(percentile(&v, 0.5), 10);
        assert_eq!(percentile(&v, 0.99), 20);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn only_a_readable_non_performance_governor_warns() {
        let mut h = HostFacts::default();
        assert!(h.warnings().is_empty(), "unknown governor: no warning");
        h.governors = vec!["performance".into()];
        assert!(h.warnings().is_empty());
        h.governors = vec!["performance".into(), "powersave".into()];
        let w = h.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("powersave") && w[0].contains("43 %"), "{w:?}");
        assert!(h.text().contains("WARNING"));
    }

    #[test]
    fn collect_measures_fsync_in_the_data_dir() {
        let dir = std::env::temp_dir();
        let h = collect(&dir);
        assert!(h.fsync_median_us.is_some());
        assert!(h.fsync_p99_us >= h.fsync_median_us);
        assert!(h.kernel.is_some() && h.cores_available.is_some());
        // The probe file is gone.
        let probe = dir.join(format!(".warrant-fsync-probe-{}", std::process::id()));
        assert!(!probe.exists());
        let missing = collect(Path::new("/nonexistent/warrant"));
        assert_eq!(missing.fsync_median_us, None);
    }
}
