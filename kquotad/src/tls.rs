//! The TLS acceptor of the SSL and SASL_SSL listeners, from the `ssl.*` settings.

use tokio_rustls::TlsAcceptor;

use kquota_wire::tls::{self, KeyPair};

use crate::error::ConfigError;
use crate::settings::SslSettings;

/// A TLS error of `kquota-wire`'s, as a [`ConfigError::Tls`].
fn tls_error(e: impl Into<crate::error::Source>) -> ConfigError {
    ConfigError::Tls(e.into())
}

/// The identity from the keystore settings (a file, inline PEM, or the file with inline parts
/// winning), the trusted certificates from both truststore settings, and `ssl.client.auth`.
pub(crate) fn acceptor(ssl: &SslSettings) -> Result<TlsAcceptor, ConfigError> {
    let (chain_pem, key_pem) = match (
        &ssl.keystore_location,
        &ssl.keystore_certificate_chain,
        &ssl.keystore_key,
    ) {
        (_, Some(chain), Some(key)) => (chain.clone(), key.clone()),
        (Some(path), chain, key) => {
            let text = tls::read_pem_file(path, "ssl.keystore.location").map_err(tls_error)?;
            (
                chain.clone().unwrap_or_else(|| text.clone()),
                key.clone().unwrap_or(text),
            )
        }
        _ => return Err(ConfigError::NoKeystore),
    };
    let identity = KeyPair {
        chain: tls::certificates(&chain_pem, "ssl.keystore").map_err(tls_error)?,
        key: tls::private_key(&key_pem, "ssl.keystore").map_err(tls_error)?,
    };
    let mut trust = Vec::new();
    if let Some(path) = &ssl.truststore_location {
        let text = tls::read_pem_file(path, "ssl.truststore.location").map_err(tls_error)?;
        trust.extend(tls::certificates(&text, "ssl.truststore.location").map_err(tls_error)?);
    }
    if let Some(pem) = &ssl.truststore_certificates {
        trust.extend(tls::certificates(pem, "ssl.truststore.certificates").map_err(tls_error)?);
    }
    let config = tls::server_config(&identity, &trust, ssl.client_auth).map_err(tls_error)?;
    Ok(TlsAcceptor::from(config))
}
