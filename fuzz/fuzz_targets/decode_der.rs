//! Every small-structure decoder (Capability, PrincipalUid, DelegationPolicy,
//! DelegationAuthorization, DelegationDepthControl, AlgorithmIdentifier, SPKI)
//! on the same input; each must return Ok or a typed error, never panic, and
//! what decodes must re-encode to something that decodes to the same value.
#![no_main]

use aic::*;
use libfuzzer_sys::fuzz_target;

macro_rules! stable {
    ($t:ty, $data:expr) => {
        if let Ok(v) = <$t>::from_der($data) {
            assert_eq!(<$t>::from_der(&v.to_der()).as_ref(), Ok(&v));
        }
    };
}

fuzz_target!(|data: &[u8]| {
    stable!(Capability, data);
    stable!(PrincipalUid, data);
    stable!(DelegationPolicy, data);
    stable!(DelegationAuthorization, data);
    stable!(DelegationDepthControl, data);
    stable!(AlgorithmIdentifier, data);
    let _ = PublicKey::from_spki(data);
    let _ = jwt::jwk_thumbprint(data);
});
