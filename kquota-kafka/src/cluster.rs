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

/// What the join thread leaves for the others: the parts that run on their own threads, and
/// the engine the log replays into.
struct Joined {
    log: ConfigLog,
    log_engine: Arc<Engine>,
    members: Membership,
    usage: UsageShare,
}

/// One instance of kquota in this process: its id's joining, log, membership and usage sharing,
/// shared by every callback of the process configured with that id. A KRaft node that is both
/// broker and controller makes two callbacks (each role has its quota managers), and a broker
/// reconfigured makes a second before it closes the first: both are one instance among the
/// others, with one heartbeat and one usage record, never two under one id.
struct Shared {
    config: ClusterConfig,
    state: Mutex<State>,
    joined: Mutex<Option<Joined>>,
    /// The callbacks served (the join and the log's changes reach each).
    callbacks: Mutex<Vec<Weak<Callback>>>,
    /// Set when closing; the join thread waits on `wake` between attempts.
    stopping: Mutex<bool>,
    wake: Condvar,
    feed: Arc<SensorFeed>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn callbacks(&self) -> Vec<Arc<Callback>> {
        self.callbacks
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Brings `callback` to the joined state: the log's entries, the usage split.
    fn attach(&self, callback: &Callback, joined: &Joined) {
        callback.attach_log(Arc::clone(&joined.log_engine));
        callback
            .parts()
            .set_split(Some(Box::new(Split(Arc::clone(joined.usage.split())))));
    }
}

/// The instances of this process, by id.
static INSTANCES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// One callback's link with the other instances, through its instance's [`Shared`].
pub(crate) struct Link {
    shared: Arc<Shared>,
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
    /// Links `callback` with the other instances as instance `config.instance_id`: joins on a
    /// thread of its own, or, if this process already is that instance, shares it. `callback`
    /// serves Kafka's quotas until joined.
    pub(crate) fn start(config: ClusterConfig, callback: &Arc<Callback>) -> std::io::Result<Link> {
        crate::log::install();
        let mut instances = INSTANCES.lock();
        instances.retain(|w| w.strong_count() > 0);
        let existing = instances
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.config.instance_id == config.instance_id && !*s.stopping.lock());
        if let Some(shared) = existing {
            if shared.config.bootstrap_servers != config.bootstrap_servers
                || shared.config.config_topic != config.config_topic
            {
                tracing::warn!(
                    "kquota: a second callback for instance {} with other cluster settings; it \
                     shares the first one's ({} , topic {})",
                    config.instance_id,
                    shared.config.bootstrap_servers,
                    shared.config.config_topic
                );
            }
            shared.callbacks.lock().push(Arc::downgrade(callback));
            if let Some(joined) = shared.joined.lock().as_ref() {
                shared.attach(callback, joined);
            }
            return Ok(Link {
                shared,
                tick: Mutex::new(SensorUsage::default()),
            });
        }
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::Joining {
                attempts: 0,
                last_error: None,
            }),
            joined: Mutex::new(None),
            callbacks: Mutex::new(vec![Arc::downgrade(callback)]),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
            feed: Arc::new(SensorFeed::default()),
            thread: Mutex::new(None),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("kquota-join-{}", shared.config.instance_id))
                .spawn(move || join(&shared))?
        };
        *shared.thread.lock() = Some(thread);
        instances.push(Arc::downgrade(&shared));
        Ok(Link {
            shared,
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
        // What a `bps` limit divides by without a usage split or leadership.
        callback.engine().set_broker_count(self.live());
        let (flags, snapshot) = self.tick.lock().tick(callback, readings);
        // Every callback of the process reads the same sensors; the first one's readings are
        // the instance's usage, so that the usage thread sees one series of them.
        let first = self.shared.callbacks.lock().iter().find_map(Weak::upgrade);
        if first.is_some_and(|c| std::ptr::eq(&*c, callback)) {
            *self.shared.feed.latest.lock() = snapshot;
        }
        flags
    }

    /// This broker leads `led` of the `total` partitions with a leader: told to every callback
    /// of the instance (Kafka tells only the broker's). Returns whether it changed.
    pub(crate) fn set_leadership(&self, led: u32, total: u32) -> bool {
        let mut changed = false;
        for cb in self.shared.callbacks() {
            changed |= cb.parts().set_leadership(led, total);
        }
        changed
    }

    /// Unlinks `callback`; the last callback of the instance stops joining, sharing,
    /// heartbeating and following: the usage thread's last record and the membership's tombstone
    /// are written if Kafka answers, and the whole waits at most [`CLOSE_BOUND`]; threads still
    /// running then are left to the process's exit.
    pub(crate) fn close(&self, callback: &Callback) {
        callback.parts().set_split(None);
        let last = {
            let _instances = INSTANCES.lock();
            let mut callbacks = self.shared.callbacks.lock();
            callbacks.retain(|w| w.upgrade().is_some_and(|c| !std::ptr::eq(&*c, callback)));
            let last = callbacks.is_empty();
            if last {
                // No later callback may share an instance that is stopping.
                *self.shared.stopping.lock() = true;
            }
            last
        };
        if !last {
            return;
        }
        self.shared.wake.notify_all();
        let thread = self.shared.thread.lock().take();
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
            "kquota: instance {} left the others in {} ms",
            self.shared.config.instance_id,
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
fn join(shared: &Arc<Shared>) {
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
        attempts += 1;
        match runtime.block_on(attempt(shared)) {
            Ok(joined) => {
                let callbacks = {
                    // Under the instances' lock, so that a callback linking now either is in
                    // this list or sees `joined` set.
                    let _instances = INSTANCES.lock();
                    let callbacks = shared.callbacks();
                    *shared.joined.lock() = Some(joined);
                    callbacks
                };
                if *shared.stopping.lock() {
                    // Closed meanwhile: undone by the closer, which waits for this thread.
                    return;
                }
                let (live, offset) = {
                    let joined = shared.joined.lock();
                    let Some(joined) = joined.as_ref() else {
                        return;
                    };
                    for cb in &callbacks {
                        shared.attach(cb, joined);
                    }
                    (joined.members.live_count(), joined.log.applied_offset())
                };
                *shared.state.lock() = State::Ready;
                let (kafka, log) = callbacks.first().map_or((0, 0), |cb| cb.source_counts());
                tracing::info!(
                    "kquota: following the configuration log {} at offset {offset} as instance \
                     {} ({log} quotas from the log, {kafka} from Kafka's metadata, which wins \
                     where both set one), {live} live instances",
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
async fn attempt(shared: &Arc<Shared>) -> Result<Joined, String> {
    let config = &shared.config;
    let policy = match shared.callbacks().first() {
        Some(cb) => cb.policy(),
        None => return Err("no callback left to join for".to_owned()),
    };
    let log_engine = Arc::new(
        Engine::builder()
            .policy(policy)
            .build()
            .map_err(|e| e.to_string())?,
    );
    {
        let shared = Arc::downgrade(shared);
        log_engine.subscribe(move |changes| {
            if let Some(shared) = shared.upgrade() {
                for cb in shared.callbacks() {
                    for change in changes {
                        cb.log_changed(&change.entity);
                    }
                }
            }
        });
    }
    // Attached before the replay, so that each record's change reaches the callbacks as it is
    // applied; again after it, for whatever a snapshot loaded whole.
    for cb in shared.callbacks() {
        cb.attach_log(Arc::clone(&log_engine));
    }
    let log = ConfigLog::open(config.clone(), Arc::clone(&log_engine))
        .await
        .map_err(|e| e.to_string())?;
    for cb in shared.callbacks() {
        cb.attach_log(Arc::clone(&log_engine));
    }
    // The membership sets the live count on the log's engine, which answers nothing: each
    // callback's engine takes it at every tick.
    let members = Membership::start(config, Arc::clone(&log_engine))
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
        log_engine,
        members,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::SubQuotaPolicy;

    /// An instance that cannot reach its Kafka (nothing listens on port 1), trying every second.
    fn unreachable(id: &str) -> ClusterConfig {
        let mut config = ClusterConfig::new("127.0.0.1:1", id);
        config.open_timeout = Duration::from_millis(300);
        config
    }

    fn wait_for(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check() {
            assert!(Instant::now() < deadline, "{what} within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn callbacks_of_one_instance_id_are_one_instance_until_the_last_closes() {
        let (a, b) = (
            Arc::new(Callback::new(SubQuotaPolicy::Kafka)),
            Arc::new(Callback::new(SubQuotaPolicy::Kafka)),
        );
        let la = Link::start(unreachable("one-instance"), &a).unwrap();
        let lb = Link::start(unreachable("one-instance"), &b).unwrap();
        assert!(Arc::ptr_eq(&la.shared, &lb.shared));
        // Kafka's quotas only, and saying why.
        wait_for("a failed attempt", || {
            la.state().starts_with("joining (attempt")
        });
        assert_eq!(la.live(), 1);
        // What the broker's callback is told, the controller's knows too.
        assert!(la.set_leadership(1, 3));
        assert_eq!(b.parts().leadership(), (1, 3));
        la.close(&a);
        assert!(!*lb.shared.stopping.lock(), "the first close stops nothing");
        let started = Instant::now();
        lb.close(&b);
        assert!(started.elapsed() <= CLOSE_BOUND + Duration::from_secs(1));
        assert_eq!(lb.state(), "stopped: closed");
        // The id is free again: a new callback is a new instance.
        let c = Arc::new(Callback::new(SubQuotaPolicy::Kafka));
        let lc = Link::start(unreachable("one-instance"), &c).unwrap();
        assert!(!Arc::ptr_eq(&lc.shared, &lb.shared));
        lc.close(&c);
    }

    #[test]
    fn only_the_first_callbacks_readings_are_the_instances_usage() {
        let (a, b) = (
            Arc::new(Callback::new(SubQuotaPolicy::Kafka)),
            Arc::new(Callback::new(SubQuotaPolicy::Kafka)),
        );
        let log = Arc::new(Engine::new());
        let c = kquota::Entity::ClientId(kquota::EntityName::named("c").unwrap());
        let set = log.mirror(&[kquota::Alteration::new(&c).set(QuotaKey::PRODUCER_BPS, 3e6)]);
        assert!(set.iter().all(|r| r.error.is_none()));
        a.attach_log(Arc::clone(&log));
        b.attach_log(log);
        let la = Link::start(unreachable("first-reads"), &a).unwrap();
        let lb = Link::start(unreachable("first-reads"), &b).unwrap();
        let reading = |rate| Reading {
            ty: crate::callback::QuotaType::Produce,
            user: String::new(),
            client: "c".to_owned(),
            rate,
        };
        lb.tick(&b, &[reading(5.0)]);
        assert!(la.shared.feed.snapshot().is_empty());
        la.tick(&a, &[reading(7.0)]);
        assert_eq!(la.shared.feed.snapshot()[0].measured, 7.0);
        lb.close(&b);
        la.close(&a);
    }
}
