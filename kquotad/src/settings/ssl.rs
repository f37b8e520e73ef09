//! [`SslSettings`]: the TLS settings of the SSL and SASL_SSL listeners, as given and as checked
//! (each is checked as it is set; the files are read when the server binds).

use std::sync::Arc;

use kquota_wire::tls::ClientAuth;
use kquota_wire::PrincipalMapper;

/// TLS settings shared by the SSL and SASL_SSL listeners, named as Kafka's.
#[derive(Clone, Debug)]
pub struct SslSettings {
    /// `ssl.keystore.location`: a PEM file with the certificate chain and the private key.
    pub keystore_location: Option<String>,
    /// `ssl.keystore.certificate.chain`: the PEM certificate chain, inline.
    pub keystore_certificate_chain: Option<String>,
    /// `ssl.keystore.key`: the PEM private key, inline.
    pub keystore_key: Option<String>,
    /// `ssl.truststore.location`: a PEM file of trusted CA certificates (client certificates).
    pub truststore_location: Option<String>,
    /// `ssl.truststore.certificates`: the trusted PEM certificates, inline.
    pub truststore_certificates: Option<String>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules`: how a client certificate's subject becomes its principal's
    /// name, as Kafka's `DefaultKafkaPrincipalBuilder` maps it.
    pub principal_mapping: Arc<PrincipalMapper>,
}

impl Default for SslSettings {
    fn default() -> Self {
        SslSettings {
            keystore_location: None,
            keystore_certificate_chain: None,
            keystore_key: None,
            truststore_location: None,
            truststore_certificates: None,
            client_auth: ClientAuth::None,
            principal_mapping: Arc::new(
                PrincipalMapper::parse("DEFAULT").expect("DEFAULT is a rule"),
            ),
        }
    }
}
