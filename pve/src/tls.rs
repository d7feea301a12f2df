//! TLS to pveproxy, as a ureq connector: public roots, a CA file (`ca_path`), a pinned
//! certificate (`api_fingerprint`), or no verification. It also keeps each response's status
//! line, because older PVE puts its error message only there and ureq keeps just the code.

use std::fmt;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
    StreamOwned,
};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

/// How the server certificate is checked.
#[derive(Clone)]
pub enum Trust {
    /// The public web PKI roots.
    PublicRoots,
    /// The certificates of a PEM file (PVE's `/etc/pve/pve-root-ca.pem`).
    Ca(Vec<CertificateDer<'static>>),
    /// Exactly this SHA-256 fingerprint of the server (leaf) certificate.
    Pin([u8; 32]),
    /// Anything (`validate_certs: false`).
    Insecure,
}

/// Parses `AA:BB:…` or plain hex (64 digits) into a SHA-256 fingerprint.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text
        .chars()
        .filter(|c| *c != ':' && !c.is_whitespace())
        .collect();
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(
            "must be a SHA-256 fingerprint: 32 hex bytes, colon-separated (AA:BB:…) or not".into(),
        );
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The certificates of a PEM file's contents.
pub fn parse_ca_pem(data: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(data)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e:?})"))?;
    if certs.is_empty() {
        return Err("no certificate found in the file".into());
    }
    Ok(certs)
}

/// Accepts a server certificate by fingerprint (pin) or unconditionally (insecure), while
/// still checking that the server holds the certificate's key.
#[derive(Debug)]
struct FingerprintVerifier {
    pin: Option<[u8; 32]>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for FingerprintVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pin) = self.pin else {
            return Ok(ServerCertVerified::assertion());
        };
        let got = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
        if got.as_ref() == pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "certificate fingerprint mismatch: the server presented {}, the pinned fingerprint is {}",
                colon_hex(got.as_ref()),
                colon_hex(&pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            signature,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            signature,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Builds the rustls client configuration for a trust mode.
pub fn client_config(trust: &Trust) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = match trust {
        Trust::PublicRoots => {
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Ca(certs) => {
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs.iter().cloned());
            if added == 0 {
                return Err(
                    "none of the trusted CA file's certificates could be used as a trust anchor"
                        .into(),
                );
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Pin(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(FingerprintVerifier {
                pin: Some(*pin),
                provider,
            }))
            .with_no_client_auth(),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(FingerprintVerifier {
                pin: None,
                provider,
            }))
            .with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The status line of the latest response on any connection of this client.
#[derive(Default, Debug)]
pub struct StatusLine {
    expecting: bool,
    partial: Vec<u8>,
    /// The reason phrase of the last complete status line (`VM is locked (create)`).
    pub last_reason: Option<String>,
}

impl StatusLine {
    fn request_sent(&mut self) {
        self.expecting = true;
        self.partial.clear();
        self.last_reason = None;
    }

    fn received(&mut self, bytes: &[u8]) {
        if !self.expecting {
            return;
        }
        self.partial.extend_from_slice(bytes);
        if let Some(end) = self.partial.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&self.partial[..end]).to_string();
            // "HTTP/1.1 500 VM is locked (create)"
            self.last_reason = line.splitn(3, ' ').nth(2).map(str::to_string);
            self.expecting = false;
            self.partial.clear();
        } else if self.partial.len() > 8192 {
            self.expecting = false;
            self.partial.clear();
        }
    }
}

/// The connector: wraps the TCP transport in TLS with our configuration.
pub struct PveTls {
    pub config: Arc<ClientConfig>,
    pub status: Arc<Mutex<StatusLine>>,
}

impl fmt::Debug for PveTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PveTls")
    }
}

impl<In: Transport> Connector<In> for PveTls {
    type Out = Either<In, PveTlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .host()
            .unwrap_or("")
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let name =
            ServerName::try_from(host).map_err(|_| ureq::Error::Tls("invalid server name"))?;
        let mut conn = ClientConnection::new(self.config.clone(), name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock).map_err(handshake_error)?;
        Ok(Some(Either::B(PveTlsTransport {
            buffers: LazyBuffers::new(64 * 1024, 64 * 1024),
            stream: StreamOwned { conn, sock },
            status: self.status.clone(),
        })))
    }
}

/// A TLS handshake that was cut short (reset, closed) or got no answer in time: no request
/// was sent on that connection, so sending it again on a new one cannot do it twice. TLS's
/// own failures (an untrusted certificate, an alert) are `rustls::Error`s instead.
#[derive(Debug)]
pub struct HandshakeCut(pub String);

impl fmt::Display for HandshakeCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the TLS handshake did not complete: {}", self.0)
    }
}

impl std::error::Error for HandshakeCut {}

fn handshake_error(err: std::io::Error) -> ureq::Error {
    if err
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
    {
        return err.into();
    }
    let kind = err.kind();
    let cause = ureq::Error::from(err).to_string();
    ureq::Error::Io(std::io::Error::new(kind, HandshakeCut(cause)))
}

/// A TLS connection that notes status lines as they arrive.
pub struct PveTlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
    status: Arc<Mutex<StatusLine>>,
}

impl fmt::Debug for PveTlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PveTlsTransport")
    }
}

impl Transport for PveTlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request_sent();
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .received(&input[..amount]);
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints() {
        let f = "C0:5A:9D:EA:48:72:39:8B:BD:C5:7F:B2:77:AC:16:82:98:F0:F6:93:09:0A:9C:C8:5E:11:FC:4F:00:07:AA:F8";
        let b = parse_fingerprint(f).unwrap();
        assert_eq!(colon_hex(&b), f);
        assert_eq!(
            parse_fingerprint(&f.replace(':', "").to_lowercase()).unwrap(),
            b
        );
        assert!(parse_fingerprint("C0:5A").is_err());
        assert!(parse_fingerprint(&"ZZ".repeat(32)).is_err());
    }

    #[test]
    fn status_line_capture() {
        let mut s = StatusLine::default();
        s.request_sent();
        s.received(b"HTTP/1.1 500 VM is loc");
        assert_eq!(s.last_reason, None);
        s.received(b"ked (create)\r\nServer: pve-api-daemon/3.0\r\n");
        assert_eq!(s.last_reason.as_deref(), Some("VM is locked (create)"));
        s.received(b"HTTP/1.1 200 OK\r\n");
        assert_eq!(s.last_reason.as_deref(), Some("VM is locked (create)"));
    }
}
