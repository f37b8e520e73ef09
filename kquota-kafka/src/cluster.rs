//! With `kquota.cluster.bootstrap.servers`: the broker as one of kquota's instances, through
//! kquota-cluster, as `kquotad` and `kquota-proxy` join.
//!
//! - **The configuration log.** The log replays into an engine of its own, whose changes join
//!   Kafka's metadata in the callback's ([`crate::sources`]).
//! - **Membership and usage.** The broker heartbeats among the instances, and shares its usage of
//!   each `bps` bucket, which Kafka's own quota sensors measure (the Java half's metrics reporter
//!   reads them and hands them over at every [`Link::tick`], [`crate::usage`]), so that each broker's part of a
//!   cluster-wide limit follows what it serves ([`crate::parts`]).
//!
//! Joining happens on a thread of the plug-in's own, never on a thread of Kafka's: the broker
//! starts serving at once with Kafka's quotas, and if the log cannot be reached (the cluster's
//! first broker starts before any other can answer) says so at WARN and keeps trying. Once joined,
//! the log follower keeps the last configuration through any outage of Kafka, as in the other
//! instances. Closing stops every thread, bounded in time.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kquota::meter::{BpsSplit, BucketOwner, BucketSnapshot};
use kquota::{Engine, QuotaKey};
use kquota_cluster::{
    ClusterConfig, ConfigLog, Membership, SharedSplit, SplitParams, UsageShare, UsageSource,
};
use parking_lot::{Condvar, Mutex};

use crate::callback::Callback;
use crate::parts::UsageSplit;
use crate::settings::ClusterSettings;
use crate::usage::{Reading, SensorUsage};

/// The longest wait between two attempts to join.
const MAX_RETRY: Duration = Duration::from_secs(15);
/// How often an unreachable log is said again at WARN.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// How long closing waits for the plug-in's threads before leaving them to the process's exit.
const CLOSE_BOUND: Duration = Duration::from_secs(10);
/// Where the broker stands with the other instances.
#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Not joined yet: Kafka's quotas are served.
    Joining {
        attempts: u32,
        last_error: Option<String>,
    },
    /// Following the log, in the membership, sharing usage.
    Ready,
    /// Closed.
    Closed,
}

/// What the join thread leaves for the others: the parts that run on their own threads.
struct Joined {
    log: ConfigLog,
    members: Membership,
    usage: UsageShare,
}

struct Shared {
    config: ClusterConfig,
    state: Mutex<State>,
    joined: Mutex<Option<Joined>>,
    /// Set when closing; the join thread waits on `wake` between attempts.
    stopping: Mutex<bool>,
    wake: Condvar,
    feed: Arc<SensorFeed>,
}

/// The broker's link with the other instances, and the thread that makes it.
pub(crate) struct Link {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    tick: Mutex<SensorUsage>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("instance", &self.shared.config.instance_id)
            .field("state", &*self.shared.state.lock())
            .finish_non_exhaustive()
    }
}

/// The usage the sensors reported at the last tick, in the meter's terms, for the usage thread.
#[derive(Debug, Default)]
struct SensorFeed {
    latest: Mutex<Vec<BucketSnapshot>>,
}

impl UsageSource for SensorFeed {
    fn snapshot(&self) -> Vec<BucketSnapshot> {
        self.latest.lock().clone()
    }
}

/// kquota-cluster's split as the callback asks it.
#[derive(Debug)]
struct Split(Arc<SharedSplit>);

impl BpsSplit for Split {
    fn local_limit(&self, key: QuotaKey, owner: &BucketOwner, limit: f64, now: u64) -> Option<f64> {
        self.0.local_limit(key, owner, limit, now)
    }
}

impl UsageSplit for Split {
    fn knows(&self, key: QuotaKey, owner: &BucketOwner) -> bool {
        self.0.knows(key, owner)
    }
}

/// The client configuration of `settings` for the broker `node_id`.
pub(crate) fn cluster_config(settings: &ClusterSettings, node_id: i32) -> ClusterConfig {
    let mut config = ClusterConfig::new(settings.bootstrap(), settings.instance_id(node_id));
    config.config_topic = settings.config_topic().to_owned();
    config.replication_factor = i32::from(settings.replication_factor());
    config.client_properties = settings.client_properties().clone();
    config
}

impl Link {
    /// Starts joining on a thread of its own; `callback` serves Kafka's quotas meanwhile.
    pub(crate) fn start(config: ClusterConfig, callback: &Arc<Callback>) -> std::io::Result<Link> {
        crate::log::install();
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::Joining {
                attempts: 0,
                last_error: None,
            }),
            joined: Mutex::new(None),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
            feed: Arc::new(SensorFeed::default()),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            let callback = Arc::downgrade(callback);
            std::thread::Builder::new()
                .name(format!("kquota-join-{}", shared.config.instance_id))
                .spawn(move || join(&shared, &callback))?
        };
        Ok(Link {
            shared,
            thread: Mutex::new(Some(thread)),
            tick: Mutex::new(SensorUsage::default()),
        })
    }

    /// How often the Java half hands over the sensors' readings.
    pub(crate) fn interval(&self) -> Duration {
        self.shared.config.usage_interval
    }

    /// `off` is the registry's; here: `joining`, `ready` or `stopped: why`.
    pub(crate) fn state(&self) -> String {
        match &*self.shared.state.lock() {
            State::Joining {
                attempts,
                last_error,
            } => match last_error {
                Some(e) => format!("joining (attempt {attempts}: {e})"),
                None => "joining".to_owned(),
            },
            State::Closed => "stopped: closed".to_owned(),
            State::Ready => match self
                .shared
                .joined
                .lock()
                .as_ref()
                .and_then(|j| j.log.failure())
            {
                Some(failure) => format!("stopped: {failure}"),
                None => "ready".to_owned(),
            },
        }
    }

    /// The live instances (1 until joined).
    pub(crate) fn live(&self) -> u32 {
        self.shared
            .joined
            .lock()
            .as_ref()
            .map_or(1, |j| j.members.live_count())
    }

    /// The sensors' readings of now: kept for the usage thread as this broker's usage of its
    /// `bps` buckets; answers [`crate::usage::tick`] bits.
    pub(crate) fn tick(&self, callback: &Callback, readings: &[Reading]) -> i32 {
        let (flags, snapshot) = self.tick.lock().tick(callback, readings);
        *self.shared.feed.latest.lock() = snapshot;
        flags
    }

    /// Stops joining, sharing, heartbeating and following: the usage thread's last record and
    /// the membership's tombstone are written if Kafka answers, and the whole waits at most
    /// [`CLOSE_BOUND`]; threads still running then are left to the process's exit.
    pub(crate) fn close(&self, callback: &Callback) {
        *self.shared.stopping.lock() = true;
        self.shared.wake.notify_all();
        callback.parts().set_split(None);
        let thread = self.thread.lock().take();
        let shared = Arc::clone(&self.shared);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let closer = std::thread::Builder::new()
            .name(format!("kquota-close-{}", shared.config.instance_id))
            .spawn(move || {
                if let Some(thread) = thread {
                    let _ = thread.join();
                }
                stop_joined(&shared);
                *shared.state.lock() = State::Closed;
                let _ = done_tx.send(());
            });
        let started = Instant::now();
        match closer {
            Ok(_) => {
                if done_rx.recv_timeout(CLOSE_BOUND).is_err() {
                    tracing::warn!(
                        "kquota: the cluster threads did not stop within {} s; left to the \
                         broker's exit",
                        CLOSE_BOUND.as_secs()
                    );
                }
            }
            Err(e) => tracing::warn!("kquota: no thread to stop the cluster threads on: {e}"),
        }
        tracing::info!(
            "kquota: left the instances in {} ms",
            started.elapsed().as_millis()
        );
    }
}

fn stop_joined(shared: &Shared) {
    if let Some(joined) = shared.joined.lock().take() {
        joined.usage.stop();
        joined.members.stop();
        drop(joined.log);
    }
}

/// The join thread: attempts until joined or closed.
fn join(shared: &Arc<Shared>, callback: &Weak<Callback>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(r) => r,
        Err(e) => {
            set_failed(shared, 1, format!("no runtime to join on: {e}"));
            return;
        }
    };
    let mut attempts = 0u32;
    let mut retry = Duration::from_secs(1);
    let mut warned: Option<Instant> = None;
    loop {
        if *shared.stopping.lock() {
            return;
        }
        let Some(cb) = callback.upgrade() else { return };
        attempts += 1;
        match runtime.block_on(attempt(shared, &cb)) {
            Ok(joined) => {
                if *shared.stopping.lock() {
                    // Closed meanwhile: undo at once.
                    *shared.joined.lock() = Some(joined);
                    stop_joined(shared);
                    return;
                }
                cb.parts()
                    .set_split(Some(Box::new(Split(Arc::clone(joined.usage.split())))));
                let live = joined.members.live_count();
                let offset = joined.log.applied_offset();
                *shared.joined.lock() = Some(joined);
                *shared.state.lock() = State::Ready;
                let (kafka, log) = cb.source_counts();
                tracing::info!(
                    "kquota: following the configuration log {} at offset {offset} as instance \
                     {} ({log} quotas from the log, {kafka} from Kafka's metadata, which wins \
                     where both set one), {live} live brokers",
                    shared.config.config_topic,
                    shared.config.instance_id,
                );
                return;
            }
            Err(e) => {
                set_failed(shared, attempts, e.clone());
                let due = warned.is_none_or(|at| at.elapsed() >= WARN_EVERY);
                if due {
                    warned = Some(Instant::now());
                    tracing::warn!(
                        "kquota: the configuration log is not reachable at {} ({e}); serving \
                         Kafka's quotas until it is, trying again (attempt {attempts})",
                        shared.config.bootstrap_servers
                    );
                } else {
                    tracing::debug!("kquota: joining, attempt {attempts}: {e}");
                }
            }
        }
        drop(cb);
        let mut stopping = shared.stopping.lock();
        if !*stopping {
            shared.wake.wait_for(&mut stopping, retry);
        }
        retry = (retry * 2).min(MAX_RETRY);
    }
}

fn set_failed(shared: &Shared, attempts: u32, error: String) {
    *shared.state.lock() = State::Joining {
        attempts,
        last_error: Some(error),
    };
}

/// One attempt: the log (replayed into a fresh engine), the membership, the usage sharing.
async fn attempt(shared: &Shared, callback: &Arc<Callback>) -> Result<Joined, String> {
    let config = &shared.config;
    let log_engine = Arc::new(
        Engine::builder()
            .policy(callback.policy())
            .build()
            .map_err(|e| e.to_string())?,
    );
    {
        let callback = Arc::downgrade(callback);
        log_engine.subscribe(move |changes| {
            if let Some(cb) = callback.upgrade() {
                for change in changes {
                    cb.log_changed(&change.entity);
                }
            }
        });
    }
    // Attached before the replay, so that each record's change reaches the callback as it is
    // applied; again after it, for whatever a snapshot loaded whole.
    callback.attach_log(Arc::clone(&log_engine));
    let log = ConfigLog::open(config.clone(), Arc::clone(&log_engine))
        .await
        .map_err(|e| e.to_string())?;
    callback.attach_log(Arc::clone(&log_engine));
    let members = Membership::start(config, Arc::clone(callback.engine()))
        .await
        .map_err(|e| e.to_string())?;
    let usage = UsageShare::start_from(
        config,
        Arc::clone(&shared.feed) as Arc<dyn UsageSource>,
        &members,
        SplitParams::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(Joined {
        log,
        members,
        usage,
    })
}
