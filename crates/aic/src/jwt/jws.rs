//! A deliberately small JWS (compact serialization) over aws-lc-rs.
//!
//! Written instead of using a general JWT crate so that every acceptance rule
//! is visible here: the algorithm allow-list (no `none`, no HMAC), the key
//! type must match `alg`, `typ` is checked exactly, unknown `crit` is
//! refused, and base64url must be canonical and unpadded.

use aws_lc_rs::{rand::SystemRandom, signature};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use crate::crypto::PublicKey;

/// The algorithms draft-wei-aic-jwt-02 allows. `none` and `HS*` have no variant,
/// so they cannot be selected by a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JwsAlgorithm {
    ES256,
    ES384,
    ES512,
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    EdDSA,
}

impl JwsAlgorithm {
    pub fn from_name(name: &str) -> Option<JwsAlgorithm> {
        use JwsAlgorithm::*;
        Some(match name {
            "ES256" => ES256,
            "ES384" => ES384,
            "ES512" => ES512,
            "RS256" => RS256,
            "RS384" => RS384,
            "RS512" => RS512,
            "PS256" => PS256,
            "PS384" => PS384,
            "PS512" => PS512,
            "EdDSA" => EdDSA,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use JwsAlgorithm::*;
        match self {
            ES256 => "ES256",
            ES384 => "ES384",
            ES512 => "ES512",
            RS256 => "RS256",
            RS384 => "RS384",
            RS512 => "RS512",
            PS256 => "PS256",
            PS384 => "PS384",
            PS512 => "PS512",
            EdDSA => "EdDSA",
        }
    }

    /// The verification algorithm for this `alg` and key, or None if the key
    /// type does not fit (e.g. ES256 with a P-384 key, RS256 with an EC key).
    fn verifier(
        self,
        key: &PublicKey,
    ) -> Option<(&'static dyn signature::VerificationAlgorithm, &[u8])> {
        use JwsAlgorithm::*;
        Some(match (self, key) {
            (ES256, PublicKey::EcP256(k)) => (&signature::ECDSA_P256_SHA256_FIXED, k),
            (ES384, PublicKey::EcP384(k)) => (&signature::ECDSA_P384_SHA384_FIXED, k),
            (ES512, PublicKey::EcP521(k)) => (&signature::ECDSA_P521_SHA512_FIXED, k),
            (RS256, PublicKey::Rsa(k)) => (&signature::RSA_PKCS1_2048_8192_SHA256, k),
            (RS384, PublicKey::Rsa(k)) => (&signature::RSA_PKCS1_2048_8192_SHA384, k),
            (RS512, PublicKey::Rsa(k)) => (&signature::RSA_PKCS1_2048_8192_SHA512, k),
            (PS256, PublicKey::Rsa(k)) => (&signature::RSA_PSS_2048_8192_SHA256, k),
            (PS384, PublicKey::Rsa(k)) => (&signature::RSA_PSS_2048_8192_SHA384, k),
            (PS512, PublicKey::Rsa(k)) => (&signature::RSA_PSS_2048_8192_SHA512, k),
            (EdDSA, PublicKey::Ed25519(k)) => (&signature::ED25519, &k[..]),
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    #[error("token is not three base64url segments")]
    Format,
    #[error("{0} is not canonical unpadded base64url")]
    Base64(&'static str),
    #[error("{0} is not a JSON object: {1}")]
    Json(&'static str, String),
    #[error("algorithm {0:?} is not allowed")]
    AlgorithmNotAllowed(String),
    #[error("header typ {found:?}, expected {expected:?}")]
    WrongType {
        expected: &'static str,
        found: Option<String>,
    },
    #[error("header kid is required")]
    MissingKid,
    #[error("header crit names extensions this verifier does not understand")]
    UnsupportedCrit,
    #[error("key does not fit algorithm {0}")]
    KeyAlgorithmMismatch(&'static str),
    #[error("public key: {0}")]
    Key(String),
    #[error("signature does not verify")]
    BadSignature,
    #[error("signing failed: {0}")]
    Signing(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwsHeader {
    pub alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crit: Option<Vec<String>>,
    /// The signer's certificate chain, standard base64 DER, leaf first (RFC 7515 §4.1.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x5c: Option<Vec<String>>,
    /// The signer's public key (RFC 7515 §4.1.3), as a DPoP proof carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwk: Option<serde_json::Value>,
}

/// A parsed but not yet verified compact JWS.
#[derive(Debug, Clone)]
pub struct UnverifiedJws<'t> {
    pub header: JwsHeader,
    pub alg: JwsAlgorithm,
    pub payload: Vec<u8>,
    signing_input: &'t str,
    signature: Vec<u8>,
}

fn b64(segment: &str, what: &'static str) -> Result<Vec<u8>, JwsError> {
    URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| JwsError::Base64(what))
}

/// Parses a compact JWS and checks the header rules that need no key.
pub fn parse<'t>(
    token: &'t str,
    expected_typ: &'static str,
    require_kid: bool,
) -> Result<UnverifiedJws<'t>, JwsError> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwsError::Format);
    };
    let header_bytes = b64(h, "header")?;
    let header: JwsHeader = serde_json::from_slice(&header_bytes)
        .map_err(|e| JwsError::Json("header", e.to_string()))?;
    let alg = JwsAlgorithm::from_name(&header.alg)
        .ok_or_else(|| JwsError::AlgorithmNotAllowed(header.alg.clone()))?;
    if header.typ.as_deref() != Some(expected_typ) {
        return Err(JwsError::WrongType {
            expected: expected_typ,
            found: header.typ.clone(),
        });
    }
    if require_kid && header.kid.as_deref().is_none_or(str::is_empty) {
        return Err(JwsError::MissingKid);
    }
    if header.crit.is_some() {
        return Err(JwsError::UnsupportedCrit);
    }
    let payload = b64(p, "payload")?;
    let signature = b64(s, "signature")?;
    Ok(UnverifiedJws {
        header,
        alg,
        payload,
        signing_input: &token[..h.len() + 1 + p.len()],
        signature,
    })
}

impl UnverifiedJws<'_> {
    /// Checks the signature with the given DER SubjectPublicKeyInfo.
    pub fn verify(&self, spki_der: &[u8]) -> Result<(), JwsError> {
        let key = PublicKey::from_spki(spki_der).map_err(|e| JwsError::Key(e.to_string()))?;
        let (alg, raw) = self
            .alg
            .verifier(&key)
            .ok_or(JwsError::KeyAlgorithmMismatch(self.alg.name()))?;
        signature::UnparsedPublicKey::new(alg, raw)
            .verify(self.signing_input.as_bytes(), &self.signature)
            .map_err(|_| JwsError::BadSignature)
    }
}

/// A private key for issuing tokens.
#[derive(Clone)]
pub struct JwsSigningKey {
    pub alg: JwsAlgorithm,
    pub pkcs8_der: Vec<u8>,
    pub kid: Option<String>,
}

impl std::fmt::Debug for JwsSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwsSigningKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl JwsSigningKey {
    /// The JWS signature over `signing_input` (`base64url(header).base64url(payload)`).
    pub fn sign_input(&self, signing_input: &[u8]) -> Result<Vec<u8>, JwsError> {
        sign_bytes(signing_input, self)
    }
}

/// Signs `claims` as a compact JWS with header `{alg, kid, typ}`.
pub fn sign(
    claims: &serde_json::Value,
    typ: &str,
    key: &JwsSigningKey,
) -> Result<String, JwsError> {
    let header = JwsHeader {
        alg: key.alg.name().into(),
        kid: key.kid.clone(),
        typ: Some(typ.into()),
        crit: None,
        x5c: None,
        jwk: None,
    };
    sign_with(&header, claims, |input| sign_bytes(input, key))
}

/// Signs `claims` under `header` with a signer held elsewhere (an HSM, a key
/// parsed once): `signer` gets the JWS signing input and returns the
/// signature in JWS form (for ECDSA, the fixed-size `r ‖ s`).
pub fn sign_with(
    header: &JwsHeader,
    claims: &serde_json::Value,
    signer: impl FnOnce(&[u8]) -> Result<Vec<u8>, JwsError>,
) -> Result<String, JwsError> {
    let h = serde_json::to_vec(header).map_err(|e| JwsError::Signing(e.to_string()))?;
    let p = serde_json::to_vec(claims).map_err(|e| JwsError::Signing(e.to_string()))?;
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(h),
        URL_SAFE_NO_PAD.encode(p)
    );
    let sig = signer(input.as_bytes())?;
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

pub(crate) fn sign_bytes(msg: &[u8], key: &JwsSigningKey) -> Result<Vec<u8>, JwsError> {
    use JwsAlgorithm::*;
    let rng = SystemRandom::new();
    let rejected = |e: aws_lc_rs::error::KeyRejected| JwsError::Signing(e.to_string());
    let failed = |_| JwsError::Signing("signature operation failed".into());
    match key.alg {
        ES256 | ES384 | ES512 => {
            let alg = match key.alg {
                ES256 => &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                ES384 => &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
                _ => &signature::ECDSA_P521_SHA512_FIXED_SIGNING,
            };
            let kp = signature::EcdsaKeyPair::from_pkcs8(alg, &key.pkcs8_der).map_err(rejected)?;
            Ok(kp.sign(&rng, msg).map_err(failed)?.as_ref().to_vec())
        }
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => {
            let padding: &'static dyn signature::RsaEncoding = match key.alg {
                RS256 => &signature::RSA_PKCS1_SHA256,
                RS384 => &signature::RSA_PKCS1_SHA384,
                RS512 => &signature::RSA_PKCS1_SHA512,
                PS256 => &signature::RSA_PSS_SHA256,
                PS384 => &signature::RSA_PSS_SHA384,
                _ => &signature::RSA_PSS_SHA512,
            };
            let kp = signature::RsaKeyPair::from_pkcs8(&key.pkcs8_der).map_err(rejected)?;
            let mut sig = vec![0u8; kp.public_modulus_len()];
            kp.sign(padding, &rng, msg, &mut sig).map_err(failed)?;
            Ok(sig)
        }
        EdDSA => {
            let kp = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&key.pkcs8_der)
                .map_err(rejected)?;
            Ok(kp.sign(msg).as_ref().to_vec())
        }
    }
}
