//! The two scenarios as a Gust [`RequestSource`]. Agent i (= seq mod agents)
//! belongs to user i mod users. `aic` signs a fresh DA per request inside the
//! window (that is the scenario: a principal delegating each time); `regular`
//! with keys=csr only copies a pre-generated CSR.

use crate::args::{Keys, RunArgs, Scenario};
use crate::setup::{AgentCsr, CAPABILITY_ID, CAPABILITY_SCHEME, Principal};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gust_engine::{Request, RequestSource, WorkerSource};
use std::sync::Arc;

pub const REASON_CODE: &str = "API_ISSUE";
pub const DA_LIFETIME: i64 = 3600;

struct Shared {
    scenario: Scenario,
    keys: Keys,
    agents: u64,
    auth_header: String,
    path: String,
    principals: Vec<Principal>,
    csrs: Vec<AgentCsr>,
    /// The DA's requested lifetime, which becomes the agent certificate's.
    da_lifetime: i64,
}

pub struct BenchSource {
    shared: Arc<Shared>,
}

impl BenchSource {
    pub fn new(
        args: &RunArgs,
        base_path: &str,
        token: &str,
        principals: Vec<Principal>,
        csrs: Vec<AgentCsr>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                scenario: args.scenario,
                keys: args.keys,
                agents: args.agents as u64,
                auth_header: format!("Bearer {token}"),
                path: format!("{base_path}/api/v1/certs"),
                principals,
                csrs,
                da_lifetime: DA_LIFETIME,
            }),
        }
    }

    /// The same source with DAs asking for `secs` (soak compresses the
    /// agent certificate's lifetime so expiry and pruning happen in minutes).
    pub fn with_da_lifetime(self, secs: i64) -> Self {
        let mut shared = self.shared;
        if let Some(s) = Arc::get_mut(&mut shared) {
            s.da_lifetime = secs;
        }
        Self { shared }
    }
}

impl RequestSource for BenchSource {
    fn for_worker(&self, _worker: usize) -> Box<dyn WorkerSource> {
        Box::new(BenchWorker {
            shared: self.shared.clone(),
            rng: aws_lc_rs::rand::SystemRandom::new(),
        })
    }
}

struct BenchWorker {
    shared: Arc<Shared>,
    rng: aws_lc_rs::rand::SystemRandom,
}

/// The `regular` body (bench.md), plus `csr_pem` with keys=csr.
pub fn regular_body(agent: u64, seq: u64, csr: Option<&AgentCsr>) -> String {
    let mut b = format!(
        r#"{{"ca":"people","cn":"sso-user-{agent}-{seq}","profile":"tls-client","validity":30,"key_type":"ecdsa-p256""#
    );
    if let Some(c) = csr {
        b.push_str(r#","csr_pem":"#);
        b.push_str(&c.pem_json);
    }
    b.push('}');
    b
}

/// The `aic` body: a fresh DA (nonce, timestamp now) signed by the user's key;
/// v2 (agent key binding) when a CSR is sent. None only if the DA cannot be
/// built or signed, which the caller turns into a request the server rejects.
pub fn aic_body(
    agent: u64,
    user: &Principal,
    csr: Option<&AgentCsr>,
    rng: &aws_lc_rs::rand::SystemRandom,
    now: i64,
    lifetime: i64,
) -> Option<String> {
    let mut nonce = [0u8; 32];
    aws_lc_rs::rand::SecureRandom::fill(rng, &mut nonce).ok()?;
    let agent_id = format!("agent-{agent}");
    let tbs = aic::DelegationRequest {
        agent_id: agent_id.clone(),
        principal_uid: user.uid.clone(),
        reason: aic::Reason::new(REASON_CODE, "bench"),
        capabilities: vec![aic::Capability::new(CAPABILITY_SCHEME, CAPABILITY_ID, None)],
        delegation_mode: aic::DelegationMode::Authorized,
        constraints: Vec::new(),
        requested_lifetime: lifetime,
        timestamp: now,
        nonce,
        agent_spki_der: csr.map(|c| c.spki_der.clone()),
    }
    .tbs()
    .ok()?;
    let sig = user.key.sign(rng, &tbs.to_der()).ok()?;
    let mut b = format!(
        concat!(
            r#"{{"ca":"people","cn":"{id}","profile":"agent-proxy","subject":"/CN={id}/OU=gateway:admin","agent_id":"{id}","#,
            r#""principal_uid":"{uid}","delegation_mode":0,"capabilities":[{{"scheme_id":"{scheme}","capability_id":"{cap}"}}],"#,
            r#""user_auth_signature":"{sig}","user_auth_signature_algo":"ECDSA-SHA256","user_auth_nonce":"{nonce}","#,
            r#""user_auth_lifetime":{life},"user_auth_timestamp":"{ts}","user_auth_reason_code":"{reason}","#,
            r#""user_auth_reason_description":"bench","agent_key_binding":{v2},"user_cert_pem":"#
        ),
        id = agent_id,
        uid = user.uid_text,
        scheme = CAPABILITY_SCHEME,
        cap = CAPABILITY_ID,
        sig = STANDARD.encode(sig.as_ref()),
        nonce = STANDARD.encode(nonce),
        life = lifetime,
        ts = aic::time::format_rfc3339(now),
        reason = REASON_CODE,
        v2 = csr.is_some(),
    );
    b.push_str(&user.cert_pem_json);
    if let Some(c) = csr {
        b.push_str(r#","csr_pem":"#);
        b.push_str(&c.pem_json);
    }
    b.push('}');
    Some(b)
}

impl WorkerSource for BenchWorker {
    fn next_request(&mut self, seq: u64) -> Request {
        let s = &*self.shared;
        let agent = seq % s.agents;
        let csr = match s.keys {
            Keys::Csr if !s.csrs.is_empty() => s.csrs.get((seq % s.csrs.len() as u64) as usize),
            _ => None,
        };
        let body = match s.scenario {
            Scenario::Regular => regular_body(agent, seq, csr),
            Scenario::Aic => {
                let user = s
                    .principals
                    .get((agent % s.principals.len().max(1) as u64) as usize);
                user.and_then(|u| {
                    aic_body(
                        agent,
                        u,
                        csr,
                        &self.rng,
                        warrant_server::clock::unix_now(),
                        s.da_lifetime,
                    )
                })
                .unwrap_or_else(|| "{}".to_string())
            }
        };
        Request {
            method: http::Method::POST,
            path: s.path.clone(),
            headers: vec![
                ("Authorization".to_string(), s.auth_header.clone()),
                ("Content-Type".to_string(), "application/json".to_string()),
            ],
            body: bytes::Bytes::from(body),
        }
    }
}
