//! SIZE bounds from the ASN.1 module (byte lengths of the encoded strings).
//!
//! Decoding enforces only the upper bounds: the lower bounds and the exact
//! nonce size are what Warrant emits and what issuance and the verifier
//! require, while the Go reference can write its zero values (`""`, an empty
//! keyHash) and other nonce lengths, which a decoder must keep (aic.md rule
//! 6). `validate` and `check_nonce` check them.

pub const AGENT_ID: (usize, usize) = (1, 256);
pub const REALM: (usize, usize) = (1, 128);
pub const IDENTIFIER: (usize, usize) = (1, 256);
pub const KEY_HASH: (usize, usize) = (1, 64);
pub const SCHEME_ID: (usize, usize) = (1, 128);
pub const CAPABILITY_ID: (usize, usize) = (1, 256);
pub const REASON_CODE: (usize, usize) = (1, 64);
pub const REASON_DESCRIPTION: (usize, usize) = (1, 512);
pub const MAX_CAPABILITIES: usize = 256;
pub const MAX_CONSTRAINTS: usize = 32;
pub const MAX_EXTENSIONS: usize = 32;
pub const NONCE_LEN: usize = 32;
pub const MAX_REQUESTED_LIFETIME: i64 = 86_400;
