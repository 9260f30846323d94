//! The AIC-JWT parser and verifier never panic on arbitrary tokens. The input
//! is split into a token and an SPKI so both attacker-controlled parts are fuzzed.
#![no_main]

use aic::jwt::{VerifyOptions, verify_aic_jwt};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let (token, spki) = data.split_at(split);
    let Ok(token) = std::str::from_utf8(token) else {
        return;
    };
    let opts = VerifyOptions::new(spki, spki, 1_755_500_060);
    assert!(verify_aic_jwt(token, &opts).is_err() || !spki.is_empty());
});
