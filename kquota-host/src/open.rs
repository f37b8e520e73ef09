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
use kquota_store::{Store, StoreError, DB_FILE};

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
    /// The cluster's configuration log, with the directory where the server keeps its store
    /// without one: quotas left there are not served, and a warning at start says so (an
    /// operator who adds `--cluster-bootstrap` to a running setup would otherwise lose them
    /// without a word).
    #[cfg(feature = "cluster")]
    LogBeside(&'a ClusterConfig, &'a Path),
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
    if let ConfigSource::LogBeside(_, dir) = source {
        warn_of_store_beside_log(dir);
    }
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
        ConfigSource::Log(cluster) | ConfigSource::LogBeside(cluster, _) => {
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

/// How many entities a store in `dir` holds; none when there is no store (nothing is created).
fn stored_entities(dir: &Path) -> Result<usize, StoreError> {
    if !dir.join(DB_FILE).exists() {
        return Ok(0);
    }
    Ok(Store::open(dir)?.entries()?.len())
}

/// The warning for quotas in a local store that a server on the configuration log does not serve,
/// with the way to move them (docs/cluster.md).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
fn warn_of_store_beside_log(dir: &Path) {
    let store = dir.display();
    match stored_entities(dir) {
        Ok(0) => {}
        Ok(entities) => tracing::warn!(
            %store,
            entities,
            "the local quota store in {store} holds {entities} entities, which this server does \
             not serve: its configuration is the cluster's configuration log. To copy them into \
             the log, serve the store without --cluster-bootstrap and replay its \
             `kafka-quotas --list --output json` with `kafka-quotas --alter --file` (docs/cluster.md, \
             \"Moving a local store into the log\")"
        ),
        Err(e) => tracing::warn!(
            %store,
            "the local quota store in {store} could not be read ({e}); whatever it holds is not \
             served: this server's configuration is the cluster's configuration log"
        ),
    }
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

    /// What the warning wrote, at every level.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<parking_lot::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[tokio::test]
    async fn a_store_beside_the_log_that_holds_quotas_is_warned_about() {
        let dir = std::env::temp_dir().join(format!("kquota-host-beside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // No store: nothing to say, and nothing created.
        assert_eq!(logged(|| warn_of_store_beside_log(&dir)), "");
        assert!(!dir.exists());
        let opened = open_engine(&settings(), ConfigSource::Store(&dir))
            .await
            .unwrap();
        drop(opened);
        // An empty store: nothing to move.
        assert_eq!(logged(|| warn_of_store_beside_log(&dir)), "");
        let opened = open_engine(&settings(), ConfigSource::Store(&dir))
            .await
            .unwrap();
        let store = opened.persistence.clone().unwrap();
        let alterations: Vec<_> = ["alice", "bob"]
            .into_iter()
            .map(|user| {
                kquota::Alteration::new(&kquota::Entity::User(
                    kquota::EntityName::named(user).unwrap(),
                ))
                .set("producer_byte_rate", 1000.0)
            })
            .collect();
        opened
            .engine
            .alter_durably(&alterations, false, |changes| store.persist(changes))
            .unwrap();
        // Still open: the store cannot be read, and the warning says so.
        let busy = logged(|| warn_of_store_beside_log(&dir));
        assert!(
            busy.contains(" WARN ") && busy.contains("could not be read"),
            "{busy}"
        );
        drop(opened);
        drop(store);
        let line = logged(|| warn_of_store_beside_log(&dir));
        assert!(line.contains(" WARN "), "{line}");
        assert!(
            line.contains(&format!(
                "the local quota store in {} holds 2 entities, which this server does not serve",
                dir.display()
            )),
            "{line}"
        );
        assert!(line.contains("kafka-quotas --alter --file"), "{line}");
        assert!(line.contains("docs/cluster.md"), "{line}");
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
