//! The AIC data model (draft-wei-aic-identity-cert-02 / draft-wei-aic-jwt-02):
//! a byte-exact DER codec matching the Go reference, delegation (DA) signing
//! and verification, and AIC-JWT issuance and verification.
//!
//! Pure: no IO, no clock (callers pass the time), no global state. See README.md
//! for the API map.
#![forbid(unsafe_code)]

pub mod cert;
pub mod crypto;
pub mod da;
pub mod der;
pub mod error;
pub mod hex;
pub mod jwt;
pub mod model;
pub mod oid;
pub mod principal;
pub mod serde_helpers;
pub mod time;

pub use crypto::{
    DaSigningAlgorithm, PublicKey, SignatureError, VerifiedForm, generate_signing_key,
    sign_delegation, spki_from_pkcs8,
};
pub use da::{DaError, DelegationRequest, verify_aic_delegation, verify_delegation};
pub use der::Oid;
pub use error::{DecodeError, DecodeErrorKind};
pub use model::{
    AgentKeyBinding, Aic, AlgorithmIdentifier, Capability, DelegationAuthTbs,
    DelegationAuthorization, DelegationDepthControl, DelegationMode, DelegationPolicy, ExtField,
    PrincipalAuthorization, PrincipalUid, Reason, effective_lifetime,
};
pub use principal::{PrincipalUidParseError, key_hash_matches};
