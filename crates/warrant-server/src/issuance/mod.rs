//! Certificate issuance: the request model of `POST /api/v1/certs` and the
//! operator-certificate endpoint, and the orchestration of person, operator
//! and agent issuance.
//!
//! Each path is a chain of typed stages, each a value made only by the one
//! before it, with the checks of that step and no IO where it can do
//! without (`agent` lists the order of ca.md §4):
//!
//! ```text
//! person:   admit → PersonRequest → Signed → IssueResponse
//! operator: OperatorRequest → Signed → IssueResponse
//! agent:    ParsedAgentRequest → VerifiedPrincipal → VerifiedDelegation
//!           → Authorized → SignedAgent → IssueResponse
//! ```
//!
//! Every step calls into `warrant_ca` (chain, CSR, signing), `aic` (TBS, DA
//! signature), [`crate::policy`] (pure decisions) or the store (revocation,
//! nonce, persistence). The paths share the request parsing (`request`),
//! the subject key (`key`), and the signed certificate with the one builder
//! of its row and its answer (`leaf`).

mod agent;
mod key;
mod leaf;
mod operator;
mod person;
mod renew;
mod request;
mod response;

pub use agent::{AgentNames, NamePolicy, agent_names, cert_has_aic, parse_signature_algorithm};
pub(crate) use agent::{certificate_pa, recorded_principal_uid};
pub use leaf::stored_capabilities;
pub use operator::issue_operator_cert;
pub use renew::{RenewRequest, renew, renewed_not_after};
pub use request::{
    CapabilityJson, IssueRequest, OperatorCertRequest, PolicyJson, PrincipalAuthorizationJson,
    limits,
};
pub use response::IssueResponse;

use crate::auth::{Caller, Permission};
use crate::error::ApiError;
use crate::state::{AppState, CaSet};
use warrant_ca::Profile;

/// Entry point of `POST /api/v1/certs`.
pub async fn issue<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    caller: &Caller,
    req: IssueRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let claimed = crate::audit::Claimed {
        principal_uid: req.principal_uid.clone(),
        agent_id: req.agent_id.clone(),
        profile: req.profile.clone(),
    };
    let profile = caller
        .require(Permission::CertIssue)
        .and_then(|()| request::profile_of(&req));
    let result = match profile {
        Ok(Profile::AgentProxy) => agent::issue_agent(state, cas, caller, req).await,
        Ok(profile) => person::issue_person(state, cas, caller, req, profile).await,
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        crate::audit::refused(state, crate::audit::actor(caller), e, claimed);
    }
    result
}
