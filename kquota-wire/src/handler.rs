//! The request handler: what it serves from (the engine, its store, SASL users, the authorizer)
//! and how it is built. `dispatch.rs` answers its requests.

use std::sync::Arc;

use kquota::{Engine, Persistence};

use crate::apis::{ApiSupport, SASL_APIS, SUPPORTED_APIS};
use crate::security::{Authorizer, DefaultPrincipalBuilder, PrincipalBuilder, SaslConfig, Session};

/// What the handler reports about the node it runs on (Metadata and DescribeCluster): the only
/// broker of its cluster and its controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// This node's id.
    pub node_id: i32,
    /// The host clients should connect to.
    pub host: String,
    /// The port clients should connect to.
    pub port: i32,
    /// The cluster id.
    pub cluster_id: String,
}

/// Serves the quota admin APIs from an engine, one request frame at a time. Cheap to share between
/// connections (`&self` everywhere; `Send + Sync`); per-connection state lives in the
/// [`Session`] each call is given.
#[derive(Clone, Debug)]
pub struct Handler {
    pub(crate) engine: Arc<Engine>,
    pub(crate) info: ServerInfo,
    pub(crate) draft_alter_quotas: bool,
    pub(crate) store: Option<Arc<dyn Persistence>>,
    pub(crate) sasl: Option<SaslConfig>,
    pub(crate) authorizer: Option<Authorizer>,
    pub(crate) principal_builder: Arc<dyn PrincipalBuilder>,
    /// Keys the stand-in SCRAM salts of unknown users, so they are stable but unpredictable.
    pub(crate) decoy_key: ring::hmac::Key,
}

impl Handler {
    /// A handler serving `engine` as the node `info`, with DescribeUserScramCredentials on 50 (the
    /// seeds' draft AlterQuotas disabled).
    pub fn new(engine: Arc<Engine>, info: ServerInfo) -> Handler {
        Handler {
            engine,
            info,
            draft_alter_quotas: false,
            store: None,
            sasl: None,
            authorizer: None,
            principal_builder: Arc::new(DefaultPrincipalBuilder),
            decoy_key: crate::security::credentials::random_key(),
        }
    }

    /// Serves SASL on SASL sessions with these mechanisms and users. Without it, a SASL
    /// session's handshake offers no mechanism and every authentication fails.
    pub fn with_sasl(mut self, sasl: SaslConfig) -> Handler {
        self.decoy_key = sasl.credentials.stand_in_key();
        self.sasl = Some(sasl);
        self
    }

    /// Decides who may describe and alter quotas (see [`Authorizer`]).
    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Handler {
        self.authorizer = Some(authorizer);
        self
    }

    /// Replaces [`DefaultPrincipalBuilder`] for SASL authentications.
    pub fn with_principal_builder(mut self, builder: Arc<dyn PrincipalBuilder>) -> Handler {
        self.principal_builder = builder;
        self
    }

    /// The principal builder in use.
    pub fn principal_builder(&self) -> &Arc<dyn PrincipalBuilder> {
        &self.principal_builder
    }

    /// Makes alterations durable: AlterClientQuotas and AlterQuotas commit through the store's
    /// [`Persistence::commit`] (by default [`Engine::alter_durably`], writing the validated
    /// changes to `store` before they become visible; a replicated log orders them first). If the
    /// store fails, nothing is applied and every entry of the request is answered with
    /// `UNKNOWN_SERVER_ERROR` (-1), as Kafka answers a request that fails as a whole.
    pub fn with_store(mut self, store: Arc<dyn Persistence>) -> Handler {
        self.store = Some(store);
        self
    }

    /// Enables or disables the seeds' draft AlterQuotas on apiKey 50 (disabled by default). Enabled,
    /// 50 is the draft (v0, request header v1); disabled, 50 is Kafka's DescribeUserScramCredentials
    /// (v0, flexible). ApiVersions lists `{50, 0, 0}` either way. A request cannot say which it
    /// means, so the server decides (`docs/wire.md`).
    pub fn with_draft_alter_quotas(mut self, enabled: bool) -> Handler {
        self.draft_alter_quotas = enabled;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Describes another node (a server gives each listener its advertised host and port).
    pub fn with_server_info(mut self, info: ServerInfo) -> Handler {
        self.info = info;
        self
    }

    /// The node this handler describes.
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The APIs served on `session`'s listener, by key, as ApiVersions lists them: the SASL APIs
    /// only on SASL listeners.
    pub fn supported_apis(&self, session: &Session) -> Vec<ApiSupport> {
        let sasl = session.protocol().uses_sasl();
        let mut apis: Vec<ApiSupport> = SUPPORTED_APIS
            .into_iter()
            .chain(SASL_APIS.into_iter().filter(|_| sasl))
            .collect();
        apis.sort_by_key(|a| a.api_key);
        apis
    }
}
