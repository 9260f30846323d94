//! `PrincipalAuthorization::from_der` never panics; a decoded value re-encodes and decodes to itself.
#![no_main]

use aic::PrincipalAuthorization;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = PrincipalAuthorization::from_der(data) {
        assert_eq!(
            PrincipalAuthorization::from_der(&v.to_der()).as_ref(),
            Ok(&v)
        );
    }
});
