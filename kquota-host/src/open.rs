//! The engine a server serves, built from its settings, with its configuration loaded from where
//! it lives: the durable store in a data directory, the cluster's configuration log in Kafka, or
//! nowhere (memory only).

use std::fmt;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kquota::{Engine, EngineBuildError, Persistence, SubQuotaPolicy};
#[cfg(feature = "cluster")]
use kquota_cluster::{ClusterConfig, ClusterError, ConfigLog};
use kquota_store::{Store, StoreError};

/// The engine's settings, as both servers name them.
#[derive(Clone, Copy, Debug)]
pub struct EngineSettings {
    /// `kquota.sub.quota.policy`.
    pub policy: SubQuotaPolicy,
    /// `kquota.broker.count`: the instances `bps` quotas are divided by when no usage is shared.
    pub broker_count: NonZeroU32,
    /// `kquota.producer.capacity.bytes.per.sec`: what `producer_byte_rate:shares` divides.
    pub producer_capacity: Option<f64>,
    /// `kquota.consumer.capacity.bytes.per.sec`: what `consumer_byte_rate:shares` divides.
    pub consumer_capacity: Option<f64>,
}

/// Where a server's configuration lives.
#[derive(Clone, Copy, Debug)]
pub enum ConfigSource<'a> {
    /// The durable store in this directory (created if missing), every alteration fsynced
    /// before it is acknowledged.
    Store(&'a Path),
    /// The cluster's configuration log, shared with the other instances.
    #[cfg(feature = "cluster")]
    Log(&'a ClusterConfig),
    /// Nowhere: alterations are lost when the server stops.
    Memory,
}

/// An engine with its configuration loaded, and where alterations are to be kept.
pub struct Opened {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Where alterations are committed before they are acknowledged (`None`: memory only).
    pub persistence: Option<Arc<dyn Persistence>>,
    /// The entities the configuration held at start.
    pub loaded: usize,
    /// The configuration log, when the configuration lives there: for the server's readiness
    /// and metrics.
    #[cfg(feature = "cluster")]
    pub log: Option<Arc<ConfigLog>>,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("loaded", &self.loaded)
            .field("persistent", &self.persistence.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the engine could not be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// The engine's settings do not work together.
    Engine(EngineBuildError),
    /// The store in this directory could not be opened or read.
    Store(PathBuf, StoreError),
    /// The configuration log could not be joined or replayed.
    #[cfg(feature = "cluster")]
    Cluster(ClusterError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Engine(e) => write!(f, "the quota engine's settings: {e}"),
            OpenError::Store(dir, e) => write!(f, "the quota store in {}: {e}", dir.display()),
            #[cfg(feature = "cluster")]
            OpenError::Cluster(e) => write!(f, "joining the cluster through Kafka: {e}"),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Engine(e) => Some(e),
            OpenError::Store(_, e) => Some(e),
            #[cfg(feature = "cluster")]
            OpenError::Cluster(e) => Some(e),
        }
    }
}

/// Builds the engine from `settings` and loads its configuration from `source`.
pub async fn open_engine(
    settings: &EngineSettings,
    source: ConfigSource<'_>,
) -> Result<Opened, OpenError> {
    let mut builder = Engine::builder()
        .policy(settings.policy)
        .broker_count(settings.broker_count.get());
    if let Some(c) = settings.producer_capacity {
        builder = builder.producer_capacity(c);
    }
    if let Some(c) = settings.consumer_capacity {
        builder = builder.consumer_capacity(c);
    }
    let engine = Arc::new(builder.build().map_err(OpenError::Engine)?);
    #[cfg(feature = "cluster")]
    let mut followed = None;
    let (persistence, loaded): (Option<Arc<dyn Persistence>>, usize) = match source {
        ConfigSource::Store(dir) => {
            let store_error = |e| OpenError::Store(dir.to_owned(), e);
            let store = Store::open(dir).map_err(store_error)?;
            let loaded = store.load_into(&engine).map_err(store_error)?;
            tracing::info!(dir = %dir.display(), entities = loaded, "quota store opened");
            (Some(Arc::new(store)), loaded)
        }
        #[cfg(feature = "cluster")]
        ConfigSource::Log(cluster) => {
            let log = ConfigLog::open(cluster.clone(), Arc::clone(&engine))
                .await
                .map_err(OpenError::Cluster)?;
            let log = Arc::new(log);
            followed = Some(Arc::clone(&log));
            (Some(log), engine.entity_count())
        }
        ConfigSource::Memory => (None, 0),
    };
    Ok(Opened {
        engine,
        persistence,
        loaded,
        #[cfg(feature = "cluster")]
        log: followed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> EngineSettings {
        EngineSettings {
            policy: SubQuotaPolicy::default(),
            broker_count: NonZeroU32::MIN,
            producer_capacity: None,
            consumer_capacity: None,
        }
    }

    #[tokio::test]
    async fn a_store_is_loaded_and_kept_across_opens() {
        let dir = std::env::temp_dir().join(format!("kquota-host-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opened = open_engine(&settings(), ConfigSource::Store(&dir))
            .await
            .unwrap();
        assert_eq!(opened.loaded, 0);
        let alteration = kquota::Alteration::new(&kquota::Entity::User(
            kquota::EntityName::named("alice").unwrap(),
        ))
        .set("producer_byte_rate", 1000.0);
        let store = opened.persistence.clone().unwrap();
        let results = opened
            .engine
            .alter_durably(&[alteration], false, |changes| store.persist(changes))
            .unwrap();
        assert!(results.iter().all(|r| r.error.is_none()));
        drop(opened);
        drop(store);
        let reopened = open_engine(&settings(), ConfigSource::Store(&dir))
            .await
            .unwrap();
        assert_eq!(reopened.loaded, 1);
        drop(reopened);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn memory_keeps_nothing_and_bad_settings_are_refused() {
        let opened = open_engine(&settings(), ConfigSource::Memory)
            .await
            .unwrap();
        assert!(opened.persistence.is_none());
        let bad = EngineSettings {
            producer_capacity: Some(-1.0),
            ..settings()
        };
        assert!(matches!(
            open_engine(&bad, ConfigSource::Memory).await,
            Err(OpenError::Engine(_))
        ));
    }
}
