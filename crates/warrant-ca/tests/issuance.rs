//! issue_leaf rules that do not need openssl: validity capping, extension
//! checks, key checks.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use warrant_ca::*;

fn spec<'a>(
    subject: &'a Subject,
    spki: &'a [u8],
    not_before: SystemTime,
    not_after: SystemTime,
    extensions: &'a [ExtraExtension],
) -> LeafSpec<'a> {
    LeafSpec {
        profile: Profile::TlsClient,
        subject,
        san: &[],
        spki_der: spki,
        not_before,
        not_after,
        extensions,
        urls: None,
    }
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn validity_is_capped_by_the_ca_not_after() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    let far = now + Duration::from_secs(100 * 365 * 86_400);
    let cert = issue_leaf(fx.people(), &spec(&subject, &key.spki_der, now, far, &[])).unwrap();
    assert_eq!(cert.not_after, fx.people().not_after());
    assert_eq!(secs(cert.not_before), secs(now));
    let p = verify_principal_cert(&cert.der, &fx.hierarchy, now).unwrap();
    assert_eq!(p.not_after, cert.not_after);
}

#[test]
fn rejects_an_empty_validity_window() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    let err = issue_leaf(fx.people(), &spec(&subject, &key.spki_der, now, now, &[])).unwrap_err();
    assert_eq!(err.invalid_field(), Some("validity"));
    // Entirely after the CA expires: capped to nothing.
    let later = fx.people().not_after() + HOUR;
    let err = issue_leaf(
        fx.people(),
        &spec(&subject, &key.spki_der, later, later + HOUR, &[]),
    )
    .unwrap_err();
    assert_eq!(err.invalid_field(), Some("validity"));
}

#[test]
fn rejects_extensions_the_ca_writes_itself() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    let san_oid = ObjectIdentifier::new_unwrap("2.5.29.17");
    let ext = [ExtraExtension::non_critical(san_oid, vec![0x30, 0x00])];
    let err = issue_leaf(
        fx.people(),
        &spec(&subject, &key.spki_der, now, now + HOUR, &ext),
    )
    .unwrap_err();
    assert_eq!(err.invalid_field(), Some("extensions"));
}

#[test]
fn rejects_duplicate_extensions() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    let ext = [
        ExtraExtension::non_critical(oids::PA_EXTENSION, pa_der()),
        ExtraExtension::non_critical(oids::PA_EXTENSION, pa_der()),
    ];
    let err = issue_leaf(
        fx.people(),
        &spec(&subject, &key.spki_der, now, now + HOUR, &ext),
    )
    .unwrap_err();
    assert_eq!(err.invalid_field(), Some("extensions"));
}

#[test]
fn rejects_extension_values_that_are_not_one_der_element() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    for bad in [
        vec![],
        vec![0x30, 0x05, 0x01],
        vec![0x30, 0x00, 0x00],
        vec![0x30, 0x80, 0x00, 0x00],
    ] {
        let ext = [ExtraExtension::non_critical(
            oids::AIC_EXTENSION,
            bad.clone(),
        )];
        let err = issue_leaf(
            fx.people(),
            &spec(&subject, &key.spki_der, now, now + HOUR, &ext),
        )
        .unwrap_err();
        assert_eq!(err.invalid_field(), Some("extensions"), "{bad:02x?}");
    }
}

#[test]
fn rejects_unsupported_or_garbage_public_keys() {
    let fx = Fixture::new();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = SystemTime::now();
    let err = issue_leaf(
        fx.people(),
        &spec(&subject, b"\x30\x00", now, now + HOUR, &[]),
    )
    .unwrap_err();
    assert_eq!(err.invalid_field(), Some("public_key"));
}

#[test]
fn agent_profile_enforces_ou_rules_at_issuance() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let now = SystemTime::now();
    for subject in ["/CN=agent", "/OU=gateway:*/CN=agent", "/OU=*/CN=agent"] {
        let subject = Subject::parse(subject).unwrap();
        let mut s = spec(&subject, &key.spki_der, now, now + HOUR, &[]);
        s.profile = Profile::AgentProxy;
        assert_eq!(
            issue_leaf(fx.people(), &s).unwrap_err().invalid_field(),
            Some("subject")
        );
    }
}

#[test]
fn extra_extensions_are_written_verbatim_and_non_critical() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/OU=gateway:reader/CN=agent").unwrap();
    let now = SystemTime::now();
    let ext = [
        ExtraExtension::non_critical(oids::AIC_EXTENSION, aic_full_der()),
        ExtraExtension::non_critical(oids::PA_EXTENSION, pa_der()),
    ];
    let mut s = spec(&subject, &key.spki_der, now, now + HOUR, &ext);
    s.profile = Profile::AgentProxy;
    let cert = issue_leaf(fx.people(), &s).unwrap();
    let exts = certificate_extensions(&cert.der).unwrap();
    let aic = find_extension(&exts, &oids::AIC_EXTENSION).unwrap();
    assert!(!aic.critical);
    assert_eq!(aic.value, aic_full_der());
    assert_eq!(
        find_extension(&exts, &oids::PA_EXTENSION).unwrap().value,
        pa_der()
    );
}

#[test]
fn agent_validity_is_hard_capped_at_24_hours() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/OU=gateway:reader/CN=agent").unwrap();
    let now = SystemTime::now();
    let mut s = spec(&subject, &key.spki_der, now, now + 48 * HOUR, &[]);
    s.profile = Profile::AgentProxy;
    let cert = issue_leaf(fx.people(), &s).unwrap();
    assert_eq!(secs(cert.not_after) - secs(cert.not_before), 24 * 3600);
    // Other profiles are capped only by the CA.
    s.profile = Profile::TlsClient;
    let cert = issue_leaf(fx.people(), &s).unwrap();
    assert_eq!(secs(cert.not_after) - secs(cert.not_before), 48 * 3600);
}
