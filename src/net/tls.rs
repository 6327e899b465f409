//! TLS on the controller listener and on connections to peers (rustls through futures-rustls,
//! which runs over glommio's streams as it runs over any `AsyncRead + AsyncWrite`).
//!
//! `Tls::new` reads the PEM stores `config::tls` names, once at start, and builds both sides:
//! the listener's (with `ssl.client.auth` deciding whether a client certificate is required)
//! and the client's, which presents the same certificate to peers and checks theirs against
//! the same trust store, including the host name unless
//! `ssl.endpoint.identification.algorithm` is empty (Kafka's behaviour on both counts).
//!
//! `Stream` is a connection either way: plaintext, or TLS as server or client. A plaintext
//! frame is written with vectored `sendmsg` straight from the record bytes (`frame_out`); a TLS
//! frame is gathered into one buffer and encrypted, because rustls copies it into records anyway.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::{future, AsyncRead, AsyncWrite, AsyncWriteExt};
use futures_rustls::rustls;
use glommio::net::{Preallocated, TcpStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::frame_out::{write_frame, Frame};
use crate::config::tls::{ClientAuth, KeyStore, TlsConfig, TrustStore};

/// How long a TLS handshake may take, on either side, before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Both sides of TLS for one node, built once at start and shared by every shard.
#[derive(Clone)]
pub struct Tls {
    /// `None` for a client-only `Tls` (`Tls::client`).
    acceptor: Option<futures_rustls::TlsAcceptor>,
    connector: futures_rustls::TlsConnector,
    pub client_auth: ClientAuth,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

/// Why the TLS material cannot be used: each names the file or key it came from (`origin`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("a listener needs a keystore")]
    NoKeystore,
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{origin}: bad PEM certificate: {source}")]
    BadCertificate {
        origin: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{origin}: no certificate (BEGIN CERTIFICATE) in it")]
    NoCertificate { origin: String },
    #[error("{origin}: the private key is encrypted; give an unencrypted PKCS#8 key")]
    EncryptedKey { origin: String },
    #[error("{origin}: no usable private key (BEGIN PRIVATE KEY): {source}")]
    NoKey {
        origin: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{origin}: a certificate cannot be trusted: {source}")]
    Untrusted {
        origin: String,
        source: rustls::Error,
    },
    #[error("TLS versions: {0}")]
    Versions(rustls::Error),
    #[error("the trust store cannot verify {side}: {source}")]
    Verifier {
        side: &'static str,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("{origin}: the private key does not fit the first certificate: {source}")]
    KeyMismatch {
        origin: String,
        source: rustls::Error,
    },
}

/// Why `write_throwaway_pki` failed.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot make a throwaway certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

impl Tls {
    /// Reads the key, the chain and the trust store, and builds both sides. Every error names
    /// the file (or the inline key) and what is wrong with it.
    pub fn new(config: &TlsConfig) -> Result<Tls, TlsError> {
        let Some(keystore) = &config.keystore else {
            return Err(TlsError::NoKeystore);
        };
        let identity = read_keystore(keystore)?;
        Self::build(config, Some(identity))
    }

    /// The client side only, for a tool: it presents the keystore's certificate when the
    /// configuration has one.
    pub fn client(config: &TlsConfig) -> Result<Tls, TlsError> {
        let identity = config.keystore.as_ref().map(read_keystore).transpose()?;
        Self::build(config, identity)
    }

    fn build(config: &TlsConfig, identity: Option<Identity>) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(read_truststore(&config.truststore)?);
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
        if config.tls13 {
            versions.push(&rustls::version::TLS13);
        }
        if config.tls12 {
            versions.push(&rustls::version::TLS12);
        }
        let mismatch = |origin: &str, source| TlsError::KeyMismatch {
            origin: origin.to_owned(),
            source,
        };

        let acceptor = match &identity {
            None => None,
            Some((chain, key, source)) => {
                let server = rustls::ServerConfig::builder_with_provider(provider.clone())
                    .with_protocol_versions(&versions)
                    .map_err(TlsError::Versions)?;
                let server = match config.client_auth {
                    ClientAuth::None => server.with_no_client_auth(),
                    auth => {
                        let builder = WebPkiClientVerifier::builder_with_provider(
                            roots.clone(),
                            provider.clone(),
                        );
                        let builder = if auth == ClientAuth::Requested {
                            builder.allow_unauthenticated()
                        } else {
                            builder
                        };
                        let verifier = builder.build().map_err(|source| TlsError::Verifier {
                            side: "clients",
                            source,
                        })?;
                        server.with_client_cert_verifier(verifier)
                    }
                };
                let server = server
                    .with_single_cert(chain.clone(), key.clone_key())
                    .map_err(|e| mismatch(source, e))?;
                Some(futures_rustls::TlsAcceptor::from(Arc::new(server)))
            }
        };
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|source| TlsError::Verifier {
                side: "servers",
                source,
            })?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(TlsError::Versions)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PeerVerifier {
                inner: verifier,
                check_name: config.verify_hostname,
            }));
        let client = match identity {
            Some((chain, key, source)) => client
                .with_client_auth_cert(chain, key)
                .map_err(|e| mismatch(&source, e))?,
            None => client.with_no_client_auth(),
        };
        Ok(Tls {
            acceptor,
            connector: futures_rustls::TlsConnector::from(Arc::new(client)),
            client_auth: config.client_auth,
        })
    }

    /// The server side of the handshake on an accepted connection, within `limit`.
    pub async fn accept(
        &self,
        stream: TcpStream<Preallocated>,
        limit: Duration,
    ) -> io::Result<Stream> {
        let Some(acceptor) = &self.acceptor else {
            return Err(io::Error::other("a client-only TLS cannot accept"));
        };
        let handshake = async {
            let tls = acceptor.accept(stream).await?;
            Ok(Stream::Server(Box::new(tls)))
        };
        within(limit, handshake).await
    }

    /// The client side of the handshake with `host` (the name or address we dialled), within
    /// `limit`.
    pub async fn connect(
        &self,
        host: &str,
        stream: TcpStream<Preallocated>,
        limit: Duration,
    ) -> io::Result<Stream> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("host {host:?}: {e}"))
        })?;
        let handshake = async {
            let tls = self.connector.connect(name, stream).await?;
            Ok(Stream::Client(Box::new(tls)))
        };
        within(limit, handshake).await
    }
}

async fn within<T>(
    limit: Duration,
    work: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    future::or(work, async {
        glommio::timer::sleep(limit).await;
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no TLS handshake within {} ms", limit.as_millis()),
        ))
    })
    .await
}

/// The web PKI check of a peer's certificate chain, with the host name check only when
/// `ssl.endpoint.identification.algorithm` asks for it.
#[derive(Debug)]
struct PeerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// PEM text as a file holds it or as Kafka's inline keys do (where a properties file's line
/// continuations may have joined the lines): each block rebuilt with its own lines.
pub fn normalize_pem(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = after[..label_end].trim();
        let body_and_rest = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_and_rest.find(&end_marker) else {
            // Left as it is: the parser says what is missing.
            out.push_str(&rest[begin..]);
            return out;
        };
        let body: String = body_and_rest[..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        for line in body.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_and_rest[end + end_marker.len()..];
    }
    out
}

fn read_pem_file(path: &Path, what: &'static str) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(pem: &str, origin: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let origin = || origin.to_owned();
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadCertificate {
            origin: origin(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { origin: origin() });
    }
    Ok(certs)
}

fn private_key(pem: &str, origin: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    if pem.contains("ENCRYPTED PRIVATE KEY") {
        return Err(TlsError::EncryptedKey {
            origin: origin.to_owned(),
        });
    }
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|source| TlsError::NoKey {
        origin: origin.to_owned(),
        source,
    })
}

/// A certificate chain, its private key, and where they were read from (for errors).
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String);

fn read_keystore(store: &KeyStore) -> Result<Identity, TlsError> {
    match store {
        KeyStore::File(path) => {
            let pem = normalize_pem(&read_pem_file(path, "keystore (ssl.keystore.location)")?);
            let source = format!("ssl.keystore.location {}", path.display());
            let key = private_key(&pem, &source)?;
            Ok((certificates(&pem, &source)?, key, source))
        }
        KeyStore::Inline { chain, key } => {
            let key = private_key(&normalize_pem(&key.0), "ssl.keystore.key")?;
            let chain = certificates(&normalize_pem(chain), "ssl.keystore.certificate.chain")?;
            Ok((chain, key, "ssl.keystore.certificate.chain".into()))
        }
    }
}

fn read_truststore(store: &TrustStore) -> Result<RootCertStore, TlsError> {
    let (pem, source) = match store {
        TrustStore::File(path) => (
            read_pem_file(path, "truststore (ssl.truststore.location)")?,
            format!("ssl.truststore.location {}", path.display()),
        ),
        TrustStore::Inline(certs) => (certs.clone(), "ssl.truststore.certificates".to_owned()),
    };
    let mut roots = RootCertStore::empty();
    for cert in certificates(&normalize_pem(&pem), &source)? {
        roots.add(cert).map_err(|e| TlsError::Untrusted {
            origin: source.clone(),
            source: e,
        })?;
    }
    Ok(roots)
}

/// One connection: plaintext, or TLS as the server or the client side.
pub enum Stream {
    Plain(TcpStream<Preallocated>),
    Server(Box<futures_rustls::server::TlsStream<TcpStream<Preallocated>>>),
    Client(Box<futures_rustls::client::TlsStream<TcpStream<Preallocated>>>),
}

impl Stream {
    /// Writes `frame` whole: vectored from its slices in plaintext, gathered for TLS.
    pub async fn write_frame<C: AsRef<[u8]>>(&mut self, frame: &Frame<C>) -> io::Result<()> {
        match self {
            Stream::Plain(s) => write_frame(s, frame).await,
            tls => {
                tls.write_all(&frame.to_vec()).await?;
                tls.flush().await
            }
        }
    }

    /// The TCP stream under it.
    pub fn tcp(&self) -> &TcpStream<Preallocated> {
        match self {
            Stream::Plain(s) => s,
            Stream::Server(s) => s.get_ref().0,
            Stream::Client(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
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
            Stream::Server(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_close(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// Failed handshakes said at warning level at most once a second per shard, with how many
/// were not said in between: a scanner cannot flood the log.
pub fn handshake_failed(peer: &str, error: &io::Error) {
    thread_local! {
        static SAID: crate::logsafe::RateLimit = const { crate::logsafe::RateLimit::repeated_warning() };
    }
    match SAID.with(|said| said.due(std::time::Instant::now())) {
        None => tracing::debug!(%peer, error = %error, "TLS handshake failed"),
        Some(unsaid) => tracing::warn!(%peer, error = %error, unsaid,
            "TLS handshake failed; the connection is closed"),
    }
}

/// A throwaway certificate authority and certificates it signs, for benchmarks and tests:
/// `ca.pem` (the trust store) and `<name>.pem` for each of `names` (an unencrypted PKCS#8 key
/// and its certificate, naming 127.0.0.1 and localhost), written into `dir`.
pub fn write_throwaway_pki(dir: &Path, names: &[&str]) -> Result<(), PkiError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let e = PkiError::Certificate;
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|source| PkiError::Write { path, source })
    };
    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Named apart from every other throwaway CA, so a chain is never matched to the wrong one.
    let ca_name = format!("ringraft throwaway CA {}", uuid::Uuid::new_v4());
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    write("ca.pem", &ca_cert.pem())?;
    let issuer = Issuer::new(ca, ca_key);
    for name in names {
        let key = KeyPair::generate().map_err(e)?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .map_err(e)?;
        params.distinguished_name.push(DnType::CommonName, *name);
        let cert = params.signed_by(&key, &issuer).map_err(e)?;
        write(&format!("{name}.pem"), &(key.serialize_pem() + &cert.pem()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_pem_lines_are_rebuilt() {
        let text = "-----BEGIN CERTIFICATE----- QUJD REVG -----END CERTIFICATE-----\
                    -----BEGIN PRIVATE KEY-----\nR0hJ\n-----END PRIVATE KEY-----";
        assert_eq!(
            normalize_pem(text),
            "-----BEGIN CERTIFICATE-----\nQUJDREVG\n-----END CERTIFICATE-----\n\
             -----BEGIN PRIVATE KEY-----\nR0hJ\n-----END PRIVATE KEY-----\n"
        );
    }
}
