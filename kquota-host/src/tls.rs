//! TLS for a server's listeners from PEM: the certificate chain and its key, and the CAs that
//! verify client certificates, each from a file or inline text and each named in errors by the
//! setting (and file) it came from.

use std::borrow::Cow;
use std::path::Path;

use kquota_wire::tls::{self, ClientAuth, KeyPair, TlsError};
use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsAcceptor;

/// Where a PEM text comes from, and the setting that gives it (for errors).
#[derive(Clone, Copy, Debug)]
pub enum Pem<'a> {
    /// A file.
    File {
        /// The setting that names the file (`ssl.keystore.location`, or a flag).
        setting: &'a str,
        /// The file.
        path: &'a Path,
    },
    /// Inline text.
    Inline {
        /// The setting that holds it (`ssl.keystore.certificate.chain`).
        setting: &'a str,
        /// The PEM text.
        text: &'a str,
    },
}

impl Pem<'_> {
    /// The PEM text.
    pub fn text(&self) -> Result<Cow<'_, str>, TlsError> {
        match self {
            Pem::Inline { text, .. } => Ok(Cow::Borrowed(text)),
            // Read here rather than with `tls::read_pem_file`, which takes the path as UTF-8; a
            // `Path` need not be.
            Pem::File { setting, path } => {
                std::fs::read_to_string(path)
                    .map(Cow::Owned)
                    .map_err(|source| TlsError::Unreadable {
                        setting: (*setting).to_owned(),
                        path: path.display().to_string(),
                        source,
                    })
            }
        }
    }

    /// How errors about the text's content name it: `setting=path`, or the setting.
    pub fn what(&self) -> String {
        match self {
            Pem::File { setting, path } => format!("{setting}={}", path.display()),
            Pem::Inline { setting, .. } => (*setting).to_owned(),
        }
    }
}

/// A certificate chain (leaf first) and its unencrypted private key, each from its PEM (which may
/// be the same file).
pub fn key_pair(chain: Pem<'_>, key: Pem<'_>) -> Result<KeyPair, TlsError> {
    Ok(KeyPair {
        chain: tls::certificates(&chain.text()?, &chain.what())?,
        key: tls::private_key(&key.text()?, &key.what())?,
    })
}

/// The CAs in each of `sources`, each checked here as a trust anchor, so that a bad one is named
/// by the setting it came from.
pub fn trust_anchors(sources: &[Pem<'_>]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut out = Vec::new();
    for source in sources {
        let what = source.what();
        let certs = tls::certificates(&source.text()?, &what)?;
        let mut store = rustls::RootCertStore::empty();
        for cert in &certs {
            store
                .add(cert.clone())
                .map_err(|source| TlsError::TrustAnchor {
                    setting: what.clone(),
                    source,
                })?;
        }
        out.extend(certs);
    }
    Ok(out)
}

/// The acceptor of a listener that presents `identity`, and verifies client certificates against
/// `trust` as `client_auth` (Kafka's `ssl.client.auth`) asks.
pub fn acceptor(
    identity: &KeyPair,
    trust: &[CertificateDer<'static>],
    client_auth: ClientAuth,
) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(tls::server_config(
        identity,
        trust,
        client_auth,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_setting_and_the_file() {
        let missing = Pem::File {
            setting: "ssl.keystore.location",
            path: Path::new("/nonexistent/key.pem"),
        };
        let e = key_pair(missing, missing).unwrap_err().to_string();
        assert!(e.contains("ssl.keystore.location"), "{e}");
        assert!(e.contains("/nonexistent/key.pem"), "{e}");
        let garbage = Pem::Inline {
            setting: "ssl.truststore.certificates",
            text: "not a certificate",
        };
        let e = trust_anchors(&[garbage]).unwrap_err().to_string();
        assert!(e.contains("ssl.truststore.certificates"), "{e}");
    }

    #[test]
    fn a_generated_identity_makes_an_acceptor() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let chain = cert.cert.pem();
        let key = cert.key_pair.serialize_pem();
        let identity = key_pair(
            Pem::Inline {
                setting: "chain",
                text: &chain,
            },
            Pem::Inline {
                setting: "key",
                text: &key,
            },
        )
        .unwrap();
        assert!(acceptor(&identity, &[], ClientAuth::None).is_ok());
        let trust = trust_anchors(&[Pem::Inline {
            setting: "ca",
            text: &chain,
        }])
        .unwrap();
        assert!(acceptor(&identity, &trust, ClientAuth::Required).is_ok());
    }
}
