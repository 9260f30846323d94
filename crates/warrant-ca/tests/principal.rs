//! Principal-certificate validation (spec §4 step 3).

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use warrant_ca::*;

#[test]
fn accepts_a_person_cert_from_this_hierarchy() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.person(&key);
    let p = verify_principal_cert(cert.pem.as_bytes(), &fx.hierarchy, SystemTime::now()).unwrap();
    assert_eq!(p.spki_der, key.spki_der);
    assert_eq!(p.serial_hex, cert.serial_hex);
    assert_eq!(p.issuing_ca, "people");
    assert_eq!(p.common_name.as_deref(), Some("alice"));
    assert_eq!(
        p.extension_value(&oids::PA_EXTENSION),
        Some(pa_der().as_slice())
    );
    assert!(!p.is_agent());
    // DER input and a PEM chain (leaf first) work too.
    verify_principal_cert(&cert.der, &fx.hierarchy, SystemTime::now()).unwrap();
    let chain = format!("{}{}", cert.pem, fx.people().chain_pem());
    verify_principal_cert(chain.as_bytes(), &fx.hierarchy, SystemTime::now()).unwrap();
}

#[test]
fn agent_cert_is_recognised_as_agent() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.agent(&key);
    let p = verify_principal_cert(cert.pem.as_bytes(), &fx.hierarchy, SystemTime::now()).unwrap();
    assert!(p.is_agent());
    assert_eq!(
        p.extension_value(&oids::AIC_EXTENSION),
        Some(aic_full_der().as_slice())
    );
    let exts = certificate_extensions(cert.pem.as_bytes()).unwrap();
    assert!(find_extension(&exts, &oids::AIC_EXTENSION).is_some());
}

#[test]
fn rejects_principal_cert_from_a_foreign_ca() {
    let ours = Fixture::new();
    // Same DNs, different keys: only the signature check can tell.
    let foreign = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = foreign.person(&key);
    let err =
        verify_principal_cert(cert.pem.as_bytes(), &ours.hierarchy, SystemTime::now()).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_principal_cert_from_an_unknown_issuer_name() {
    let ours = Fixture::new();
    let dir = tempfile::tempdir().unwrap();
    let other = Hierarchy::init_with(
        dir.path(),
        None,
        &InitOptions {
            organization: "Elsewhere".into(),
            ..InitOptions::default()
        },
    )
    .unwrap();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=mallory").unwrap();
    let now = SystemTime::now();
    let cert = issue_leaf(
        other.ca("people").unwrap(),
        &LeafSpec {
            profile: Profile::TlsClient,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + HOUR,
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();
    let err = verify_principal_cert(&cert.der, &ours.hierarchy, now).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_expired_principal_cert() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.person(&key); // valid for 24 h
    let later = SystemTime::now() + Duration::from_secs(25 * 3600);
    assert_eq!(
        verify_principal_cert(&cert.der, &fx.hierarchy, later).unwrap_err(),
        PrincipalCertError::Expired
    );
}

#[test]
fn rejects_not_yet_valid_principal_cert() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.person(&key);
    let earlier = SystemTime::now() - Duration::from_secs(3600);
    assert_eq!(
        verify_principal_cert(&cert.der, &fx.hierarchy, earlier).unwrap_err(),
        PrincipalCertError::NotYetValid
    );
}

#[test]
fn rejects_a_ca_certificate_as_principal() {
    let fx = Fixture::new();
    // The People CA is issued by the root, not by an issuing CA: untrusted as a principal.
    let err = verify_principal_cert(
        fx.people().cert_pem().as_bytes(),
        &fx.hierarchy,
        SystemTime::now(),
    )
    .unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_a_server_certificate_as_principal() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=host.example").unwrap();
    let now = SystemTime::now();
    let cert = issue_leaf(
        fx.people(),
        &LeafSpec {
            profile: Profile::TlsServer,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + HOUR,
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();
    let err = verify_principal_cert(&cert.der, &fx.hierarchy, now).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_tampered_principal_cert() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let mut der = fx.person(&key).der;
    let pos = der.windows(5).position(|w| w == b"alice").unwrap();
    der[pos] = b'A';
    let err = verify_principal_cert(&der, &fx.hierarchy, SystemTime::now()).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_malformed_principal_cert() {
    let fx = Fixture::new();
    let now = SystemTime::now();
    for bad in [
        &b""[..],
        b"garbage",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        let err = verify_principal_cert(bad, &fx.hierarchy, now).unwrap_err();
        assert!(matches!(err, PrincipalCertError::Malformed(_)), "{err:?}");
    }
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let mut der = fx.person(&key).der;
    der.push(0); // trailing byte: not DER
    let err = verify_principal_cert(&der, &fx.hierarchy, now).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Malformed(_)), "{err:?}");
}

#[test]
fn accepts_crlf_pem_principal_cert() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let pem = fx.person(&key).pem.replace('\n', "\r\n");
    verify_principal_cert(pem.as_bytes(), &fx.hierarchy, SystemTime::now()).unwrap();
}

#[test]
fn issuing_cas_are_shareable_across_threads_without_a_lock() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Hierarchy>();
    assert_send_sync::<IssuingCa>();
    let fx = Fixture::new();
    let ca = std::sync::Arc::clone(fx.hierarchy.ca("people").unwrap());
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let serials: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let ca = &ca;
                let key = &key;
                s.spawn(move || {
                    let subject = Subject::parse("/CN=t").unwrap();
                    let now = SystemTime::now();
                    issue_leaf(
                        ca,
                        &LeafSpec {
                            profile: Profile::TlsClient,
                            subject: &subject,
                            san: &[],
                            spki_der: &key.spki_der,
                            not_before: now,
                            not_after: now + HOUR,
                            extensions: &[],
                            urls: None,
                        },
                    )
                    .unwrap()
                    .serial_hex
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let unique: std::collections::HashSet<_> = serials.iter().collect();
    assert_eq!(unique.len(), serials.len());
}

#[test]
fn der_input_ending_in_whitespace_bytes_is_kept_whole() {
    // A DER certificate ends with its signature, whose last byte is random; it
    // may be 0x20 or 0x0A. Only PEM text may be trimmed.
    for last in [b' ', b'\n', b'\t', b'\r', 0x0C] {
        let der = [0x30, 0x03, 0x02, 0x01, last];
        assert_eq!(warrant_ca::certificate_der(&der).unwrap(), der.to_vec());
    }
}

/// The chain is verified once per certificate; what can change between two
/// requests (the clock) is checked on every call, and a certificate that
/// differs in one byte is a different certificate.
#[test]
fn a_cached_principal_cert_is_still_checked_for_validity_and_identity() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.person(&key); // valid for 24 h
    let now = SystemTime::now();
    let first = verify_principal_cert(cert.pem.as_bytes(), &fx.hierarchy, now).unwrap();
    assert_eq!(fx.hierarchy.cached_principal_certs(), 1);
    let again = verify_principal_cert(&cert.der, &fx.hierarchy, now).unwrap();
    assert_eq!(first, again);
    assert_eq!(
        fx.hierarchy.cached_principal_certs(),
        1,
        "PEM and DER: one entry"
    );

    let later = now + Duration::from_secs(25 * 3600);
    assert_eq!(
        verify_principal_cert(&cert.der, &fx.hierarchy, later).unwrap_err(),
        PrincipalCertError::Expired
    );
    let earlier = now - Duration::from_secs(3600);
    assert_eq!(
        verify_principal_cert(&cert.der, &fx.hierarchy, earlier).unwrap_err(),
        PrincipalCertError::NotYetValid
    );

    // The same certificate with its signature's last byte changed.
    let mut forged = cert.der.clone();
    if let Some(b) = forged.last_mut() {
        *b ^= 0x01;
    }
    let err = verify_principal_cert(&forged, &fx.hierarchy, now).unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
    assert_eq!(
        fx.hierarchy.cached_principal_certs(),
        1,
        "failures are not cached"
    );
}
