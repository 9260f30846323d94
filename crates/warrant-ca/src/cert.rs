//! Strict parsing of DER certificates into borrowed raw parts: the signed TBS
//! bytes exactly as they appear (for signature checks and exact name matches,
//! with no re-encoding) and the few fields Warrant reads.

use std::time::SystemTime;

use const_oid::ObjectIdentifier;
use der::asn1::{AnyRef, BitStringRef, ContextSpecific, OctetStringRef};
use der::{Decode, Reader, SliceReader, Tag, TagNumber, Tagged};
use spki::AlgorithmIdentifierRef;
use x509_cert::time::Time;

use crate::derw;
use crate::oids;

/// `SEQUENCE { tbs, algorithm, signature }`, shared by certificates, CRLs and CSRs.
pub(crate) struct Signed<'a> {
    /// The complete TBS TLV, as signed.
    pub tbs: &'a [u8],
    pub algorithm: AlgorithmIdentifierRef<'a>,
    pub signature: BitStringRef<'a>,
}

pub(crate) fn parse_signed(der: &[u8]) -> der::Result<Signed<'_>> {
    let mut reader = SliceReader::new(der)?;
    let signed = reader.sequence(|r| {
        let tbs = r.tlv_bytes()?;
        let algorithm = AlgorithmIdentifierRef::decode(r)?;
        let signature = BitStringRef::decode(r)?;
        Ok(Signed {
            tbs,
            algorithm,
            signature,
        })
    })?;
    reader.finish(signed)
}

/// One extension of a parsed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertExtension {
    pub oid: ObjectIdentifier,
    pub critical: bool,
    /// The extnValue contents (the DER of the extension's own value).
    pub value: Vec<u8>,
}

/// Finds an extension value by OID.
pub fn find_extension<'a>(
    extensions: &'a [CertExtension],
    oid: &ObjectIdentifier,
) -> Option<&'a CertExtension> {
    extensions.iter().find(|e| &e.oid == oid)
}

pub(crate) struct RawCert<'a> {
    pub signed: Signed<'a>,
    /// INTEGER contents of the serial (two's complement, as encoded).
    pub serial: &'a [u8],
    pub tbs_algorithm: AlgorithmIdentifierRef<'a>,
    pub issuer: &'a [u8],
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub subject: &'a [u8],
    pub spki: &'a [u8],
    pub extensions: Vec<CertExtension>,
}

#[derive(der::Sequence)]
struct ExtensionRef<'a> {
    extn_id: ObjectIdentifier,
    #[asn1(default = "bool::default")]
    critical: bool,
    extn_value: OctetStringRef<'a>,
}

pub(crate) fn parse_cert(der: &[u8]) -> der::Result<RawCert<'_>> {
    let signed = parse_signed(der)?;
    let mut reader = SliceReader::new(signed.tbs)?;
    let raw = reader.sequence(|r| {
        let version = ContextSpecific::<u8>::decode_explicit(r, TagNumber::N0)?
            .map(|v| v.value)
            .unwrap_or(0);
        if version > 2 {
            return Err(Tag::Integer.value_error());
        }
        let serial = AnyRef::decode(r)?;
        if serial.tag() != Tag::Integer {
            return Err(serial.tag().unexpected_error(Some(Tag::Integer)));
        }
        let tbs_algorithm = AlgorithmIdentifierRef::decode(r)?;
        let issuer = r.tlv_bytes()?;
        let (not_before, not_after) = r.sequence(|r| Ok((Time::decode(r)?, Time::decode(r)?)))?;
        let subject = r.tlv_bytes()?;
        let spki = r.tlv_bytes()?;
        // issuerUniqueID [1] / subjectUniqueID [2]: skipped.
        for n in [1u8, 2] {
            let present = r
                .peek_tag()
                .is_ok_and(|t| t.is_context_specific() && t.number().value() == n);
            if present {
                r.tlv_bytes()?;
            }
        }
        let extensions =
            ContextSpecific::<Vec<ExtensionRef<'_>>>::decode_explicit(r, TagNumber::N3)?
                .map(|c| c.value)
                .unwrap_or_default()
                .into_iter()
                .map(|e| CertExtension {
                    oid: e.extn_id,
                    critical: e.critical,
                    value: e.extn_value.as_bytes().to_vec(),
                })
                .collect();
        Ok(RawCert {
            signed: Signed {
                tbs: &[],
                algorithm: tbs_algorithm,
                signature: BitStringRef::new(0, &[])?,
            },
            serial: serial.value(),
            tbs_algorithm,
            issuer,
            not_before: not_before.to_system_time(),
            not_after: not_after.to_system_time(),
            subject,
            spki,
            extensions,
        })
    })?;
    let raw = reader.finish(raw)?;
    // The closure cannot hold `signed` (it borrows the reader's input); put it back.
    Ok(RawCert { signed, ..raw })
}

impl RawCert<'_> {
    pub fn extension(&self, oid: &ObjectIdentifier) -> Option<&CertExtension> {
        find_extension(&self.extensions, oid)
    }

    /// basicConstraints cA, absent → false.
    pub fn is_ca(&self) -> bool {
        self.extension(&oids::EXT_BASIC_CONSTRAINTS)
            .and_then(|e| x509_cert::ext::pkix::BasicConstraints::from_der(&e.value).ok())
            .is_some_and(|bc| bc.ca)
    }

    /// The SKI extension's key identifier, if present.
    pub fn subject_key_id(&self) -> Option<Vec<u8>> {
        self.extension(&oids::EXT_SUBJECT_KEY_ID)
            .and_then(|e| OctetStringRef::from_der(&e.value).ok())
            .map(|o| o.as_bytes().to_vec())
    }

    /// The serial as up to 40 upper-case hex digits (zero-padded to 40 when it
    /// fits in 20 octets, like the serials Warrant issues).
    pub fn serial_hex(&self) -> String {
        serial_hex(self.serial)
    }
}

/// A serial's INTEGER contents as up to 40 upper-case hex digits
/// (zero-padded to 40 when it fits in 20 octets, like the serials Warrant
/// issues): certificates' and CRL entries' serials compare as these.
pub(crate) fn serial_hex(serial: &[u8]) -> String {
    let digits = match serial.iter().position(|b| *b != 0) {
        Some(i) => &serial[i..],
        None => &[0u8][..],
    };
    let hex = derw::hex_upper(digits);
    format!("{hex:0>40}")
}
