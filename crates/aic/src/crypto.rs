//! Key parsing, hashing, and the DA signature algorithms, all over aws-lc-rs.

use aws_lc_rs::{digest, rand::SystemRandom, signature};

use crate::der::{Reader, TAG_BIT_STRING, TAG_NULL, TAG_SEQUENCE};
use crate::model::AlgorithmIdentifier;
use crate::oid;

pub fn sha256(data: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A public key taken apart from its DER SubjectPublicKeyInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// Uncompressed SEC1 point.
    EcP256(Vec<u8>),
    EcP384(Vec<u8>),
    EcP521(Vec<u8>),
    /// PKCS#1 RSAPublicKey DER.
    Rsa(Vec<u8>),
    Ed25519([u8; 32]),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("SubjectPublicKeyInfo is malformed: {0}")]
    Malformed(String),
    #[error("unsupported public key algorithm {0}")]
    UnsupportedAlgorithm(String),
    #[error("unsupported elliptic curve {0}")]
    UnsupportedCurve(String),
}

impl PublicKey {
    pub fn from_spki(spki_der: &[u8]) -> Result<PublicKey, KeyError> {
        let malformed = |e: crate::DecodeError| KeyError::Malformed(e.to_string());
        let mut outer = Reader::new(spki_der);
        let mut spki = outer
            .read_nested(TAG_SEQUENCE, "SubjectPublicKeyInfo")
            .map_err(malformed)?;
        outer.finish("SubjectPublicKeyInfo").map_err(malformed)?;
        let mut alg = spki
            .read_nested(TAG_SEQUENCE, "SubjectPublicKeyInfo.algorithm")
            .map_err(malformed)?;
        let alg_oid = alg
            .read_oid("SubjectPublicKeyInfo.algorithm.algorithm")
            .map_err(malformed)?;
        let bits = spki
            .read(TAG_BIT_STRING, "SubjectPublicKeyInfo.subjectPublicKey")
            .map_err(malformed)?;
        spki.finish("SubjectPublicKeyInfo").map_err(malformed)?;
        let key = match bits.split_first() {
            Some((0, key)) => key.to_vec(),
            _ => {
                return Err(KeyError::Malformed(
                    "subjectPublicKey has unused bits".into(),
                ));
            }
        };
        let dotted = alg_oid.to_dotted();
        match dotted.as_str() {
            oid::EC_PUBLIC_KEY => {
                let curve = alg
                    .read_oid("SubjectPublicKeyInfo.algorithm.namedCurve")
                    .map_err(malformed)?;
                alg.finish("SubjectPublicKeyInfo.algorithm")
                    .map_err(malformed)?;
                match curve.to_dotted().as_str() {
                    oid::SECP256R1 => Ok(PublicKey::EcP256(key)),
                    oid::SECP384R1 => Ok(PublicKey::EcP384(key)),
                    oid::SECP521R1 => Ok(PublicKey::EcP521(key)),
                    other => Err(KeyError::UnsupportedCurve(other.to_owned())),
                }
            }
            oid::RSA_ENCRYPTION => {
                if !alg.is_empty() {
                    alg.read(TAG_NULL, "SubjectPublicKeyInfo.algorithm.parameters")
                        .map_err(malformed)?;
                }
                alg.finish("SubjectPublicKeyInfo.algorithm")
                    .map_err(malformed)?;
                Ok(PublicKey::Rsa(key))
            }
            oid::ED25519 => {
                alg.finish("SubjectPublicKeyInfo.algorithm")
                    .map_err(malformed)?;
                let raw: [u8; 32] = key
                    .try_into()
                    .map_err(|_| KeyError::Malformed("Ed25519 key must be 32 bytes".into()))?;
                Ok(PublicKey::Ed25519(raw))
            }
            other => Err(KeyError::UnsupportedAlgorithm(other.to_owned())),
        }
    }
}

/// Which bytes an accepted DA signature covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifiedForm {
    /// The DER TBS itself (every algorithm's normal form; ECDSA and RSA hash it internally).
    Message,
    /// Ed25519 over the 32-byte SHA-256 of the TBS, as the Go reference signs.
    Sha256Digest,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("unsupported DA signature algorithm {0}")]
    UnsupportedAlgorithm(String),
    #[error("signature algorithm {alg} does not match the principal's key type")]
    KeyAlgorithmMismatch { alg: String },
    #[error("unsupported parameters for signature algorithm {0}")]
    UnsupportedParameters(String),
    #[error("signature does not verify")]
    BadSignature,
}

/// DER of RSASSA-PSS-params for SHA-256 / MGF1-SHA-256 / salt 32, as Go's x509
/// writes them (hash AlgorithmIdentifiers with NULL parameters).
pub const PSS_SHA256_PARAMS: &[u8] = &[
    0x30, 0x34, 0xa0, 0x0f, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
    0x01, 0x05, 0x00, 0xa1, 0x1c, 0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01,
    0x01, 0x08, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05,
    0x00, 0xa2, 0x03, 0x02, 0x01, 0x20,
];
const NULL_PARAMS: &[u8] = &[0x05, 0x00];

fn check(
    alg: &'static dyn signature::VerificationAlgorithm,
    key: &[u8],
    msg: &[u8],
    sig: &[u8],
) -> bool {
    signature::UnparsedPublicKey::new(alg, key)
        .verify(msg, sig)
        .is_ok()
}

/// Verifies a DA signature over `tbs_der` with the principal's key.
///
/// Ed25519 accepts both the message form and the reference's digest form and
/// reports which one matched, so callers can log or phase out the digest form.
pub fn verify_signature(
    tbs_der: &[u8],
    sig_alg: &AlgorithmIdentifier,
    signature_value: &[u8],
    principal_spki_der: &[u8],
) -> Result<VerifiedForm, SignatureError> {
    let key = PublicKey::from_spki(principal_spki_der)?;
    let dotted = sig_alg.oid.to_dotted();
    let params = sig_alg.parameters.as_deref();
    let mismatch = || SignatureError::KeyAlgorithmMismatch {
        alg: dotted.clone(),
    };
    let (alg, key_bytes): (&'static dyn signature::VerificationAlgorithm, &[u8]) =
        match dotted.as_str() {
            oid::ECDSA_WITH_SHA256 | oid::ECDSA_WITH_SHA384 => {
                if params.is_some() {
                    return Err(SignatureError::UnsupportedParameters(dotted));
                }
                let sha384 = dotted == oid::ECDSA_WITH_SHA384;
                match (&key, sha384) {
                    (PublicKey::EcP256(k), false) => (&signature::ECDSA_P256_SHA256_ASN1, k),
                    (PublicKey::EcP384(k), false) => (&signature::ECDSA_P384_SHA256_ASN1, k),
                    (PublicKey::EcP384(k), true) => (&signature::ECDSA_P384_SHA384_ASN1, k),
                    (PublicKey::EcP521(k), false) => (&signature::ECDSA_P521_SHA256_ASN1, k),
                    _ => return Err(mismatch()),
                }
            }
            oid::SHA256_WITH_RSA | oid::RSASSA_PSS => {
                // PKCS#1 v1.5 takes NULL parameters; PSS only the SHA-256 parameter
                // set the spec names. Absent parameters are accepted for both
                // because the reference's DA does not spell them out.
                let (alg, allowed): (&'static dyn signature::VerificationAlgorithm, _) =
                    if dotted == oid::RSASSA_PSS {
                        (&signature::RSA_PSS_2048_8192_SHA256, PSS_SHA256_PARAMS)
                    } else {
                        (&signature::RSA_PKCS1_2048_8192_SHA256, NULL_PARAMS)
                    };
                if params.is_some_and(|p| p != allowed) {
                    return Err(SignatureError::UnsupportedParameters(dotted));
                }
                let PublicKey::Rsa(k) = &key else {
                    return Err(mismatch());
                };
                (alg, k)
            }
            oid::ED25519 => {
                if params.is_some() {
                    return Err(SignatureError::UnsupportedParameters(dotted));
                }
                let PublicKey::Ed25519(k) = &key else {
                    return Err(mismatch());
                };
                if check(&signature::ED25519, k, tbs_der, signature_value) {
                    return Ok(VerifiedForm::Message);
                }
                if check(&signature::ED25519, k, &sha256(tbs_der), signature_value) {
                    return Ok(VerifiedForm::Sha256Digest);
                }
                return Err(SignatureError::BadSignature);
            }
            _ => return Err(SignatureError::UnsupportedAlgorithm(dotted)),
        };
    if check(alg, key_bytes, tbs_der, signature_value) {
        Ok(VerifiedForm::Message)
    } else {
        Err(SignatureError::BadSignature)
    }
}

/// How a principal key signs a DA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaSigningAlgorithm {
    /// ecdsa-with-SHA256 with a P-256 key.
    EcdsaP256Sha256,
    /// sha256WithRSA (PKCS#1 v1.5), parameters NULL.
    RsaPkcs1Sha256,
    /// RSASSA-PSS, SHA-256, MGF1-SHA-256, salt 32.
    RsaPssSha256,
    /// Ed25519 over the TBS (the default, standard form).
    Ed25519,
    /// Ed25519 over SHA-256(TBS): what the Go reference produces. For interop tests.
    Ed25519Sha256Digest,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("private key rejected: {0}")]
    KeyRejected(String),
    #[error("signing failed")]
    Failed,
}

/// Signs `tbs_der` with a PKCS#8 private key and returns the AlgorithmIdentifier
/// and signature to put in the DelegationAuthorization.
///
/// P-384 keys are not offered: aws-lc-rs only signs P-384 with SHA-384, and
/// the spec's algorithm is ecdsa-with-SHA256 (P-384 DAs still verify).
pub fn sign_delegation(
    tbs_der: &[u8],
    pkcs8_der: &[u8],
    alg: DaSigningAlgorithm,
) -> Result<(AlgorithmIdentifier, Vec<u8>), SignError> {
    let rng = SystemRandom::new();
    let rejected = |e: aws_lc_rs::error::KeyRejected| SignError::KeyRejected(e.to_string());
    match alg {
        DaSigningAlgorithm::EcdsaP256Sha256 => {
            let kp = signature::EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                pkcs8_der,
            )
            .map_err(rejected)?;
            let sig = kp.sign(&rng, tbs_der).map_err(|_| SignError::Failed)?;
            Ok((
                AlgorithmIdentifier::new(oid::named(oid::ECDSA_WITH_SHA256)),
                sig.as_ref().to_vec(),
            ))
        }
        DaSigningAlgorithm::RsaPkcs1Sha256 | DaSigningAlgorithm::RsaPssSha256 => {
            let kp = signature::RsaKeyPair::from_pkcs8(pkcs8_der).map_err(rejected)?;
            let mut sig = vec![0u8; kp.public_modulus_len()];
            let (padding, ai): (&'static dyn signature::RsaEncoding, AlgorithmIdentifier) =
                match alg {
                    DaSigningAlgorithm::RsaPkcs1Sha256 => (
                        &signature::RSA_PKCS1_SHA256,
                        AlgorithmIdentifier {
                            oid: oid::named(oid::SHA256_WITH_RSA),
                            parameters: Some(NULL_PARAMS.to_vec()),
                        },
                    ),
                    _ => (
                        &signature::RSA_PSS_SHA256,
                        AlgorithmIdentifier {
                            oid: oid::named(oid::RSASSA_PSS),
                            parameters: Some(PSS_SHA256_PARAMS.to_vec()),
                        },
                    ),
                };
            kp.sign(padding, &rng, tbs_der, &mut sig)
                .map_err(|_| SignError::Failed)?;
            Ok((ai, sig))
        }
        DaSigningAlgorithm::Ed25519 | DaSigningAlgorithm::Ed25519Sha256Digest => {
            let kp = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8_der)
                .map_err(rejected)?;
            let sig = if alg == DaSigningAlgorithm::Ed25519 {
                kp.sign(tbs_der)
            } else {
                kp.sign(&sha256(tbs_der))
            };
            Ok((
                AlgorithmIdentifier::new(oid::named(oid::ED25519)),
                sig.as_ref().to_vec(),
            ))
        }
    }
}

/// The DER SubjectPublicKeyInfo of a PKCS#8 private key (ECDSA P-256/P-384,
/// RSA or Ed25519), e.g. to compute a principal's keyHash.
pub fn spki_from_pkcs8(pkcs8_der: &[u8]) -> Result<Vec<u8>, SignError> {
    use aws_lc_rs::encoding::{AsDer, PublicKeyX509Der};
    use signature::KeyPair;
    let failed = |_| SignError::Failed;
    for alg in [
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
    ] {
        if let Ok(kp) = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8_der) {
            let der: PublicKeyX509Der = kp.public_key().as_der().map_err(failed)?;
            return Ok(der.as_ref().to_vec());
        }
    }
    if let Ok(kp) = signature::RsaKeyPair::from_pkcs8(pkcs8_der) {
        let der: PublicKeyX509Der = kp.public_key().as_der().map_err(failed)?;
        return Ok(der.as_ref().to_vec());
    }
    if let Ok(kp) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8_der) {
        let der: PublicKeyX509Der = kp.public_key().as_der().map_err(failed)?;
        return Ok(der.as_ref().to_vec());
    }
    Err(SignError::KeyRejected(
        "not an ECDSA P-256/P-384, RSA or Ed25519 PKCS#8 key".into(),
    ))
}

/// Hash algorithm named by an AlgorithmIdentifier; None (absent) is SHA-256.
pub fn hash_with(alg: Option<&AlgorithmIdentifier>, data: &[u8]) -> Option<Vec<u8>> {
    let which = match alg.map(|a| a.oid.to_dotted()) {
        None => &digest::SHA256,
        Some(d) if d == oid::SHA256 => &digest::SHA256,
        Some(d) if d == oid::SHA384 => &digest::SHA384,
        Some(d) if d == oid::SHA512 => &digest::SHA512,
        Some(_) => return None,
    };
    Some(digest::digest(which, data).as_ref().to_vec())
}

/// A fresh PKCS#8 private key for `alg` (tests, benchmarks, demo principals).
/// RSA keys are 2048-bit.
pub fn generate_signing_key(alg: DaSigningAlgorithm) -> Result<Vec<u8>, SignError> {
    use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
    let rng = SystemRandom::new();
    match alg {
        DaSigningAlgorithm::EcdsaP256Sha256 => signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &rng,
        )
        .map(|d| d.as_ref().to_vec())
        .map_err(|_| SignError::Failed),
        DaSigningAlgorithm::RsaPkcs1Sha256 | DaSigningAlgorithm::RsaPssSha256 => {
            let kp = signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
                .map_err(|_| SignError::Failed)?;
            let der: Pkcs8V1Der = kp.as_der().map_err(|_| SignError::Failed)?;
            Ok(der.as_ref().to_vec())
        }
        DaSigningAlgorithm::Ed25519 | DaSigningAlgorithm::Ed25519Sha256Digest => {
            signature::Ed25519KeyPair::generate_pkcs8(&rng)
                .map(|d| d.as_ref().to_vec())
                .map_err(|_| SignError::Failed)
        }
    }
}
