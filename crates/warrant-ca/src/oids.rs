//! Object identifiers used by Warrant. The AIC/PA values are under the
//! private enterprise arc 1.3.6.1.4.1.66257 (see `aic.md`).

use const_oid::ObjectIdentifier as Oid;

/// Agent Identity Certificate extension (non-critical).
pub const AIC_EXTENSION: Oid = Oid::new_unwrap("1.3.6.1.4.1.66257.1.1");
/// PrincipalAuthorization extension (non-critical).
pub const PA_EXTENSION: Oid = Oid::new_unwrap("1.3.6.1.4.1.66257.1.2");

pub const EC_PUBLIC_KEY: Oid = Oid::new_unwrap("1.2.840.10045.2.1");
pub const SECP256R1: Oid = Oid::new_unwrap("1.2.840.10045.3.1.7");
pub const SECP384R1: Oid = Oid::new_unwrap("1.3.132.0.34");
pub const ED25519: Oid = Oid::new_unwrap("1.3.101.112");
pub const RSA_ENCRYPTION: Oid = Oid::new_unwrap("1.2.840.113549.1.1.1");
pub const ECDSA_WITH_SHA256: Oid = Oid::new_unwrap("1.2.840.10045.4.3.2");
pub const ECDSA_WITH_SHA384: Oid = Oid::new_unwrap("1.2.840.10045.4.3.3");
pub const SHA256_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.11");
pub const SHA384_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.12");
pub const SHA512_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.13");
pub const RSASSA_PSS: Oid = Oid::new_unwrap("1.2.840.113549.1.1.10");
pub const MGF1: Oid = Oid::new_unwrap("1.2.840.113549.1.1.8");
pub const SHA256: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.1");
pub const SHA384: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.2");
pub const SHA512: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.3");

pub const AT_COUNTRY: Oid = Oid::new_unwrap("2.5.4.6");
pub const AT_STATE: Oid = Oid::new_unwrap("2.5.4.8");
pub const AT_LOCALITY: Oid = Oid::new_unwrap("2.5.4.7");
pub const AT_ORGANIZATION: Oid = Oid::new_unwrap("2.5.4.10");
pub const AT_ORG_UNIT: Oid = Oid::new_unwrap("2.5.4.11");
pub const AT_COMMON_NAME: Oid = Oid::new_unwrap("2.5.4.3");

pub const EXT_SUBJECT_KEY_ID: Oid = Oid::new_unwrap("2.5.29.14");
pub const EXT_KEY_USAGE: Oid = Oid::new_unwrap("2.5.29.15");
pub const EXT_SUBJECT_ALT_NAME: Oid = Oid::new_unwrap("2.5.29.17");
pub const EXT_BASIC_CONSTRAINTS: Oid = Oid::new_unwrap("2.5.29.19");
pub const EXT_CRL_NUMBER: Oid = Oid::new_unwrap("2.5.29.20");
pub const EXT_CRL_REASON: Oid = Oid::new_unwrap("2.5.29.21");
pub const EXT_CRL_DISTRIBUTION_POINTS: Oid = Oid::new_unwrap("2.5.29.31");
pub const EXT_AUTHORITY_KEY_ID: Oid = Oid::new_unwrap("2.5.29.35");
pub const EXT_EXTENDED_KEY_USAGE: Oid = Oid::new_unwrap("2.5.29.37");
pub const EXT_AUTHORITY_INFO_ACCESS: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.1.1");

pub const KP_SERVER_AUTH: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.3.1");
pub const KP_CLIENT_AUTH: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.3.2");
pub const AD_OCSP: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.48.1");
pub const AD_CA_ISSUERS: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.48.2");
