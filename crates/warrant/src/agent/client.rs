//! The agent's two conversations: with the person's signer (a DA) and with
//! the CA (a certificate, the chain, an AIC-JWT). Every non-200 answer
//! becomes a [`RenewError`] that says whether to retry.

use super::schedule::{Disposition, classify_ca, classify_signer, parse_retry_after};
use crate::delegate::protocol::{DaRequest, DaResponse, PATH, SignerError};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why one renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("the signer refused ({key}): {detail}")]
    SignerRefused {
        status: u16,
        key: String,
        detail: String,
    },
    #[error("the CA refused ({status} {key}): {detail}")]
    CaRefused {
        status: u16,
        key: String,
        detail: String,
        retry_after: Option<Duration>,
    },
    #[error("cannot reach the {peer}: {detail}")]
    Unreachable { peer: &'static str, detail: String },
    /// Local trouble (files, keys, a malformed answer): final.
    #[error("{0:#}")]
    Local(#[from] anyhow::Error),
}

impl RenewError {
    pub fn disposition(&self) -> Disposition {
        match self {
            RenewError::SignerRefused { status, key, .. } => classify_signer(*status, key),
            RenewError::CaRefused { status, key, .. } => classify_ca(*status, key),
            RenewError::Unreachable { .. } => Disposition::Retry,
            RenewError::Local(_) => Disposition::Stop,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RenewError::CaRefused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The process's exit status when this error stops the agent.
    pub fn exit_code(&self) -> u8 {
        match self {
            RenewError::CaRefused { .. } => super::EXIT_CA_REFUSED,
            RenewError::SignerRefused { .. } => super::EXIT_SIGNER_REFUSED,
            RenewError::Unreachable { .. } | RenewError::Local(_) => super::EXIT_ERROR,
        }
    }
}

/// Where the signer listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignerAddr {
    Unix(PathBuf),
    /// `https://host:port`: mTLS with the agent's current certificate.
    Https(String),
}

impl SignerAddr {
    pub fn parse(s: &str) -> Result<SignerAddr, String> {
        if s.starts_with("https://") && s.len() > "https://".len() {
            return Ok(SignerAddr::Https(s.trim_end_matches('/').to_string()));
        }
        match s.strip_prefix("unix:") {
            Some(p) if !p.is_empty() => Ok(SignerAddr::Unix(PathBuf::from(p))),
            _ => Err(format!(
                "--signer {s:?}: expected unix:PATH or https://HOST:PORT (`warrant delegate serve`)"
            )),
        }
    }
}

/// Asks the signer for one DA; `dir` holds the agent's current certificate
/// (its mTLS client certificate for an `https://` signer).
pub async fn request_da(
    addr: &SignerAddr,
    dir: &Path,
    req: &DaRequest,
) -> Result<DaResponse, RenewError> {
    let body = serde_json::to_vec(req).map_err(anyhow::Error::from)?;
    let sent = match addr {
        SignerAddr::Unix(path) => post_unix(path, body).await,
        SignerAddr::Https(url) => post_mtls(url, dir, body).await?,
    };
    let (status, bytes) = sent.map_err(|detail| RenewError::Unreachable {
        peer: "signer",
        detail,
    })?;
    if status == 200 {
        return serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("the signer's answer: {e}").into());
    }
    let err: SignerError = serde_json::from_slice(&bytes).unwrap_or_else(|_| SignerError {
        error: format!("http.{status}"),
        detail: String::from_utf8_lossy(&bytes).into_owned(),
    });
    Err(RenewError::SignerRefused {
        status,
        key: err.error,
        detail: err.detail,
    })
}

/// `POST /v1/da` over mTLS: the client certificate is the agent's current
/// one (`cert.pem`, `chain.pem`, `key.pem`); the signer's certificate must
/// chain to a CA in `chain.pem` (the Warrant People CA or Root).
async fn post_mtls(
    url: &str,
    dir: &Path,
    body: Vec<u8>,
) -> Result<Result<(u16, Bytes), String>, RenewError> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|e| {
            anyhow::anyhow!(
                "an https:// signer needs the agent's current certificate: {}: {e} \
                 (issue the first one through a unix: signer)",
                dir.join(name).display()
            )
        })
    };
    let (cert, chain, key) = (
        read(super::files::CERT)?,
        read(super::files::CHAIN)?,
        read(super::files::KEY)?,
    );
    let identity = reqwest::Identity::from_pem(&[key, cert, chain.clone()].concat())
        .map_err(|e| anyhow::anyhow!("the agent's client certificate: {e}"))?;
    let roots = reqwest::Certificate::from_pem_bundle(&chain)
        .map_err(|e| anyhow::anyhow!("chain.pem: {e}"))?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .tls_certs_only(roots)
        .identity(identity)
        .build()
        .map_err(|e| anyhow::anyhow!("TLS client: {e}"))?;
    let sent = http
        .post(format!("{url}{PATH}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    Ok(match sent {
        Ok(resp) => {
            let status = resp.status().as_u16();
            resp.bytes()
                .await
                .map(|b| (status, b))
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(format!("{url}: {e}")),
    })
}

async fn post_unix(path: &Path, body: Vec<u8>) -> Result<(u16, Bytes), String> {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::post(PATH)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// The CA's HTTP API, as the agent uses it.
pub struct Ca {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// What `POST /api/v1/certs` answered.
#[derive(Debug, serde::Deserialize)]
pub struct Issued {
    pub serial_number: String,
    pub cert_pem: String,
    pub ca: String,
    pub not_before: String,
    pub not_after: String,
}

impl Ca {
    pub fn new(base: &str, token: String) -> anyhow::Result<Ca> {
        Ok(Ca {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// `POST /api/v1/certs` with the signer's body.
    pub async fn issue(&self, body: &serde_json::Value) -> Result<Issued, RenewError> {
        let resp = self
            .http
            .post(format!("{}/api/v1/certs", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).map_err(anyhow::Error::from)?)
            .send()
            .await
            .map_err(unreachable)?;
        let bytes = ok_body(resp).await?;
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("the CA's answer: {e}").into())
    }

    /// `GET /api/v1/ca/{name}` (PEM).
    pub async fn ca_pem(&self, name: &str) -> Result<String, RenewError> {
        let resp = self
            .http
            .get(format!("{}/api/v1/ca/{name}", self.base))
            .send()
            .await
            .map_err(unreachable)?;
        let bytes = ok_body(resp).await?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| anyhow::anyhow!("CA certificate {name}: not UTF-8").into())
    }

    /// `POST /oauth/token` (RFC 7523 JWT-bearer grant) with a DA JWT.
    pub async fn aic_jwt(&self, da_jwt: &str) -> Result<TokenAnswer, RenewError> {
        let form = format!(
            "grant_type={}&assertion={}",
            "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer", da_jwt
        );
        let resp = self
            .http
            .post(format!("{}/oauth/token", self.base))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(unreachable)?;
        let bytes = ok_body(resp).await?;
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("the token answer: {e}").into())
    }
}

/// The parts of an RFC 6749 §5.1 answer the agent keeps.
#[derive(Debug, serde::Deserialize)]
pub struct TokenAnswer {
    pub access_token: String,
    #[serde(default)]
    pub expires_in: Option<i64>,
}

fn unreachable(e: reqwest::Error) -> RenewError {
    RenewError::Unreachable {
        peer: "CA",
        detail: format!("{e}"),
    }
}

/// The body of a 200, or the refusal: `{"message": key, "detail"}` from the
/// API, `{"error_key", "error_description"}` from `/oauth/token`.
async fn ok_body(resp: reqwest::Response) -> Result<Bytes, RenewError> {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let bytes = resp.bytes().await.map_err(unreachable)?;
    if status == 200 {
        return Ok(bytes);
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let text = |k: &str| v.get(k).and_then(|s| s.as_str()).map(str::to_string);
    Err(RenewError::CaRefused {
        status,
        key: text("error_key")
            .or_else(|| text("message"))
            .unwrap_or_else(|| format!("http.{status}")),
        detail: text("detail")
            .or_else(|| text("error_description"))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect()),
        retry_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_signer_addresses() {
        assert_eq!(
            SignerAddr::parse("unix:/run/s.sock"),
            Ok(SignerAddr::Unix("/run/s.sock".into()))
        );
        assert!(SignerAddr::parse("unix:").is_err());
        assert_eq!(
            SignerAddr::parse("https://127.0.0.1:7443/"),
            Ok(SignerAddr::Https("https://127.0.0.1:7443".into()))
        );
        assert!(SignerAddr::parse("https://").is_err());
        assert!(SignerAddr::parse("/run/s.sock").is_err());
    }

    #[test]
    fn rejected_grants_stop_with_the_signer_exit_code() {
        let e = RenewError::SignerRefused {
            status: 403,
            key: "grant.unknown_agent".into(),
            detail: String::new(),
        };
        assert_eq!(e.disposition(), Disposition::Stop);
        assert_eq!(e.exit_code(), super::super::EXIT_SIGNER_REFUSED);
        let e = RenewError::Unreachable {
            peer: "CA",
            detail: String::new(),
        };
        assert_eq!(e.disposition(), Disposition::Retry);
    }
}
