//! `DelegationAuthTbs::from_der` never panics; a decoded value re-encodes and decodes to itself.
#![no_main]

use aic::DelegationAuthTbs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = DelegationAuthTbs::from_der(data) {
        assert_eq!(DelegationAuthTbs::from_der(&v.to_der()).as_ref(), Ok(&v));
    }
});
