//! What SIGHUP reloads in `kquotad`: the TLS acceptor of the SSL and SASL_SSL listeners (the
//! keystore and truststore files read again), and the SASL users (`sasl.credentials.file`) of
//! every listener's handler. Each applies to connections made from then on; a connection already
//! open keeps the acceptor and users it started with.

use std::path::PathBuf;
use std::sync::Arc;

use kquota_host::{Reload, Reloadable};
use kquota_wire::{Credentials, SaslConfig, SaslMechanism};
use tokio_rustls::TlsAcceptor;

use crate::peer::Endpoint;
use crate::settings::ServerConfig;

/// The SASL users of every listener, from `sasl.credentials.file`.
struct SaslUsers {
    path: PathBuf,
    mechanisms: Vec<SaslMechanism>,
    endpoints: Vec<Arc<Endpoint>>,
}

impl Reload for SaslUsers {
    fn what(&self) -> String {
        format!("SASL users sasl.credentials.file={}", self.path.display())
    }

    fn reload(&self) -> bool {
        let credentials = match Credentials::load(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("kept the {} in use: the reload failed: {e}", self.what());
                return false;
            }
        };
        let users = credentials.len();
        let sasl = SaslConfig {
            mechanisms: self.mechanisms.clone(),
            credentials: Arc::new(credentials),
        };
        // Every listener's handler with the new users; the rest of each handler as it was.
        for endpoint in &self.endpoints {
            let next = (**endpoint.handler.load()).clone().with_sasl(sasl.clone());
            endpoint.handler.store(Arc::new(next));
        }
        tracing::info!(users, "reloaded {}: new connections use it", self.what());
        true
    }
}

/// What SIGHUP reloads on a server with these settings, `acceptor` (if a listener uses TLS) and
/// these listeners.
pub(crate) fn targets(
    config: &ServerConfig,
    acceptor: Option<Arc<Reloadable<TlsAcceptor>>>,
    endpoints: impl IntoIterator<Item = Arc<Endpoint>>,
) -> Vec<Arc<dyn Reload>> {
    let mut out: Vec<Arc<dyn Reload>> = Vec::new();
    if let Some(acceptor) = acceptor {
        out.push(acceptor);
    }
    let endpoints: Vec<Arc<Endpoint>> = endpoints.into_iter().collect();
    // The users are read at start only when a listener uses SASL; so are they again.
    let sasl = endpoints.iter().any(|e| e.config.protocol.uses_sasl());
    if let (true, Some(path)) = (sasl, &config.sasl_credentials_file) {
        out.push(Arc::new(SaslUsers {
            path: path.clone(),
            mechanisms: config.sasl_mechanisms.clone(),
            endpoints,
        }));
    }
    out
}
