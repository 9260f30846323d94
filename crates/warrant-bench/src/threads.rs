//! Where the embedded server's CPU goes: its threads grouped by name.
//!
//! The bench, the Gust client and the embedded server share one process, so
//! the server's CPU is the CPU of the threads that are neither the client's
//! nor the bench's own, read by name from `/proc/<pid>/task/*/comm`. The
//! name patterns are the bench's own: the names it gives the embedded
//! server's tokio runtime ([`worker_thread_name`]), sqlx's SQLite connection
//! threads, and everything else of the server as `other`. Nothing here
//! depends on how the store names its threads, if it names any.

use crate::procstat::{self, ThreadCpu};
use std::collections::BTreeMap;

/// Prefix of the embedded server's tokio worker threads (HTTP, checks,
/// signing: the async work).
const WORKER_PREFIX: &str = "wsrv-worker-";
/// Prefix of the embedded server's tokio blocking-pool threads
/// (`spawn_blocking`: server-side key generation, password hashing).
const BLOCKING_PREFIX: &str = "wsrv-block-";

/// Thread-name prefixes (at most 15 bytes: the kernel cuts `comm` there)
/// and the group each stands for, first match wins.
const GROUPS: &[(&str, &str)] = &[
    (WORKER_PREFIX, "tokio-workers"),
    (BLOCKING_PREFIX, "blocking-pool"),
    // sqlx names its SQLite connection threads `sqlx-sqlite-worker-<n>`.
    ("sqlx-sqlite-", "sqlx-sqlite-workers"),
];
/// Any other thread of the server.
pub const OTHER: &str = "other";

/// Threads of the load generator (Gust's workers, aggregator, …) and of the
/// bench itself (progress, wall limit, setup): never the server's.
const CLIENT_PREFIXES: &[&str] = &["gust-", BENCH_THREAD_PREFIX];
/// The bench names each thread it starts with this prefix.
pub const BENCH_THREAD_PREFIX: &str = "bench-";

/// The name of the embedded server runtime's `n`-th thread (from 0) when the
/// runtime has `workers` worker threads. Tokio starts its workers first,
/// while the runtime is built and before any task can run, so the first
/// `workers` threads it names are the workers and every later one is a
/// blocking-pool thread. (`block_in_place` would hand a worker's role to a
/// new thread; the server does not use it.)
pub fn worker_thread_name(n: usize, workers: usize) -> String {
    if n < workers {
        format!("{WORKER_PREFIX}{n}")
    } else {
        format!("{BLOCKING_PREFIX}{}", n - workers)
    }
}

/// The server group of a thread name, or `None` for a client or bench thread.
pub fn group_of(name: &str) -> Option<&'static str> {
    if CLIENT_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return None;
    }
    Some(
        GROUPS
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map_or(OTHER, |(_, group)| group),
    )
}

/// The server's threads at one moment: thread id → (group, CPU seconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerThreads(BTreeMap<u32, (&'static str, f64)>);

impl ServerThreads {
    /// The server's threads among `threads`, leaving out the client's and
    /// the bench's, and the thread `caller` (the one driving the run, which
    /// may carry any name: `main`, or a test's).
    pub fn from_threads(threads: Vec<ThreadCpu>, caller: Option<u32>) -> Self {
        Self(
            threads
                .into_iter()
                .filter(|t| Some(t.tid) != caller)
                .filter_map(|t| Some((t.tid, (group_of(&t.name)?, t.cpu_seconds))))
                .collect(),
        )
    }

    /// This process's server threads now, seen from the calling thread.
    pub fn of_this_process() -> Option<Self> {
        let threads = procstat::threads(std::process::id())?;
        Some(Self::from_threads(threads, current_tid()))
    }

    /// CPU seconds per group used between `before` and `self`. A thread is
    /// counted by its own progress (a thread born in between, from zero), so
    /// one that exited in between takes nothing from the others of its
    /// group; its own CPU is lost. Groups are those with a live thread now.
    pub fn cpu_since(&self, before: &ServerThreads) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (tid, (group, now)) in &self.0 {
            let then = before.0.get(tid).map_or(0.0, |(_, c)| *c);
            *out.entry(group.to_string()).or_insert(0.0) += (now - then).max(0.0);
        }
        out
    }
}

#[cfg(target_os = "linux")]
fn current_tid() -> Option<u32> {
    // SAFETY: gettid has no preconditions and cannot fail.
    u32::try_from(unsafe { libc::gettid() }).ok()
}

#[cfg(not(target_os = "linux"))]
fn current_tid() -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tid: u32, name: &str, cpu: f64) -> ThreadCpu {
        ThreadCpu {
            tid,
            name: name.into(),
            cpu_seconds: cpu,
        }
    }

    #[test]
    fn names_map_to_groups_and_client_threads_to_none() {
        assert_eq!(group_of("wsrv-worker-3"), Some("tokio-workers"));
        assert_eq!(group_of("wsrv-block-12"), Some("blocking-pool"));
        // `sqlx-sqlite-worker-0` as the kernel keeps it (15 bytes).
        assert_eq!(group_of("sqlx-sqlite-wor"), Some("sqlx-sqlite-workers"));
        assert_eq!(group_of("some-db-thread"), Some(OTHER));
        assert_eq!(group_of("warrant"), Some(OTHER));
        assert_eq!(group_of("gust-worker-0"), None);
        assert_eq!(group_of("gust-aggregator"), None);
        assert_eq!(group_of("bench-progress"), None);
    }

    #[test]
    fn the_first_threads_tokio_names_are_its_workers() {
        let names: Vec<String> = (0..5).map(|n| worker_thread_name(n, 3)).collect();
        assert_eq!(
            names,
            [
                "wsrv-worker-0",
                "wsrv-worker-1",
                "wsrv-worker-2",
                "wsrv-block-0",
                "wsrv-block-1"
            ]
        );
        assert_eq!(
            group_of(&worker_thread_name(999, 1000)),
            Some("tokio-workers")
        );
        assert_eq!(
            group_of(&worker_thread_name(9999, 2)),
            Some("blocking-pool")
        );
        assert!(worker_thread_name(999, 1000).len() <= 15);
        assert!(worker_thread_name(9999, 2).len() <= 15);
    }

    #[test]
    fn cpu_is_counted_per_thread_and_summed_per_group() {
        let before = ServerThreads::from_threads(
            vec![
                t(1, "main", 5.0),
                t(2, "wsrv-worker-0", 1.0),
                t(3, "wsrv-worker-1", 2.0),
                t(4, "wsrv-block-0", 0.5),
                t(5, "gust-worker-0", 3.0),
            ],
            Some(1),
        );
        let after = ServerThreads::from_threads(
            vec![
                t(1, "main", 9.0),
                t(2, "wsrv-worker-0", 1.5),
                t(3, "wsrv-worker-1", 2.25),
                // tid 4 exited: its CPU is lost, nothing goes negative.
                t(6, "wsrv-block-1", 0.125),
                t(7, "sqlx-sqlite-wor", 0.25),
                t(8, "sqlite-writer", 1.0),
                t(5, "gust-worker-0", 7.0),
            ],
            Some(1),
        );
        let by_group = after.cpu_since(&before);
        assert_eq!(
            by_group,
            BTreeMap::from([
                ("blocking-pool".to_string(), 0.125),
                ("other".to_string(), 1.0),
                ("sqlx-sqlite-workers".to_string(), 0.25),
                ("tokio-workers".to_string(), 0.75),
            ])
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_without_the_calling_thread() {
        let now = ServerThreads::of_this_process().expect("/proc is readable");
        let me = current_tid().expect("linux");
        assert!(!now.0.contains_key(&me));
    }
}
