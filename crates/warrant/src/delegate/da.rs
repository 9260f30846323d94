//! Building and signing one DA with a person's key: the one place both
//! `warrant delegate` (prints it) and `warrant delegate serve` (answers an
//! agent with it) make a DA, as a `POST /api/v1/certs` body or as a DA JWT
//! for `POST /oauth/token`.

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::path::Path;

/// The person's signing material, loaded once; the key never leaves the process.
pub struct Principal {
    key_der: Vec<u8>,
    cert_pem: String,
    cert_der: Vec<u8>,
    uid_text: String,
    uid: aic::PrincipalUid,
    algo: Algo,
}

/// The principal key's signature algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    EcdsaP256,
    Rsa,
    RsaPss,
    Ed25519,
}

impl Algo {
    pub fn parse(s: &str) -> Result<Algo> {
        Ok(match s {
            "ecdsa-p256" => Algo::EcdsaP256,
            "rsa" => Algo::Rsa,
            "rsa-pss" => Algo::RsaPss,
            "ed25519" => Algo::Ed25519,
            other => bail!("--algo {other:?}: expected ecdsa-p256, rsa, rsa-pss or ed25519"),
        })
    }

    fn da(self) -> (aic::DaSigningAlgorithm, &'static str) {
        match self {
            Algo::EcdsaP256 => (aic::DaSigningAlgorithm::EcdsaP256Sha256, "ECDSA-SHA256"),
            Algo::Rsa => (aic::DaSigningAlgorithm::RsaPkcs1Sha256, "RSA-SHA256"),
            Algo::RsaPss => (aic::DaSigningAlgorithm::RsaPssSha256, "RSA-PSS-SHA256"),
            Algo::Ed25519 => (aic::DaSigningAlgorithm::Ed25519, "ED25519"),
        }
    }

    fn jws(self) -> aic::jwt::JwsAlgorithm {
        use aic::jwt::JwsAlgorithm;
        match self {
            Algo::EcdsaP256 => JwsAlgorithm::ES256,
            Algo::Rsa => JwsAlgorithm::RS256,
            Algo::RsaPss => JwsAlgorithm::PS256,
            Algo::Ed25519 => JwsAlgorithm::EdDSA,
        }
    }
}

/// One capability, `scheme:id`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Cap {
    pub scheme: String,
    pub id: String,
}

impl Cap {
    pub fn parse(s: &str) -> Option<Cap> {
        let (scheme, id) = s.split_once(':')?;
        if scheme.is_empty() || id.is_empty() {
            return None;
        }
        Some(Cap {
            scheme: scheme.into(),
            id: id.into(),
        })
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.scheme, self.id)
    }
}

/// What one DA says, apart from the principal, the time and the nonce.
pub struct DaParams {
    pub agent_id: String,
    /// Agent certificate subject (empty: the server's first gateway role).
    pub subject: String,
    pub capabilities: Vec<Cap>,
    /// 0 authorized, 1 representative.
    pub mode: i64,
    pub reason_code: String,
    pub reason_description: String,
    /// Requested lifetime of the delegation, seconds.
    pub lifetime: i64,
    /// The agent's CSR: makes a v2 DA bound to its key, sent as `csr_pem`.
    pub csr_pem: Option<String>,
}

impl DaParams {
    /// The agent's SubjectPublicKeyInfo DER, from the CSR (its signature checked).
    pub fn agent_spki(&self) -> Result<Option<Vec<u8>>> {
        match &self.csr_pem {
            Some(pem) => Ok(Some(warrant_ca::verify_csr(pem).context("csr")?.spki_der)),
            None => Ok(None),
        }
    }
}

/// A fresh 32-byte nonce from the CSPRNG.
pub fn fresh_nonce() -> Result<[u8; 32]> {
    let mut nonce = [0u8; 32];
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| anyhow!("CSPRNG failure"))?;
    Ok(nonce)
}

impl Principal {
    pub fn load(key: &Path, cert: &Path, uid: &str, algo: &str) -> Result<Principal> {
        let key_pem =
            std::fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
        let key_der = aic::cert::pem_decode(&key_pem, "PRIVATE KEY")
            .context("--principal-key: expected a PKCS#8 PEM (BEGIN PRIVATE KEY)")?;
        let cert_pem =
            std::fs::read_to_string(cert).with_context(|| format!("reading {}", cert.display()))?;
        let cert_der =
            aic::cert::pem_decode(&cert_pem, "CERTIFICATE").context("--principal-cert")?;
        Ok(Principal {
            key_der,
            cert_pem,
            cert_der,
            uid_text: uid.to_string(),
            uid: aic::PrincipalUid::parse(uid).context("--principal-uid")?,
            algo: Algo::parse(algo)?,
        })
    }

    pub fn uid(&self) -> &aic::PrincipalUid {
        &self.uid
    }

    /// The whole `POST /api/v1/certs` body for an agent-proxy certificate.
    pub fn cert_request(
        &self,
        p: &DaParams,
        timestamp: i64,
        nonce: [u8; 32],
    ) -> Result<serde_json::Value> {
        let (alg, alg_name) = self.algo.da();
        let tbs = aic::DelegationRequest {
            agent_id: p.agent_id.clone(),
            principal_uid: self.uid.clone(),
            reason: aic::Reason::new(&p.reason_code, &p.reason_description),
            capabilities: p
                .capabilities
                .iter()
                .map(|c| aic::Capability::new(&c.scheme, &c.id, None))
                .collect(),
            delegation_mode: aic::DelegationMode::from_i64(p.mode, "mode")?,
            constraints: Vec::new(),
            requested_lifetime: p.lifetime,
            timestamp,
            nonce,
            agent_spki_der: p.agent_spki()?,
        }
        .tbs()?;
        let (_, signature) = aic::sign_delegation(&tbs.to_der(), &self.key_der, alg)?;
        let caps_json: Vec<_> = p
            .capabilities
            .iter()
            .map(|c| serde_json::json!({"scheme_id": c.scheme, "capability_id": c.id}))
            .collect();
        let mut body = serde_json::json!({
            "profile": "agent-proxy",
            "cn": p.agent_id,
            "agent_id": p.agent_id,
            "principal_uid": self.uid_text,
            "delegation_mode": p.mode,
            "capabilities": caps_json,
            "user_auth_signature": STANDARD.encode(signature),
            "user_auth_signature_algo": alg_name,
            "user_auth_nonce": STANDARD.encode(nonce),
            "user_auth_lifetime": p.lifetime,
            "user_auth_timestamp": aic::time::format_rfc3339(timestamp),
            "user_auth_reason_code": p.reason_code,
            "user_auth_reason_description": p.reason_description,
            "user_cert_pem": self.cert_pem,
            "agent_key_binding": p.csr_pem.is_some(),
        });
        if !p.subject.is_empty() {
            body["subject"] = serde_json::Value::String(p.subject.clone());
        }
        if let Some(csr) = &p.csr_pem {
            body["csr_pem"] = serde_json::Value::String(csr.clone());
        }
        Ok(body)
    }

    /// The DA as a JWT (draft-wei-aic-jwt-02) with the principal certificate
    /// as `x5c`; an agent key binds by its RFC 7638 thumbprint (`ver` 3), so
    /// the token is bound to that key without a DPoP proof.
    pub fn da_jwt(
        &self,
        p: &DaParams,
        audience: Option<&str>,
        ts: i64,
        nonce: [u8; 32],
    ) -> Result<String> {
        use aic::jwt::{CapabilityClaim, JwsHeader, JwsSigningKey, KeyHashAlg};
        let alg = self.algo.jws();
        let spki = aic::cert::CertificateView::from_der(&self.cert_der)
            .context("--principal-cert")?
            .subject_spki_der;
        let agent_spki = p.agent_spki()?;
        let request = aic::jwt::DaJwtRequest {
            principal: self.uid.clone(),
            principal_spki_der: spki,
            key_hash_alg: KeyHashAlg::Sha256,
            agent_id: p.agent_id.clone(),
            audience: audience.map(str::to_string).into_iter().collect(),
            reason: aic::jwt::ReasonClaim {
                code: p.reason_code.clone(),
                desc: p.reason_description.clone(),
            },
            capabilities: p
                .capabilities
                .iter()
                .map(|c| CapabilityClaim {
                    scheme: c.scheme.clone(),
                    id: c.id.clone(),
                    params: None,
                })
                .collect(),
            delegation_mode: aic::DelegationMode::from_i64(p.mode, "mode")?,
            constraints: Vec::new(),
            requested_lifetime: p.lifetime,
            ts,
            nonce,
            agent_spki_der: agent_spki.clone(),
        };
        let mut claims = request.claims()?;
        if let (Some(binding), Some(spki)) = (claims.agent_key_binding.as_mut(), &agent_spki) {
            binding.key_hash = aic::jwt::jwk_thumbprint(spki)?;
            binding.hash_alg = KeyHashAlg::Jkt.name().into();
        }
        let header = JwsHeader {
            alg: alg.name().into(),
            kid: None,
            typ: Some(aic::jwt::DA_TYP.into()),
            crit: None,
            x5c: Some(vec![STANDARD.encode(&self.cert_der)]),
            jwk: None,
        };
        let signer = JwsSigningKey {
            alg,
            pkcs8_der: self.key_der.clone(),
            kid: None,
        };
        Ok(aic::jwt::jws::sign_with(
            &header,
            &serde_json::to_value(claims)?,
            |input| signer.sign_input(input),
        )?)
    }
}
