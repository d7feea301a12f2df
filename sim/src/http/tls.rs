//! The simulator's certificates: a cluster CA and a node certificate signed by it, made at
//! every start like a fresh PVE install's `pve-root-ca.pem` and `pve-ssl.pem`.

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What a client needs to trust the server, and the server's TLS configuration.
pub struct Tls {
    pub config: Arc<ServerConfig>,
    /// SHA-256 of the node certificate (DER), colon-separated uppercase hex, as `pvenode cert info` prints it.
    pub fingerprint: String,
}

fn fail(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Generates the CA and node certificate, writes `pve-root-ca.pem` and `pve-ssl.pem` into
/// `dir`, and returns the server configuration.
pub fn generate(dir: &Path, node: &str) -> Result<Tls, String> {
    let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA params", e))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Proxmox Virtual Environment (pve-sim)");
    ca_params
        .distinguished_name
        .push(DnType::OrganizationName, "PVE Cluster Manager CA");
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|e| fail("CA certificate", e))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let node_key = KeyPair::generate().map_err(|e| fail("node key", e))?;
    let mut params = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        node.to_string(),
    ])
    .map_err(|e| fail("node params", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{node}.pve-sim"));
    let cert = params
        .signed_by(&node_key, &issuer)
        .map_err(|e| fail("node certificate", e))?;

    std::fs::write(dir.join("pve-root-ca.pem"), ca_cert.pem())
        .map_err(|e| fail("write pve-root-ca.pem", e))?;
    std::fs::write(dir.join("pve-ssl.pem"), cert.pem())
        .map_err(|e| fail("write pve-ssl.pem", e))?;

    let digest = ring::digest::digest(&ring::digest::SHA256, cert.der());
    let fingerprint = digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":");

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(node_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("TLS versions", e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| fail("TLS config", e))?;
    Ok(Tls {
        config: Arc::new(config),
        fingerprint,
    })
}
