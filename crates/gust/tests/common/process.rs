//! Child `gust` processes: bounded waits and shared start instants.

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant, SystemTime};

pub fn gust() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gust"))
}

/// Waits for `child`, killing it if it outlives `limit`.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gust ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An RFC 3339 instant `ms` from now, rounded up to a whole second (the form a
/// shell's `date` makes).
pub fn rfc3339_in(ms: u64) -> String {
    let at = SystemTime::now() + Duration::from_millis(ms);
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() + 1;
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `cmd` to its end (killed past 30 s) with its output captured.
pub fn output_of(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, Duration::from_secs(30))
}
