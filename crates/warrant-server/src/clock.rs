//! Time as the server stores and compares it: whole Unix seconds (`i64`,
//! negative before 1970), and RFC 3339 UTC text on the wire. Every clock
//! read and every `SystemTime` ↔ seconds conversion of the crate is here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The current time in Unix seconds: the store's clock
/// ([`warrant_store::now_unix`]), so that what the server compares with
/// stored times is read in one place.
pub fn unix_now() -> i64 {
    warrant_store::now_unix()
}

/// The current time, for the APIs that take a [`SystemTime`] (certificate
/// chain checks).
pub fn system_now() -> SystemTime {
    SystemTime::now()
}

/// `t` in Unix seconds, rounded towards the epoch.
pub fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Unix seconds as a [`SystemTime`].
pub fn from_unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// Unix seconds as RFC 3339 UTC with whole seconds (`2026-01-02T03:04:05Z`),
/// the form of every time in an API answer.
pub fn rfc3339(secs: i64) -> String {
    aic::time::format_rfc3339(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_round_trip_on_both_sides_of_the_epoch() {
        for secs in [-86_400, -1, 0, 1, 1_700_000_000] {
            assert_eq!(unix(from_unix(secs)), secs);
        }
    }
}
