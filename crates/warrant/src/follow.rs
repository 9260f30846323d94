//! Following a configuration file without a restart: the services that
//! read one (`delegate serve`'s grants, `admit`'s route rules) reload it on
//! SIGHUP and whenever its content changes (read every second). A file that
//! fails to load keeps what is in force; the caller logs why.

use std::path::PathBuf;
use std::time::Duration;

/// Calls `reload` with the file's bytes after each change (and on every
/// SIGHUP), never for the content read when it started. Runs until the
/// task is dropped.
pub async fn follow_file<F>(path: PathBuf, mut reload: F)
where
    F: FnMut(&[u8]) + Send,
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut last = std::fs::read(&path).ok();
    loop {
        let forced = tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = std::fs::read(&path).ok();
        if !forced && now == last {
            continue;
        }
        last = now;
        match &last {
            Some(bytes) => reload(bytes),
            None => eprintln!("{}: unreadable; keeping what is in force", path.display()),
        }
    }
}
