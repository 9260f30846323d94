//! The AIC data model and its DER codec.
//!
//! Encoding follows the Go reference byte for byte: DEFAULT integers are written
//! explicitly, empty constraint/extension lists are omitted, empty capability
//! lists are written as `30 00`. Decoding accepts both the explicit and the
//! omitted form of DEFAULT integers and is otherwise strict DER.
//!
//! One module per structure family, each over the shared checks in `codec`:
//! `uid` (AlgorithmIdentifier, PrincipalUid), `capability` (Capability,
//! DelegationPolicy, PrincipalAuthorization), `delegation` (the DA and the TBS
//! the principal signs), `ext_field` (ExtField, DelegationDepthControl) and
//! `extension` (the AIC extension value). Everything public is re-exported here.

pub mod bounds;
mod capability;
mod codec;
mod delegation;
mod ext_field;
mod extension;
mod uid;

pub use capability::{Capability, DelegationPolicy, PrincipalAuthorization};
pub use delegation::{
    AgentKeyBinding, DEFAULT_REQUESTED_LIFETIME, DelegationAuthTbs, DelegationAuthorization,
    DelegationMode, Reason, check_nonce, effective_lifetime,
};
pub use ext_field::{DelegationDepthControl, ExtField};
pub use extension::Aic;
pub use uid::{AlgorithmIdentifier, PrincipalUid};
