//! Building the DelegationAuthTBS (and the agentKeyBinding it signs) and
//! checking a delegation end to end.

use crate::DecodeError;
use crate::crypto::{self, SignatureError, VerifiedForm};
use crate::model::{
    AgentKeyBinding, Aic, AlgorithmIdentifier, Capability, DelegationAuthTbs,
    DelegationAuthorization, DelegationMode, ExtField, PrincipalUid, Reason,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaError {
    #[error("the AIC carries no delegationAuthorization")]
    MissingDelegation,
    #[error("a version 2 delegation needs the agent's public key to rebuild agentKeyBinding")]
    MissingAgentKey,
    #[error("principalUid.keyHash does not match the principal's public key")]
    KeyHashMismatch,
    #[error("agentKeyBinding does not match the agent's public key")]
    AgentKeyBindingMismatch,
    /// The 32-byte nonce rule (aic.md rule 6: the codec keeps any length,
    /// the verifier does not accept it).
    #[error("the delegation's nonce must be 32 bytes, got {actual}")]
    NonceLength { actual: usize },
    #[error("invalid delegation fields: {0}")]
    Invalid(#[from] DecodeError),
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

/// The fields a principal (or the CA on its behalf) supplies to request a
/// delegation. `agent_spki_der = Some(..)` makes a v2 TBS with agentKeyBinding;
/// new delegations should use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationRequest {
    pub agent_id: String,
    pub principal_uid: PrincipalUid,
    pub reason: Reason,
    pub capabilities: Vec<Capability>,
    pub delegation_mode: DelegationMode,
    pub constraints: Vec<Capability>,
    pub requested_lifetime: i64,
    /// Unix seconds, UTC, whole seconds.
    pub timestamp: i64,
    pub nonce: [u8; 32],
    pub agent_spki_der: Option<Vec<u8>>,
}

impl DelegationRequest {
    /// The TBS the principal signs, with every SIZE/range bound checked.
    pub fn tbs(&self) -> Result<DelegationAuthTbs, DecodeError> {
        let tbs = DelegationAuthTbs {
            version: if self.agent_spki_der.is_some() { 2 } else { 1 },
            agent_id: self.agent_id.clone(),
            principal_uid: self.principal_uid.clone(),
            reason: self.reason.clone(),
            capabilities: self.capabilities.clone(),
            delegation_mode: self.delegation_mode,
            constraints: self.constraints.clone(),
            requested_lifetime: self.requested_lifetime,
            timestamp: self.timestamp,
            nonce: self.nonce.to_vec(),
            agent_key_binding: self
                .agent_spki_der
                .as_deref()
                .map(AgentKeyBinding::for_spki),
        };
        tbs.validate()?;
        Ok(tbs)
    }
}

impl AgentKeyBinding {
    /// SHA-256 of the agent's DER SubjectPublicKeyInfo.
    pub fn for_spki(agent_spki_der: &[u8]) -> Self {
        AgentKeyBinding {
            key_hash: crypto::sha256(agent_spki_der).to_vec(),
            hash_algo: AlgorithmIdentifier::sha256(),
        }
    }
}

impl DelegationAuthTbs {
    /// Rebuilds the TBS an AIC's DA was signed over. For a version 2 AIC the
    /// binding is recomputed from the agent key actually presented (the
    /// certificate's SPKI), which is what defeats grafting.
    pub fn from_aic(
        aic: &Aic,
        agent_spki_der: Option<&[u8]>,
    ) -> Result<DelegationAuthTbs, DaError> {
        let da = aic
            .delegation_authorization
            .as_ref()
            .ok_or(DaError::MissingDelegation)?;
        let agent_key_binding = if aic.version >= 2 {
            Some(AgentKeyBinding::for_spki(
                agent_spki_der.ok_or(DaError::MissingAgentKey)?,
            ))
        } else {
            None
        };
        Ok(DelegationAuthTbs {
            version: aic.version,
            agent_id: aic.agent_id.clone(),
            principal_uid: aic.principal_uid.clone(),
            reason: da.reason.clone(),
            capabilities: aic.capabilities.clone(),
            delegation_mode: aic.delegation_mode,
            constraints: aic.constraints.clone(),
            requested_lifetime: da.requested_lifetime,
            timestamp: da.timestamp,
            nonce: da.nonce.clone(),
            agent_key_binding,
        })
    }

    /// Whether the v2 binding names this agent key. A v1 TBS binds no key and
    /// returns false, so callers that require binding can use this alone.
    pub fn agent_key_binding_matches(&self, agent_spki_der: &[u8]) -> bool {
        self.agent_key_binding.as_ref().is_some_and(|b| {
            crypto::hash_with(Some(&b.hash_algo), agent_spki_der).is_some_and(|h| h == b.key_hash)
        })
    }

    /// Assembles the AIC extension value from this TBS and the principal's signature.
    pub fn into_aic(
        self,
        signature_algorithm: AlgorithmIdentifier,
        signature_value: Vec<u8>,
        extensions: Vec<ExtField>,
    ) -> Aic {
        Aic {
            version: self.version,
            agent_id: self.agent_id,
            principal_uid: self.principal_uid,
            capabilities: self.capabilities,
            delegation_mode: self.delegation_mode,
            constraints: self.constraints,
            delegation_authorization: Some(DelegationAuthorization {
                reason: self.reason,
                requested_lifetime: self.requested_lifetime,
                timestamp: self.timestamp,
                nonce: self.nonce,
                signature_algorithm,
                signature_value,
            }),
            extensions,
        }
    }
}

/// Verifies a DA signature over DER TBS bytes with the principal's SPKI.
pub fn verify_delegation(
    tbs_der: &[u8],
    sig_alg: &AlgorithmIdentifier,
    signature: &[u8],
    principal_spki_der: &[u8],
) -> Result<VerifiedForm, DaError> {
    Ok(crypto::verify_signature(
        tbs_der,
        sig_alg,
        signature,
        principal_spki_der,
    )?)
}

/// Full check of an AIC's delegation: keyHash names the principal key, the
/// nonce is 32 bytes, the TBS rebuilt from the AIC (and, for v2, the
/// presented agent key) carries the principal's signature.
pub fn verify_aic_delegation(
    aic: &Aic,
    principal_spki_der: &[u8],
    agent_spki_der: Option<&[u8]>,
) -> Result<VerifiedForm, DaError> {
    if !aic.principal_uid.key_hash_matches(principal_spki_der) {
        return Err(DaError::KeyHashMismatch);
    }
    let da = aic
        .delegation_authorization
        .as_ref()
        .ok_or(DaError::MissingDelegation)?;
    if da.nonce.len() != crate::model::bounds::NONCE_LEN {
        return Err(DaError::NonceLength {
            actual: da.nonce.len(),
        });
    }
    let tbs = DelegationAuthTbs::from_aic(aic, agent_spki_der)?;
    verify_delegation(
        &tbs.to_der(),
        &da.signature_algorithm,
        &da.signature_value,
        principal_spki_der,
    )
}
