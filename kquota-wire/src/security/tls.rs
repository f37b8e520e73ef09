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

/// A TLS setting that cannot be used, and why. `setting` names the property (or the part of a
/// configuration) it came from, as the caller gave it.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file cannot be read.
    Unreadable {
        /// The setting.
        setting: String,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// PEM text whose certificate blocks do not parse.
    BadCertificate {
        /// The setting.
        setting: String,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// PEM text with no certificate.
    NoCertificate {
        /// The setting.
        setting: String,
    },
    /// An encrypted private key (not supported).
    EncryptedKey {
        /// The setting.
        setting: String,
    },
    /// PEM text with no usable private key (PKCS#8, PKCS#1 or SEC1).
    NoPrivateKey {
        /// The setting.
        setting: String,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// A trusted certificate that cannot be a trust anchor.
    TrustAnchor {
        /// The setting.
        setting: String,
        /// Why.
        source: rustls::Error,
    },
    /// `ssl.client.auth` asks for client certificates but no truststore verifies them.
    NoTruststore,
    /// The provider refuses the protocol versions (a server's safe defaults, or `ssl.protocol`).
    ProtocolVersions {
        /// `None` for a server's defaults, `Some("ssl.protocol")` for a client's.
        setting: Option<&'static str>,
        /// Why.
        source: rustls::Error,
    },
    /// The client-certificate verifier cannot be built.
    ClientVerifier(rustls::server::VerifierBuilderError),
    /// The server-certificate verifier cannot be built.
    ServerVerifier(rustls::client::VerifierBuilderError),
    /// The keystore's certificate and key do not fit.
    KeyMismatch {
        /// Whether it is the client's keystore (the admin client) rather than a listener's.
        client: bool,
        /// Why.
        source: rustls::Error,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Unreadable {
                setting,
                path,
                source,
            } => write!(f, "{setting}={path}: cannot read: {source}"),
            TlsError::BadCertificate { setting, source } => {
                write!(f, "{setting}: bad PEM certificate: {source}")
            }
            TlsError::NoCertificate { setting } => write!(
                f,
                "{setting}: no PEM certificate (-----BEGIN CERTIFICATE-----) found"
            ),
            TlsError::EncryptedKey { setting } => write!(
                f,
                "{setting}: encrypted private keys are not supported; store the key unencrypted and protect the file"
            ),
            TlsError::NoPrivateKey { setting, source } => {
                write!(f, "{setting}: no usable PEM private key: {source}")
            }
            TlsError::TrustAnchor { setting, source } => {
                write!(f, "{setting}: unusable trust anchor: {source}")
            }
            TlsError::NoTruststore => f.write_str(
                "ssl.client.auth needs a truststore (ssl.truststore.location) to verify client certificates",
            ),
            TlsError::ProtocolVersions {
                setting: None,
                source,
            } => source.fmt(f),
            TlsError::ProtocolVersions {
                setting: Some(setting),
                source,
            } => write!(f, "{setting}: {source}"),
            TlsError::ClientVerifier(e) => write!(f, "client certificate verifier: {e}"),
            TlsError::ServerVerifier(e) => write!(f, "server certificate verifier: {e}"),
            TlsError::KeyMismatch { client, source } => {
                let which = if *client { "the client keystore's" } else { "the keystore's" };
                write!(f, "{which} certificate and key do not fit: {source}")
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Unreadable { source, .. } => Some(source),
            TlsError::BadCertificate { source, .. } | TlsError::NoPrivateKey { source, .. } => {
                Some(source)
            }
            TlsError::TrustAnchor { source, .. }
            | TlsError::ProtocolVersions { source, .. }
            | TlsError::KeyMismatch { source, .. } => Some(source),
            TlsError::ClientVerifier(e) => Some(e),
            TlsError::ServerVerifier(e) => Some(e),
            TlsError::NoCertificate { .. }
            | TlsError::EncryptedKey { .. }
            | TlsError::NoTruststore => None,
        }
    }
}

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
    type Err = super::ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(super::ParseError::ClientAuth {
                value: s.to_owned(),
            }),
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
        .map_err(|source| TlsError::BadCertificate {
            setting: what.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            setting: what.to_owned(),
        });
    }
    Ok(certs)
}

/// The private key in PEM text (PKCS#8, PKCS#1 or SEC1; not encrypted).
pub fn private_key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    if pem.contains("ENCRYPTED PRIVATE KEY") {
        return Err(TlsError::EncryptedKey {
            setting: what.to_owned(),
        });
    }
    PrivateKeyDer::from_pem_slice(normalize_pem(pem).as_bytes()).map_err(|source| {
        TlsError::NoPrivateKey {
            setting: what.to_owned(),
            source,
        }
    })
}

/// Reads a file for a setting.
pub fn read_pem_file(path: &str, what: &str) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Unreadable {
        setting: what.to_owned(),
        path: path.to_owned(),
        source,
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(trust: &[CertificateDer<'static>], what: &str) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in trust {
        store
            .add(cert.clone())
            .map_err(|source| TlsError::TrustAnchor {
                setting: what.to_owned(),
                source,
            })?;
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
        .map_err(|source| TlsError::ProtocolVersions {
            setting: None,
            source,
        })?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            if trust.is_empty() {
                return Err(TlsError::NoTruststore);
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
            builder.with_client_cert_verifier(verifier.build().map_err(TlsError::ClientVerifier)?)
        }
    };
    let config = builder
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|source| TlsError::KeyMismatch {
            client: false,
            source,
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
        .map_err(|source| TlsError::ProtocolVersions {
            setting: Some("ssl.protocol"),
            source,
        })?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(TlsError::ServerVerifier)?;
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
            .map_err(|source| TlsError::KeyMismatch {
                client: true,
                source,
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
