//! Sockets, TLS and HTTP/2.
//!
//! DNS is resolved once during validation; connections rotate over every resolved
//! address. TLS uses rustls with the aws-lc-rs provider. HTTP/2 goes through hyper
//! (its framing and flow control are not worth re-implementing); HTTP/1.1 uses the
//! in-house fast path in [`crate::http1`] over the same [`Stream`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::error::ConfigError;
use crate::http1::io_class;
use crate::metrics::{ConnectTiming, ErrorClass};
use crate::spec::{Target, TlsOptions};

/// A client connection, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Opens connections to the run's target. Shared by all workers.
pub struct Connector {
    addrs: Vec<SocketAddr>,
    next: AtomicUsize,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Connector {
    /// A connector to `target`'s resolved addresses, with TLS on an `https://` target.
    pub fn new(target: &Target, tls: &TlsOptions, http2: bool) -> Result<Self, ConfigError> {
        let tls = if target.tls {
            let config = tls_config(tls, http2)?;
            let name = ServerName::try_from(target.host.clone()).map_err(|_| {
                ConfigError::new(
                    "url",
                    format!("{:?} is not a valid TLS server name", target.host),
                )
            })?;
            Some((TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Self {
            addrs: target.addrs.clone(),
            next: AtomicUsize::new(0),
            tls,
        })
    }

    /// Open a connection and say how long its TCP and TLS phases took (DNS was
    /// resolved before the run, so `dns` is always `None` here).
    pub async fn connect(&self) -> Result<(Stream, ConnectTiming), ErrorClass> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.addrs.len().max(1);
        let addr = *self.addrs.get(i).ok_or(ErrorClass::Connect)?;
        let started = Instant::now();
        let tcp = TcpStream::connect(addr).await.map_err(|e| match e.kind() {
            io::ErrorKind::ConnectionRefused => ErrorClass::ConnectRefused,
            io::ErrorKind::TimedOut => ErrorClass::Timeout,
            _ => ErrorClass::Connect,
        })?;
        // Small requests must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let connected = Instant::now();
        let mut timing = ConnectTiming {
            dns: None,
            connect: connected - started,
            tls: None,
        };
        match &self.tls {
            None => Ok((Stream::Plain(tcp), timing)),
            Some((connector, name)) => {
                let tls =
                    connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| match io_class(&e) {
                            ErrorClass::Reset => ErrorClass::Reset,
                            _ => ErrorClass::Tls,
                        })?;
                timing.tls = Some(connected.elapsed());
                Ok((Stream::Tls(Box::new(tls)), timing))
            }
        }
    }
}

fn tls_err(reason: String) -> ConfigError {
    ConfigError::new("tls", reason)
}

/// Build the rustls client configuration from the user's options.
pub fn tls_config(opts: &TlsOptions, http2: bool) -> Result<ClientConfig, ConfigError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?;
    let builder = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match &opts.ca_file {
            Some(path) => {
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| tls_err(format!("cannot read CA file {}: {e}", path.display())))?;
                for cert in certs {
                    let cert =
                        cert.map_err(|e| tls_err(format!("bad CA file {}: {e}", path.display())))?;
                    roots.add(cert).map_err(|e| {
                        tls_err(format!("bad CA certificate in {}: {e}", path.display()))
                    })?;
                }
                if roots.is_empty() {
                    return Err(tls_err(format!(
                        "no certificate in CA file {}",
                        path.display()
                    )));
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match (&opts.cert_file, &opts.key_file) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| tls_err(format!("cannot read certificate {}: {e}", cert.display())))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_err(format!("bad certificate {}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| tls_err(format!("cannot read key {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_err(format!("client certificate rejected: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// `--insecure`: accept any server certificate (signatures are still checked so the
/// handshake exercises the same crypto as a verified one).
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

pub type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// HTTP/2 handshake (prior knowledge on plain TCP, ALPN on TLS). The connection task
/// runs on the worker's own runtime.
pub async fn h2_handshake(stream: Stream) -> Result<H2Sender, ErrorClass> {
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| hyper_class(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Classify a hyper error by its innermost IO cause when there is one.
pub fn hyper_class(e: &hyper::Error) -> ErrorClass {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            return io_class(io);
        }
        source = s.source();
    }
    if e.is_parse() || e.is_user() {
        ErrorClass::Protocol
    } else if e.is_timeout() {
        ErrorClass::Timeout
    } else {
        ErrorClass::Reset
    }
}

/// Result of one HTTP/2 exchange.
pub struct H2Outcome {
    pub status: u16,
    /// When the response head arrived (time to first byte, as far as hyper shows it).
    pub first_byte: Instant,
    pub bytes_in: u64,
    pub headers: http::HeaderMap,
}

pub async fn h2_exchange(
    sender: &mut H2Sender,
    request: http::Request<Full<Bytes>>,
    max_body: u64,
    mut body_out: Option<&mut Vec<u8>>,
) -> Result<H2Outcome, ErrorClass> {
    sender.ready().await.map_err(|e| hyper_class(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| hyper_class(&e))?;
    let first_byte = Instant::now();
    let (parts, mut body) = response.into_parts();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| hyper_class(&e))?;
        if let Some(data) = frame.data_ref() {
            total += data.len() as u64;
            if total > max_body {
                return Err(ErrorClass::BodyTooLarge);
            }
            if let Some(out) = body_out.as_deref_mut() {
                out.extend_from_slice(data);
            }
        }
    }
    Ok(H2Outcome {
        status: parts.status.as_u16(),
        first_byte,
        bytes_in: total,
        headers: parts.headers,
    })
}
