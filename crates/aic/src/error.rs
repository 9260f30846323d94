//! Typed decode errors. Every error names the field it was found in, so an
//! operator debugging interop with another implementation sees *where* the
//! bytes went wrong, not just that they did.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {kind}")]
pub struct DecodeError {
    /// Dotted path of the ASN.1 field, e.g. `AIC.principalUid.keyHash`.
    pub field: &'static str,
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    pub fn new(field: &'static str, kind: DecodeErrorKind) -> Self {
        DecodeError { field, kind }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeErrorKind {
    Truncated,
    TrailingBytes {
        count: usize,
    },
    IndefiniteLength,
    NonMinimalLength,
    LengthTooLarge,
    UnexpectedTag {
        expected: u8,
        found: u8,
    },
    UnsupportedTag(u8),
    InvalidInteger,
    NonMinimalInteger,
    IntegerOutOfRange,
    InvalidBoolean,
    InvalidUtf8,
    InvalidOid,
    InvalidTime,
    /// A string or octet string outside its SIZE constraint (byte length).
    SizeOutOfRange {
        min: usize,
        max: usize,
        actual: usize,
    },
    /// SEQUENCE OF with more elements than allowed.
    TooManyElements {
        max: usize,
        actual: usize,
    },
    /// An INTEGER outside its value constraint.
    ValueOutOfRange {
        min: i64,
        max: i64,
        actual: i64,
    },
    NonceLength {
        actual: usize,
    },
    UnknownCriticalExtension {
        oid: String,
    },
    /// Structure-level inconsistency, e.g. a v1 TBS that carries an agent key binding.
    Inconsistent(&'static str),
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeErrorKind::*;
        match self {
            Truncated => write!(f, "truncated"),
            TrailingBytes { count } => write!(f, "{count} trailing bytes after the value"),
            IndefiniteLength => write!(f, "BER indefinite length is not DER"),
            NonMinimalLength => write!(f, "length is not minimally encoded"),
            LengthTooLarge => write!(f, "length too large"),
            UnexpectedTag { expected, found } => {
                write!(f, "expected tag 0x{expected:02x}, found 0x{found:02x}")
            }
            UnsupportedTag(t) => write!(f, "unsupported tag 0x{t:02x}"),
            InvalidInteger => write!(f, "empty INTEGER"),
            NonMinimalInteger => write!(f, "INTEGER is not minimally encoded"),
            IntegerOutOfRange => write!(f, "INTEGER does not fit in 64 bits"),
            InvalidBoolean => write!(f, "BOOLEAN must be 0x00 or 0xff"),
            InvalidUtf8 => write!(f, "UTF8String is not valid UTF-8"),
            InvalidOid => write!(f, "malformed OBJECT IDENTIFIER"),
            InvalidTime => write!(f, "GeneralizedTime must be YYYYMMDDHHMMSSZ"),
            SizeOutOfRange { min, max, actual } => {
                write!(f, "size {actual} outside {min}..={max}")
            }
            TooManyElements { max, actual } => {
                write!(f, "{actual} elements, at most {max} allowed")
            }
            ValueOutOfRange { min, max, actual } => {
                write!(f, "value {actual} outside {min}..={max}")
            }
            NonceLength { actual } => write!(f, "nonce must be 32 bytes, got {actual}"),
            UnknownCriticalExtension { oid } => write!(f, "unknown critical extension {oid}"),
            Inconsistent(why) => write!(f, "{why}"),
        }
    }
}
