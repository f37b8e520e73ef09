//! [`ServerConfig`]: `kquotad`'s settings once checked together, each in a field private to the
//! crate. Only [`ServerSettings::build`](super::ServerSettings::build) makes one, so nothing
//! checks them again.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kquota::SubQuotaPolicy;
#[cfg(feature = "cluster")]
use kquota_cluster::ClusterConfig;
use kquota_wire::{Principal, SaslMechanism};

use super::listeners::{AdvertisedListeners, ListenerConfig};
use super::ssl::SslSettings;

/// Everything `kquotad` is configured with, checked: made by
/// [`ServerSettings::build`](super::ServerSettings::build) and given to
/// [`Server::bind`](crate::Server::bind). Each field is the setting of the same name.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub(crate) listeners: Vec<ListenerConfig>,
    pub(crate) advertised: AdvertisedListeners,
    pub(crate) data_dir: PathBuf,
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) policy: SubQuotaPolicy,
    pub(crate) broker_count: NonZeroU32,
    pub(crate) producer_capacity: Option<f64>,
    pub(crate) consumer_capacity: Option<f64>,
    pub(crate) max_request_bytes: NonZeroUsize,
    pub(crate) sasl_max_receive_bytes: NonZeroUsize,
    /// At least `max_request_bytes`, when bounded.
    pub(crate) queued_max_request_bytes: Option<NonZeroUsize>,
    pub(crate) max_connections: NonZeroUsize,
    pub(crate) max_connections_per_ip: NonZeroUsize,
    pub(crate) network_threads: kquota_host::ThreadCount,
    pub(crate) idle_timeout: Duration,
    pub(crate) connection_grace: Duration,
    pub(crate) node_id: i32,
    pub(crate) cluster_id: String,
    pub(crate) super_users: Vec<Principal>,
    pub(crate) describe_allow_anonymous: bool,
    pub(crate) draft_alter_quotas: bool,
    pub(crate) sasl_mechanisms: Vec<SaslMechanism>,
    pub(crate) sasl_credentials_file: Option<PathBuf>,
    pub(crate) failed_authentication_delay: Duration,
    pub(crate) ssl: SslSettings,
    /// The configuration log and membership, when shared through Kafka.
    #[cfg(feature = "cluster")]
    pub(crate) cluster: Option<ClusterConfig>,
    pub(crate) log_format: kquota_host::LogFormat,
}

impl ServerConfig {
    /// The listeners, their protocols resolved.
    pub fn listeners(&self) -> &[ListenerConfig] {
        &self.listeners
    }

    /// How log lines are to be written.
    pub fn log_format(&self) -> kquota_host::LogFormat {
        self.log_format
    }

    /// The sub-quota policy.
    pub fn policy(&self) -> SubQuotaPolicy {
        self.policy
    }

    /// The store's directory (with a cluster, where the configuration log's snapshot is kept).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Where the configuration lives, as the start's log line says it: the store's directory, or
    /// the configuration topic and its cluster.
    pub fn configuration_source(&self) -> String {
        #[cfg(feature = "cluster")]
        if let Some(c) = &self.cluster {
            return format!("the topic {} at {}", c.config_topic, c.bootstrap_servers);
        }
        self.data_dir.display().to_string()
    }
}
