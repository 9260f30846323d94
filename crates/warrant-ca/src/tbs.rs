//! What a CA signs and what it hands out: the `TBSCertificate` assembled from
//! pre-encoded parts, and the `SEQUENCE { tbs, algorithm, signature }` envelope
//! shared by certificates and CRLs.

use std::time::SystemTime;

use crate::derw::{self, TAG_BIT_STRING, TAG_SEQUENCE};
use crate::error::Result;

/// The fields of a certificate that are its own; the issuer name and the
/// signature algorithm come from the CA that signs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CertFields<'a> {
    /// Big-endian magnitude of the serial number.
    pub serial: &'a [u8],
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub subject_der: &'a [u8],
    pub spki_der: &'a [u8],
    /// The concatenation of `Extension` SEQUENCEs (may be empty).
    pub extensions: &'a [u8],
}

impl CertFields<'_> {
    /// The `TBSCertificate` (v3) of these fields under `issuer_der`, to be
    /// signed with the algorithm `signature_alg_der` names.
    pub(crate) fn tbs_der(&self, signature_alg_der: &[u8], issuer_der: &[u8]) -> Result<Vec<u8>> {
        let mut body = Vec::with_capacity(
            64 + signature_alg_der.len()
                + issuer_der.len()
                + self.subject_der.len()
                + self.spki_der.len()
                + self.extensions.len(),
        );
        body.extend_from_slice(&[0xA0, 3, 2, 1, 2]); // version v3
        derw::push_uint(&mut body, self.serial);
        body.extend_from_slice(signature_alg_der);
        body.extend_from_slice(issuer_der);
        let mut validity = Vec::with_capacity(34);
        derw::push_time(&mut validity, self.not_before, "validity")?;
        derw::push_time(&mut validity, self.not_after, "validity")?;
        derw::push_tlv(&mut body, TAG_SEQUENCE, &validity);
        body.extend_from_slice(self.subject_der);
        body.extend_from_slice(self.spki_der);
        if !self.extensions.is_empty() {
            derw::push_tlv(&mut body, 0xA3, &derw::tlv(TAG_SEQUENCE, self.extensions));
        }
        Ok(derw::tlv(TAG_SEQUENCE, &body))
    }
}

/// `SEQUENCE { tbs, signatureAlgorithm, BIT STRING signature }`.
pub(crate) fn signed_structure(tbs: &[u8], signature_alg_der: &[u8], signature: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(tbs.len() + signature_alg_der.len() + signature.len() + 8);
    body.extend_from_slice(tbs);
    body.extend_from_slice(signature_alg_der);
    body.push(TAG_BIT_STRING);
    derw::push_len(&mut body, signature.len() + 1);
    body.push(0);
    body.extend_from_slice(signature);
    derw::tlv(TAG_SEQUENCE, &body)
}
