//! Client-certificate validation against a bundle of public CA certificates
//! (no CA keys): what admission trusts.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use warrant_ca::*;

fn bundle(fx: &Fixture) -> TrustBundle {
    TrustBundle::from_pem(fx.people().chain_pem()).unwrap()
}

#[test]
fn accepts_an_agent_cert_from_the_bundles_issuing_ca() {
    let fx = Fixture::new();
    let b = bundle(&fx);
    // A bundle names its CAs by their subject CN (the hierarchy's own names
    // are configuration the bundle does not carry).
    assert_eq!(b.issuer_names().collect::<Vec<_>>(), ["Warrant People CA"]);
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.agent(&key);
    let v = b.verify_client_cert(cert.pem.as_bytes()).unwrap();
    assert!(v.cert.is_agent());
    assert_eq!(v.cert.organizational_units(), ["gateway:reader"]);
    assert_eq!(v.cert.serial_hex, cert.serial_hex);
    assert_eq!(v.cert.spki_der, key.spki_der);
    v.check_validity_with_skew(SystemTime::now(), Duration::from_secs(30))
        .unwrap();
    assert_eq!(v.cert.issuing_ca, "Warrant People CA");
    // Otherwise the same answer as the CA's own validation.
    let mut p = verify_principal_cert(&cert.der, &fx.hierarchy, SystemTime::now()).unwrap();
    p.issuing_ca = v.cert.issuing_ca.clone();
    assert_eq!(p, v.cert);
}

#[test]
fn rejects_a_cert_from_a_foreign_ca_with_the_same_names() {
    let ours = Fixture::new();
    let foreign = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = foreign.agent(&key);
    let err = bundle(&ours)
        .verify_client_cert(cert.pem.as_bytes())
        .unwrap_err();
    assert!(matches!(err, PrincipalCertError::Untrusted(_)), "{err:?}");
}

#[test]
fn rejects_expiry_outside_the_skew_and_accepts_it_inside() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let v = bundle(&fx)
        .verify_client_cert(fx.agent(&key).pem.as_bytes())
        .unwrap();
    let after = v.usable_until + Duration::from_secs(10);
    assert!(matches!(
        v.check_validity_with_skew(after, Duration::from_secs(5)),
        Err(PrincipalCertError::Expired)
    ));
    v.check_validity_with_skew(after, Duration::from_secs(15))
        .unwrap();
    let before = v.usable_from - Duration::from_secs(10);
    assert!(matches!(
        v.check_validity_with_skew(before, Duration::ZERO),
        Err(PrincipalCertError::NotYetValid)
    ));
    v.check_validity_with_skew(before, Duration::from_secs(15))
        .unwrap();
}

#[test]
fn rejects_a_bundle_whose_issuing_ca_chains_to_no_root_in_it() {
    let fx = Fixture::new();
    let other = Fixture::new();
    // Our issuing CA beside another hierarchy's root.
    let pem = format!(
        "{}{}",
        fx.people().cert_pem(),
        other.hierarchy.root().cert_pem()
    );
    assert!(matches!(
        TrustBundle::from_pem(&pem),
        Err(TrustBundleError::Unanchored { index: 0, .. })
    ));
    // An issuing CA alone has no anchor.
    assert_eq!(
        TrustBundle::from_pem(fx.people().cert_pem()).unwrap_err(),
        TrustBundleError::NoRoot
    );
    // A root alone issues no client certificates.
    assert_eq!(
        TrustBundle::from_pem(fx.hierarchy.root().cert_pem()).unwrap_err(),
        TrustBundleError::NoIssuer
    );
}

#[test]
fn rejects_a_bundle_holding_a_leaf_or_nothing() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let pem = format!("{}{}", fx.people().chain_pem(), fx.person(&key).pem);
    assert!(matches!(
        TrustBundle::from_pem(&pem),
        Err(TrustBundleError::NotCa { .. })
    ));
    assert_eq!(
        TrustBundle::from_pem("no certificates here").unwrap_err(),
        TrustBundleError::Empty
    );
    let cut = &fx.people().chain_pem()[..100];
    assert!(matches!(
        TrustBundle::from_pem(cut),
        Err(TrustBundleError::Malformed { index: 0, .. })
    ));
}

#[test]
fn the_fingerprint_follows_the_bundle() {
    let a = Fixture::new();
    let b = Fixture::new();
    assert_eq!(bundle(&a).fingerprint(), bundle(&a).fingerprint());
    assert_ne!(bundle(&a).fingerprint(), bundle(&b).fingerprint());
}

fn crl(fx: &Fixture, serials: &[&str]) -> Vec<u8> {
    let now = SystemTime::now();
    let entries: Vec<RevokedEntry<'_>> = serials
        .iter()
        .map(|s| RevokedEntry {
            serial_hex: s,
            revoked_at: now,
            reason: RevocationReason::KeyCompromise,
        })
        .collect();
    build_crl(
        fx.people(),
        &entries,
        now,
        now + Duration::from_secs(3600),
        7,
    )
    .unwrap()
}

#[test]
fn reads_the_revoked_serials_of_a_crl_its_issuing_ca_signed() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.agent(&key);
    let v = bundle(&fx)
        .verify_crl(&crl(&fx, &[&cert.serial_hex, "0A"]))
        .unwrap();
    assert_eq!(v.issuer, "Warrant People CA");
    assert_eq!(
        v.revoked_serials,
        [cert.serial_hex.clone(), format!("{:0>40}", "0A")]
    );
    assert!(v.next_update.is_some_and(|n| n > v.this_update));
    assert!(
        bundle(&fx)
            .verify_crl(&crl(&fx, &[]))
            .unwrap()
            .revoked_serials
            .is_empty()
    );
}

#[test]
fn rejects_a_crl_signed_by_another_ca_or_tampered() {
    let ours = Fixture::new();
    let foreign = Fixture::new();
    // Same names, other key: only the signature tells.
    assert_eq!(
        bundle(&ours)
            .verify_crl(&crl(&foreign, &["01"]))
            .unwrap_err(),
        CrlError::BadSignature
    );
    let mut der = crl(&ours, &["01"]);
    let last = der.len() - 1;
    der[last] ^= 1;
    assert!(bundle(&ours).verify_crl(&der).is_err());
    assert!(matches!(
        bundle(&ours).verify_crl(b"not a crl"),
        Err(CrlError::Malformed(_))
    ));
    // A CRL signed by another hierarchy's differently named CA.
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
    let now = SystemTime::now();
    let der = build_crl(
        other.ca("people").unwrap(),
        &[],
        now,
        now + Duration::from_secs(60),
        1,
    )
    .unwrap();
    assert_eq!(
        bundle(&ours).verify_crl(&der).unwrap_err(),
        CrlError::UnknownIssuer
    );
}
