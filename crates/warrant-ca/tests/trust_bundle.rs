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
