//! Object identifiers. Functions rather than constants because `Oid` owns its
//! bytes; the dotted strings are the constants other crates (X.509 building)
//! usually want.

use crate::der::Oid;

/// Private enterprise arc of the AIC drafts.
pub const AIC_ARC: &str = "1.3.6.1.4.1.66257";
/// The AIC certificate extension (non-critical).
pub const AIC_EXTENSION: &str = "1.3.6.1.4.1.66257.1.1";
/// DER content bytes of [`AIC_EXTENSION`], for matching extensions without parsing OIDs.
pub const AIC_EXTENSION_DER: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x84, 0x85, 0x51, 0x01, 0x01];
pub const AGENT_IDENTITY: &str = "1.3.6.1.4.1.66257.1.1.1";
pub const DELEGATION_AUTHORIZATION: &str = "1.3.6.1.4.1.66257.1.1.2";
pub const DELEGATION_DEPTH_CONTROL: &str = "1.3.6.1.4.1.66257.1.1.4";
/// The PrincipalAuthorization certificate extension (non-critical).
pub const PRINCIPAL_AUTHORIZATION_EXTENSION: &str = "1.3.6.1.4.1.66257.1.2";
pub const PRINCIPAL_AUTHORIZATION_EXTENSION_DER: &[u8] =
    &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x84, 0x85, 0x51, 0x01, 0x02];
pub const GATEWAY_SESSION: &str = "1.3.6.1.4.1.66257.1.5";
pub const RENEWAL_TOKEN: &str = "1.3.6.1.4.1.66257.1.6";

pub const SHA256: &str = "2.16.840.1.101.3.4.2.1";
pub const SHA384: &str = "2.16.840.1.101.3.4.2.2";
pub const SHA512: &str = "2.16.840.1.101.3.4.2.3";
pub const ECDSA_WITH_SHA256: &str = "1.2.840.10045.4.3.2";
pub const ECDSA_WITH_SHA384: &str = "1.2.840.10045.4.3.3";
pub const SHA256_WITH_RSA: &str = "1.2.840.113549.1.1.11";
pub const RSASSA_PSS: &str = "1.2.840.113549.1.1.10";
pub const ED25519: &str = "1.3.101.112";
pub const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
pub const RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
pub const SECP256R1: &str = "1.2.840.10045.3.1.7";
pub const SECP384R1: &str = "1.3.132.0.34";
pub const SECP521R1: &str = "1.3.132.0.35";

fn parse(dotted: &str) -> Oid {
    // The inputs are the constants above; a typo would fail every test.
    Oid::parse(dotted).unwrap_or_else(|| panic!("invalid OID constant {dotted}"))
}

pub fn aic_extension() -> Oid {
    parse(AIC_EXTENSION)
}
pub fn principal_authorization_extension() -> Oid {
    parse(PRINCIPAL_AUTHORIZATION_EXTENSION)
}
pub fn delegation_depth_control() -> Oid {
    parse(DELEGATION_DEPTH_CONTROL)
}
pub fn sha256() -> Oid {
    parse(SHA256)
}
pub fn named(dotted: &'static str) -> Oid {
    parse(dotted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_constants_match_dotted_forms() {
        assert_eq!(aic_extension().as_der_content(), AIC_EXTENSION_DER);
        assert_eq!(
            principal_authorization_extension().as_der_content(),
            PRINCIPAL_AUTHORIZATION_EXTENSION_DER
        );
    }
}
