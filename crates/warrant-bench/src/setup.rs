//! Setup before the measured window: the operator's token (one login), the
//! people (principals) with People-CA certificates carrying a PA grant, and
//! the pool of agent CSRs. None of this is timed.

use crate::args::{RunArgs, Scenario};
use crate::http;
use crate::server::ServerUnderTest;
use anyhow::{Context, Result, anyhow, bail};
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};
use std::sync::Mutex;
use std::time::Instant;

pub const CAPABILITY_SCHEME: &str = "varwof-gateway-v1";
pub const CAPABILITY_ID: &str = "gateway:read";
const SETUP_THREADS: usize = 4;

/// A person whose key signs the DAs of the agents mapped to them.
pub struct Principal {
    pub key: EcdsaKeyPair,
    pub uid: aic::PrincipalUid,
    pub uid_text: String,
    /// The certificate PEM as a JSON string literal (quotes included), encoded once.
    pub cert_pem_json: String,
}

/// An agent key's CSR, generated before the run so the client's own keygen
/// does not compete with the server inside the measured window.
pub struct AgentCsr {
    pub pem_json: String,
    pub spki_der: Vec<u8>,
}

/// The bench operator logs in once (Argon2id once); `--target` uses `--token`.
pub fn operator_token(sut: &ServerUnderTest, args: &RunArgs) -> Result<String> {
    if let Some(t) = &args.token {
        return Ok(t.clone());
    }
    let creds = sut
        .operator_password
        .as_deref()
        .ok_or_else(|| anyhow!("no operator credentials"))?;
    let (user, pass) = creds
        .split_once('\n')
        .ok_or_else(|| anyhow!("bad operator credentials"))?;
    let body = serde_json::json!({"username": user, "password": pass}).to_string();
    let r = http::request(
        sut.addr,
        "POST",
        &format!("{}/api/v1/users/login", sut.base_path),
        None,
        &body,
    )?;
    if r.status != 200 {
        bail!(
            "login failed: HTTP {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).context("login response")?;
    v["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("login response without token"))
}

fn new_csr() -> Result<(rcgen::KeyPair, String)> {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let pem = rcgen::CertificateParams::new(Vec::<String>::new())?
        .serialize_request(&kp)?
        .pem()?;
    Ok((kp, pem))
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Issues one person certificate through the API with a bench-generated key
/// (sent as a CSR, so the bench holds the private key and can sign DAs).
fn create_principal(sut: &ServerUnderTest, token: &str, i: usize) -> Result<Principal> {
    let (kp, csr_pem) = new_csr()?;
    let body = serde_json::json!({
        "ca": "people",
        "cn": format!("bench-user-{i}"),
        "profile": "tls-client",
        "validity": 2,
        "csr_pem": csr_pem,
        "principal_authorization": {
            "grants": [{"scheme_id": CAPABILITY_SCHEME, "capability_id": CAPABILITY_ID}],
            "delegation_policy": {"allowed_mode": 0, "max_agents": 1_000_000, "max_session_hours": 24}
        }
    })
    .to_string();
    let r = http::request(
        sut.addr,
        "POST",
        &format!("{}/api/v1/certs", sut.base_path),
        Some(token),
        &body,
    )?;
    if r.status != 200 {
        bail!(
            "person certificate {i}: HTTP {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).context("issue response")?;
    let cert_pem = v["cert_pem"]
        .as_str()
        .ok_or_else(|| anyhow!("issue response without cert_pem"))?;
    let uid_text = v["principal_uid"]
        .as_str()
        .ok_or_else(|| anyhow!("person certificate {i}: response without principal_uid"))?
        .to_string();
    let uid = aic::PrincipalUid::parse(&uid_text)
        .map_err(|e| anyhow!("principal_uid {uid_text:?}: {e}"))?;
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &kp.serialize_der())
        .map_err(|e| anyhow!("person key: {e}"))?;
    Ok(Principal {
        key,
        uid,
        uid_text,
        cert_pem_json: json_string(cert_pem),
    })
}

/// `users` principals for the aic scenario (none are needed for regular).
pub fn create_principals(
    sut: &ServerUnderTest,
    token: &str,
    users: usize,
    scenario: Scenario,
    verbose: bool,
) -> Result<Vec<Principal>> {
    if scenario != Scenario::Aic {
        return Ok(Vec::new());
    }
    let start = Instant::now();
    let out: Mutex<Vec<Option<Principal>>> = Mutex::new((0..users).map(|_| None).collect());
    let first_err: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for t in 0..SETUP_THREADS {
            let out = &out;
            let first_err = &first_err;
            s.spawn(move || {
                for i in (t..users).step_by(SETUP_THREADS) {
                    if first_err.lock().map(|e| e.is_some()).unwrap_or(true) {
                        return;
                    }
                    match create_principal(sut, token, i) {
                        Ok(p) => {
                            if let Ok(mut o) = out.lock() {
                                o[i] = Some(p);
                            }
                        }
                        Err(e) => {
                            if let Ok(mut f) = first_err.lock() {
                                f.get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_err
        .into_inner()
        .map_err(|_| anyhow!("setup thread panicked"))?
    {
        return Err(e.context("creating the principals"));
    }
    let v: Vec<Principal> = out
        .into_inner()
        .map_err(|_| anyhow!("setup thread panicked"))?
        .into_iter()
        .flatten()
        .collect();
    if v.len() != users {
        bail!("created {} of {users} principals", v.len());
    }
    if verbose {
        eprintln!(
            "setup: {users} principals in {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(v)
}

/// `n` agent keys and CSRs, generated in parallel before the run.
pub fn csr_pool(n: usize) -> Result<Vec<AgentCsr>> {
    let out: Mutex<Vec<AgentCsr>> = Mutex::new(Vec::with_capacity(n));
    let errs: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for t in 0..SETUP_THREADS {
            let out = &out;
            let errs = &errs;
            s.spawn(move || {
                for _ in (t..n).step_by(SETUP_THREADS) {
                    let r = new_csr().and_then(|(_, pem)| {
                        let spki_der = warrant_ca::verify_csr(&pem)?.spki_der;
                        Ok(AgentCsr {
                            pem_json: json_string(&pem),
                            spki_der,
                        })
                    });
                    match r {
                        Ok(c) => {
                            if let Ok(mut o) = out.lock() {
                                o.push(c)
                            }
                        }
                        Err(e) => {
                            if let Ok(mut f) = errs.lock() {
                                f.get_or_insert(e);
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = errs
        .into_inner()
        .map_err(|_| anyhow!("CSR thread panicked"))?
    {
        return Err(e.context("pre-generating CSRs"));
    }
    out.into_inner().map_err(|_| anyhow!("CSR thread panicked"))
}
