//! warrant-ca: the certificate authority core of Warrant — CA hierarchy and
//! keys, certificate profiles, X.509 building and signing, CSR checks, CRLs
//! and principal-certificate validation. No HTTP, no database: the server
//! calls these functions and maps [`CaError`] / [`PrincipalCertError`] to
//! API error keys. See README.md for the API overview.
#![forbid(unsafe_code)]

mod cert;
mod crl;
mod csr;
mod derw;
mod error;
mod hierarchy;
mod issue;
mod keys;
mod names;
mod ocsp;
pub mod oids;
mod pkcs11;
mod principal;
mod serial;
mod tbs;
mod token_keys;
mod trust;
mod verify;

pub use cert::{CertExtension, find_extension};
pub use const_oid::ObjectIdentifier;
pub use crl::{RevocationReason, RevokedEntry, build_crl};
pub use csr::{CsrInfo, MAX_CSR_PEM_LEN, verify_csr, verify_csr_der};
pub use error::{CaError, PrincipalCertError, Result};
pub use hierarchy::{
    DEFAULT_CA, Generation, Hierarchy, InitOptions, IssuingCa, KeyPlacement, OfflineRoot,
    RootExport, TokenPlacement, root_crl_path, token_key_label,
};
pub use issue::{
    AGENT_PROXY_MAX_VALIDITY, ExtraExtension, IssuedCert, LeafSpec, LeafUrls, Profile,
    check_profile_subject, issue_leaf,
};
pub use keys::{GeneratedKey, KeyType, PublicKeyKind, generate_key};
pub use names::{DnAttribute, SanEntry, Subject, parse_san, spiffe_id};
pub use ocsp::{
    CertIdHash, CertQuery, MAX_REQUEST_ENTRIES as OCSP_MAX_REQUEST_ENTRIES,
    MAX_REQUEST_LEN as OCSP_MAX_REQUEST_LEN, OcspCertStatus, OcspFailure, OcspRequestError,
    OcspResponder, OcspTimes, ParsedOcspRequest, failure_response as ocsp_failure_response,
    parse_request as parse_ocsp_request,
};
pub use pkcs11::{Pkcs11Access, Pkcs11Key, Pkcs11Uri};
pub use principal::{PRINCIPAL_CACHE_CAPACITY, PrincipalCert, VerifiedPrincipal};
pub use serial::{
    SERIAL_RANDOM_BITS, new_serial, parse_serial_hex, serial_from, serial_hex, serial_now,
};
pub use token_keys::{
    MAX_TOKEN_LIFETIME_SECS, TokenAlgorithm, TokenKey, TokenKeyRing, key_id as token_key_id,
};
pub use trust::{CrlError, TrustBundle, TrustBundleError, VerifiedCrl};
pub use verify::{
    MAX_PRINCIPAL_CERT_LEN, certificate_der, certificate_extensions, verify_principal_cert,
};
