//! GeneralizedTime / RFC 3339 conversions without a date library: the AIC only
//! needs whole-second UTC timestamps, and the civil-date conversion those need
//! is two small closed-form functions.

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + (c - b'0') as i64)
    })
}

/// Parses `YYYYMMDDHHMMSSZ`; anything else (fractions, offsets) is rejected.
pub fn parse_generalized_time(s: &[u8]) -> Option<i64> {
    if s.len() != 15 || s[14] != b'Z' {
        return None;
    }
    fields_to_unix(
        digits(&s[0..4])?,
        digits(&s[4..6])?,
        digits(&s[6..8])?,
        digits(&s[8..10])?,
        digits(&s[10..12])?,
        digits(&s[12..14])?,
    )
}

fn fields_to_unix(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s)
}

fn split(unix: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = unix.div_euclid(86400);
    let secs = unix.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    (y, m, d, secs / 3600, secs % 3600 / 60, secs % 60)
}

pub fn format_generalized_time(unix: i64) -> String {
    let (y, m, d, h, mi, s) = split(unix);
    format!("{y:04}{m:02}{d:02}{h:02}{mi:02}{s:02}Z")
}

/// `2026-08-18T00:00:00Z`, the JSON form of timestamps.
pub fn format_rfc3339(unix: i64) -> String {
    let (y, m, d, h, mi, s) = split(unix);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds only).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    fields_to_unix(
        digits(&b[0..4])?,
        digits(&b[5..7])?,
        digits(&b[8..10])?,
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generalized_time_round_trip() {
        let t = parse_generalized_time(b"20260818000000Z").unwrap();
        assert_eq!(t, 1_787_011_200);
        assert_eq!(format_generalized_time(t), "20260818000000Z");
        assert_eq!(format_rfc3339(t), "2026-08-18T00:00:00Z");
        assert_eq!(parse_rfc3339("2026-08-18T00:00:00Z"), Some(t));
        assert_eq!(format_generalized_time(0), "19700101000000Z");
        assert_eq!(
            parse_generalized_time(b"20240229235959Z"),
            Some(1_709_251_199)
        );
    }

    #[test]
    fn rejects_fractional_or_offset_generalized_time() {
        assert_eq!(parse_generalized_time(b"20260818000000.5Z"), None);
        assert_eq!(parse_generalized_time(b"20260818000000+0100"), None);
        assert_eq!(parse_generalized_time(b"20260230000000Z"), None);
    }
}
