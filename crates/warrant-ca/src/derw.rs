//! Minimal DER writing for the issuance hot path. Certificates are assembled
//! from pre-encoded constant parts plus a few per-leaf fields, so a general
//! encoder (and its intermediate structs) is not needed here; parsing still goes
//! through the `der`/`x509-cert` crates.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use const_oid::ObjectIdentifier;
use der::Encode;
use zeroize::Zeroizing;

use crate::error::{CaError, Result};

pub(crate) const TAG_BOOLEAN: u8 = 0x01;
pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_ENUMERATED: u8 = 0x0A;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
pub(crate) const TAG_SET: u8 = 0x31;

pub(crate) fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

pub(crate) fn push_tlv(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    push_len(out, content.len());
    out.extend_from_slice(content);
}

pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    push_tlv(&mut out, tag, content);
    out
}

pub(crate) fn oid_tlv(oid: &ObjectIdentifier) -> Vec<u8> {
    tlv(TAG_OID, oid.as_bytes())
}

/// DER INTEGER from big-endian unsigned magnitude (leading zeros stripped, a
/// 0x00 prepended when the top bit is set so the value stays positive).
pub(crate) fn push_uint(out: &mut Vec<u8>, magnitude: &[u8]) {
    let first = magnitude.iter().position(|b| *b != 0);
    let digits = match first {
        Some(i) => &magnitude[i..],
        None => &[0u8][..],
    };
    out.push(TAG_INTEGER);
    if digits[0] & 0x80 != 0 {
        push_len(out, digits.len() + 1);
        out.push(0);
    } else {
        push_len(out, digits.len());
    }
    out.extend_from_slice(digits);
}

/// The DER `ECDSA-Sig-Value` (RFC 3279 §2.2.3) of a fixed-size `r ‖ s`
/// signature, as a PKCS#11 token returns it.
pub(crate) fn ecdsa_fixed_to_der(fixed: &[u8]) -> Option<Vec<u8>> {
    if fixed.is_empty() || !fixed.len().is_multiple_of(2) {
        return None;
    }
    let (r, s) = fixed.split_at(fixed.len() / 2);
    let mut body = Vec::with_capacity(fixed.len() + 6);
    push_uint(&mut body, r);
    push_uint(&mut body, s);
    Some(tlv(TAG_SEQUENCE, &body))
}

/// The contents of a DER OCTET STRING that is the whole of `der`.
pub(crate) fn octet_string_contents(der: &[u8]) -> Option<&[u8]> {
    let (&tag, rest) = der.split_first()?;
    if tag != TAG_OCTET_STRING {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, body) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7F) as usize;
        if n == 0 || n > 2 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, b| (a << 8) | *b as usize);
        (len, &rest[n..])
    };
    (body.len() == len).then_some(body)
}

fn len_of_len(len: usize) -> usize {
    if len < 0x80 {
        1
    } else {
        1 + (usize::BITS as usize / 8 - len.leading_zeros() as usize / 8)
    }
}

/// Appends one `Extension` SEQUENCE; `critical` FALSE is omitted (DER DEFAULT
/// rule). Written in place: this runs several times per issued certificate.
pub(crate) fn push_extension(
    out: &mut Vec<u8>,
    oid: &ObjectIdentifier,
    critical: bool,
    value_der: &[u8],
) {
    let oid = oid.as_bytes();
    let octets = 1 + len_of_len(value_der.len()) + value_der.len();
    let body = 1 + len_of_len(oid.len()) + oid.len() + if critical { 3 } else { 0 } + octets;
    out.reserve(1 + len_of_len(body) + body);
    out.push(TAG_SEQUENCE);
    push_len(out, body);
    push_tlv(out, TAG_OID, oid);
    if critical {
        out.extend_from_slice(&[TAG_BOOLEAN, 1, 0xFF]);
    }
    push_tlv(out, TAG_OCTET_STRING, value_der);
}

/// One `Extension` SEQUENCE as its own buffer (for values encoded once).
pub(crate) fn extension(oid: &ObjectIdentifier, critical: bool, value_der: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_extension(&mut out, oid, critical, value_der);
    out
}

/// Whole seconds since the epoch; times before 1970 are refused.
pub(crate) fn unix_seconds(t: SystemTime, field: &'static str) -> Result<u64> {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| CaError::field(field, "time before 1970"))
}

/// RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050.
pub(crate) fn push_time(out: &mut Vec<u8>, t: SystemTime, field: &'static str) -> Result<()> {
    let secs = unix_seconds(t, field)?;
    let dt = der::DateTime::from_unix_duration(Duration::from_secs(secs))
        .map_err(|_| CaError::field(field, "time out of range"))?;
    let encoded = if dt.year() <= der::asn1::UtcTime::MAX_YEAR {
        der::asn1::UtcTime::from_date_time(dt).and_then(|t| t.to_der())
    } else {
        der::asn1::GeneralizedTime::from_date_time(dt).to_der()
    };
    out.extend_from_slice(&encoded.map_err(|_| CaError::field(field, "time out of range"))?);
    Ok(())
}

/// Truncates to whole seconds, as a certificate stores it.
pub(crate) fn whole_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

/// PEM with 64-column lines (RFC 7468) of public data. Certificates and CRLs
/// are public, so nothing here needs a constant-time encoder and this uses the
/// table-driven `base64` engine, the cheaper one on the issuance path.
/// Private keys go through [`pem_secret`].
pub(crate) fn pem(label: &str, der: &[u8]) -> Result<String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 2 * label.len() + 40);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    for line in b64.as_bytes().chunks(64) {
        // Base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(std::str::from_utf8(line).map_err(CaError::internal)?);
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    Ok(out)
}

/// PEM of secret material (a private key): constant-time Base64 (the
/// `pem-rfc7468` encoder behind `der`), written into one buffer sized up
/// front and wiped on drop, so no copy of the key outlives the answer.
pub(crate) fn pem_secret(label: &'static str, der: &[u8]) -> Result<Zeroizing<String>> {
    use der::pem::LineEnding;
    let len =
        der::pem::encapsulated_len(label, LineEnding::LF, der.len()).map_err(CaError::internal)?;
    let mut buf = Zeroizing::new(vec![0u8; len]);
    let written = der::pem::encode(label, LineEnding::LF, der, &mut buf)
        .map_err(CaError::internal)?
        .len();
    buf.truncate(written);
    let bytes = std::mem::take(&mut *buf);
    // PEM is ASCII; on a failure the bytes come back and are wiped.
    String::from_utf8(bytes).map(Zeroizing::new).map_err(|e| {
        drop(Zeroizing::new(e.into_bytes()));
        CaError::internal("the PEM encoder wrote non-ASCII bytes")
    })
}

/// Upper-case hex, the display form of serials.
pub(crate) fn hex_upper(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use der::Decode;

    #[test]
    fn pem_matches_the_rfc7468_encoder() {
        for len in [1usize, 47, 48, 49, 300, 573] {
            let der: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let ours = pem("CERTIFICATE", &der).unwrap();
            let reference =
                der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, &der).unwrap();
            assert_eq!(ours, reference, "len {len}");
        }
    }

    #[test]
    fn extension_lengths_are_exact() {
        let oid = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.66257.1.1");
        for len in [0usize, 1, 120, 127, 128, 255, 256, 70_000] {
            for critical in [false, true] {
                let value = vec![0xAB; len];
                let ext = extension(&oid, critical, &value);
                let parsed = x509_cert::ext::Extension::from_der(&ext).unwrap();
                assert_eq!(parsed.critical, critical);
                assert_eq!(parsed.extn_value.as_bytes(), value.as_slice());
                assert_eq!(ext.capacity(), ext.len(), "exact reserve for {len}");
            }
        }
    }

    #[test]
    fn fixed_ecdsa_signatures_become_der_that_verifies() {
        use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        for (signing, verifying) in [
            (
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                &signature::ECDSA_P256_SHA256_ASN1,
            ),
            (
                &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
                &signature::ECDSA_P384_SHA384_ASN1,
            ),
        ] {
            let kp = EcdsaKeyPair::generate(signing).unwrap();
            // Enough signatures that some r or s has its top bit set and
            // some a leading zero byte.
            for i in 0..200u32 {
                let msg = i.to_be_bytes();
                let fixed = kp.sign(&rng, &msg).unwrap();
                let der = ecdsa_fixed_to_der(fixed.as_ref()).unwrap();
                signature::UnparsedPublicKey::new(verifying, kp.public_key().as_ref())
                    .verify(&msg, &der)
                    .unwrap();
            }
        }
        assert!(ecdsa_fixed_to_der(&[1, 2, 3]).is_none());
    }

    #[test]
    fn octet_strings_unwrap_whole_or_not_at_all() {
        assert_eq!(octet_string_contents(&[4, 2, 9, 9]), Some(&[9u8, 9][..]));
        let long = tlv(TAG_OCTET_STRING, &[7u8; 200]);
        assert_eq!(octet_string_contents(&long), Some(&[7u8; 200][..]));
        assert_eq!(octet_string_contents(&[4, 3, 9, 9]), None);
        assert_eq!(octet_string_contents(&[3, 2, 9, 9]), None);
    }

    #[test]
    fn long_lengths_use_minimal_octets() {
        let mut v = Vec::new();
        push_len(&mut v, 0x7F);
        push_len(&mut v, 0x80);
        push_len(&mut v, 0x1234);
        assert_eq!(v, [0x7F, 0x81, 0x80, 0x82, 0x12, 0x34]);
    }

    #[test]
    fn integers_stay_positive_and_minimal() {
        let mut v = Vec::new();
        push_uint(&mut v, &[0, 0, 0x80]);
        push_uint(&mut v, &[0, 0x7F]);
        push_uint(&mut v, &[0, 0]);
        assert_eq!(v, [2, 2, 0, 0x80, 2, 1, 0x7F, 2, 1, 0]);
    }

    #[test]
    fn times_switch_to_generalized_in_2050() {
        let mut v = Vec::new();
        push_time(&mut v, UNIX_EPOCH + Duration::from_secs(2_524_607_999), "t").unwrap(); // 2049-12-31T23:59:59Z
        assert_eq!(v[0], 0x17);
        v.clear();
        push_time(&mut v, UNIX_EPOCH + Duration::from_secs(2_524_608_000), "t").unwrap(); // 2050-01-01
        assert_eq!(v[0], 0x18);
    }
}
