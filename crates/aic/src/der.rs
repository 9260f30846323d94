//! Minimal strict DER reader and writer.
//!
//! Hand-written rather than a generic ASN.1 crate because the bytes must match
//! the Go reference exactly (explicit DEFAULT integers, no NULL in hash
//! AlgorithmIdentifiers) and because every rejection has to name the field it
//! happened in. Only the handful of universal types AIC uses are supported, and
//! only low tag numbers (every AIC tag fits in one byte).

use crate::error::{DecodeError, DecodeErrorKind as K};

pub const TAG_BOOLEAN: u8 = 0x01;
pub const TAG_INTEGER: u8 = 0x02;
pub const TAG_BIT_STRING: u8 = 0x03;
pub const TAG_OCTET_STRING: u8 = 0x04;
pub const TAG_NULL: u8 = 0x05;
pub const TAG_OID: u8 = 0x06;
pub const TAG_UTF8_STRING: u8 = 0x0c;
pub const TAG_GENERALIZED_TIME: u8 = 0x18;
pub const TAG_SEQUENCE: u8 = 0x30;

/// Context-specific constructed tag `[n]` (EXPLICIT tagging).
pub const fn ctx(n: u8) -> u8 {
    0xa0 | n
}

/// Largest encoded object accepted. AIC structures are a few KiB at most; the
/// bound keeps a hostile length field from meaning anything.
const MAX_LEN: usize = 1 << 20;

/// Cursor over DER bytes. Every read names the field so errors can too.
#[derive(Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The tag of the next element without consuming it.
    pub fn peek_tag(&self) -> Option<u8> {
        self.data.get(self.pos).copied()
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self, field: &'static str) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::new(
                field,
                K::TrailingBytes {
                    count: self.data.len() - self.pos,
                },
            ))
        }
    }

    /// Reads one TLV with the expected tag and returns its contents.
    pub fn read(&mut self, tag: u8, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let found = self
            .peek_tag()
            .ok_or(DecodeError::new(field, K::Truncated))?;
        if found != tag {
            return Err(DecodeError::new(
                field,
                K::UnexpectedTag {
                    expected: tag,
                    found,
                },
            ));
        }
        if found & 0x1f == 0x1f {
            return Err(DecodeError::new(field, K::UnsupportedTag(found)));
        }
        self.pos += 1;
        let len = self.read_len(field)?;
        let end = self
            .pos
            .checked_add(len)
            .ok_or(DecodeError::new(field, K::Truncated))?;
        if end > self.data.len() {
            return Err(DecodeError::new(field, K::Truncated));
        }
        let content = &self.data[self.pos..end];
        self.pos = end;
        Ok(content)
    }

    /// Reads a TLV only if the next tag matches (OPTIONAL / DEFAULT fields).
    pub fn read_optional(
        &mut self,
        tag: u8,
        field: &'static str,
    ) -> Result<Option<&'a [u8]>, DecodeError> {
        if self.peek_tag() == Some(tag) {
            self.read(tag, field).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads one complete TLV of any tag and returns its full encoding
    /// (used for opaque AlgorithmIdentifier parameters).
    pub fn read_any_raw(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let tag = self
            .peek_tag()
            .ok_or(DecodeError::new(field, K::Truncated))?;
        self.read(tag, field)?;
        Ok(&self.data[start..self.pos])
    }

    /// Reads a constructed element and returns a reader over its contents.
    pub fn read_nested(&mut self, tag: u8, field: &'static str) -> Result<Reader<'a>, DecodeError> {
        self.read(tag, field).map(Reader::new)
    }

    fn read_len(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let first = *self
            .data
            .get(self.pos)
            .ok_or(DecodeError::new(field, K::Truncated))?;
        self.pos += 1;
        if first < 0x80 {
            return Ok(first as usize);
        }
        if first == 0x80 {
            return Err(DecodeError::new(field, K::IndefiniteLength));
        }
        let n = (first & 0x7f) as usize;
        if n > 4 {
            return Err(DecodeError::new(field, K::LengthTooLarge));
        }
        let bytes = self
            .data
            .get(self.pos..self.pos + n)
            .ok_or(DecodeError::new(field, K::Truncated))?;
        self.pos += n;
        if bytes[0] == 0 {
            return Err(DecodeError::new(field, K::NonMinimalLength));
        }
        let len = bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        if len < 0x80 {
            return Err(DecodeError::new(field, K::NonMinimalLength));
        }
        if len > MAX_LEN {
            return Err(DecodeError::new(field, K::LengthTooLarge));
        }
        Ok(len)
    }

    pub fn read_integer(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let content = self.read(TAG_INTEGER, field)?;
        parse_integer(content, field)
    }

    /// An INTEGER with a DEFAULT: absent means `default`. The reference always
    /// writes it, but DER proper omits it, so both forms are accepted.
    pub fn read_integer_default(
        &mut self,
        field: &'static str,
        default: i64,
    ) -> Result<i64, DecodeError> {
        if self.peek_tag() == Some(TAG_INTEGER) {
            self.read_integer(field)
        } else {
            Ok(default)
        }
    }

    pub fn read_utf8(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let content = self.read(TAG_UTF8_STRING, field)?;
        std::str::from_utf8(content)
            .map(str::to_owned)
            .map_err(|_| DecodeError::new(field, K::InvalidUtf8))
    }

    pub fn read_octets(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        self.read(TAG_OCTET_STRING, field)
    }

    pub fn read_bool_default_false(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.read_optional(TAG_BOOLEAN, field)? {
            None => Ok(false),
            Some([0x00]) => Ok(false),
            Some([0xff]) => Ok(true),
            Some(_) => Err(DecodeError::new(field, K::InvalidBoolean)),
        }
    }

    pub fn read_oid(&mut self, field: &'static str) -> Result<Oid, DecodeError> {
        let content = self.read(TAG_OID, field)?;
        Oid::from_der_content(content).ok_or(DecodeError::new(field, K::InvalidOid))
    }

    /// GeneralizedTime restricted to `YYYYMMDDHHMMSSZ` (whole seconds, UTC), as
    /// the reference writes it. Returns Unix seconds.
    pub fn read_generalized_time(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let content = self.read(TAG_GENERALIZED_TIME, field)?;
        crate::time::parse_generalized_time(content).ok_or(DecodeError::new(field, K::InvalidTime))
    }
}

fn parse_integer(content: &[u8], field: &'static str) -> Result<i64, DecodeError> {
    if content.is_empty() {
        return Err(DecodeError::new(field, K::InvalidInteger));
    }
    if content.len() > 1
        && ((content[0] == 0x00 && content[1] & 0x80 == 0)
            || (content[0] == 0xff && content[1] & 0x80 != 0))
    {
        return Err(DecodeError::new(field, K::NonMinimalInteger));
    }
    if content.len() > 8 {
        return Err(DecodeError::new(field, K::IntegerOutOfRange));
    }
    let mut v: i64 = if content[0] & 0x80 != 0 { -1 } else { 0 };
    for b in content {
        v = (v << 8) | *b as i64;
    }
    Ok(v)
}

/// DER writer. Encoding nested structures builds the contents first and then
/// wraps them, which costs a few small allocations but keeps the code obviously
/// correct; the signature check dominates the DA path by two orders of magnitude.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer {
            buf: Vec::with_capacity(256),
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn tlv(&mut self, tag: u8, content: &[u8]) {
        self.buf.push(tag);
        write_len(&mut self.buf, content.len());
        self.buf.extend_from_slice(content);
    }

    /// Writes a constructed element whose contents `f` produces.
    pub fn nested(&mut self, tag: u8, f: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::new();
        f(&mut inner);
        self.tlv(tag, &inner.buf);
    }

    pub fn sequence(&mut self, f: impl FnOnce(&mut Writer)) {
        self.nested(TAG_SEQUENCE, f)
    }

    pub fn integer(&mut self, v: i64) {
        let bytes = v.to_be_bytes();
        let mut start = 0;
        while start < 7 {
            let (b, next) = (bytes[start], bytes[start + 1]);
            if (b == 0x00 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
                start += 1;
            } else {
                break;
            }
        }
        self.tlv(TAG_INTEGER, &bytes[start..]);
    }

    pub fn utf8(&mut self, s: &str) {
        self.tlv(TAG_UTF8_STRING, s.as_bytes());
    }

    pub fn octets(&mut self, b: &[u8]) {
        self.tlv(TAG_OCTET_STRING, b);
    }

    pub fn boolean(&mut self, v: bool) {
        self.tlv(TAG_BOOLEAN, &[if v { 0xff } else { 0x00 }]);
    }

    pub fn oid(&mut self, oid: &Oid) {
        self.tlv(TAG_OID, oid.as_der_content());
    }

    pub fn generalized_time(&mut self, unix: i64) {
        self.tlv(
            TAG_GENERALIZED_TIME,
            crate::time::format_generalized_time(unix).as_bytes(),
        );
    }

    /// Appends already-encoded DER (e.g. AlgorithmIdentifier parameters).
    pub fn raw(&mut self, der: &[u8]) {
        self.buf.extend_from_slice(der);
    }
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u64).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (8 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// An OBJECT IDENTIFIER kept as its DER content bytes, so comparison and
/// re-encoding are byte-exact.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Oid(Vec<u8>);

impl Oid {
    pub fn from_der_content(content: &[u8]) -> Option<Oid> {
        // Each arc must be minimally encoded and the last byte must end an arc.
        if content.is_empty() || content[content.len() - 1] & 0x80 != 0 {
            return None;
        }
        let mut arc_start = true;
        for b in content {
            if arc_start && *b == 0x80 {
                return None;
            }
            arc_start = b & 0x80 == 0;
        }
        Some(Oid(content.to_vec()))
    }

    pub fn as_der_content(&self) -> &[u8] {
        &self.0
    }

    /// Parses dotted form, e.g. `1.3.6.1.4.1.66257.1.1`.
    pub fn parse(dotted: &str) -> Option<Oid> {
        let arcs: Vec<u64> = dotted
            .split('.')
            .map(|a| a.parse().ok())
            .collect::<Option<_>>()?;
        if arcs.len() < 2 || arcs[0] > 2 || (arcs[0] < 2 && arcs[1] >= 40) {
            return None;
        }
        let mut out = Vec::new();
        let first = arcs[0].checked_mul(40)?.checked_add(arcs[1])?;
        push_base128(&mut out, first);
        for a in &arcs[2..] {
            push_base128(&mut out, *a);
        }
        Some(Oid(out))
    }

    pub fn to_dotted(&self) -> String {
        let mut arcs: Vec<u64> = Vec::new();
        let mut acc: u64 = 0;
        for b in &self.0 {
            acc = (acc << 7) | (b & 0x7f) as u64;
            if b & 0x80 == 0 {
                if arcs.is_empty() {
                    let (x, y) = if acc < 40 {
                        (0, acc)
                    } else if acc < 80 {
                        (1, acc - 40)
                    } else {
                        (2, acc - 80)
                    };
                    arcs.push(x);
                    arcs.push(y);
                } else {
                    arcs.push(acc);
                }
                acc = 0;
            }
        }
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".")
    }
}

fn push_base128(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 10];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = (v & 0x7f) as u8 | if i == tmp.len() - 1 { 0 } else { 0x80 };
        v >>= 7;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

impl std::fmt::Debug for Oid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Oid({})", self.to_dotted())
    }
}

impl std::fmt::Display for Oid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_dotted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_encoding_is_minimal() {
        for (v, hex) in [
            (0i64, "020100"),
            (1, "020101"),
            (127, "02017f"),
            (128, "02020080"),
            (3600, "02020e10"),
            (-1, "0201ff"),
            (-129, "0202ff7f"),
        ] {
            let mut w = Writer::new();
            w.integer(v);
            assert_eq!(crate::hex::encode(&w.into_bytes()), hex);
            let bytes = crate::hex::decode(hex).unwrap();
            assert_eq!(Reader::new(&bytes).read_integer("x").unwrap(), v);
        }
    }

    #[test]
    fn rejects_non_minimal_integer() {
        let err = Reader::new(&[0x02, 0x02, 0x00, 0x01])
            .read_integer("f")
            .unwrap_err();
        assert_eq!(err.kind, K::NonMinimalInteger);
    }

    #[test]
    fn rejects_non_minimal_length() {
        let err = Reader::new(&[0x04, 0x81, 0x01, 0x00])
            .read_octets("f")
            .unwrap_err();
        assert_eq!(err.kind, K::NonMinimalLength);
    }

    #[test]
    fn rejects_ber_indefinite_length_in_reader() {
        let err = Reader::new(&[0x30, 0x80, 0x00, 0x00])
            .read(TAG_SEQUENCE, "f")
            .unwrap_err();
        assert_eq!(err.kind, K::IndefiniteLength);
    }

    #[test]
    fn long_lengths_round_trip() {
        let content = vec![7u8; 300];
        let mut w = Writer::new();
        w.octets(&content);
        let bytes = w.into_bytes();
        assert_eq!(&bytes[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(Reader::new(&bytes).read_octets("f").unwrap(), &content[..]);
    }

    #[test]
    fn oid_dotted_round_trip() {
        for s in [
            "1.3.6.1.4.1.66257.1.1",
            "2.16.840.1.101.3.4.2.1",
            "1.2.840.10045.4.3.2",
            "1.3.101.112",
        ] {
            let oid = Oid::parse(s).unwrap();
            assert_eq!(oid.to_dotted(), s);
        }
        assert_eq!(
            crate::hex::encode(
                Oid::parse("2.16.840.1.101.3.4.2.1")
                    .unwrap()
                    .as_der_content()
            ),
            "608648016503040201"
        );
    }
}
