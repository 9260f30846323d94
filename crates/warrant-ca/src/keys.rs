//! Key types, key generation, public-key classification and signature checks.
//! All asymmetric crypto goes through aws-lc-rs.

use std::fmt;
use std::str::FromStr;

use aws_lc_rs::encoding::{AsBigEndian, AsDer, Pkcs8V1Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use const_oid::ObjectIdentifier;
use der::Decode;
use der::asn1::{BitStringRef, UintRef};
use spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};
use zeroize::Zeroizing;

use crate::derw;
use crate::error::{CaError, Result};
use crate::oids;
use crate::pkcs11::{Pkcs11Key, Pkcs11Uri};
use crate::tbs::{CertFields, signed_structure};

/// Key types a leaf may have, as named by the API's `key_type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyType {
    #[default]
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa2048,
    Rsa4096,
}

impl KeyType {
    pub const ALL: [KeyType; 5] = [
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
        KeyType::Rsa2048,
        KeyType::Rsa4096,
    ];

    /// The API string (`ecdsa-p256`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::EcdsaP384 => "ecdsa-p384",
            KeyType::Ed25519 => "ed25519",
            KeyType::Rsa2048 => "rsa-2048",
            KeyType::Rsa4096 => "rsa-4096",
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyType {
    type Err = CaError;

    /// Accepts the API strings; an empty string means the default (P-256).
    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Ok(KeyType::default());
        }
        KeyType::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                CaError::field(
                    "key_type",
                    format!(
                        "unknown key type {s:?} (expected one of ecdsa-p256, ecdsa-p384, ed25519, rsa-2048, rsa-4096)"
                    ),
                )
            })
    }
}

/// A freshly generated key pair: the private key to hand to the client once,
/// and the public key to certify.
pub struct GeneratedKey {
    pub key_type: KeyType,
    /// Unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), wiped on drop.
    pub pkcs8_pem: Zeroizing<String>,
    /// DER SubjectPublicKeyInfo.
    pub spki_der: Vec<u8>,
}

impl fmt::Debug for GeneratedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratedKey")
            .field("key_type", &self.key_type)
            .field("spki_der", &self.spki_der.len())
            .finish_non_exhaustive()
    }
}

/// Generates a key pair with aws-lc-rs. RSA-4096 takes from a fraction of a
/// second to a few seconds: call it from a blocking thread in async code.
pub fn generate_key(key_type: KeyType) -> Result<GeneratedKey> {
    let (pkcs8, spki): (Zeroizing<Vec<u8>>, Vec<u8>) = match key_type {
        KeyType::EcdsaP256 | KeyType::EcdsaP384 => {
            let (alg, curve) = if key_type == KeyType::EcdsaP256 {
                (&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &oids::SECP256R1)
            } else {
                (&signature::ECDSA_P384_SHA384_ASN1_SIGNING, &oids::SECP384R1)
            };
            let kp = EcdsaKeyPair::generate(alg).map_err(CaError::internal)?;
            let scalar = kp.private_key().as_be_bytes().map_err(CaError::internal)?;
            ec_key_encodings(curve, kp.public_key().as_ref(), scalar.as_ref())
        }
        KeyType::Ed25519 => {
            let kp = Ed25519KeyPair::generate().map_err(CaError::internal)?;
            let doc: Pkcs8V1Der = kp.as_der().map_err(CaError::internal)?;
            let spki = kp.public_key().as_der().map_err(CaError::internal)?;
            (
                Zeroizing::new(doc.as_ref().to_vec()),
                spki.as_ref().to_vec(),
            )
        }
        KeyType::Rsa2048 | KeyType::Rsa4096 => {
            let size = if key_type == KeyType::Rsa2048 {
                aws_lc_rs::rsa::KeySize::Rsa2048
            } else {
                aws_lc_rs::rsa::KeySize::Rsa4096
            };
            let kp = aws_lc_rs::rsa::KeyPair::generate(size).map_err(CaError::internal)?;
            let doc: Pkcs8V1Der = kp.as_der().map_err(CaError::internal)?;
            let spki = kp.public_key().as_der().map_err(CaError::internal)?;
            (
                Zeroizing::new(doc.as_ref().to_vec()),
                spki.as_ref().to_vec(),
            )
        }
    };
    Ok(GeneratedKey {
        key_type,
        pkcs8_pem: derw::pem_secret("PRIVATE KEY", &pkcs8)?,
        spki_der: spki,
    })
}

/// PKCS#8 (RFC 5208, holding an RFC 5915 `ECPrivateKey` without the
/// redundant curve parameters, as aws-lc-rs writes it) and the
/// SubjectPublicKeyInfo of an EC key, from the uncompressed public point that
/// aws-lc-rs computed when it generated the key. Asking aws-lc-rs for either
/// encoding converts the point to affine coordinates again, a field inversion
/// each time, which issuance with a server-generated key would pay twice per
/// certificate for nothing. Every buffer that holds the scalar is sized up
/// front, so no reallocation leaves an unwiped copy behind.
fn ec_key_encodings(
    curve: &ObjectIdentifier,
    point: &[u8],
    scalar: &[u8],
) -> (Zeroizing<Vec<u8>>, Vec<u8>) {
    let (alg, public_bits) = ec_spki_parts(curve, point);
    let mut spki_body = Vec::with_capacity(alg.len() + public_bits.len());
    spki_body.extend_from_slice(&alg);
    spki_body.extend_from_slice(&public_bits);
    let spki = derw::tlv(derw::TAG_SEQUENCE, &spki_body);

    // Each level adds at most 4 bytes of tag and length.
    let ec_body_len = 3 + (scalar.len() + 4) + (public_bits.len() + 4);
    let mut ec_body = Zeroizing::new(Vec::with_capacity(ec_body_len));
    ec_body.extend_from_slice(&[derw::TAG_INTEGER, 1, 1]);
    derw::push_tlv(&mut ec_body, derw::TAG_OCTET_STRING, scalar);
    derw::push_tlv(&mut ec_body, 0xA1, &public_bits);
    let mut ec_private_key = Zeroizing::new(Vec::with_capacity(ec_body.len() + 4));
    derw::push_tlv(&mut ec_private_key, derw::TAG_SEQUENCE, &ec_body);

    let p8_body_len = 3 + alg.len() + ec_private_key.len() + 4;
    let mut p8_body = Zeroizing::new(Vec::with_capacity(p8_body_len));
    p8_body.extend_from_slice(&[derw::TAG_INTEGER, 1, 0]);
    p8_body.extend_from_slice(&alg);
    derw::push_tlv(&mut p8_body, derw::TAG_OCTET_STRING, &ec_private_key);
    let mut pkcs8 = Zeroizing::new(Vec::with_capacity(p8_body.len() + 4));
    derw::push_tlv(&mut pkcs8, derw::TAG_SEQUENCE, &p8_body);
    (pkcs8, spki)
}

/// The AlgorithmIdentifier and the subjectPublicKey BIT STRING of an EC key.
fn ec_spki_parts(curve: &ObjectIdentifier, point: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut alg = Vec::with_capacity(32);
    derw::push_tlv(&mut alg, derw::TAG_OID, oids::EC_PUBLIC_KEY.as_bytes());
    derw::push_tlv(&mut alg, derw::TAG_OID, curve.as_bytes());
    let alg = derw::tlv(derw::TAG_SEQUENCE, &alg);
    let mut bits = Vec::with_capacity(point.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(point);
    (alg, derw::tlv(derw::TAG_BIT_STRING, &bits))
}

/// The SubjectPublicKeyInfo of the uncompressed EC `point` on `curve`.
pub(crate) fn ec_spki(curve: &ObjectIdentifier, point: &[u8]) -> Vec<u8> {
    let (mut body, bits) = ec_spki_parts(curve, point);
    body.extend_from_slice(&bits);
    derw::tlv(derw::TAG_SEQUENCE, &body)
}

/// What a SubjectPublicKeyInfo holds, after checking it is one of the key
/// types Warrant certifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicKeyKind {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    /// RSA with this modulus size in bits (2048..=8192).
    Rsa(u32),
}

impl PublicKeyKind {
    pub fn is_rsa(self) -> bool {
        matches!(self, PublicKeyKind::Rsa(_))
    }
}

/// A checked SubjectPublicKeyInfo borrowed from its DER.
pub(crate) struct ParsedSpki<'a> {
    pub kind: PublicKeyKind,
    /// The subjectPublicKey BIT STRING contents (EC point, RSAPublicKey DER or
    /// the raw Ed25519 key): what aws-lc-rs verifies with and what the SKI hashes.
    pub key_bits: &'a [u8],
}

/// Parses and classifies a DER SPKI. `field` names the API field it came from.
pub(crate) fn parse_spki<'a>(spki_der: &'a [u8], field: &'static str) -> Result<ParsedSpki<'a>> {
    let spki = SubjectPublicKeyInfoRef::from_der(spki_der)
        .map_err(|e| CaError::field(field, format!("bad SubjectPublicKeyInfo: {e}")))?;
    let key_bits = spki
        .subject_public_key
        .as_bytes()
        .ok_or_else(|| CaError::field(field, "public key bit string has unused bits"))?;
    let alg = spki.algorithm.oid;
    let kind = if alg == oids::EC_PUBLIC_KEY {
        let curve: ObjectIdentifier = spki
            .algorithm
            .parameters
            .ok_or_else(|| CaError::field(field, "EC key without a named curve"))?
            .decode_as()
            .map_err(|_| CaError::field(field, "EC key parameters are not a named curve"))?;
        let (kind, point_len) = if curve == oids::SECP256R1 {
            (PublicKeyKind::EcdsaP256, 65)
        } else if curve == oids::SECP384R1 {
            (PublicKeyKind::EcdsaP384, 97)
        } else {
            return Err(CaError::field(
                field,
                format!("unsupported EC curve {curve} (P-256 and P-384 are accepted)"),
            ));
        };
        if key_bits.len() != point_len || key_bits[0] != 0x04 {
            return Err(CaError::field(
                field,
                "EC public key is not an uncompressed point",
            ));
        }
        kind
    } else if alg == oids::ED25519 {
        if spki.algorithm.parameters.is_some() || key_bits.len() != 32 {
            return Err(CaError::field(field, "malformed Ed25519 public key"));
        }
        PublicKeyKind::Ed25519
    } else if alg == oids::RSA_ENCRYPTION {
        let bits = rsa_modulus_bits(key_bits)
            .ok_or_else(|| CaError::field(field, "malformed RSA public key"))?;
        if !(2048..=8192).contains(&bits) {
            return Err(CaError::field(
                field,
                format!("RSA key of {bits} bits (2048..=8192 accepted)"),
            ));
        }
        PublicKeyKind::Rsa(bits)
    } else {
        return Err(CaError::field(
            field,
            format!("unsupported public key algorithm {alg}"),
        ));
    };
    Ok(ParsedSpki { kind, key_bits })
}

fn rsa_modulus_bits(rsa_public_key: &[u8]) -> Option<u32> {
    let mut reader = der::SliceReader::new(rsa_public_key).ok()?;
    use der::Reader;
    let modulus = reader
        .sequence(|r| {
            let n = UintRef::decode(r)?;
            let _e = UintRef::decode(r)?;
            Ok(n)
        })
        .ok()?;
    reader.finish(()).ok()?;
    let bytes = modulus.as_bytes();
    let first = *bytes.first()?;
    Some((bytes.len() as u32 - 1) * 8 + (8 - first.leading_zeros()))
}

/// Verifies `signature` over `message` by the key in `spki_der`, for the
/// signature algorithm named in the signed structure. Returns a human reason
/// on failure; callers wrap it in their own error type.
pub(crate) fn verify_signature(
    spki_der: &[u8],
    algorithm: &AlgorithmIdentifierRef<'_>,
    message: &[u8],
    signature: &BitStringRef<'_>,
) -> std::result::Result<(), String> {
    let spki = parse_spki(spki_der, "public_key").map_err(|e| e.to_string())?;
    let sig = signature
        .as_bytes()
        .ok_or_else(|| "signature bit string has unused bits".to_string())?;
    let oid = algorithm.oid;
    let params_absent_or_null = match algorithm.parameters {
        None => true,
        Some(p) => p.is_null(),
    };
    let alg: &'static dyn signature::VerificationAlgorithm = match (spki.kind, oid) {
        (PublicKeyKind::EcdsaP256, o) if o == oids::ECDSA_WITH_SHA256 => {
            &signature::ECDSA_P256_SHA256_ASN1
        }
        (PublicKeyKind::EcdsaP256, o) if o == oids::ECDSA_WITH_SHA384 => {
            &signature::ECDSA_P256_SHA384_ASN1
        }
        (PublicKeyKind::EcdsaP384, o) if o == oids::ECDSA_WITH_SHA256 => {
            &signature::ECDSA_P384_SHA256_ASN1
        }
        (PublicKeyKind::EcdsaP384, o) if o == oids::ECDSA_WITH_SHA384 => {
            &signature::ECDSA_P384_SHA384_ASN1
        }
        (PublicKeyKind::Ed25519, o) if o == oids::ED25519 => &signature::ED25519,
        (PublicKeyKind::Rsa(_), o) if o == oids::SHA256_WITH_RSA && params_absent_or_null => {
            &signature::RSA_PKCS1_2048_8192_SHA256
        }
        (PublicKeyKind::Rsa(_), o) if o == oids::SHA384_WITH_RSA && params_absent_or_null => {
            &signature::RSA_PKCS1_2048_8192_SHA384
        }
        (PublicKeyKind::Rsa(_), o) if o == oids::SHA512_WITH_RSA && params_absent_or_null => {
            &signature::RSA_PKCS1_2048_8192_SHA512
        }
        (PublicKeyKind::Rsa(_), o) if o == oids::RSASSA_PSS => {
            let params = algorithm
                .parameters
                .map(|p| p.value())
                .ok_or_else(|| "RSASSA-PSS without parameters".to_string())?;
            pss_algorithm(params)?
        }
        (kind, o) => {
            return Err(format!(
                "signature algorithm {o} does not fit a {kind:?} key or is unsupported"
            ));
        }
    };
    signature::UnparsedPublicKey::new(alg, spki.key_bits)
        .verify(message, sig)
        .map_err(|_| "signature does not verify".to_string())
}

/// RSASSA-PSS parameters are accepted only in their three common canonical
/// forms (SHA-256/384/512, MGF1 with the same hash, salt = hash length), the
/// ones every mainstream tool writes.
fn pss_algorithm(
    params_value: &[u8],
) -> std::result::Result<&'static dyn signature::VerificationAlgorithm, String> {
    for (hash_oid, salt, alg) in [
        (
            oids::SHA256,
            32u8,
            &signature::RSA_PSS_2048_8192_SHA256 as &'static dyn signature::VerificationAlgorithm,
        ),
        (oids::SHA384, 48, &signature::RSA_PSS_2048_8192_SHA384),
        (oids::SHA512, 64, &signature::RSA_PSS_2048_8192_SHA512),
    ] {
        if pss_params_value(&hash_oid, salt, true) == params_value
            || pss_params_value(&hash_oid, salt, false) == params_value
        {
            return Ok(alg);
        }
    }
    Err("unsupported RSASSA-PSS parameters".to_string())
}

fn pss_params_value(hash: &ObjectIdentifier, salt: u8, with_null: bool) -> Vec<u8> {
    let mut hash_alg = derw::oid_tlv(hash);
    if with_null {
        hash_alg.extend_from_slice(&[0x05, 0x00]);
    }
    let hash_alg = derw::tlv(derw::TAG_SEQUENCE, &hash_alg);
    let mut mgf = derw::oid_tlv(&oids::MGF1);
    mgf.extend_from_slice(&hash_alg);
    let mgf = derw::tlv(derw::TAG_SEQUENCE, &mgf);
    let mut out = derw::tlv(0xA0, &hash_alg);
    out.extend_from_slice(&derw::tlv(0xA1, &mgf));
    out.extend_from_slice(&derw::tlv(0xA2, &[derw::TAG_INTEGER, 1, salt]));
    out
}

/// A CA signing key: a key pair in memory (from a key file), or a key in a
/// PKCS#11 token that never leaves it. Either is shared by every request
/// thread without a lock (a token key pools its sessions).
pub(crate) struct CaSigningKey {
    backend: Backend,
    /// DER AlgorithmIdentifier of the signatures this key makes.
    pub algorithm_der: Vec<u8>,
    pub spki_der: Vec<u8>,
}

enum Backend {
    Memory {
        key: EcdsaKeyPair,
        rng: SystemRandom,
    },
    Token(Box<Pkcs11Key>),
}

impl CaSigningKey {
    pub fn generate(kind: PublicKeyKind) -> Result<(Self, Zeroizing<Vec<u8>>)> {
        let alg = ca_alg(kind)?;
        let kp = EcdsaKeyPair::generate(alg).map_err(CaError::internal)?;
        let pkcs8 = Zeroizing::new(
            kp.to_pkcs8v1()
                .map_err(CaError::internal)?
                .as_ref()
                .to_vec(),
        );
        Ok((Self::from_key_pair(kp, kind)?, pkcs8))
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> std::result::Result<Self, String> {
        for kind in [PublicKeyKind::EcdsaP256, PublicKeyKind::EcdsaP384] {
            let alg = ca_alg(kind).map_err(|e| e.to_string())?;
            if let Ok(kp) = EcdsaKeyPair::from_pkcs8(alg, pkcs8) {
                return Self::from_key_pair(kp, kind).map_err(|e| e.to_string());
            }
        }
        Err("not an ECDSA P-256 or P-384 PKCS#8 key".to_string())
    }

    fn from_key_pair(key: EcdsaKeyPair, kind: PublicKeyKind) -> Result<Self> {
        let spki_der = key
            .public_key()
            .as_der()
            .map_err(CaError::internal)?
            .as_ref()
            .to_vec();
        Ok(Self {
            backend: Backend::Memory {
                key,
                rng: SystemRandom::new(),
            },
            algorithm_der: signature_algorithm_der(kind),
            spki_der,
        })
    }

    /// A key held in a PKCS#11 token.
    pub fn from_token(key: Pkcs11Key) -> Self {
        Self {
            algorithm_der: signature_algorithm_der(key.kind()),
            spki_der: key.spki_der().to_vec(),
            backend: Backend::Token(Box::new(key)),
        }
    }

    /// The token key's URI, or `None` for a key held in memory.
    pub fn token_uri(&self) -> Option<&Pkcs11Uri> {
        match &self.backend {
            Backend::Memory { .. } => None,
            Backend::Token(k) => Some(k.uri()),
        }
    }

    /// Signs a fixed message, to tell whether the key can sign now.
    pub fn check(&self) -> Result<()> {
        match &self.backend {
            Backend::Memory { .. } => Ok(()),
            Backend::Token(k) => k.sign_fixed(b"warrant key check").map(drop),
        }
    }

    /// DER ECDSA signature over `message`.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        match &self.backend {
            Backend::Memory { key, rng } => key
                .sign(rng, message)
                .map(|s| s.as_ref().to_vec())
                .map_err(CaError::internal),
            Backend::Token(k) => {
                let fixed = k.sign_fixed(message)?;
                derw::ecdsa_fixed_to_der(&fixed).ok_or_else(|| CaError::KeyUnavailable {
                    key: k.uri().to_string(),
                    reason: format!("the token returned a {}-byte signature", fixed.len()),
                })
            }
        }
    }

    /// Signs a TBS (certificate or CRL) and wraps it with this key's algorithm.
    pub fn sign_structure(&self, tbs: &[u8]) -> Result<Vec<u8>> {
        let signature = self.sign(tbs)?;
        Ok(signed_structure(tbs, &self.algorithm_der, &signature))
    }

    /// The certificate with `fields` that `issuer_der` issues with this key.
    pub fn sign_certificate(&self, issuer_der: &[u8], fields: &CertFields<'_>) -> Result<Vec<u8>> {
        let tbs = fields.tbs_der(&self.algorithm_der, issuer_der)?;
        self.sign_structure(&tbs)
    }
}

/// The AlgorithmIdentifier a CA whose key is `spki_der` signs with.
pub(crate) fn signature_algorithm_of_spki(spki_der: &[u8]) -> Result<Vec<u8>> {
    match parse_spki(spki_der, "public_key")?.kind {
        kind @ (PublicKeyKind::EcdsaP256 | PublicKeyKind::EcdsaP384) => {
            Ok(signature_algorithm_der(kind))
        }
        other => Err(CaError::internal(format!(
            "CA keys are ECDSA P-256 or P-384, not {other:?}"
        ))),
    }
}

fn signature_algorithm_der(kind: PublicKeyKind) -> Vec<u8> {
    let sig_oid = if kind == PublicKeyKind::EcdsaP256 {
        oids::ECDSA_WITH_SHA256
    } else {
        oids::ECDSA_WITH_SHA384
    };
    derw::tlv(derw::TAG_SEQUENCE, &derw::oid_tlv(&sig_oid))
}

fn ca_alg(kind: PublicKeyKind) -> Result<&'static signature::EcdsaSigningAlgorithm> {
    match kind {
        PublicKeyKind::EcdsaP256 => Ok(&signature::ECDSA_P256_SHA256_ASN1_SIGNING),
        PublicKeyKind::EcdsaP384 => Ok(&signature::ECDSA_P384_SHA384_ASN1_SIGNING),
        other => Err(CaError::internal(format!(
            "CA keys are ECDSA P-256 or P-384, not {other:?}"
        ))),
    }
}

/// RFC 7093 §2 method 1: the leftmost 160 bits of SHA-256 over the
/// subjectPublicKey bits, always of the certificate's own key, so that no two
/// keys share an identifier.
pub(crate) fn key_identifier(key_bits: &[u8]) -> [u8; 20] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key_bits);
    let mut id = [0u8; 20];
    id.copy_from_slice(&digest.as_ref()[..20]);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_type_parses_api_strings() {
        for k in KeyType::ALL {
            assert_eq!(k.as_str().parse::<KeyType>().unwrap(), k);
        }
        assert_eq!("".parse::<KeyType>().unwrap(), KeyType::EcdsaP256);
        let err = "rsa-1024".parse::<KeyType>().unwrap_err();
        assert_eq!(err.invalid_field(), Some("key_type"));
    }

    #[test]
    fn generated_keys_classify_as_their_type() {
        for (k, kind) in [
            (KeyType::EcdsaP256, PublicKeyKind::EcdsaP256),
            (KeyType::EcdsaP384, PublicKeyKind::EcdsaP384),
            (KeyType::Ed25519, PublicKeyKind::Ed25519),
            (KeyType::Rsa2048, PublicKeyKind::Rsa(2048)),
        ] {
            let g = generate_key(k).unwrap();
            assert!(g.pkcs8_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
            assert_eq!(parse_spki(&g.spki_der, "public_key").unwrap().kind, kind);
        }
    }

    /// The hot path writes EC keys itself (`ec_key_encodings`); they must be
    /// the bytes aws-lc-rs writes, for many keys (a scalar or coordinate with
    /// leading zero bytes included, about one key in 128).
    #[test]
    fn ec_key_encodings_match_aws_lc() {
        for (alg, curve, n) in [
            (
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                &oids::SECP256R1,
                600,
            ),
            (
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
                &oids::SECP384R1,
                200,
            ),
        ] {
            for _ in 0..n {
                let kp = EcdsaKeyPair::generate(alg).unwrap();
                let scalar = kp.private_key().as_be_bytes().unwrap();
                let (pkcs8, spki) =
                    ec_key_encodings(curve, kp.public_key().as_ref(), scalar.as_ref());
                assert_eq!(pkcs8.as_slice(), kp.to_pkcs8v1().unwrap().as_ref());
                assert_eq!(spki, kp.public_key().as_der().unwrap().as_ref());
            }
        }
    }

    #[test]
    fn generated_ec_private_key_pem_holds_the_certified_key() {
        for (k, alg) in [
            (
                KeyType::EcdsaP256,
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            ),
            (
                KeyType::EcdsaP384,
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            ),
        ] {
            let g = generate_key(k).unwrap();
            assert!(g.pkcs8_pem.ends_with("\n-----END PRIVATE KEY-----\n"));
            let (label, der) = der::pem::decode_vec(g.pkcs8_pem.as_bytes()).unwrap();
            assert_eq!(label, "PRIVATE KEY");
            let kp = EcdsaKeyPair::from_pkcs8(alg, &der).unwrap();
            assert_eq!(kp.public_key().as_der().unwrap().as_ref(), g.spki_der);
        }
    }

    #[test]
    fn rejects_spki_garbage_naming_the_field() {
        let err = parse_spki(b"\x30\x03\x02\x01\x00", "csr_pem")
            .err()
            .unwrap();
        assert_eq!(err.invalid_field(), Some("csr_pem"));
    }
}
