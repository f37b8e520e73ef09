//! The TLS acceptor of the SSL and SASL_SSL listeners, from the `ssl.*` settings.

use std::path::Path;

use kquota_host::tls::{self, Pem};
use tokio_rustls::TlsAcceptor;

use crate::error::ConfigError;
use crate::settings::SslSettings;

/// A TLS error of `kquota-wire`'s, as a [`ConfigError::Tls`].
fn tls_error(e: impl Into<kquota_host::settings::Source>) -> ConfigError {
    ConfigError::Tls(e.into())
}

/// `ssl.keystore.location`'s file.
fn keystore_file(path: &str) -> Pem<'_> {
    Pem::File {
        setting: "ssl.keystore.location",
        path: Path::new(path),
    }
}

/// The identity from the keystore settings (a file, inline PEM, or the file with inline parts
/// winning), the trusted certificates from both truststore settings, and `ssl.client.auth`.
pub(crate) fn acceptor(ssl: &SslSettings) -> Result<TlsAcceptor, ConfigError> {
    let chain = match (&ssl.keystore_certificate_chain, &ssl.keystore_location) {
        (Some(text), _) => Pem::Inline {
            setting: "ssl.keystore",
            text,
        },
        (None, Some(path)) => keystore_file(path),
        (None, None) => return Err(ConfigError::NoKeystore),
    };
    let key = match (&ssl.keystore_key, &ssl.keystore_location) {
        (Some(text), _) => Pem::Inline {
            setting: "ssl.keystore",
            text,
        },
        (None, Some(path)) => keystore_file(path),
        (None, None) => return Err(ConfigError::NoKeystore),
    };
    let identity = tls::key_pair(chain, key).map_err(tls_error)?;
    let mut trust = Vec::new();
    if let Some(path) = &ssl.truststore_location {
        trust.push(Pem::File {
            setting: "ssl.truststore.location",
            path: Path::new(path),
        });
    }
    if let Some(text) = &ssl.truststore_certificates {
        trust.push(Pem::Inline {
            setting: "ssl.truststore.certificates",
            text,
        });
    }
    let trust = tls::trust_anchors(&trust).map_err(tls_error)?;
    tls::acceptor(&identity, &trust, ssl.client_auth).map_err(tls_error)
}

/// [`acceptor`], and how to make it again from the same settings when SIGHUP asks (the files
/// read again; inline PEM is what it was).
pub(crate) fn reloadable_acceptor(
    ssl: &SslSettings,
) -> Result<kquota_host::Reloadable<TlsAcceptor>, ConfigError> {
    let initial = acceptor(ssl)?;
    let mut files: Vec<String> = Vec::new();
    if let Some(path) = &ssl.keystore_location {
        files.push(format!("ssl.keystore.location={path}"));
    }
    if let Some(path) = &ssl.truststore_location {
        files.push(format!("ssl.truststore.location={path}"));
    }
    let what = match files.is_empty() {
        true => "TLS keystore (inline PEM)".to_owned(),
        false => format!("TLS keystore and truststore {}", files.join(" ")),
    };
    let ssl = ssl.clone();
    Ok(kquota_host::Reloadable::new(what, initial, move || {
        acceptor(&ssl).map_err(|e| e.to_string())
    }))
}
