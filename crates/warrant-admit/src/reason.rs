//! What a refusal says: the step of admit.md §2 that refused, and a stable
//! reason key (`admit.…`) that clients, logs and metrics can rely on. The
//! keys are the contract; the free-text detail beside them is not.

use std::fmt;

/// The header a refusal carries its reason's key in.
pub const REASON_HEADER: &str = "x-admit-reason";
/// The header a refusal carries its step's number in.
pub const STEP_HEADER: &str = "x-admit-step";

/// The checks of admit.md §2, in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// 1. A credential is present and parseable.
    Credential,
    /// 2. It chains to the trust bundle and is within its validity window.
    Chain,
    /// 3. Neither it nor its principal's certificate is revoked, per a
    ///    revocation state fresh enough to trust.
    Revocation,
    /// 4. The route's roles, from the certificate's OUs.
    Roles,
    /// 5. The AIC parses and is one Warrant would act on.
    Aic,
    /// 6. The delegation verifies under the principal's key.
    Delegation,
    /// 7. PA constraints, then AIC constraints.
    Constraints,
    /// 8. The delegation mode is allowed; the effective capabilities.
    Mode,
    /// 9. The route's required capability is among the effective ones.
    Route,
}

impl Step {
    /// The step's number in admit.md §2.
    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Credential => "credential",
            Step::Chain => "chain",
            Step::Revocation => "revocation",
            Step::Roles => "roles",
            Step::Aic => "aic",
            Step::Delegation => "delegation",
            Step::Constraints => "constraints",
            Step::Mode => "mode",
            Step::Route => "route",
        }
    }
}

/// Why a request was refused. Each reason belongs to one step and has one
/// HTTP status: 401 when no usable credential arrived, 403 otherwise (nginx's
/// `auth_request` passes only 401 and 403 through as refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No client certificate or token.
    NoCredential,
    /// A credential arrived but could not be read.
    CredentialMalformed,
    /// A `DPoP` token without a valid proof for this request (signature,
    /// `htm`, `htu`, `iat` window, `ath`), or the proxy did not say the
    /// request's absolute URI.
    DpopProofInvalid,
    /// A DPoP proof whose `jti` was already used within its window.
    DpopReplayed,
    /// The replay cache is full of live proofs: fail closed.
    ReplayCacheFull,
    /// A key-bound token presented without its key (as `Bearer`, or with a
    /// proof by another key), or an unbound token presented as `DPoP`.
    TokenBindingMismatch,
    /// Not issued by a CA of the trust bundle, or not a usable client
    /// certificate (a CA, a server certificate, an unknown critical extension).
    Untrusted,
    Expired,
    NotYetValid,
    Revoked,
    /// The principal's certificate is revoked.
    PrincipalRevoked,
    /// The revocation state is older than the configured staleness: fail
    /// closed rather than admit what may have been revoked since.
    RevocationStale,
    /// The route names roles and the certificate has none of them.
    RoleMissing,
    /// A certificate without the AIC extension: not an agent.
    NotAnAgent,
    /// The AIC (or the PA beside it) does not decode.
    AicInvalid,
    /// The delegation carries no DA, or its signature does not verify (a v2
    /// DA presented with another agent key among them: the TBS is rebuilt
    /// from the presented key).
    DelegationInvalid,
    /// The DA's nonce is not 32 bytes (aic.md rule 6).
    DaNonceInvalid,
    /// No certificate known for the principal's key hash.
    PrincipalUnknown,
    /// The principal's certificate is not usable (untrusted or outside its
    /// validity).
    PrincipalUntrusted,
    /// A constraint of the PA or the AIC denies this request.
    ConstraintDenied,
    /// Representative mode without PA `allowedMode = 1`.
    RepresentativeDenied,
    /// No route rule matches the method and path.
    NoRoute,
    /// The request's path is not canonical (`..`, `//`, encoded `/` …).
    PathInvalid,
    /// The route's capability is not among the effective ones.
    CapabilityNotGranted,
}

impl Reason {
    /// The stable key.
    pub fn key(self) -> &'static str {
        match self {
            Reason::NoCredential => "admit.no_credential",
            Reason::CredentialMalformed => "admit.credential_malformed",
            Reason::DpopProofInvalid => "admit.dpop_proof_invalid",
            Reason::DpopReplayed => "admit.dpop_replayed",
            Reason::ReplayCacheFull => "admit.replay_cache_full",
            Reason::TokenBindingMismatch => "admit.token_binding_mismatch",
            Reason::Untrusted => "admit.untrusted",
            Reason::Expired => "admit.expired",
            Reason::NotYetValid => "admit.not_yet_valid",
            Reason::Revoked => "admit.revoked",
            Reason::PrincipalRevoked => "admit.principal_revoked",
            Reason::RevocationStale => "admit.revocation_stale",
            Reason::RoleMissing => "admit.role_missing",
            Reason::NotAnAgent => "admit.not_an_agent",
            Reason::AicInvalid => "admit.aic_invalid",
            Reason::DelegationInvalid => "admit.delegation_invalid",
            Reason::DaNonceInvalid => "admit.da_nonce_invalid",
            Reason::PrincipalUnknown => "admit.principal_unknown",
            Reason::PrincipalUntrusted => "admit.principal_untrusted",
            Reason::ConstraintDenied => "admit.constraint_denied",
            Reason::RepresentativeDenied => "admit.representative_denied",
            Reason::NoRoute => "admit.no_route",
            Reason::PathInvalid => "admit.path_invalid",
            Reason::CapabilityNotGranted => "admit.capability_not_granted",
        }
    }

    /// The step that gives this reason.
    pub fn step(self) -> Step {
        match self {
            Reason::NoCredential
            | Reason::CredentialMalformed
            | Reason::DpopProofInvalid
            | Reason::DpopReplayed
            | Reason::ReplayCacheFull
            | Reason::TokenBindingMismatch => Step::Credential,
            Reason::Untrusted | Reason::Expired | Reason::NotYetValid => Step::Chain,
            Reason::Revoked | Reason::PrincipalRevoked | Reason::RevocationStale => {
                Step::Revocation
            }
            Reason::RoleMissing => Step::Roles,
            Reason::NotAnAgent | Reason::AicInvalid => Step::Aic,
            Reason::DelegationInvalid
            | Reason::DaNonceInvalid
            | Reason::PrincipalUnknown
            | Reason::PrincipalUntrusted => Step::Delegation,
            Reason::ConstraintDenied => Step::Constraints,
            Reason::RepresentativeDenied => Step::Mode,
            Reason::NoRoute | Reason::PathInvalid | Reason::CapabilityNotGranted => Step::Route,
        }
    }

    /// 401 when no usable credential arrived, 403 for every other refusal.
    pub fn status(self) -> u16 {
        match self.step() {
            Step::Credential => 401,
            _ => 403,
        }
    }

    /// Every reason, for metrics that pre-register their series and tests.
    pub const ALL: [Reason; 24] = [
        Reason::NoCredential,
        Reason::CredentialMalformed,
        Reason::DpopProofInvalid,
        Reason::DpopReplayed,
        Reason::ReplayCacheFull,
        Reason::TokenBindingMismatch,
        Reason::Untrusted,
        Reason::Expired,
        Reason::NotYetValid,
        Reason::Revoked,
        Reason::PrincipalRevoked,
        Reason::RevocationStale,
        Reason::RoleMissing,
        Reason::NotAnAgent,
        Reason::AicInvalid,
        Reason::DelegationInvalid,
        Reason::DaNonceInvalid,
        Reason::PrincipalUnknown,
        Reason::PrincipalUntrusted,
        Reason::ConstraintDenied,
        Reason::RepresentativeDenied,
        Reason::NoRoute,
        Reason::PathInvalid,
        Reason::CapabilityNotGranted,
    ];
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_unique_and_prefixed() {
        let keys: HashSet<_> = Reason::ALL.iter().map(|r| r.key()).collect();
        assert_eq!(keys.len(), Reason::ALL.len());
        assert!(keys.iter().all(|k| k.starts_with("admit.")));
    }

    #[test]
    fn only_a_missing_or_unusable_credential_is_401() {
        for r in Reason::ALL {
            let want = if r.step() == Step::Credential {
                401
            } else {
                403
            };
            assert_eq!(r.status(), want, "{r}");
        }
    }

    #[test]
    fn steps_are_numbered_as_in_the_spec() {
        assert_eq!(Step::Credential.number(), 1);
        assert_eq!(Step::Route.number(), 9);
        assert!(Step::Revocation < Step::Delegation);
    }
}
