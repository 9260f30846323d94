//! OCSP (RFC 6960) in the RFC 5019 lightweight profile, for one issuing CA:
//! requests parsed, responses built and signed by a delegated responder.
//!
//! The responder is a short-lived certificate the CA issues to a key of its
//! own ([`OcspResponder::new`]): `id-kp-OCSPSigning`, `id-pkix-ocsp-nocheck`
//! (a client does not ask about the responder itself), KU
//! digitalSignature. So the CA key signs once per responder, not once per
//! response, and the responder can be replaced without touching the CA.
//!
//! A response answers every entry of its request in order, names the
//! responder by key hash, carries the responder certificate, and echoes the
//! request's nonce when there is one. Each entry's `CertID` is echoed as the
//! request sent it (same hash algorithm), which is how clients match them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::digest;
use const_oid::ObjectIdentifier;
use der::{Decode, Encode};

use crate::crl::RevocationReason;
use crate::derw::{self, TAG_ENUMERATED, TAG_OCTET_STRING, TAG_SEQUENCE};
use crate::error::{CaError, Result};
use crate::hierarchy::IssuingCa;
use crate::keys::{self, CaSigningKey, PublicKeyKind};
use crate::oids;
use crate::serial::new_serial;
use crate::tbs::CertFields;

/// Most certificates one request may ask about. RFC 5019 clients ask about
/// one; a request for more is refused as malformed.
pub const MAX_REQUEST_ENTRIES: usize = 8;

/// Largest request accepted, DER.
pub const MAX_REQUEST_LEN: usize = 4096;

const ID_PKIX_OCSP_BASIC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.1");
const ID_PKIX_OCSP_NONCE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.2");
const ID_PKIX_OCSP_NOCHECK: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.5");
const KP_OCSP_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.9");
const SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.14.3.2.26");

/// `OCSPResponseStatus` values other than `successful`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OcspFailure {
    MalformedRequest = 1,
    InternalError = 2,
    TryLater = 3,
    Unauthorized = 6,
}

/// Why a request could not be answered: every variant answers
/// `malformedRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OcspRequestError {
    #[error("request: not a DER OCSPRequest ({0})")]
    Malformed(String),
    #[error("request: larger than {MAX_REQUEST_LEN} bytes")]
    TooLarge,
    #[error("request: no certificate asked about")]
    Empty,
    #[error("request: {0} certificates asked about, at most {MAX_REQUEST_ENTRIES}")]
    TooManyEntries(usize),
}

/// The hash algorithms a `CertID` may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertIdHash {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl CertIdHash {
    const ALL: [CertIdHash; 4] = [
        CertIdHash::Sha1,
        CertIdHash::Sha256,
        CertIdHash::Sha384,
        CertIdHash::Sha512,
    ];

    fn from_oid(oid: &ObjectIdentifier) -> Option<Self> {
        match *oid {
            SHA1 => Some(CertIdHash::Sha1),
            oids::SHA256 => Some(CertIdHash::Sha256),
            oids::SHA384 => Some(CertIdHash::Sha384),
            oids::SHA512 => Some(CertIdHash::Sha512),
            _ => None,
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            CertIdHash::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            CertIdHash::Sha256 => &digest::SHA256,
            CertIdHash::Sha384 => &digest::SHA384,
            CertIdHash::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }
}

/// One certificate a request asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertQuery {
    /// `None` for a hash algorithm no CA is matched with (answered
    /// `unknown`).
    pub hash: Option<CertIdHash>,
    pub issuer_name_hash: Vec<u8>,
    pub issuer_key_hash: Vec<u8>,
    /// Big-endian magnitude of the serial number.
    pub serial: Vec<u8>,
    /// The `CertID` as the request encoded it, echoed in the response.
    cert_id_der: Vec<u8>,
}

/// A parsed `OCSPRequest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOcspRequest {
    pub queries: Vec<CertQuery>,
    /// The nonce extension's value (RFC 8954), echoed in the response.
    pub nonce: Option<Vec<u8>>,
}

/// Parses a DER `OCSPRequest`. A signature on the request is ignored (RFC
/// 5019 requests are unsigned and nothing here depends on the requester).
pub fn parse_request(der: &[u8]) -> std::result::Result<ParsedOcspRequest, OcspRequestError> {
    if der.len() > MAX_REQUEST_LEN {
        return Err(OcspRequestError::TooLarge);
    }
    let req = x509_ocsp::OcspRequest::from_der(der)
        .map_err(|e| OcspRequestError::Malformed(e.to_string()))?;
    let list = &req.tbs_request.request_list;
    if list.is_empty() {
        return Err(OcspRequestError::Empty);
    }
    if list.len() > MAX_REQUEST_ENTRIES {
        return Err(OcspRequestError::TooManyEntries(list.len()));
    }
    let mut queries = Vec::with_capacity(list.len());
    for r in list {
        let id = &r.req_cert;
        let serial = id.serial_number.as_bytes();
        let first = serial.iter().position(|&b| b != 0).unwrap_or(serial.len());
        queries.push(CertQuery {
            hash: CertIdHash::from_oid(&id.hash_algorithm.oid),
            issuer_name_hash: id.issuer_name_hash.as_bytes().to_vec(),
            issuer_key_hash: id.issuer_key_hash.as_bytes().to_vec(),
            serial: serial[first..].to_vec(),
            cert_id_der: id
                .to_der()
                .map_err(|e| OcspRequestError::Malformed(e.to_string()))?,
        });
    }
    let nonce = req
        .tbs_request
        .request_extensions
        .iter()
        .flatten()
        .find(|e| e.extn_id == ID_PKIX_OCSP_NONCE)
        .map(|e| e.extn_value.as_bytes().to_vec());
    Ok(ParsedOcspRequest { queries, nonce })
}

/// What a response says of one certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OcspCertStatus {
    Good,
    Revoked {
        at: SystemTime,
        /// Omitted from the response when `None`.
        reason: Option<RevocationReason>,
    },
    Unknown,
}

/// The times of one response (RFC 5019 §2.2.4: `producedAt` is when it was
/// signed, `thisUpdate` when the status was known to be right,
/// `nextUpdate` until when a client may cache it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OcspTimes {
    pub produced_at: SystemTime,
    pub this_update: SystemTime,
    pub next_update: SystemTime,
}

/// A bare `OCSPResponse` with a failure status and no body.
pub fn failure_response(status: OcspFailure) -> Vec<u8> {
    derw::tlv(TAG_SEQUENCE, &[TAG_ENUMERATED, 1, status as u8])
}

/// A CA's delegated OCSP responder: its key, its certificate, and the
/// `CertID` hashes of the CA it answers for.
pub struct OcspResponder {
    ca_name: String,
    key: CaSigningKey,
    cert_der: Vec<u8>,
    not_after: SystemTime,
    /// `byKey` responder id: SHA-1 of the responder's public key bits.
    key_hash: Vec<u8>,
    /// (hash, issuer name hash, issuer key hash) of the CA.
    issuer_ids: Vec<(CertIdHash, Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for OcspResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcspResponder")
            .field("ca", &self.ca_name)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl OcspResponder {
    /// A fresh key and a responder certificate `ca` issues for it, valid
    /// from a minute before `now` (clock skew) for `lifetime`, capped by the
    /// CA's own validity.
    pub fn new(ca: &IssuingCa, now: SystemTime, lifetime: Duration) -> Result<Self> {
        if lifetime < Duration::from_secs(60) {
            return Err(CaError::field("lifetime", "at least one minute"));
        }
        let (key, _pkcs8) = CaSigningKey::generate(PublicKeyKind::EcdsaP256)?;
        let key_bits = keys::parse_spki(&key.spki_der, "responder key")?
            .key_bits
            .to_vec();
        let not_before = derw::whole_seconds(now) - Duration::from_secs(60);
        let not_after = derw::whole_seconds(now + lifetime).min(ca.not_after());
        if not_after <= now {
            return Err(CaError::field(
                "lifetime",
                "the CA expires before the responder would start",
            ));
        }
        let serial = new_serial()?;
        let subject = responder_subject(ca.name());
        let mut exts = Vec::with_capacity(256);
        derw::push_extension(
            &mut exts,
            &oids::EXT_BASIC_CONSTRAINTS,
            true,
            &[TAG_SEQUENCE, 0],
        );
        // digitalSignature only.
        derw::push_extension(
            &mut exts,
            &oids::EXT_KEY_USAGE,
            true,
            &[0x03, 0x02, 0x07, 0x80],
        );
        derw::push_extension(
            &mut exts,
            &oids::EXT_EXTENDED_KEY_USAGE,
            false,
            &derw::tlv(TAG_SEQUENCE, &derw::oid_tlv(&KP_OCSP_SIGNING)),
        );
        derw::push_extension(&mut exts, &ID_PKIX_OCSP_NOCHECK, false, &[0x05, 0x00]);
        derw::push_extension(
            &mut exts,
            &oids::EXT_SUBJECT_KEY_ID,
            false,
            &derw::tlv(TAG_OCTET_STRING, &keys::key_identifier(&key_bits)),
        );
        exts.extend_from_slice(ca.aki_extension());
        let cert_der = ca.sign_certificate(&CertFields {
            serial: &serial,
            not_before,
            not_after,
            subject_der: &subject,
            spki_der: &key.spki_der,
            extensions: &exts,
        })?;
        let ca_key_bits = keys::parse_spki(ca.spki_der(), "CA key")?.key_bits;
        let issuer_ids = CertIdHash::ALL
            .into_iter()
            .map(|h| (h, h.digest(ca.subject_der()), h.digest(ca_key_bits)))
            .collect();
        Ok(OcspResponder {
            ca_name: ca.name().to_string(),
            key_hash: CertIdHash::Sha1.digest(&key_bits),
            key,
            cert_der,
            not_after,
            issuer_ids,
        })
    }

    /// The CA this responder answers for.
    pub fn ca_name(&self) -> &str {
        &self.ca_name
    }

    /// The responder certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Whether `q` names a certificate of this responder's CA.
    pub fn answers_for(&self, q: &CertQuery) -> bool {
        let Some(hash) = q.hash else {
            return false;
        };
        self.issuer_ids.iter().any(|(h, name, key)| {
            *h == hash && *name == q.issuer_name_hash && *key == q.issuer_key_hash
        })
    }

    /// A signed, successful `OCSPResponse` answering `entries` in order.
    pub fn respond(
        &self,
        entries: &[(&CertQuery, OcspCertStatus)],
        times: OcspTimes,
        nonce: Option<&[u8]>,
    ) -> Result<Vec<u8>> {
        let mut data = Vec::with_capacity(128 + entries.len() * 96);
        derw::push_tlv(
            &mut data,
            0xA2,
            &derw::tlv(TAG_OCTET_STRING, &self.key_hash),
        );
        push_generalized_time(&mut data, times.produced_at, "produced_at")?;
        let mut list = Vec::with_capacity(entries.len() * 96);
        for (q, status) in entries {
            let mut single = Vec::with_capacity(96);
            single.extend_from_slice(&q.cert_id_der);
            match status {
                OcspCertStatus::Good => single.extend_from_slice(&[0x80, 0]),
                OcspCertStatus::Unknown => single.extend_from_slice(&[0x82, 0]),
                OcspCertStatus::Revoked { at, reason } => {
                    let mut info = Vec::with_capacity(24);
                    push_generalized_time(&mut info, *at, "revoked_at")?;
                    if let Some(r) = reason {
                        derw::push_tlv(&mut info, 0xA0, &[TAG_ENUMERATED, 1, r.code()]);
                    }
                    derw::push_tlv(&mut single, 0xA1, &info);
                }
            }
            push_generalized_time(&mut single, times.this_update, "this_update")?;
            let mut next = Vec::with_capacity(17);
            push_generalized_time(&mut next, times.next_update, "next_update")?;
            derw::push_tlv(&mut single, 0xA0, &next);
            derw::push_tlv(&mut list, TAG_SEQUENCE, &single);
        }
        derw::push_tlv(&mut data, TAG_SEQUENCE, &list);
        if let Some(nonce) = nonce {
            let ext = derw::extension(&ID_PKIX_OCSP_NONCE, false, nonce);
            derw::push_tlv(&mut data, 0xA1, &derw::tlv(TAG_SEQUENCE, &ext));
        }
        let tbs = derw::tlv(TAG_SEQUENCE, &data);
        let signature = self.key.sign(&tbs)?;
        let mut basic = Vec::with_capacity(tbs.len() + signature.len() + self.cert_der.len() + 32);
        basic.extend_from_slice(&tbs);
        basic.extend_from_slice(&self.key.algorithm_der);
        basic.push(derw::TAG_BIT_STRING);
        derw::push_len(&mut basic, signature.len() + 1);
        basic.push(0);
        basic.extend_from_slice(&signature);
        derw::push_tlv(&mut basic, 0xA0, &derw::tlv(TAG_SEQUENCE, &self.cert_der));
        let basic = derw::tlv(TAG_SEQUENCE, &basic);
        let mut bytes = derw::oid_tlv(&ID_PKIX_OCSP_BASIC);
        derw::push_tlv(&mut bytes, TAG_OCTET_STRING, &basic);
        let mut out = vec![TAG_ENUMERATED, 1, 0];
        derw::push_tlv(&mut out, 0xA0, &derw::tlv(TAG_SEQUENCE, &bytes));
        Ok(derw::tlv(TAG_SEQUENCE, &out))
    }
}

/// `CN=Warrant OCSP responder (<ca>)`.
fn responder_subject(ca_name: &str) -> Vec<u8> {
    let cn = format!("Warrant OCSP responder ({ca_name})");
    let mut atv = derw::oid_tlv(&oids::AT_COMMON_NAME);
    derw::push_tlv(&mut atv, 0x0C, cn.as_bytes());
    derw::tlv(
        TAG_SEQUENCE,
        &derw::tlv(derw::TAG_SET, &derw::tlv(TAG_SEQUENCE, &atv)),
    )
}

/// OCSP times are always GeneralizedTime (RFC 6960 §4.2.1), to the second.
fn push_generalized_time(out: &mut Vec<u8>, t: SystemTime, field: &'static str) -> Result<()> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| CaError::field(field, "time before 1970"))?
        .as_secs();
    let dt = der::DateTime::from_unix_duration(Duration::from_secs(secs))
        .map_err(|_| CaError::field(field, "time out of range"))?;
    let encoded = der::asn1::GeneralizedTime::from_date_time(dt)
        .to_der()
        .map_err(|_| CaError::field(field, "time out of range"))?;
    out.extend_from_slice(&encoded);
    Ok(())
}
