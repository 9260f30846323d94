//! `warrant aic …` and `warrant aic-jwt …`: interop debugging tools, in the
//! spirit of `openssl asn1parse`. Thin: parse arguments, call `aic`, print.
//!
//! Exit codes: 0 success (or permit), 1 invalid data (or deny), 2 usage error.

use std::process::ExitCode;

use aic::jwt::{CapabilityClaim, Decision, JwkSet, VerifyOptions, verify_aic_jwt};
use base64::{Engine, engine::general_purpose::STANDARD};
use clap::{Subcommand, ValueEnum};

#[derive(Subcommand)]
pub enum AicCommand {
    /// Decode DER (hex, or @file holding hex or raw DER) and print it as JSON.
    Decode {
        #[arg(long = "type", value_enum)]
        kind: StructureKind,
        /// Hex DER, or @path to a file with hex or raw DER.
        input: String,
    },
    /// Encode JSON (as printed by `decode`) to DER and print it as hex.
    Encode {
        #[arg(long = "type", value_enum)]
        kind: StructureKind,
        /// JSON text, or @path to a JSON file.
        input: String,
    },
    /// Decode the AIC and PrincipalAuthorization extensions of a PEM certificate.
    InspectCert {
        /// Path to a PEM certificate.
        pem: String,
    },
}

/// The structures `decode` / `encode` understand.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StructureKind {
    /// AIC extension value (OID 1.3.6.1.4.1.66257.1.1).
    Aic,
    /// DelegationAuthTBS (what the principal signs).
    Tbs,
    /// PrincipalAuthorization extension value (OID 1.3.6.1.4.1.66257.1.2).
    Pa,
    /// Capability.
    Cap,
    /// PrincipalUid.
    Pu,
    /// DelegationPolicy.
    Dpol,
    /// DelegationAuthorization.
    Da,
}

#[derive(Subcommand)]
pub enum AicJwtCommand {
    /// Verify an AIC-JWT; prints {"permit",…,"failed_step"}; exit 0 permit, 1 deny, 2 usage error.
    Verify(Box<VerifyArgs>),
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The token, or @path to a file holding it.
    #[arg(long)]
    token: String,
    /// Issuer (CA) SubjectPublicKeyInfo, standard base64 DER.
    #[arg(long, required_unless_present = "jwks", conflicts_with = "jwks")]
    issuer_spki: Option<String>,
    /// The issuer's JWK Set, a file or an http(s) URL (Warrant serves it at
    /// `/.well-known/jwks.json`): the key named by the token's `kid` verifies it.
    #[arg(long)]
    jwks: Option<String>,
    /// Principal SubjectPublicKeyInfo, standard base64 DER.
    #[arg(long)]
    principal_spki: String,
    /// Verification time, Unix seconds.
    #[arg(long)]
    at: i64,
    /// Source IP of the request (for allowed-cidr).
    #[arg(long)]
    source_ip: Option<std::net::IpAddr>,
    /// Requested capability, `scheme:id` (split at the first ':').
    #[arg(long)]
    capability: Option<String>,
    /// JSON parameters of the requested capability.
    #[arg(long, requires = "capability")]
    params: Option<String>,
    /// PrincipalAuthorization as JSON (the `warrant aic decode --type pa` form), or @path.
    #[arg(long)]
    pa: Option<String>,
    /// Expected `iss`.
    #[arg(long)]
    issuer: Option<String>,
    /// Audience this verifier answers to.
    #[arg(long)]
    audience: Option<String>,
    /// Presenter's SubjectPublicKeyInfo (base64 DER), checked against cnf.jkt.
    #[arg(long)]
    presenter_spki: Option<String>,
    /// Sessions of this agent already in flight (for max-concurrent).
    #[arg(long)]
    concurrent: Option<u64>,
    /// Allowed clock skew, seconds.
    #[arg(long, default_value_t = VerifyOptions::DEFAULT_SKEW_SECS)]
    skew: i64,
    /// Permit constraints this verifier does not know instead of denying.
    #[arg(long)]
    allow_unknown_constraints: bool,
}

const EXIT_INVALID: u8 = 1;
const EXIT_USAGE: u8 = 2;

/// A failure with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_USAGE,
        message: message.into(),
    }
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_INVALID,
        message: message.into(),
    }
}

fn finish(r: Result<(), Failure>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

pub fn run_aic(cmd: AicCommand) -> ExitCode {
    finish(match cmd {
        AicCommand::Decode { kind, input } => read_der_input(&input).and_then(|der| {
            let json = decode_to_json(kind, &der).map_err(|e| invalid(e.to_string()))?;
            println!("{json}");
            Ok(())
        }),
        AicCommand::Encode { kind, input } => read_text_input(&input).and_then(|text| {
            let der = encode_from_json(kind, &text)?;
            println!("{}", aic::hex::encode(&der));
            Ok(())
        }),
        AicCommand::InspectCert { pem } => inspect_cert(&pem),
    })
}

pub fn run_aic_jwt(cmd: AicJwtCommand) -> ExitCode {
    match cmd {
        AicJwtCommand::Verify(args) => match verify(&args) {
            Ok(decision) => {
                println!(
                    "{}",
                    serde_json::to_string(&decision).unwrap_or_else(|_| "{}".into())
                );
                if decision.permit {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_INVALID)
                }
            }
            Err(f) => finish(Err(f)),
        },
    }
}

fn print_json(v: &serde_json::Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v).map_err(|e| invalid(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn read_file(path: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| usage(format!("reading {path}: {e}")))
}

/// Hex on the command line; `@file` may hold hex text or raw DER.
fn read_der_input(input: &str) -> Result<Vec<u8>, Failure> {
    match input.strip_prefix('@') {
        Some(path) => {
            let bytes = read_file(path)?;
            Ok(std::str::from_utf8(&bytes)
                .ok()
                .and_then(aic::hex::decode)
                .unwrap_or(bytes))
        }
        None => aic::hex::decode(input)
            .ok_or_else(|| usage("input is not hex (use @file for a DER file)")),
    }
}

fn read_text_input(input: &str) -> Result<String, Failure> {
    match input.strip_prefix('@') {
        Some(path) => {
            String::from_utf8(read_file(path)?).map_err(|_| usage(format!("{path} is not UTF-8")))
        }
        None => Ok(input.to_owned()),
    }
}

/// Pretty JSON in the structure's field order (the ASN.1 order).
fn decode_to_json(kind: StructureKind, der: &[u8]) -> Result<String, aic::DecodeError> {
    use aic::*;
    fn j<T: serde::Serialize>(v: T) -> String {
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
    Ok(match kind {
        StructureKind::Aic => j(Aic::from_der(der)?),
        StructureKind::Tbs => j(DelegationAuthTbs::from_der(der)?),
        StructureKind::Pa => j(PrincipalAuthorization::from_der(der)?),
        StructureKind::Cap => j(Capability::from_der(der)?),
        StructureKind::Pu => j(PrincipalUid::from_der(der)?),
        StructureKind::Dpol => j(DelegationPolicy::from_der(der)?),
        StructureKind::Da => j(DelegationAuthorization::from_der(der)?),
    })
}

/// JSON → model → DER, then a strict decode of the result so that the
/// encoder never prints bytes a verifier would reject (bounds, versions).
fn encode_from_json(kind: StructureKind, text: &str) -> Result<Vec<u8>, Failure> {
    use aic::*;
    fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Failure> {
        serde_json::from_str(text).map_err(|e| invalid(format!("JSON: {e}")))
    }
    let der = match kind {
        StructureKind::Aic => parse::<Aic>(text)?.to_der(),
        StructureKind::Tbs => parse::<DelegationAuthTbs>(text)?.to_der(),
        StructureKind::Pa => parse::<PrincipalAuthorization>(text)?.to_der(),
        StructureKind::Cap => parse::<Capability>(text)?.to_der(),
        StructureKind::Pu => parse::<PrincipalUid>(text)?.to_der(),
        StructureKind::Dpol => parse::<DelegationPolicy>(text)?.to_der(),
        StructureKind::Da => parse::<DelegationAuthorization>(text)?.to_der(),
    };
    decode_to_json(kind, &der).map_err(|e| invalid(e.to_string()))?;
    Ok(der)
}

fn inspect_cert(path: &str) -> Result<(), Failure> {
    let bytes = read_file(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let der = aic::cert::pem_decode(&text, "CERTIFICATE")
        .ok_or_else(|| invalid(format!("{path}: no PEM CERTIFICATE block")))?;
    let view = aic::cert::CertificateView::from_der(&der)
        .map_err(|e| invalid(format!("certificate: {e}")))?;
    let to_json = |r: Option<Result<serde_json::Value, aic::DecodeError>>| match r {
        None => serde_json::Value::Null,
        Some(Ok(v)) => v,
        Some(Err(e)) => serde_json::json!({ "error": e.to_string() }),
    };
    let aic_json = to_json(
        view.aic()
            .map(|r| r.map(|a| serde_json::to_value(a).unwrap_or_default())),
    );
    let pa_json = to_json(
        view.principal_authorization()
            .map(|r| r.map(|p| serde_json::to_value(p).unwrap_or_default())),
    );
    let out = serde_json::json!({
        "subject_spki_sha256": aic::hex::encode(&aic::crypto::sha256(&view.subject_spki_der)),
        "aic": aic_json,
        "principal_authorization": pa_json,
    });
    print_json(&out)
}

fn b64_arg(name: &str, value: &str) -> Result<Vec<u8>, Failure> {
    STANDARD
        .decode(value.trim())
        .map_err(|_| usage(format!("--{name} is not standard base64")))
}

fn verify(args: &VerifyArgs) -> Result<Decision, Failure> {
    let token = read_text_input(&args.token)?;
    let token = token.trim();
    let issuer_spki = match (&args.issuer_spki, &args.jwks) {
        (Some(spki), _) => b64_arg("issuer-spki", spki)?,
        (None, Some(source)) => match issuer_key_from_jwks(token, source)? {
            Ok(spki) => spki,
            Err(reason) => return Ok(outer_denial(reason)),
        },
        (None, None) => return Err(usage("--issuer-spki or --jwks is required")),
    };
    let principal_spki = b64_arg("principal-spki", &args.principal_spki)?;
    let presenter_spki = args
        .presenter_spki
        .as_deref()
        .map(|v| b64_arg("presenter-spki", v))
        .transpose()?;
    let requested = match &args.capability {
        None => None,
        Some(c) => {
            let (scheme, id) = c
                .split_once(':')
                .ok_or_else(|| usage("--capability must be scheme:id"))?;
            let params = args
                .params
                .as_deref()
                .map(serde_json::from_str::<serde_json::Value>)
                .transpose()
                .map_err(|e| usage(format!("--params is not JSON: {e}")))?;
            Some(CapabilityClaim {
                scheme: scheme.into(),
                id: id.into(),
                params,
            })
        }
    };
    let pa = match &args.pa {
        None => None,
        Some(p) => {
            let text = read_text_input(p)?;
            Some(
                serde_json::from_str::<aic::PrincipalAuthorization>(&text).map_err(|e| {
                    usage(format!("--pa is not a PrincipalAuthorization JSON: {e}"))
                })?,
            )
        }
    };
    let mut opts = VerifyOptions::new(&issuer_spki, &principal_spki, args.at);
    opts.skew_secs = args.skew;
    opts.expected_issuer = args.issuer.as_deref();
    opts.expected_audience = args.audience.as_deref();
    opts.presenter_spki_der = presenter_spki.as_deref();
    opts.source_ip = args.source_ip;
    opts.current_concurrency = args.concurrent;
    opts.allow_unknown_constraints = args.allow_unknown_constraints;
    opts.requested_capability = requested;
    opts.principal_authorization = pa.as_ref();
    Ok(Decision::from(&verify_aic_jwt(token, &opts)))
}

/// The issuer key the token's `kid` names in the JWK Set at `source`. The
/// inner `Err` is a denial (no such key, an unusable token header); the
/// outer one a usage error (the set cannot be read).
fn issuer_key_from_jwks(token: &str, source: &str) -> Result<Result<Vec<u8>, String>, Failure> {
    let set =
        JwkSet::parse(&read_jwks(source)?).map_err(|e| usage(format!("--jwks {source}: {e}")))?;
    let kid = match aic::jwt::jws::parse(token, aic::jwt::OUTER_TYP, true) {
        Ok(jws) => jws.header.kid.unwrap_or_default(),
        Err(e) => return Ok(Err(e.to_string())),
    };
    Ok(set
        .spki_for_kid(&kid)
        .map_err(|e| format!("issuer key: {e}")))
}

/// A denial at the outer signature step, before the pipeline could start.
fn outer_denial(reason: String) -> Decision {
    Decision {
        permit: false,
        actor: None,
        executor: None,
        principal: None,
        failed_step: Some(aic::jwt::Step::OuterSignature),
        reason: Some(reason),
    }
}

/// Most bytes read from a JWK Set file or URL.
const MAX_JWKS_BYTES: usize = 1 << 20;

fn read_jwks(source: &str) -> Result<Vec<u8>, Failure> {
    if !(source.starts_with("http://") || source.starts_with("https://")) {
        let bytes = std::fs::read(source).map_err(|e| usage(format!("--jwks {source}: {e}")))?;
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(usage(format!("--jwks {source}: larger than 1 MiB")));
        }
        return Ok(bytes);
    }
    let fetch = async {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let mut resp = client
            .get(source)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_JWKS_BYTES {
                return Err("larger than 1 MiB".to_string());
            }
        }
        Ok::<_, String>(body)
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| usage(format!("starting the runtime: {e}")))?
        .block_on(fetch)
        .map_err(|e| usage(format!("--jwks {source}: {e}")))
}
