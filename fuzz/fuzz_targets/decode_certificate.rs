//! Certificate extension lookup and PEM decoding never panic.
#![no_main]

use aic::cert::{CertificateView, pem_decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = CertificateView::from_der(data) {
        let _ = view.aic();
        let _ = view.principal_authorization();
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pem_decode(text, "CERTIFICATE");
    }
});
