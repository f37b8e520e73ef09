//! The proxy's quota state, shared by every connection: the engine and its durable store, the
//! meter every client is metered in, the admin APIs served from them, and the partition counts
//! of the topics the cluster has named (for counting mutations).

use std::collections::HashMap;
use std::sync::Arc;

use kquota::meter::{Meter, SystemClock};
#[cfg(feature = "cluster")]
use kquota_cluster::{ClusterError, Membership, UsageShare};
use kquota_host::http::ClusterState;
use kquota_host::{open_engine, ConfigSource, EngineSettings, OpenError, Opened};
use parking_lot::Mutex;

use crate::admin::Admin;
use crate::error::ProxyError;
use crate::messages::enforce::PartitionCounts;
use crate::settings::ProxyConfig;

/// Topics whose partition counts the proxy keeps at most: past this, new topics are not learnt
/// (their deletion counts one partition each).
const MAX_TOPICS: usize = 100_000;

/// The engine, the meter and the admin APIs.
pub(crate) struct Quotas {
    pub(crate) meter: Meter,
    pub(crate) admin: Admin,
    pub(crate) topics: Topics,
    /// With a cluster: this instance's membership and usage sharing, kept running.
    _cluster: Option<Joined>,
    /// The configuration log and membership, for readiness and metrics.
    pub(crate) cluster_state: ClusterState,
}

/// What keeps an instance in the cluster: its membership and its usage sharing.
#[cfg(feature = "cluster")]
type Joined = (Arc<Membership>, UsageShare);
/// Without the `cluster` feature there is nothing to keep.
#[cfg(not(feature = "cluster"))]
type Joined = std::convert::Infallible;

impl Quotas {
    /// Builds the engine from `config` and its configuration: from the cluster's configuration
    /// log when [`ProxyConfig::cluster`] is set (then also joining the membership and sharing
    /// `bps` usage), else from the durable store; and the meter over it.
    pub(crate) async fn open(config: &ProxyConfig) -> Result<Quotas, ProxyError> {
        let settings = EngineSettings {
            policy: config.policy,
            broker_count: config.instance_count,
            producer_capacity: config.producer_capacity,
            consumer_capacity: config.consumer_capacity,
        };
        #[cfg(feature = "cluster")]
        let source = match (&config.cluster, &config.data_dir) {
            // A store left in the data directory is said to be there, not served.
            (Some(cluster), Some(dir)) => ConfigSource::LogBeside(cluster, dir),
            (Some(cluster), None) => ConfigSource::Log(cluster),
            (None, Some(dir)) => ConfigSource::Store(dir),
            (None, None) => ConfigSource::Memory,
        };
        #[cfg(not(feature = "cluster"))]
        let source = match &config.data_dir {
            Some(dir) => ConfigSource::Store(dir),
            None => ConfigSource::Memory,
        };
        let opened = open_engine(&settings, source).await.map_err(|e| match e {
            OpenError::Engine(e) => ProxyError::Engine(e.to_string()),
            OpenError::Store(dir, e) => ProxyError::Store(dir.display().to_string(), e.to_string()),
            // The cluster's own error: ProxyError says what was being done.
            #[cfg(feature = "cluster")]
            OpenError::Cluster(e) => ProxyError::Cluster(e.to_string()),
            other => ProxyError::Engine(other.to_string()),
        })?;
        #[allow(unused_mut)] // Without the cluster feature nothing more is filled in.
        let mut cluster_state = ClusterState::default();
        #[cfg(feature = "cluster")]
        {
            cluster_state.log = opened.log.clone();
        }
        let Opened {
            engine,
            persistence: store,
            ..
        } = opened;
        #[cfg(feature = "cluster")]
        let cluster_error = |e: ClusterError| ProxyError::Cluster(e.to_string());
        let meter = Meter::with_clock(
            Arc::clone(&engine),
            Arc::new(SystemClock::new()),
            config.meter,
        );
        #[cfg(feature = "cluster")]
        let cluster = match &config.cluster {
            Some(cluster) => {
                let members = Membership::start(cluster, Arc::clone(&engine))
                    .await
                    .map_err(cluster_error)?;
                let usage = UsageShare::start(cluster, meter.clone(), &members)
                    .await
                    .map_err(cluster_error)?;
                let members = Arc::new(members);
                cluster_state.members = Some(Arc::clone(&members));
                Some((members, usage))
            }
            None => None,
        };
        #[cfg(not(feature = "cluster"))]
        let cluster = None;
        let admin = Admin::new(
            engine,
            store,
            config.super_users.clone(),
            config.describe_allow_anonymous,
            config.draft_alter_quotas,
        );
        Ok(Quotas {
            meter,
            admin,
            topics: Topics::default(),
            _cluster: cluster,
            cluster_state,
        })
    }
}

#[cfg(test)]
impl Quotas {
    /// Quotas over `engine` metered on `clock` with `config`, kept in memory, with `super_users`
    /// allowed to alter: for the decisions' tests.
    pub(crate) fn for_tests(
        engine: Arc<kquota::Engine>,
        clock: Arc<dyn kquota::meter::Clock>,
        config: kquota::meter::MeterConfig,
        super_users: Vec<kquota_wire::Principal>,
    ) -> Quotas {
        Quotas {
            meter: Meter::with_clock(Arc::clone(&engine), clock, config),
            admin: Admin::new(engine, None, super_users, false, false),
            topics: Topics::default(),
            _cluster: None,
            cluster_state: ClusterState::default(),
        }
    }
}

/// Partition counts by topic name and id, from the Metadata answers the proxy forwards.
#[derive(Default)]
pub(crate) struct Topics {
    inner: Mutex<TopicMaps>,
}

#[derive(Default)]
struct TopicMaps {
    by_name: HashMap<Box<str>, u32>,
    by_id: HashMap<[u8; 16], u32>,
}

impl Topics {
    /// Notes a topic a Metadata answer named.
    pub(crate) fn learn(&self, name: Option<&str>, id: [u8; 16], partitions: u32) {
        let mut maps = self.inner.lock();
        if let Some(name) = name {
            if let Some(n) = maps.by_name.get_mut(name) {
                *n = partitions;
            } else if maps.by_name.len() < MAX_TOPICS {
                maps.by_name.insert(name.into(), partitions);
            }
        }
        if id != [0; 16] && (maps.by_id.len() < MAX_TOPICS || maps.by_id.contains_key(&id)) {
            maps.by_id.insert(id, partitions);
        }
    }
}

impl PartitionCounts for Topics {
    fn by_name(&self, name: &str) -> Option<u32> {
        self.inner.lock().by_name.get(name).copied()
    }

    fn by_id(&self, id: [u8; 16]) -> Option<u32> {
        self.inner.lock().by_id.get(&id).copied()
    }
}
