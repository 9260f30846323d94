//! DPoP proofs (RFC 9449): checking one as an authorization server does at
//! its token endpoint (§4.3), and making one as a client does.
//!
//! The checks here are the ones that need no state: the header (`typ`,
//! `alg`, a public `jwk`), the signature with that key, `htm`, `htu` and
//! the age of `iat`. Whether a proof's `jti` was seen before is the
//! caller's to decide.

use serde::{Deserialize, Serialize};

use super::jwk::{jwk_thumbprint, public_jwk, spki_from_jwk};
use super::jws::{self, JwsError, JwsHeader, JwsSigningKey};

pub const DPOP_TYP: &str = "dpop+jwt";
/// Longest `jti` accepted; RFC 9449 asks for 96 bits of randomness, any
/// honest client stays far below this.
pub const MAX_JTI_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DpopClaims {
    pub jti: String,
    pub htm: String,
    pub htu: String,
    pub iat: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ath: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

/// What the proof must match, and the clock it is judged by.
#[derive(Debug, Clone, Copy)]
pub struct DpopExpectation<'a> {
    /// The request's method (`POST` at a token endpoint).
    pub htm: &'a str,
    /// The request's URI; compared without query and fragment, after
    /// RFC 3986 normalisation of scheme, host and default port.
    pub htu: &'a str,
    pub now: i64,
    /// How old `iat` may be, in seconds.
    pub max_age_secs: i64,
    /// How far `iat` may lie in the future, in seconds (clock skew).
    pub skew_secs: i64,
}

/// A proof that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpopProof {
    /// The DER SubjectPublicKeyInfo of the proof's key.
    pub spki_der: Vec<u8>,
    /// Its RFC 7638 thumbprint: what a token bound to it carries as `cnf.jkt`.
    pub jkt: String,
    pub claims: DpopClaims,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpopError {
    #[error("DPoP proof: {0}")]
    Jws(#[from] JwsError),
    #[error("DPoP proof header has no jwk")]
    MissingJwk,
    #[error("DPoP proof jwk: {0}")]
    BadJwk(JwsError),
    #[error("DPoP proof claims: {0}")]
    Claims(String),
    #[error("DPoP proof htm {found:?} is not {expected:?}")]
    WrongMethod { expected: String, found: String },
    #[error("DPoP proof htu {found:?} is not this endpoint ({expected:?})")]
    WrongUri { expected: String, found: String },
    #[error("DPoP proof iat {iat} is outside the accepted window at {now}")]
    Stale { iat: i64, now: i64 },
}

/// Checks a DPoP proof (RFC 9449 §4.3, steps 2–9 and 11).
pub fn verify_dpop_proof(proof: &str, want: &DpopExpectation<'_>) -> Result<DpopProof, DpopError> {
    let parsed = jws::parse(proof, DPOP_TYP, false)?;
    let jwk = parsed.header.jwk.as_ref().ok_or(DpopError::MissingJwk)?;
    let spki_der = spki_from_jwk(jwk).map_err(DpopError::BadJwk)?;
    parsed.verify(&spki_der)?;
    let claims: DpopClaims =
        serde_json::from_slice(&parsed.payload).map_err(|e| DpopError::Claims(e.to_string()))?;
    if claims.jti.is_empty() || claims.jti.len() > MAX_JTI_LEN {
        return Err(DpopError::Claims(format!(
            "jti must be 1..={MAX_JTI_LEN} characters"
        )));
    }
    if claims.htm != want.htm {
        return Err(DpopError::WrongMethod {
            expected: want.htm.into(),
            found: claims.htm,
        });
    }
    let expected = normalize_htu(want.htu);
    if expected.is_none() || normalize_htu(&claims.htu) != expected {
        return Err(DpopError::WrongUri {
            expected: want.htu.into(),
            found: claims.htu,
        });
    }
    let earliest = want.now - want.max_age_secs - want.skew_secs;
    if claims.iat < earliest || claims.iat > want.now + want.skew_secs {
        return Err(DpopError::Stale {
            iat: claims.iat,
            now: want.now,
        });
    }
    let jkt = jwk_thumbprint(&spki_der).map_err(DpopError::BadJwk)?;
    Ok(DpopProof {
        spki_der,
        jkt,
        claims,
    })
}

/// `ath` (RFC 9449 §4.2): base64url of the SHA-256 of the access token's
/// ASCII, which a proof sent to a resource server carries.
pub fn access_token_hash(access_token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(crate::crypto::sha256(access_token.as_bytes()))
}

/// Makes a DPoP proof for `htm htu` at `iat` with `key`, whose public key is
/// `spki_der` (for a token endpoint: no `ath`).
pub fn sign_dpop_proof(
    key: &JwsSigningKey,
    spki_der: &[u8],
    htm: &str,
    htu: &str,
    iat: i64,
    jti: &str,
) -> Result<String, JwsError> {
    sign_proof(key, spki_der, htm, htu, iat, jti, None)
}

/// Makes a DPoP proof that presents `access_token` to a resource server:
/// [`sign_dpop_proof`] with `ath`.
pub fn sign_dpop_proof_for_token(
    key: &JwsSigningKey,
    spki_der: &[u8],
    htm: &str,
    htu: &str,
    iat: i64,
    jti: &str,
    access_token: &str,
) -> Result<String, JwsError> {
    let ath = access_token_hash(access_token);
    sign_proof(key, spki_der, htm, htu, iat, jti, Some(ath))
}

fn sign_proof(
    key: &JwsSigningKey,
    spki_der: &[u8],
    htm: &str,
    htu: &str,
    iat: i64,
    jti: &str,
    ath: Option<String>,
) -> Result<String, JwsError> {
    let header = JwsHeader {
        alg: key.alg.name().into(),
        kid: None,
        typ: Some(DPOP_TYP.into()),
        crit: None,
        x5c: None,
        jwk: Some(serde_json::Value::Object(public_jwk(
            spki_der, None, None, None,
        )?)),
    };
    let claims = DpopClaims {
        jti: jti.into(),
        htm: htm.into(),
        htu: htu.into(),
        iat,
        ath,
        nonce: None,
    };
    let value = serde_json::to_value(claims).map_err(|e| JwsError::Signing(e.to_string()))?;
    jws::sign_with(&header, &value, |input| jws::sign_bytes(input, key))
}

/// `scheme://authority/path` with scheme and host lower-cased, the scheme's
/// default port dropped, an empty path made `/`, and query and fragment
/// removed (RFC 9449 §4.3 step 9, RFC 3986 §6.2.2–6.2.3). None if the text
/// is not an absolute http(s) URI.
pub fn normalize_htu(uri: &str) -> Option<String> {
    let uri = uri.split(['#', '?']).next().unwrap_or_default();
    let (scheme, rest) = uri.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let authority = authority.to_ascii_lowercase();
    let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
    Some(format!("{scheme}://{authority}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::JwsAlgorithm;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{self, KeyPair};

    const URL: &str = "https://ca.example.com/oauth/token";

    fn key() -> (JwsSigningKey, Vec<u8>) {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        let kp = signature::EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
        )
        .unwrap();
        let spki = kp.public_key().as_der().unwrap().as_ref().to_vec();
        let key = JwsSigningKey {
            alg: JwsAlgorithm::ES256,
            pkcs8_der: pkcs8.as_ref().to_vec(),
            kid: None,
        };
        (key, spki)
    }

    fn want(now: i64) -> DpopExpectation<'static> {
        DpopExpectation {
            htm: "POST",
            htu: URL,
            now,
            max_age_secs: 60,
            skew_secs: 5,
        }
    }

    #[test]
    fn a_proof_verifies_and_names_its_key() {
        let (k, spki) = key();
        let proof = sign_dpop_proof(&k, &spki, "POST", URL, 1000, "j1").unwrap();
        let p = verify_dpop_proof(&proof, &want(1010)).unwrap();
        assert_eq!(p.spki_der, spki);
        assert_eq!(p.jkt, jwk_thumbprint(&spki).unwrap());
        // Default port, case and a query do not change the endpoint.
        let proof = sign_dpop_proof(
            &k,
            &spki,
            "POST",
            "HTTPS://CA.example.com:443/oauth/token?x=1",
            1000,
            "j2",
        )
        .unwrap();
        assert!(verify_dpop_proof(&proof, &want(1000)).is_ok());
    }

    #[test]
    fn rejects_a_proof_for_another_method_or_endpoint() {
        let (k, spki) = key();
        let get = sign_dpop_proof(&k, &spki, "GET", URL, 1000, "j").unwrap();
        assert!(matches!(
            verify_dpop_proof(&get, &want(1000)),
            Err(DpopError::WrongMethod { .. })
        ));
        let other =
            sign_dpop_proof(&k, &spki, "POST", "https://ca.example.com/other", 1000, "j").unwrap();
        assert!(matches!(
            verify_dpop_proof(&other, &want(1000)),
            Err(DpopError::WrongUri { .. })
        ));
    }

    #[test]
    fn rejects_a_proof_too_old_or_from_the_future() {
        let (k, spki) = key();
        let proof = sign_dpop_proof(&k, &spki, "POST", URL, 1000, "j").unwrap();
        assert!(matches!(
            verify_dpop_proof(&proof, &want(1066)),
            Err(DpopError::Stale { .. })
        ));
        assert!(matches!(
            verify_dpop_proof(&proof, &want(994)),
            Err(DpopError::Stale { .. })
        ));
    }

    #[test]
    fn rejects_a_proof_signed_by_another_key_than_its_jwk() {
        let (k, spki) = key();
        let (_, other_spki) = key();
        let proof = sign_dpop_proof(&k, &other_spki, "POST", URL, 1000, "j").unwrap();
        assert!(matches!(
            verify_dpop_proof(&proof, &want(1000)),
            Err(DpopError::Jws(JwsError::BadSignature))
        ));
        let _ = spki;
    }

    #[test]
    fn rejects_a_proof_without_jwk_or_of_another_type() {
        let (k, _) = key();
        let header = JwsHeader {
            alg: "ES256".into(),
            kid: None,
            typ: Some(DPOP_TYP.into()),
            crit: None,
            x5c: None,
            jwk: None,
        };
        let claims = serde_json::json!({"jti":"j","htm":"POST","htu":URL,"iat":1000});
        let no_jwk = jws::sign_with(&header, &claims, |i| jws::sign_bytes(i, &k)).unwrap();
        assert_eq!(
            verify_dpop_proof(&no_jwk, &want(1000)),
            Err(DpopError::MissingJwk)
        );
        let jwt = jws::sign(&claims, "JWT", &k).unwrap();
        assert!(matches!(
            verify_dpop_proof(&jwt, &want(1000)),
            Err(DpopError::Jws(JwsError::WrongType { .. }))
        ));
    }

    #[test]
    fn htu_normalisation() {
        assert_eq!(
            normalize_htu("HTTP://Example.COM:80").as_deref(),
            Some("http://example.com/")
        );
        assert_eq!(
            normalize_htu("https://h:8443/a#f").as_deref(),
            Some("https://h:8443/a")
        );
        assert_eq!(normalize_htu("ftp://h/"), None);
        assert_eq!(normalize_htu("https://u@h/"), None);
        assert_eq!(normalize_htu("/oauth/token"), None);
    }
}
