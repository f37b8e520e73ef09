//! TLS settings from PEM, for SSL and SASL_SSL listeners and for the admin client (rustls with
//! the ring provider).
//!
//! PEM text may come from a file (`ssl.keystore.location`, `ssl.truststore.location`) or inline
//! from a property (`ssl.keystore.certificate.chain`, `ssl.keystore.key`,
//! `ssl.truststore.certificates`); inline PEM whose line breaks were lost (a properties file's
//! `\` continuations join lines) is accepted.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A TLS setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// Whether a TLS listener asks for client certificates (`ssl.client.auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// A client certificate is asked for; a client without one is `User:ANONYMOUS`.
    Requested,
    /// A client without a certificate that verifies is refused.
    Required,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!(
                "ssl.client.auth={s}: expected required, requested or none"
            )),
        }
    }
}

/// Re-wraps every PEM block of `text` with proper line breaks, so that PEM whose newlines were
/// lost still parses.
fn normalize_pem(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + 11..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_start.find(&end_marker) else {
            break;
        };
        let body: String = body_start[..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        for chunk in body.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(chunk).unwrap_or(""));
            out.push('\n');
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_start[end + end_marker.len()..];
    }
    out
}

/// The certificates in PEM text (`what` names the setting in errors).
pub fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let normalized = normalize_pem(pem);
    let certs = CertificateDer::pem_slice_iter(normalized.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{what}: bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{what}: no PEM certificate (-----BEGIN CERTIFICATE-----) found"
        )));
    }
    Ok(certs)
}

/// The private key in PEM text (PKCS#8, PKCS#1 or SEC1; not encrypted).
pub fn private_key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    if pem.contains("ENCRYPTED PRIVATE KEY") {
        return Err(TlsError(format!(
            "{what}: encrypted private keys are not supported; store the key unencrypted and protect the file"
        )));
    }
    PrivateKeyDer::from_pem_slice(normalize_pem(pem).as_bytes())
        .map_err(|e| TlsError(format!("{what}: no usable PEM private key: {e}")))
}

/// Reads a file for a setting.
pub fn read_pem_file(path: &str, what: &str) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|e| TlsError(format!("{what}={path}: cannot read: {e}")))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(trust: &[CertificateDer<'static>], what: &str) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in trust {
        store
            .add(cert.clone())
            .map_err(|e| TlsError(format!("{what}: unusable trust anchor: {e}")))?;
    }
    Ok(store)
}

/// A certificate chain and its key.
#[derive(Debug)]
pub struct KeyPair {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for KeyPair {
    fn clone(&self) -> Self {
        KeyPair {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// A TLS listener's server configuration.
pub fn server_config(
    identity: &KeyPair,
    trust: &[CertificateDer<'static>],
    client_auth: ClientAuth,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            if trust.is_empty() {
                return Err(TlsError(
                    "ssl.client.auth needs a truststore (ssl.truststore.location) to verify client certificates"
                        .to_owned(),
                ));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(trust, "ssl.truststore.location")?),
                provider(),
            );
            let verifier = if client_auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError(format!("client certificate verifier: {e}")))?,
            )
        }
    };
    let config = builder
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| {
            TlsError(format!(
                "the keystore's certificate and key do not fit: {e}"
            ))
        })?;
    Ok(Arc::new(config))
}

/// The admin client's TLS configuration: trust anchors, an optional client certificate, whether
/// the server's name is checked (`ssl.endpoint.identification.algorithm=https`), and the TLS
/// versions it may negotiate (`ssl.protocol`; `rustls::DEFAULT_VERSIONS` is TLS 1.3 and 1.2).
pub fn client_config(
    trust: &[CertificateDer<'static>],
    identity: Option<&KeyPair>,
    verify_hostname: bool,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = Arc::new(roots(trust, "ssl.truststore.location")?);
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError(format!("ssl.protocol: {e}")))?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| TlsError(format!("server certificate verifier: {e}")))?;
    let builder = if verify_hostname {
        builder.with_webpki_verifier(inner)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoHostnameVerifier(inner)))
    };
    let config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(|e| {
                TlsError(format!(
                    "the client keystore's certificate and key do not fit: {e}"
                ))
            })?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Verifies the chain and validity as WebPKI does but accepts any host name, as a Kafka client with
/// `ssl.endpoint.identification.algorithm=` (empty) does.
#[derive(Debug)]
struct NoHostnameVerifier(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NoHostnameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_with_lost_newlines_parses() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let pem = cert.cert.pem();
        let joined: String = pem.lines().collect::<Vec<_>>().join("");
        assert_eq!(certificates(&joined, "x").unwrap().len(), 1);
        let key = cert.key_pair.serialize_pem();
        let joined_key: String = key.lines().collect::<Vec<_>>().join(" ");
        assert!(private_key(&joined_key, "k").is_ok());
        assert!(certificates("nothing", "x").is_err());
        assert!(private_key("-----BEGIN ENCRYPTED PRIVATE KEY-----", "k").is_err());
        assert!("sometimes".parse::<ClientAuth>().is_err());
    }
}
