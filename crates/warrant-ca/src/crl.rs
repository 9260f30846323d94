//! DER CRLs (v2) per issuing CA, with RFC 5280 reason codes.

use std::str::FromStr;
use std::time::SystemTime;

use crate::derw::{self, TAG_ENUMERATED, TAG_SEQUENCE};
use crate::error::{CaError, Result};
use crate::hierarchy::IssuingCa;
use crate::oids;
use crate::serial::parse_serial_hex;

/// RFC 5280 §5.3.1 CRLReason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RevocationReason {
    #[default]
    Unspecified,
    KeyCompromise,
    CaCompromise,
    AffiliationChanged,
    Superseded,
    CessationOfOperation,
    CertificateHold,
    PrivilegeWithdrawn,
    AaCompromise,
}

impl RevocationReason {
    pub const ALL: [RevocationReason; 9] = [
        RevocationReason::Unspecified,
        RevocationReason::KeyCompromise,
        RevocationReason::CaCompromise,
        RevocationReason::AffiliationChanged,
        RevocationReason::Superseded,
        RevocationReason::CessationOfOperation,
        RevocationReason::CertificateHold,
        RevocationReason::PrivilegeWithdrawn,
        RevocationReason::AaCompromise,
    ];

    /// The CRLReason code.
    pub fn code(self) -> u8 {
        match self {
            RevocationReason::Unspecified => 0,
            RevocationReason::KeyCompromise => 1,
            RevocationReason::CaCompromise => 2,
            RevocationReason::AffiliationChanged => 3,
            RevocationReason::Superseded => 4,
            RevocationReason::CessationOfOperation => 5,
            RevocationReason::CertificateHold => 6,
            RevocationReason::PrivilegeWithdrawn => 9,
            RevocationReason::AaCompromise => 10,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// The RFC 5280 name (`keyCompromise`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RevocationReason::Unspecified => "unspecified",
            RevocationReason::KeyCompromise => "keyCompromise",
            RevocationReason::CaCompromise => "cACompromise",
            RevocationReason::AffiliationChanged => "affiliationChanged",
            RevocationReason::Superseded => "superseded",
            RevocationReason::CessationOfOperation => "cessationOfOperation",
            RevocationReason::CertificateHold => "certificateHold",
            RevocationReason::PrivilegeWithdrawn => "privilegeWithdrawn",
            RevocationReason::AaCompromise => "aACompromise",
        }
    }
}

impl std::fmt::Display for RevocationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RevocationReason {
    type Err = CaError;

    /// RFC 5280 names, case-insensitive, `_`/`-`/blanks ignored
    /// (`keyCompromise`, `key_compromise`, `KEY-COMPROMISE`), or the numeric
    /// code. `removeFromCRL` (8) belongs to delta CRLs only and is refused.
    fn from_str(s: &str) -> Result<Self> {
        let folded: String = s
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .flat_map(char::to_lowercase)
            .collect();
        if let Ok(code) = folded.parse::<u8>()
            && let Some(r) = Self::from_code(code)
        {
            return Ok(r);
        }
        Self::ALL
            .into_iter()
            .find(|r| r.as_str().to_lowercase() == folded)
            .ok_or_else(|| {
                CaError::field(
                    "reason",
                    format!("{s:?} is not an RFC 5280 revocation reason (keyCompromise, superseded, ...)"),
                )
            })
    }
}

/// One revoked certificate on a CRL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevokedEntry<'a> {
    pub serial_hex: &'a str,
    pub revoked_at: SystemTime,
    pub reason: RevocationReason,
}

/// A DER CRL v2 signed by `ca`: AKI and CRL number (must grow with every CRL
/// the CA publishes; the server owns the counter), one entry per revoked
/// certificate with its reason (omitted for `unspecified`, as RFC 5280 asks).
pub fn build_crl(
    ca: &IssuingCa,
    revoked: &[RevokedEntry<'_>],
    this_update: SystemTime,
    next_update: SystemTime,
    crl_number: u64,
) -> Result<Vec<u8>> {
    if next_update <= this_update {
        return Err(CaError::field("next_update", "must be after this_update"));
    }
    let mut body = Vec::with_capacity(256 + revoked.len() * 48);
    body.extend_from_slice(&[derw::TAG_INTEGER, 1, 1]); // v2
    body.extend_from_slice(ca.signature_algorithm_der());
    body.extend_from_slice(ca.subject_der());
    derw::push_time(&mut body, this_update, "this_update")?;
    derw::push_time(&mut body, next_update, "next_update")?;
    if !revoked.is_empty() {
        let mut list = Vec::with_capacity(revoked.len() * 48);
        for entry in revoked {
            let mut e = Vec::with_capacity(48);
            derw::push_uint(&mut e, &parse_serial_hex(entry.serial_hex)?);
            derw::push_time(&mut e, entry.revoked_at, "revoked_at")?;
            if entry.reason != RevocationReason::Unspecified {
                let ext = derw::extension(
                    &oids::EXT_CRL_REASON,
                    false,
                    &[TAG_ENUMERATED, 1, entry.reason.code()],
                );
                derw::push_tlv(&mut e, TAG_SEQUENCE, &ext);
            }
            derw::push_tlv(&mut list, TAG_SEQUENCE, &e);
        }
        derw::push_tlv(&mut body, TAG_SEQUENCE, &list);
    }
    let mut exts = ca.aki_extension().to_vec();
    let mut number = Vec::new();
    derw::push_uint(&mut number, &crl_number.to_be_bytes());
    exts.extend(derw::extension(&oids::EXT_CRL_NUMBER, false, &number));
    derw::push_tlv(&mut body, 0xA0, &derw::tlv(TAG_SEQUENCE, &exts));
    let tbs = derw::tlv(TAG_SEQUENCE, &body);
    ca.sign_structure(&tbs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_and_codes_round_trip() {
        for r in RevocationReason::ALL {
            assert_eq!(r.as_str().parse::<RevocationReason>().unwrap(), r);
            assert_eq!(RevocationReason::from_code(r.code()), Some(r));
        }
        assert_eq!(
            "key_compromise".parse::<RevocationReason>().unwrap(),
            RevocationReason::KeyCompromise
        );
        assert_eq!(
            "CA-COMPROMISE".parse::<RevocationReason>().unwrap(),
            RevocationReason::CaCompromise
        );
        assert_eq!(
            "4".parse::<RevocationReason>().unwrap(),
            RevocationReason::Superseded
        );
    }

    #[test]
    fn rejects_unknown_and_delta_only_reasons() {
        for bad in ["", "stolen", "removeFromCRL", "8", "7"] {
            let e = bad.parse::<RevocationReason>().unwrap_err();
            assert_eq!(e.invalid_field(), Some("reason"), "{bad}");
        }
    }
}
