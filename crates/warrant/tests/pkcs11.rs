//! CA keys in a PKCS#11 token (issue 47), with the real SoftHSM2 and the
//! real `warrant` binary: `warrant init --pkcs11` makes the Root, People
//! and token-signing keys in the token; what they sign is checked by tools
//! that know nothing of Warrant (`openssl verify`, `openssl crl`, `openssl
//! ocsp`, PyJWT); the token taken away mid-load is 503 and not ready, and
//! everything comes back when it returns, with nothing acknowledged lost.
//! SoftHSM2 and OpenSC come from Debian (`.ci/run` installs them); without
//! them the tests fail under CI and skip, saying so, elsewhere.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Da, Person, run, write};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const PIN: &str = "1234";
const SO_PIN: &str = "5678";
/// The server's public base URL (`ocsp.base_url`).
const PUBLIC_BASE: &str = "http://ca.example";

/// A SoftHSM2 installation of its own: a config file and a token directory
/// in a temp dir, with one initialized token.
struct SoftHsm {
    dir: tempfile::TempDir,
    module: PathBuf,
    label: String,
}

impl SoftHsm {
    /// `None` (after saying why) where SoftHSM2 is not installed and CI is
    /// not set; under CI its absence fails the test.
    fn new(label: &str) -> Option<SoftHsm> {
        let module = [
            "/usr/lib/softhsm/libsofthsm2.so",
            "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
            "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
        let tools = Command::new("softhsm2-util")
            .arg("--version")
            .output()
            .is_ok()
            && Command::new("pkcs11-tool").arg("--help").output().is_ok();
        let Some(module) = module.filter(|_| tools) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "SoftHSM2 and OpenSC (apt-get install softhsm2 opensc) are required by this test and CI is set"
            );
            eprintln!("skipping: SoftHSM2 or OpenSC is not installed");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        std::fs::write(
            dir.path().join("softhsm2.conf"),
            format!(
                "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                dir.path().join("tokens").display()
            ),
        )
        .unwrap();
        let hsm = SoftHsm {
            dir,
            module,
            label: label.to_string(),
        };
        hsm.init_token(label);
        Some(hsm)
    }

    fn conf(&self) -> String {
        self.dir.path().join("softhsm2.conf").display().to_string()
    }

    fn init_token(&self, label: &str) {
        let (ok, out) = run(Command::new("softhsm2-util")
            .env("SOFTHSM2_CONF", self.conf())
            .args(["--init-token", "--free", "--label", label])
            .args(["--pin", PIN, "--so-pin", SO_PIN]));
        assert!(ok, "softhsm2-util --init-token: {out}");
    }

    /// The URI of the token (`--pkcs11`).
    fn uri(&self) -> String {
        format!(
            "pkcs11:token={}?module-path={}",
            self.label,
            self.module.display()
        )
    }

    /// The environment of every process that uses the token, with `pin`.
    fn env<'a>(&'a self, conf: &'a str, pin: &'a str) -> [(&'a str, &'a str); 2] {
        [("SOFTHSM2_CONF", conf), ("WARRANT_PKCS11_PIN", pin)]
    }

    /// `pkcs11-tool --list-objects`, logged in.
    fn objects(&self) -> String {
        let (ok, out) = run(Command::new("pkcs11-tool")
            .env("SOFTHSM2_CONF", self.conf())
            .arg("--module")
            .arg(&self.module)
            .args(["--token-label", &self.label, "--login", "--pin", PIN])
            .arg("--list-objects"));
        assert!(ok, "pkcs11-tool --list-objects: {out}");
        out
    }

    /// The token's files, moved away (`false`) or back (`true`): to
    /// SoftHSM2, the token is gone until they return.
    fn set_present(&self, present: bool) {
        let (here, away) = (
            self.dir.path().join("tokens"),
            self.dir.path().join("tokens.away"),
        );
        let (from, to) = if present { (away, here) } else { (here, away) };
        std::fs::rename(&from, &to).unwrap();
    }
}

/// `openssl verify` of `cert_pem` against the data dir's root, with its
/// People CA as the intermediate.
fn openssl_verify(data: &Path, cert_pem: &str, name: &str) {
    let cert = write(data, &format!("{name}.pem"), cert_pem);
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(data.join("ca/root.cert.pem"))
        .arg("-untrusted")
        .arg(data.join("ca/people.cert.pem"))
        .arg(&cert));
    assert!(ok && out.contains(": OK"), "openssl verify {name}: {out}");
}

fn init_in_token(hsm: &SoftHsm, conf: &str, extra: &[&str]) -> DataDir {
    let uri = hsm.uri();
    let mut args = vec!["--pkcs11", uri.as_str()];
    args.extend_from_slice(extra);
    let mut env = hsm.env(conf, PIN).to_vec();
    env.push(("WARRANT_OCSP_BASE_URL", PUBLIC_BASE));
    env.push(("WARRANT_KEYS_CA_RELOAD_INTERVAL", "200ms"));
    DataDir::try_init(None, &args, &env).unwrap_or_else(|out| panic!("warrant init: {out}"))
}

/// A DPoP-bound AIC-JWT from the real `/oauth/token`: `person` delegates
/// `db:read` to `agent_id` in a DA JWT, and the agent proves its own key.
async fn aic_jwt(node: &Node, person: &Person, agent_id: &str) -> (u16, Value) {
    let agent_pkcs8 = aic::generate_signing_key(aic::DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let agent_spki = aic::spki_from_pkcs8(&agent_pkcs8).unwrap();
    let agent = aic::jwt::JwsSigningKey {
        alg: aic::jwt::JwsAlgorithm::ES256,
        pkcs8_der: agent_pkcs8,
        kid: None,
    };
    let pem = aic::cert::pem_decode(&person.cert_pem, "CERTIFICATE").unwrap();
    let spki = aic::cert::CertificateView::from_der(&pem)
        .unwrap()
        .subject_spki_der;
    let da = aic::jwt::DaJwtRequest {
        principal: aic::PrincipalUid::parse(&person.uid).unwrap(),
        principal_spki_der: spki,
        key_hash_alg: aic::jwt::KeyHashAlg::Sha256,
        agent_id: agent_id.into(),
        audience: vec![],
        reason: aic::jwt::ReasonClaim {
            code: "task".into(),
            desc: "keys in a token".into(),
        },
        capabilities: vec![aic::jwt::CapabilityClaim {
            scheme: "db".into(),
            id: "read".into(),
            params: None,
        }],
        delegation_mode: aic::DelegationMode::Authorized,
        constraints: vec![],
        requested_lifetime: 600,
        ts: common::now(),
        nonce: aic::crypto::sha256(agent_id.as_bytes()),
        agent_spki_der: None,
    };
    let key = aic::jwt::JwsSigningKey {
        alg: aic::jwt::JwsAlgorithm::ES256,
        pkcs8_der: person.key_der.clone(),
        kid: None,
    };
    let da_jwt = aic::jwt::issue_da_jwt(&da, &key).unwrap();
    let enc = |v: &str| {
        percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let body = format!(
        "grant_type={}&assertion={}&principal_cert={}",
        enc("urn:ietf:params:oauth:grant-type:jwt-bearer"),
        enc(&da_jwt),
        enc(&person.cert_pem)
    );
    // The proof names the public URL (`ocsp.base_url`), which is what the
    // server checks `htu` against.
    let proof = aic::jwt::dpop::sign_dpop_proof(
        &agent,
        &agent_spki,
        "POST",
        &format!("{PUBLIC_BASE}/oauth/token"),
        common::now(),
        "p1",
    )
    .unwrap();
    let resp = reqwest::Client::new()
        .post(node.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("DPoP", proof)
        .body(body)
        .send()
        .await
        .unwrap();
    common::decode(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_in_a_token_sign_certificates_crls_ocsp_answers_and_tokens() {
    let Some(hsm) = SoftHsm::new("warrant") else {
        return;
    };
    let conf = hsm.conf();
    let data = init_in_token(&hsm, &conf, &[]);
    let d = data.path.clone();

    // The data dir holds where each CA key is, never the key.
    let files = files_under(&d);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        assert!(
            !name.ends_with(".key.pem"),
            "a key file in the data dir: {f:?}"
        );
    }
    for uri_file in ["ca/root.key.uri", "ca/people.key.uri"] {
        let text = std::fs::read_to_string(d.join(uri_file)).unwrap();
        assert!(
            text.starts_with("pkcs11:token=warrant;object=warrant-"),
            "{text}"
        );
        assert!(!text.contains(PIN), "{text}");
    }
    assert!(
        files.iter().any(
            |f| f.starts_with(d.join("ca/tokens")) && f.to_string_lossy().ends_with(".key.uri")
        ),
        "no token key URI in ca/tokens: {files:?}"
    );
    let objects = hsm.objects();
    for label in ["warrant-root", "warrant-people", "warrant-jwt-"] {
        assert!(
            objects.contains(&format!("label:      {label}")),
            "{objects}"
        );
    }
    assert!(
        objects.contains("Private Key Object; EC"),
        "the private keys are in the token: {objects}"
    );
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(d.join("ca/root.cert.pem"))
        .arg(d.join("ca/people.cert.pem")));
    assert!(ok, "the People CA, signed by the root's token key: {out}");

    let node = data.serve("hsm");
    let api = Api::login(&node).await;
    let (s, ready) = api.get(&node.url("/readyz")).await.unwrap();
    assert_eq!((s, &ready["ca_keys"]), (200, &json!(true)), "{ready}");

    // A person and an agent certificate, signed by the People CA's token key.
    let pa = common::grants(&[("db", "read")], 10, 0);
    let alice = api.person_with_pa(&node, "alice", &pa).await;
    openssl_verify(&d, &alice.cert_pem, "alice");
    let (s, agent) = api
        .post(
            &node.url("/api/v1/certs"),
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{agent}");
    openssl_verify(&d, agent["cert_pem"].as_str().unwrap(), "agent");

    // A CRL listing a revocation, verified against the People CA.
    let bob = api.person(&node, "bob").await;
    let (s, r) = api
        .post(
            &node.url(&format!("/api/v1/cert/people/{}/revoke", bob.serial)),
            &json!({"reason": "keyCompromise"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{r}");
    let crl = api
        .http
        .get(node.url("/api/v1/crl/people"))
        .send()
        .await
        .unwrap();
    assert_eq!(crl.status().as_u16(), 200);
    std::fs::write(d.join("people.crl"), crl.bytes().await.unwrap()).unwrap();
    let (ok, text) = run(Command::new("openssl")
        .args(["crl", "-inform", "DER", "-noout", "-text", "-CAfile"])
        .arg(d.join("ca/people.cert.pem"))
        .arg("-in")
        .arg(d.join("people.crl")));
    assert!(ok && text.contains("verify OK"), "{text}");
    assert!(
        text.to_uppercase().contains(&bob.serial.to_uppercase()),
        "bob's serial {} on the CRL: {text}",
        bob.serial
    );

    // OCSP answers for both, signed through the token, read by openssl.
    let bob_pem = write(&d, "bob.pem", &bob.cert_pem);
    let alice_pem = d.join("alice.pem");
    for (cert, want) in [(&alice_pem, "good"), (&bob_pem, "revoked")] {
        let (ok, out) = run(Command::new("openssl")
            .args(["ocsp", "-no_nonce", "-url", &node.url("/ocsp"), "-issuer"])
            .arg(d.join("ca/people.cert.pem"))
            .arg("-cert")
            .arg(cert)
            .arg("-CAfile")
            .arg(d.join("ca/root.cert.pem"))
            .arg("-verify_other")
            .arg(d.join("ca/people.cert.pem")));
        assert!(ok && out.contains("Response verify OK"), "{out}");
        assert!(
            out.contains(&format!("{}: {want}", cert.display())),
            "{want}: {out}"
        );
    }

    // An AIC-JWT signed by the token-signing key in the token, verified by
    // PyJWT with only the JWK Set.
    let (s, body) = aic_jwt(&node, &alice, "agent:hsm").await;
    assert_eq!(s, 200, "{body}");
    let token = body["access_token"].as_str().unwrap();
    let script = r#"
import json, sys, jwt
url, token = sys.argv[1], sys.argv[2]
key = jwt.PyJWKClient(url).get_signing_key_from_jwt(token)
claims = jwt.decode(token, key.key, algorithms=["ES256"], options={"verify_aud": False})
print(json.dumps({"sub": claims["sub"]}))
"#;
    let probe = Command::new("python3")
        .args(["-c", "import jwt, cryptography"])
        .output();
    if probe.is_ok_and(|o| o.status.success()) {
        let (ok, out) = run(Command::new("python3")
            .args(["-c", script])
            .arg(node.url("/.well-known/jwks.json"))
            .arg(token));
        assert!(ok, "PyJWT refused the token: {out}");
        assert!(out.contains("agent:hsm"), "{out}");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "PyJWT (pip install 'pyjwt[crypto]') is required by this test and CI is set"
        );
        eprintln!("skipping the PyJWT check: PyJWT is not installed");
    }

    // The People CA rotated to a new key made in the token: the running
    // server picks it up and issues from it; both verify with the bundle.
    let (ok, out) = run(Command::new(warrant_bin())
        .args([
            "ca",
            "rotate",
            "people",
            "--activate-in",
            "0s",
            "--pkcs11",
            &hsm.uri(),
        ])
        .arg("--data-dir")
        .arg(&d)
        .envs(data.env.iter().map(|(k, v)| (k, v))));
    assert!(ok, "warrant ca rotate --pkcs11: {out}");
    assert!(!d.join("ca/people-2.key.pem").exists());
    let uri = std::fs::read_to_string(d.join("ca/people-2.key.uri")).unwrap();
    assert!(uri.contains("object=warrant-people-2"), "{uri}");
    assert!(hsm.objects().contains("label:      warrant-people-2"));
    let mut carol = None;
    for _ in 0..100 {
        let (s, b) = api
            .post(&node.url("/api/v1/certs"), &json!({"cn": "carol"}))
            .await
            .unwrap();
        assert_eq!(s, 200, "{b}");
        if b["ca"] == "people-2" {
            carol = Some(b);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let carol = carol.expect("the rotated CA in the token never issued");
    let bundle = api
        .http
        .get(node.url("/api/v1/ca/people"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let bundle = write(&d, "bundle.pem", &bundle);
    for (name, pem) in [
        ("carol", carol["cert_pem"].as_str().unwrap()),
        ("alice-again", alice.cert_pem.as_str()),
    ] {
        let cert = write(&d, &format!("{name}.pem"), pem);
        let (ok, out) = run(Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(d.join("ca/root.cert.pem"))
            .arg("-untrusted")
            .arg(&bundle)
            .arg(&cert));
        assert!(ok && out.contains(": OK"), "{name}: {out}");
    }
    node.stop();
}

/// Waits up to 30 s for `check`, polling every 50 ms.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_goes_away_is_503_until_it_returns_and_nothing_acknowledged_is_lost() {
    let Some(hsm) = SoftHsm::new("warrant") else {
        return;
    };
    let conf = hsm.conf();
    let data = init_in_token(&hsm, &conf, &[]);
    let node = data.serve("hsm");
    let api = Api::login(&node).await;
    let people = vec![
        api.person(&node, "alice").await,
        api.person(&node, "bob").await,
    ];
    let load = Load::start(&api, &node.base, &people, 4);
    eventually("issuance under load", async || acked_count(&load.seen) > 50).await;

    hsm.set_present(false);
    eventually("a 503 while the token is away", async || {
        load.seen.lock().unwrap().statuses.contains_key(&503)
    })
    .await;
    let (s, ready) = api.get(&node.url("/readyz")).await.unwrap();
    assert_eq!(s, 503, "{ready}");
    assert_eq!(ready["ca_keys"], json!(false), "{ready}");
    let acked_while_away = acked_count(&load.seen);

    hsm.set_present(true);
    eventually("issuance again once the token is back", async || {
        acked_count(&load.seen) > acked_while_away + 50
    })
    .await;
    let (s, ready) = api.get(&node.url("/readyz")).await.unwrap();
    assert_eq!((s, &ready["ca_keys"]), (200, &json!(true)), "{ready}");
    let seen = load.finish().await;

    // Only 200s and 503s naming the key, with Retry-After; no 500, no
    // dropped connection.
    let (count, body) = &seen.statuses[&503];
    assert!(*count > 0);
    assert_eq!(body["message"], "api.ca_key_unavailable", "{body}");
    assert!(
        !body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("pkcs11:"),
        "a 5xx names no internals: {body}"
    );
    assert_eq!(seen.statuses.len(), 1, "{}", seen.non_200());
    assert_eq!(seen.transport_errors, 0);
    assert_nothing_lost(&api, &node, &seen.acked, "token away and back").await;
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_wrong_pin_a_missing_key_another_token_and_a_pin_in_the_uri() {
    let Some(hsm) = SoftHsm::new("warrant") else {
        return;
    };
    let conf = hsm.conf();
    let uri = hsm.uri();
    let refused = |args: &[&str], pin: &str| -> String {
        let env = hsm.env(&conf, pin);
        match DataDir::try_init(None, args, &env) {
            Ok(d) => panic!("warrant init {args:?} succeeded in {}", d.path.display()),
            Err(out) => out,
        }
    };

    let out = refused(&["--pkcs11", &uri], "0000");
    assert!(out.contains("PIN") || out.contains("Pin"), "{out}");
    let out = refused(
        &[
            "--pkcs11",
            &uri,
            "--pkcs11-key",
            &format!(
                "people=pkcs11:token=warrant;object=nope?module-path={}",
                hsm.module.display()
            ),
        ],
        PIN,
    );
    assert!(out.contains("no EC private key"), "{out}");
    let out = refused(
        &[
            "--pkcs11",
            &format!("pkcs11:token=another?module-path={}", hsm.module.display()),
        ],
        PIN,
    );
    assert!(out.contains("no token matches"), "{out}");
    let out = refused(&["--pkcs11", &format!("{uri}&pin-value={PIN}")], PIN);
    assert!(out.contains("pin-value"), "{out}");
    // None of them left a key in the token.
    let objects = hsm.objects();
    assert!(!objects.contains("warrant-"), "{objects}");

    // A data dir whose keys are in the token does not start with a wrong
    // PIN, and says why.
    let data = init_in_token(&hsm, &conf, &[]);
    let out = Command::new(warrant_bin())
        .args(["serve", "--data-dir"])
        .arg(&data.path)
        .env("WARRANT_LISTEN", "127.0.0.1:0")
        .env("SOFTHSM2_CONF", &conf)
        .env("WARRANT_PKCS11_PIN", "0000")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("is unavailable") && text.contains("PIN"),
        "{text}"
    );
}
