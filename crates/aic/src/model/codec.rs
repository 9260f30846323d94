//! What every structure's codec shares: bound checks, whole-buffer and
//! `[n] EXPLICIT OPTIONAL` decoding, and `to_der`/`from_der`.

use crate::der::{Reader, Writer};
use crate::error::{DecodeError, DecodeErrorKind as K};

/// The serde default of every `version` field.
pub(super) fn one() -> i64 {
    1
}

fn size_error(field: &'static str, len: usize, (min, max): (usize, usize)) -> DecodeError {
    DecodeError::new(
        field,
        K::SizeOutOfRange {
            min,
            max,
            actual: len,
        },
    )
}

/// Both ends of a SIZE bound: what Warrant emits and issuance requires.
pub(super) fn check_size(
    field: &'static str,
    len: usize,
    bounds: (usize, usize),
) -> Result<(), DecodeError> {
    if len < bounds.0 {
        return Err(size_error(field, len, bounds));
    }
    check_max_size(field, len, bounds)
}

/// Decode-time form of [`check_size`]: only the upper bound is enforced (the
/// lower one is reported in the error for context).
pub(super) fn check_max_size(
    field: &'static str,
    len: usize,
    bounds: (usize, usize),
) -> Result<(), DecodeError> {
    if len > bounds.1 {
        return Err(size_error(field, len, bounds));
    }
    Ok(())
}

pub(super) fn check_count(field: &'static str, len: usize, max: usize) -> Result<(), DecodeError> {
    if len > max {
        return Err(DecodeError::new(
            field,
            K::TooManyElements { max, actual: len },
        ));
    }
    Ok(())
}

pub(super) fn check_range(
    field: &'static str,
    v: i64,
    min: i64,
    max: i64,
) -> Result<(), DecodeError> {
    if v < min || v > max {
        return Err(DecodeError::new(
            field,
            K::ValueOutOfRange {
                min,
                max,
                actual: v,
            },
        ));
    }
    Ok(())
}

/// A UTF8String bounded above; `""` (Go's zero value) is accepted and kept.
pub(super) fn read_string(
    r: &mut Reader<'_>,
    field: &'static str,
    b: (usize, usize),
) -> Result<String, DecodeError> {
    let s = r.read_utf8(field)?;
    check_max_size(field, s.len(), b)?;
    Ok(s)
}

/// The `version` INTEGERs: the model's versions, or 0, Go's zero value, which
/// the reference writes when a struct's version was never set (aic.md rule 6).
/// 0 has the semantics of version 1 and is kept so that re-encoding is exact.
pub(super) fn check_version(field: &'static str, v: i64, max: i64) -> Result<(), DecodeError> {
    check_range(field, v, 0, max)
}

/// Decodes a whole buffer with `f`, rejecting trailing bytes.
pub(super) fn decode_all<T>(
    der: &[u8],
    field: &'static str,
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut r = Reader::new(der);
    let v = f(&mut r)?;
    r.finish(field)?;
    Ok(v)
}

/// An `[tag] EXPLICIT ... OPTIONAL` element: `None` when absent, else `f` over
/// the whole of its contents (trailing bytes inside the tag are rejected).
pub(super) fn decode_explicit_optional<T>(
    r: &mut Reader<'_>,
    tag: u8,
    field: &'static str,
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    r.read_optional(tag, field)?
        .map(|inner| decode_all(inner, field, f))
        .transpose()
}

/// A list the model keeps no "present but empty" state for was encoded as an
/// empty list inside its tag.
pub(super) fn present_but_empty(field: &'static str) -> DecodeError {
    DecodeError::new(
        field,
        K::Inconsistent("present but empty: an empty list is encoded by omitting it"),
    )
}

/// The DER of one value, from its `encode`.
pub(super) fn encode_to_vec(encode: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    encode(&mut w);
    w.into_bytes()
}

/// `to_der` and `from_der` for a structure with `encode(&self, &mut Writer)`
/// and `decode(&mut Reader) -> Result<Self, DecodeError>`; `$name` is the
/// ASN.1 name a trailing-bytes error carries.
macro_rules! whole_der {
    ($ty:ty, $name:literal) => {
        impl $ty {
            /// The DER encoding of this value alone.
            pub fn to_der(&self) -> Vec<u8> {
                $crate::model::codec::encode_to_vec(|w| self.encode(w))
            }

            /// Decodes exactly one value; trailing bytes are an error.
            pub fn from_der(der: &[u8]) -> Result<Self, $crate::error::DecodeError> {
                $crate::model::codec::decode_all(der, $name, Self::decode)
            }
        }
    };
}
pub(super) use whole_der;
