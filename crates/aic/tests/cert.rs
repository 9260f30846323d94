//! Finding the AIC and PA extensions in a real certificate.

mod common;

use aic::cert::{CertificateView, pem_decode};
use aic::*;

/// Made with `openssl req -x509` carrying the AIC_FULL and PA vectors as extensions.
const AGENT_PEM: &str = include_str!("data/agent-with-aic.pem");

#[test]
fn extracts_aic_pa_and_subject_key_from_openssl_certificate() {
    let der = pem_decode(AGENT_PEM, "CERTIFICATE").unwrap();
    let view = CertificateView::from_der(&der).unwrap();
    let aic = view.aic().unwrap().unwrap();
    assert_eq!(aic.to_der(), common::der_vector("AIC_FULL"));
    let pa = view.principal_authorization().unwrap().unwrap();
    assert_eq!(pa.to_der(), common::der_vector("PA"));
    assert!(matches!(
        PublicKey::from_spki(&view.subject_spki_der),
        Ok(PublicKey::EcP384(_))
    ));
    assert!(
        view.extensions
            .iter()
            .any(|e| e.critical && e.oid.to_dotted() == "2.5.29.19")
    );
}

#[test]
fn rejects_certificate_with_trailing_bytes() {
    let mut der = pem_decode(AGENT_PEM, "CERTIFICATE").unwrap();
    der.push(0);
    assert_eq!(
        CertificateView::from_der(&der).unwrap_err().field,
        "Certificate"
    );
}
