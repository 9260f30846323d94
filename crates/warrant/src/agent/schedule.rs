//! The agent's pure decisions: when to renew, how long to back off, and
//! which refusals are final.

use std::time::Duration;

/// Renew at 2/3 of the certificate's life, counted from `from` (the later of
/// its notBefore and when it was asked for), moved by `jitter` ∈ [-1, 1]
/// times 10 % of the remaining third, so a fleet issued together does not
/// renew together. Never before `from`.
pub fn renew_at(from: i64, not_after: i64, jitter: f64) -> i64 {
    let life = (not_after - from).max(0) as f64;
    let spread = life / 3.0 * 0.1;
    let at = from as f64 + life * 2.0 / 3.0 + jitter.clamp(-1.0, 1.0) * spread;
    (at.round() as i64).max(from)
}

/// Exponential backoff from 1 s, doubled per failed attempt, capped at
/// `cap`; a server's `Retry-After` is honoured when it asks for longer.
pub fn backoff(attempt: u32, cap: Duration, retry_after: Option<Duration>) -> Duration {
    let exp = Duration::from_secs(1u64 << attempt.min(20)).min(cap);
    match retry_after {
        Some(r) if r > exp => r.min(Duration::from_secs(3600)),
        _ => exp,
    }
}

/// What to do after a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Transient: back off and try again (with a fresh DA).
    Retry,
    /// Final: stop with a non-zero exit.
    Stop,
}

/// A CA answer that is not 200, by status and error key.
pub fn classify_ca(status: u16, key: &str) -> Disposition {
    match (status, key) {
        (429, _) | (500..=599, _) | (408, _) => Disposition::Retry,
        // A fresh DA fixes these; a full agent slot or a per-principal
        // rate limit clears with time.
        (
            403,
            "api.da_nonce_replayed"
            | "api.da_timestamp_stale"
            | "api.max_agents_exceeded"
            | "api.principal_rate_limited",
        ) => Disposition::Retry,
        _ => Disposition::Stop,
    }
}

/// A signer answer that is not 200, by status and error key.
pub fn classify_signer(status: u16, key: &str) -> Disposition {
    match (status, key) {
        (403, "grant.rate_exceeded") | (429, _) | (500..=599, _) => Disposition::Retry,
        _ => Disposition::Stop,
    }
}

/// `Retry-After` in seconds (an HTTP-date is ignored: the backoff applies).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A signal for `--signal PID:SIG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalTarget {
    pub pid: i32,
    pub signal: i32,
}

/// `PID:HUP` (also `USR1`, `USR2`, `TERM`, with or without `SIG`).
pub fn parse_signal(s: &str) -> Result<SignalTarget, String> {
    let (pid, sig) = s
        .split_once(':')
        .ok_or_else(|| format!("--signal {s:?}: expected PID:SIGNAL, e.g. 1234:HUP"))?;
    let pid: i32 = pid
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("--signal {s:?}: {pid:?} is not a process id"))?;
    let signal = match sig.trim_start_matches("SIG") {
        "HUP" => libc::SIGHUP,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        other => return Err(format!("--signal {s:?}: unsupported signal {other:?}")),
    };
    Ok(SignalTarget { pid, signal })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_two_thirds_with_bounded_jitter() {
        assert_eq!(renew_at(1000, 1060, 0.0), 1040);
        assert_eq!(renew_at(1000, 1060, 1.0), 1042);
        assert_eq!(renew_at(1000, 1060, -1.0), 1038);
        assert_eq!(renew_at(0, 3600, 5.0), 2400 + 120);
        // Already expired: renew now.
        assert_eq!(renew_at(1000, 900, 0.0), 1000);
    }

    #[test]
    fn backs_off_exponentially_to_the_cap() {
        let cap = Duration::from_secs(60);
        assert_eq!(backoff(0, cap, None), Duration::from_secs(1));
        assert_eq!(backoff(3, cap, None), Duration::from_secs(8));
        assert_eq!(backoff(10, cap, None), cap);
        assert_eq!(backoff(99, cap, None), cap);
    }

    #[test]
    fn honours_a_longer_retry_after() {
        let cap = Duration::from_secs(60);
        let ra = Some(Duration::from_secs(30));
        assert_eq!(backoff(0, cap, ra), Duration::from_secs(30));
        assert_eq!(backoff(6, cap, ra), Duration::from_secs(60));
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn ca_refusals_that_are_final() {
        for (s, k) in [
            (403, "api.principal_cert_untrusted"),
            (401, "api.unauthorized"),
            (403, "api.forbidden"),
            (403, "api.capability_not_granted"),
            (400, "api.invalid_field"),
        ] {
            assert_eq!(classify_ca(s, k), Disposition::Stop, "{s} {k}");
        }
        for (s, k) in [
            (503, "api.too_many_requests"),
            (429, "api.rate_limited"),
            (500, "api.internal_error"),
            (403, "api.da_nonce_replayed"),
            (403, "api.max_agents_exceeded"),
        ] {
            assert_eq!(classify_ca(s, k), Disposition::Retry, "{s} {k}");
        }
    }

    #[test]
    fn signer_refusals_that_are_final() {
        assert_eq!(
            classify_signer(403, "grant.unknown_agent"),
            Disposition::Stop
        );
        assert_eq!(
            classify_signer(403, "grant.window_ended"),
            Disposition::Stop
        );
        assert_eq!(classify_signer(400, "request.invalid"), Disposition::Stop);
        assert_eq!(
            classify_signer(403, "grant.rate_exceeded"),
            Disposition::Retry
        );
        assert_eq!(classify_signer(500, "signer.internal"), Disposition::Retry);
    }

    #[test]
    fn parses_signal_targets() {
        assert_eq!(
            parse_signal("42:HUP"),
            Ok(SignalTarget {
                pid: 42,
                signal: libc::SIGHUP
            })
        );
        assert_eq!(
            parse_signal("42:SIGUSR1").map(|t| t.signal),
            Ok(libc::SIGUSR1)
        );
        for bad in ["42", "x:HUP", "0:HUP", "42:KILL"] {
            assert!(parse_signal(bad).is_err(), "{bad}");
        }
    }
}
