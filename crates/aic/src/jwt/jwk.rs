//! Public JWKs (RFC 7517/7518) to and from DER SubjectPublicKeyInfo, the
//! RFC 7638 thumbprint, and JWK Sets.
//!
//! Only public keys: a JWK carrying a private member (`d`, `p`, `q`, …) is
//! refused, so a key set or a DPoP header can never smuggle a secret in or
//! be mistaken for one.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::jws::JwsError;
use crate::crypto::{PublicKey, sha256};
use crate::der::{Oid, Reader, TAG_BIT_STRING, TAG_INTEGER, TAG_NULL, TAG_SEQUENCE, Writer};
use crate::oid;

/// Members that only a private JWK has (RFC 7518 §6.2.2, §6.3.2, RFC 8037).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// The public members of a JWK, in the form the thumbprint hashes.
enum PublicJwk {
    Ec {
        crv: &'static str,
        x: Vec<u8>,
        y: Vec<u8>,
    },
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    Okp {
        x: Vec<u8>,
    },
}

impl PublicJwk {
    fn from_spki(spki_der: &[u8]) -> Result<PublicJwk, JwsError> {
        let key = PublicKey::from_spki(spki_der).map_err(|e| JwsError::Key(e.to_string()))?;
        Ok(match &key {
            PublicKey::EcP256(p) | PublicKey::EcP384(p) | PublicKey::EcP521(p) => {
                let (crv, n) = match key {
                    PublicKey::EcP256(_) => ("P-256", 32),
                    PublicKey::EcP384(_) => ("P-384", 48),
                    _ => ("P-521", 66),
                };
                if p.len() != 1 + 2 * n || p[0] != 0x04 {
                    return Err(JwsError::Key("EC point must be uncompressed".into()));
                }
                PublicJwk::Ec {
                    crv,
                    x: p[1..1 + n].to_vec(),
                    y: p[1 + n..].to_vec(),
                }
            }
            PublicKey::Rsa(der) => {
                let (n, e) = rsa_components(der)
                    .ok_or_else(|| JwsError::Key("malformed RSAPublicKey".into()))?;
                PublicJwk::Rsa {
                    n: n.to_vec(),
                    e: e.to_vec(),
                }
            }
            PublicKey::Ed25519(k) => PublicJwk::Okp { x: k.to_vec() },
        })
    }

    /// The required members in lexicographic order, no whitespace
    /// (RFC 7638 §3.2–3.3): both the thumbprint input and the JWK itself.
    fn canonical_json(&self) -> String {
        let e = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        match self {
            PublicJwk::Ec { crv, x, y } => format!(
                r#"{{"crv":"{crv}","kty":"EC","x":"{}","y":"{}"}}"#,
                e(x),
                e(y)
            ),
            PublicJwk::Rsa { n, e: exp } => {
                format!(r#"{{"e":"{}","kty":"RSA","n":"{}"}}"#, e(exp), e(n))
            }
            PublicJwk::Okp { x } => format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, e(x)),
        }
    }
}

/// RFC 7638 JWK thumbprint (SHA-256, base64url) of a DER SubjectPublicKeyInfo.
pub fn jwk_thumbprint(spki_der: &[u8]) -> Result<String, JwsError> {
    let canonical = PublicJwk::from_spki(spki_der)?.canonical_json();
    Ok(URL_SAFE_NO_PAD.encode(sha256(canonical.as_bytes())))
}

/// The public JWK of a DER SubjectPublicKeyInfo: its required members, plus
/// `kid`, `alg` and `use` when given.
pub fn public_jwk(
    spki_der: &[u8],
    kid: Option<&str>,
    alg: Option<&str>,
    use_: Option<&str>,
) -> Result<Map<String, Value>, JwsError> {
    let canonical = PublicJwk::from_spki(spki_der)?.canonical_json();
    let mut map: Map<String, Value> =
        serde_json::from_str(&canonical).map_err(|e| JwsError::Json("JWK", e.to_string()))?;
    for (name, value) in [("kid", kid), ("alg", alg), ("use", use_)] {
        if let Some(v) = value {
            map.insert(name.into(), Value::String(v.into()));
        }
    }
    Ok(map)
}

fn member<'a>(jwk: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, JwsError> {
    jwk.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| JwsError::Key(format!("JWK member {name:?} is missing or not a string")))
}

fn b64_member(jwk: &Map<String, Value>, name: &'static str) -> Result<Vec<u8>, JwsError> {
    URL_SAFE_NO_PAD
        .decode(member(jwk, name)?)
        .map_err(|_| JwsError::Key(format!("JWK member {name:?} is not base64url")))
}

/// The DER SubjectPublicKeyInfo of a public JWK (EC P-256/384/521, RSA,
/// Ed25519). A JWK with a private member is refused.
pub fn spki_from_jwk(jwk: &Value) -> Result<Vec<u8>, JwsError> {
    let jwk = jwk
        .as_object()
        .ok_or_else(|| JwsError::Key("JWK is not a JSON object".into()))?;
    if let Some(private) = PRIVATE_MEMBERS.iter().find(|m| jwk.contains_key(**m)) {
        return Err(JwsError::Key(format!(
            "JWK carries the private member {private:?}; only public keys are accepted"
        )));
    }
    let oid = |dotted: &str| Oid::parse(dotted).ok_or_else(|| JwsError::Key("OID".into()));
    let mut w = Writer::new();
    match member(jwk, "kty")? {
        "EC" => {
            let (curve, n) = match member(jwk, "crv")? {
                "P-256" => (oid::SECP256R1, 32),
                "P-384" => (oid::SECP384R1, 48),
                "P-521" => (oid::SECP521R1, 66),
                other => return Err(JwsError::Key(format!("unsupported EC curve {other:?}"))),
            };
            let (x, y) = (b64_member(jwk, "x")?, b64_member(jwk, "y")?);
            if x.len() != n || y.len() != n {
                return Err(JwsError::Key(format!(
                    "EC coordinates must be {n} bytes each"
                )));
            }
            let mut bits = Vec::with_capacity(2 + 2 * n);
            bits.extend_from_slice(&[0x00, 0x04]);
            bits.extend_from_slice(&x);
            bits.extend_from_slice(&y);
            let (alg_oid, curve_oid) = (oid(oid::EC_PUBLIC_KEY)?, oid(curve)?);
            w.sequence(|s| {
                s.sequence(|a| {
                    a.oid(&alg_oid);
                    a.oid(&curve_oid);
                });
                s.tlv(TAG_BIT_STRING, &bits);
            });
        }
        "RSA" => {
            let (n, e) = (b64_member(jwk, "n")?, b64_member(jwk, "e")?);
            if n.is_empty() || e.is_empty() {
                return Err(JwsError::Key("RSA n and e must not be empty".into()));
            }
            let mut rsa = Writer::new();
            rsa.sequence(|s| {
                s.tlv(TAG_INTEGER, &unsigned_integer(&n));
                s.tlv(TAG_INTEGER, &unsigned_integer(&e));
            });
            let mut bits = vec![0x00];
            bits.extend_from_slice(&rsa.into_bytes());
            let alg_oid = oid(oid::RSA_ENCRYPTION)?;
            w.sequence(|s| {
                s.sequence(|a| {
                    a.oid(&alg_oid);
                    a.tlv(TAG_NULL, &[]);
                });
                s.tlv(TAG_BIT_STRING, &bits);
            });
        }
        "OKP" => {
            if member(jwk, "crv")? != "Ed25519" {
                return Err(JwsError::Key(
                    "only the Ed25519 OKP curve is supported".into(),
                ));
            }
            let x = b64_member(jwk, "x")?;
            if x.len() != 32 {
                return Err(JwsError::Key("Ed25519 x must be 32 bytes".into()));
            }
            let mut bits = vec![0x00];
            bits.extend_from_slice(&x);
            let alg_oid = oid(oid::ED25519)?;
            w.sequence(|s| {
                s.sequence(|a| a.oid(&alg_oid));
                s.tlv(TAG_BIT_STRING, &bits);
            });
        }
        other => return Err(JwsError::Key(format!("unsupported JWK kty {other:?}"))),
    }
    let spki = w.into_bytes();
    // The key must also parse as this crate reads keys (e.g. a point on the curve
    // is checked at verification; the structure is checked here).
    PublicKey::from_spki(&spki).map_err(|e| JwsError::Key(e.to_string()))?;
    Ok(spki)
}

/// A minimal DER INTEGER content for an unsigned big-endian value.
fn unsigned_integer(b: &[u8]) -> Vec<u8> {
    let b = strip_leading_zeros(b);
    let mut out = Vec::with_capacity(b.len() + 1);
    if b.first().is_some_and(|x| x & 0x80 != 0) {
        out.push(0);
    }
    out.extend_from_slice(b);
    out
}

fn rsa_components(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut r = Reader::new(der);
    let mut s = r.read_nested(TAG_SEQUENCE, "RSAPublicKey").ok()?;
    let n = s.read(TAG_INTEGER, "RSAPublicKey.modulus").ok()?;
    let e = s.read(TAG_INTEGER, "RSAPublicKey.publicExponent").ok()?;
    Some((strip_leading_zeros(n), strip_leading_zeros(e)))
}

/// JWK integers are unsigned big-endian without the DER sign byte.
fn strip_leading_zeros(b: &[u8]) -> &[u8] {
    let skip = b.iter().take_while(|x| **x == 0).count();
    &b[skip.min(b.len().saturating_sub(1))..]
}

/// A JWK Set (RFC 7517 §5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JwkSet {
    pub keys: Vec<Value>,
}

impl JwkSet {
    pub fn parse(json: &[u8]) -> Result<JwkSet, JwsError> {
        serde_json::from_slice(json).map_err(|e| JwsError::Json("JWK Set", e.to_string()))
    }

    /// The DER SPKI of the key named `kid`. Several keys with that `kid`, or
    /// none, is an error: a verifier must not guess.
    pub fn spki_for_kid(&self, kid: &str) -> Result<Vec<u8>, JwsError> {
        let mut found = self
            .keys
            .iter()
            .filter(|k| k.get("kid").and_then(Value::as_str) == Some(kid));
        match (found.next(), found.next()) {
            (Some(k), None) => spki_from_jwk(k),
            (None, _) => Err(JwsError::Key(format!(
                "no key with kid {kid:?} in the JWK Set"
            ))),
            (Some(_), Some(_)) => Err(JwsError::Key(format!(
                "several keys with kid {kid:?} in the JWK Set"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{self, KeyPair};

    fn ec_spki(alg: &'static signature::EcdsaSigningAlgorithm) -> Vec<u8> {
        let kp = signature::EcdsaKeyPair::generate(alg).unwrap();
        kp.public_key().as_der().unwrap().as_ref().to_vec()
    }

    #[test]
    fn ec_and_ed25519_keys_round_trip_through_a_jwk() {
        let ed = signature::Ed25519KeyPair::generate().unwrap();
        let ed_spki = ed.public_key().as_der().unwrap().as_ref().to_vec();
        for spki in [
            ec_spki(&signature::ECDSA_P256_SHA256_FIXED_SIGNING),
            ec_spki(&signature::ECDSA_P384_SHA384_FIXED_SIGNING),
            ec_spki(&signature::ECDSA_P521_SHA512_FIXED_SIGNING),
            ed_spki,
        ] {
            let jwk = public_jwk(&spki, Some("k1"), None, Some("sig")).unwrap();
            assert_eq!(jwk["kid"], "k1");
            assert_eq!(spki_from_jwk(&Value::Object(jwk)).unwrap(), spki);
        }
    }

    #[test]
    fn rsa_keys_round_trip_through_a_jwk() {
        // An RSA-2048 SPKI: modulus with the high bit set (needs the sign byte back).
        let kp = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let spki = kp.public_key().as_der().unwrap().as_ref().to_vec();
        let jwk = public_jwk(&spki, None, Some("RS256"), None).unwrap();
        assert_eq!(spki_from_jwk(&Value::Object(jwk)).unwrap(), spki);
    }

    #[test]
    fn rejects_a_jwk_with_a_private_member() {
        let spki = ec_spki(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
        let mut jwk = public_jwk(&spki, None, None, None).unwrap();
        jwk.insert("d".into(), Value::String("AAAA".into()));
        let err = spki_from_jwk(&Value::Object(jwk)).unwrap_err();
        assert!(err.to_string().contains("private member \"d\""), "{err}");
    }

    #[test]
    fn rejects_a_jwk_with_short_coordinates_or_an_unknown_type() {
        let short = serde_json::json!({"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"});
        assert!(spki_from_jwk(&short).is_err());
        let oct = serde_json::json!({"kty":"oct","k2":"AAAA"});
        assert!(spki_from_jwk(&oct).unwrap_err().to_string().contains("kty"));
    }

    #[test]
    fn a_key_set_finds_exactly_one_key_per_kid() {
        let spki = ec_spki(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
        let a = Value::Object(public_jwk(&spki, Some("a"), None, None).unwrap());
        let set = JwkSet {
            keys: vec![a.clone()],
        };
        assert_eq!(set.spki_for_kid("a").unwrap(), spki);
        assert!(set.spki_for_kid("b").is_err());
        let twice = JwkSet {
            keys: vec![a.clone(), a],
        };
        assert!(
            twice
                .spki_for_kid("a")
                .unwrap_err()
                .to_string()
                .contains("several")
        );
    }
}
