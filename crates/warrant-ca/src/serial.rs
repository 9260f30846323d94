//! Certificate serial numbers: 20 octets, time-ordered, with 110 random bits.

use std::time::SystemTime;

use crate::derw;
use crate::error::{CaError, Result};

/// A fresh serial, time-ordered: see [`serial_from`]. Returns the 20 raw bytes.
pub fn new_serial() -> Result<[u8; 20]> {
    let mut random = [0u8; 20];
    aws_lc_rs::rand::fill(&mut random).map_err(CaError::internal)?;
    Ok(serial_now(&random))
}

/// [`serial_from`] at the current time, for callers that bring their own
/// random bytes.
pub fn serial_now(random: &[u8; 20]) -> [u8; 20] {
    let millis = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    serial_from(millis, random)
}

/// CSPRNG bits in every serial: at least the 64 the CA/Browser Forum asks for.
pub const SERIAL_RANDOM_BITS: u32 = 110;

/// The serial of a certificate issued at `millis` (ms since the Unix epoch):
/// bit 159 clear and bit 158 set, so the INTEGER is positive, below 2^159 and
/// always 20 octets; bits 157–110 the time (48 bits, wrapping in the year
/// 10889); the low 110 bits from `random`.
///
/// Why time first: every backend keeps certificates in a B-tree keyed by
/// (ca, serial). A random serial puts each new row on a random page of that
/// index, so every small durable commit rewrites about one page per
/// certificate; a time-ordered serial appends at the right edge, where
/// consecutive commits share pages. Two serials are never sequential: within
/// a millisecond they differ in 110 random bits.
pub fn serial_from(millis: u64, random: &[u8; 20]) -> [u8; 20] {
    const TIME_BITS: u32 = 48;
    // The top 56 bits: 0, 1, the time, then the first 6 random bits.
    let time = millis & ((1u64 << TIME_BITS) - 1);
    let top = (1u64 << 54) | (time << 6) | u64::from(random[6] & 0x3F);
    let mut serial = *random;
    serial[..7].copy_from_slice(&top.to_be_bytes()[1..]);
    serial
}

/// Display form: 40 upper-case hex digits.
pub fn serial_hex(serial: &[u8; 20]) -> String {
    derw::hex_upper(serial)
}

/// Parses a serial in hex (1..=40 digits, any case) to its big-endian bytes.
pub fn parse_serial_hex(s: &str) -> Result<Vec<u8>> {
    if s.is_empty() || s.len() > 40 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CaError::field("serial", "must be 1..=40 hex digits"));
    }
    let padded = if s.len() % 2 == 1 {
        format!("0{s}")
    } else {
        s.to_string()
    };
    Ok((0..padded.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).unwrap_or(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_is_159_bits_positive_nonzero() {
        for _ in 0..200 {
            let s = new_serial().unwrap();
            // Bit 159 clear, bit 158 set: 159 significant bits, 20 DER octets.
            assert_eq!(s[0] & 0xC0, 0x40);
            let hex = serial_hex(&s);
            assert_eq!(hex.len(), 40);
            assert!(
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            );
            assert_eq!(parse_serial_hex(&hex).unwrap(), s);
        }
    }

    #[test]
    fn serials_follow_the_clock_and_keep_the_random_bits() {
        let random = [0xA5u8; 20];
        let a = serial_from(1_700_000_000_000, &random);
        let b = serial_from(1_700_000_000_001, &random);
        assert!(a < b, "a later millisecond sorts after an earlier one");
        assert!(
            serial_hex(&a) < serial_hex(&b),
            "and so does the stored hex"
        );
        // The low 110 bits are the random input's: bytes 7.. whole, 6 bits of byte 6.
        assert_eq!(a[7..], random[7..]);
        assert_eq!(a[6] & 0x3F, random[6] & 0x3F);
        let low_bits = 8 * 13 + 6;
        assert_eq!(low_bits, SERIAL_RANDOM_BITS);
        // The time field reads back.
        let top = u64::from_be_bytes([0, a[0], a[1], a[2], a[3], a[4], a[5], a[6]]);
        assert_eq!((top >> 6) & ((1 << 48) - 1), 1_700_000_000_000);
        // Whatever the time and the random bytes, bit 158 stays the top bit.
        for millis in [0, 1, u64::MAX] {
            for fill in [0x00u8, 0xFF] {
                assert_eq!(serial_from(millis, &[fill; 20])[0] & 0xC0, 0x40);
            }
        }
        // Two serials of one millisecond differ in their random bits.
        let (x, y) = (new_serial().unwrap(), new_serial().unwrap());
        assert_ne!(x[7..], y[7..]);
    }

    #[test]
    fn rejects_bad_serial_hex() {
        for bad in ["", "xyz", &"A".repeat(41)] {
            assert_eq!(
                parse_serial_hex(bad).unwrap_err().invalid_field(),
                Some("serial")
            );
        }
        assert_eq!(parse_serial_hex("abc").unwrap(), [0x0A, 0xBC]);
    }
}
