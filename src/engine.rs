//! The engine: one shared configuration that many threads resolve against while alterations commit.
//!
//! Readers load the current immutable snapshot (an `arc-swap` load, no lock) and never wait for
//! writers. Writers are serialized by a mutex, build the next snapshot by path-copying only what a batch
//! changes, and publish it with one atomic swap, so a batch becomes visible all at once.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};

use crate::alter::{self, AlterResult, Alteration, EntityChange};
use crate::describe::{self, BrokerView, DescribedQuota, ListFilter, ListedEntity};
use crate::entity::Entity;
use crate::key::{QuotaKey, QuotaType};
use crate::notify::ChangeNotification;
use crate::policy::SubQuotaPolicy;
use crate::resolve::{self, ClientArg, IpQuota, Levels, Resolved, Shapes};
use crate::state::State;

/// A subscriber to change notifications.
pub type Subscriber = Arc<dyn Fn(&[ChangeNotification]) + Send + Sync>;

/// Builds an [`Engine`].
#[derive(Clone, Debug, Default)]
pub struct EngineBuilder {
    policy: SubQuotaPolicy,
    broker_count: Option<u32>,
    producer_capacity: Option<f64>,
    consumer_capacity: Option<f64>,
    no_resolve_cache: bool,
}

impl EngineBuilder {
    /// The sub-quota policy (default [`SubQuotaPolicy::Kip55`]).
    #[must_use = "a builder method returns the changed builder"]
    pub fn policy(mut self, policy: SubQuotaPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The live broker count that `bps` quotas divide by (default 1; changeable later).
    #[must_use = "a builder method returns the changed builder"]
    pub fn broker_count(mut self, count: u32) -> Self {
        self.broker_count = Some(count);
        self
    }

    /// This broker's `producer_byte_rate` capacity in bytes/s, split among `shares` quotas.
    #[must_use = "a builder method returns the changed builder"]
    pub fn producer_capacity(mut self, bytes_per_sec: f64) -> Self {
        self.producer_capacity = Some(bytes_per_sec);
        self
    }

    /// This broker's `consumer_byte_rate` capacity in bytes/s, split among `shares` quotas.
    #[must_use = "a builder method returns the changed builder"]
    pub fn consumer_capacity(mut self, bytes_per_sec: f64) -> Self {
        self.consumer_capacity = Some(bytes_per_sec);
        self
    }

    /// Whether [`Engine::resolve`] keeps each thread's recent answers (default `true`). The cache
    /// makes resolving a connection's names again cost the same at any store size; each thread that
    /// resolves holds a table of 752 KiB, plus up to 2 MiB of buffers for pairs of names longer than
    /// 60 bytes together. Turning it off makes every resolve read the snapshot.
    #[must_use = "a builder method returns the changed builder"]
    pub fn resolve_cache(mut self, enabled: bool) -> Self {
        self.no_resolve_cache = !enabled;
        self
    }

    /// Checks the settings and builds the engine, empty.
    #[must_use = "the engine is returned, and the settings may be refused"]
    pub fn build(self) -> Result<Engine, EngineBuildError> {
        if self.broker_count == Some(0) {
            return Err(EngineBuildError::ZeroBrokerCount);
        }
        for (quota_type, cap) in [
            (QuotaType::ProducerByteRate, self.producer_capacity),
            (QuotaType::ConsumerByteRate, self.consumer_capacity),
        ] {
            if let Some(c) = cap {
                if !(c.is_finite() && c > 0.0) {
                    return Err(EngineBuildError::InvalidCapacity {
                        quota_type,
                        value: c,
                    });
                }
            }
        }
        Ok(Engine {
            state: ArcSwap::from_pointee(State::default()),
            writer: Mutex::new(()),
            policy: self.policy,
            broker_count: AtomicU32::new(self.broker_count.unwrap_or(1)),
            producer_capacity: self.producer_capacity,
            consumer_capacity: self.consumer_capacity,
            subscribers: RwLock::new(Vec::new()),
            generations: CachePadded::default(),
            id: (!self.no_resolve_cache).then(|| NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        })
    }
}

/// Settings an [`EngineBuilder`] refused.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum EngineBuildError {
    /// A broker count of 0: `bps` quotas divide by it.
    ZeroBrokerCount,
    /// A producer or consumer capacity that is not finite and greater than 0.
    InvalidCapacity {
        /// Whose capacity: [`QuotaType::ProducerByteRate`] or [`QuotaType::ConsumerByteRate`].
        quota_type: QuotaType,
        /// The capacity given, in bytes/s.
        value: f64,
    },
}

impl fmt::Display for EngineBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineBuildError::ZeroBrokerCount => f.write_str("broker count must be at least 1"),
            EngineBuildError::InvalidCapacity { quota_type, value } => {
                let name = match quota_type {
                    QuotaType::ProducerByteRate => "producer",
                    _ => "consumer",
                };
                write!(
                    f,
                    "{name} capacity must be finite and greater than 0, got {value}"
                )
            }
        }
    }
}

impl std::error::Error for EngineBuildError {}

/// The newest snapshot's generation, counted twice around its publication.
#[derive(Debug, Default)]
struct Generations {
    /// Raised just before a snapshot is published: whoever has seen a snapshot reads at least its
    /// generation here afterwards. The resolution cache answers only for this generation, with
    /// answers computed from exactly that snapshot (see `cache`).
    announced: AtomicU64,
    /// Raised just after: whoever reads a generation here sees at least that snapshot afterwards.
    /// This is [`Engine::generation`], for hosts that cache answers themselves.
    published: AtomicU64,
}

impl Generations {
    /// Publishes `next`, the successor of `current`, through `state`; returns its generation.
    fn publish(&self, state: &ArcSwap<State>, current: &State, mut next: State) -> u64 {
        let generation = current.generation + 1;
        next.generation = generation;
        self.announced.store(generation, Ordering::Release);
        state.store(Arc::new(next));
        self.published.store(generation, Ordering::Release);
        generation
    }
}

/// The next engine's identity in the resolution cache (0 marks an empty slot).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Stores at least this large are freed off the writer's thread once replaced.
const RETIRE_OFF_THREAD: usize = 50_000;

/// Drops a replaced snapshot. Freeing the shards a batch replaced in a large store takes a good
/// share of the batch's time, and nobody waits for it, so one background thread (shared by every
/// engine, started on first use) does it. The channel is bounded: a writer that outpaces the
/// reclaimer waits rather than piling up garbage.
fn retire(old: Arc<State>) {
    static RECLAIMER: OnceLock<Option<SyncSender<Arc<State>>>> = OnceLock::new();
    if old.entity_count < RETIRE_OFF_THREAD {
        return;
    }
    let sender = RECLAIMER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<State>>(2);
        std::thread::Builder::new()
            .name("kquota-reclaim".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = sender {
        // If the thread is gone, `send` hands the snapshot back inside the error and it drops here.
        let _ = tx.send(old);
    }
}

/// The quota engine. Share it between threads with an `Arc`; every method takes `&self`.
pub struct Engine {
    state: ArcSwap<State>,
    /// Serializes writers; readers never touch it.
    writer: Mutex<()>,
    policy: SubQuotaPolicy,
    broker_count: AtomicU32,
    producer_capacity: Option<f64>,
    consumer_capacity: Option<f64>,
    subscribers: RwLock<Vec<Subscriber>>,
    /// Read by every resolve, so on a line of their own: writes to neighbouring memory (the `Arc`
    /// count of a shared engine, the writer lock) must not pull them away from the readers' caches.
    generations: CachePadded<Generations>,
    /// This engine's identity in the per-thread resolution cache, unless the cache is off.
    id: Option<u64>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("policy", &self.policy)
            .field("entities", &self.entity_count())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An empty engine with the default settings (`kip55`, one broker, no share capacities).
    pub fn new() -> Engine {
        Engine::builder().build().expect("the defaults are valid")
    }

    /// A builder for non-default settings.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The sub-quota policy the engine was built with.
    pub fn policy(&self) -> SubQuotaPolicy {
        self.policy
    }

    /// The effective quotas of a connection, for the hot path: no lock, no allocation once the thread
    /// has resolved before, and a cost that does not grow with the number of configured entities. An
    /// empty `client_id` matches no client-id level, and an empty `user` no user level, as in Kafka.
    ///
    /// Each thread keeps its recent answers (unless [`EngineBuilder::resolve_cache`] turned that
    /// off), each stamped with the snapshot it came from: resolving the same names again costs one
    /// small-table lookup, and a commit makes every cached answer stale at once. Answers never go
    /// backwards on a thread, and once [`Engine::alter`] has returned no thread gets an answer from
    /// before it. The first resolve on a thread allocates that thread's table, and a slot allocates
    /// a buffer the first time it holds a pair longer than 60 bytes together (an mTLS principal, say);
    /// a user name and client-id longer than 512 bytes together are always resolved from the
    /// snapshot.
    #[inline]
    pub fn resolve(&self, user: &str, client_id: &str) -> Resolved {
        match self.id {
            Some(id) => {
                // Read before the snapshot is loaded (see `cache`).
                let announced = self.generations.announced.load(Ordering::Acquire);
                crate::cache::resolve(id, announced, user, client_id, || {
                    let state = self.state.load();
                    (self.resolve_in(&state, user, client_id), state.generation)
                })
            }
            None => self.resolve_in(&self.state.load(), user, client_id),
        }
    }

    /// [`Engine::resolve`] in `state`.
    #[inline]
    fn resolve_in(&self, state: &State, user: &str, client_id: &str) -> Resolved {
        resolve::resolve(
            state,
            self.policy == SubQuotaPolicy::Kip55,
            Some(user),
            ClientArg::from_client_id(client_id),
        )
    }

    /// What each of the eight levels of [`Engine::resolve`]'s table configures for `key`, found by
    /// exact entity lookups (no precedence, no sub-quota rule, nothing skipped for an empty name:
    /// an empty name's own levels find nothing, since no entity has one), and which shapes of
    /// entity configure `key` anywhere, both from one snapshot. For a host that must reproduce
    /// another precedence to the letter, such as Apache Kafka's default quota callback with its
    /// shortcuts. No lock, no allocation.
    #[inline]
    pub fn levels(&self, user: &str, client_id: &str, key: QuotaKey) -> Levels {
        resolve::levels(&self.state.load(), user, client_id, key)
    }

    /// Which shapes of entity configure `key` anywhere.
    pub fn shapes(&self, key: QuotaKey) -> Shapes {
        resolve::Shapes::of(&self.state.load(), key)
    }

    /// The value `entity` itself configures for `key`, if any (no precedence).
    pub fn value(&self, entity: &Entity, key: QuotaKey) -> Option<f64> {
        alter::current_value(&self.state.load(), entity, key)
    }

    /// The effective `connection_creation_rate` of an IP, or `None` if unlimited.
    #[inline]
    pub fn resolve_ip(&self, ip: &str) -> Option<IpQuota> {
        resolve::resolve_ip(&self.state.load(), ip)
    }

    /// Describes a connection's effective quotas with provenance and, if asked, the overridden entries.
    /// `None` for a name means "a name with no entry of its own": only defaults apply for that type.
    pub fn describe(
        &self,
        user: Option<&str>,
        client_id: Option<&str>,
        include_overrides: bool,
    ) -> Vec<DescribedQuota> {
        describe::describe(
            &self.state.load(),
            self.policy == SubQuotaPolicy::Kip55,
            &self.broker_view(),
            user,
            client_id,
            include_overrides,
        )
    }

    /// Lists the configured entities that pass `filter`.
    pub fn list(&self, filter: &ListFilter) -> Vec<ListedEntity> {
        describe::list(&self.state.load(), filter)
    }

    /// Validates a batch and, unless `validate_only`, commits every valid alteration at once. Returns
    /// one result per alteration, in order. Subscribers hear of the changed entities after the commit
    /// is visible.
    #[must_use = "each alteration's result says whether it was refused, and why"]
    pub fn alter(&self, batch: &[Alteration], validate_only: bool) -> Vec<AlterResult> {
        match self.alter_durably(batch, validate_only, |_| {
            Ok::<(), std::convert::Infallible>(())
        }) {
            Ok(results) => results,
            Err(never) => match never {},
        }
    }

    /// Like [`Engine::alter`], but hands the validated changes to `persist` before they become
    /// visible, under the writer lock. If `persist` fails, nothing is applied and its error is
    /// returned; if it succeeds, the changes are published. A durable store acknowledges an
    /// alteration only after this returns `Ok`.
    #[must_use = "each alteration's result says whether it was refused, and why"]
    pub fn alter_durably<E>(
        &self,
        batch: &[Alteration],
        validate_only: bool,
        persist: impl FnOnce(&[EntityChange<'_>]) -> Result<(), E>,
    ) -> Result<Vec<AlterResult>, E> {
        self.commit(batch, validate_only, alter::Checks::Full, persist)
    }

    /// Applies changes that an authority has already accepted, as a broker's quota callback mirrors
    /// what Apache Kafka's controller committed: the entity and the key are checked, a value only as
    /// Kafka's controller checks it (so NaN, byte rates within 1e-6 of a whole number and +∞ for the
    /// double-valued types are stored as Kafka stores them), and the `kip55` sub-quota rules are not
    /// enforced. A state that breaks them is
    /// bounded when it is resolved: a sub-quota above its user's total is held to the total, and
    /// sub-quotas summing above it leave a remainder of 0.
    #[must_use = "each alteration's result says whether it was refused, and why"]
    pub fn mirror(&self, batch: &[Alteration]) -> Vec<AlterResult> {
        let none = |_: &[EntityChange<'_>]| Ok::<(), std::convert::Infallible>(());
        match self.commit(batch, false, alter::Checks::Mirror, none) {
            Ok(results) => results,
            Err(never) => match never {},
        }
    }

    fn commit<E>(
        &self,
        batch: &[Alteration],
        validate_only: bool,
        checks: alter::Checks,
        persist: impl FnOnce(&[EntityChange<'_>]) -> Result<(), E>,
    ) -> Result<Vec<AlterResult>, E> {
        let (results, notes) = {
            let _writer = self.writer.lock();
            let current = self.state.load_full();
            let plan = alter::plan(&current, batch, self.policy, checks);
            if validate_only || plan.changes.is_empty() {
                (plan.results, Vec::new())
            } else {
                let changes: Vec<EntityChange<'_>> = plan
                    .changes
                    .iter()
                    .map(|c| EntityChange {
                        entity: &c.entity,
                        quotas: &c.new,
                    })
                    .collect();
                persist(&changes)?;
                let mut next = State::clone(&current);
                alter::apply(&mut next, &plan.changes);
                let seq = self.generations.publish(&self.state, &current, next);
                retire(current);
                let notes = plan
                    .changes
                    .iter()
                    .map(|c| ChangeNotification {
                        seq,
                        entity: c.entity.clone(),
                    })
                    .collect();
                (plan.results, notes)
            }
        };
        if !notes.is_empty() {
            // Outside the writer lock: a slow subscriber delays only its own delivery.
            let subscribers = self.subscribers.read().clone();
            for subscriber in &subscribers {
                subscriber(&notes);
            }
        }
        Ok(results)
    }

    /// Loads a whole configuration into an empty engine in one pass (the start-up path of a durable
    /// store): every entity gets the checks an alteration setting its keys would get, and under `kip55`
    /// the sub-quota rules are checked once everything is in. Nothing is applied unless everything is
    /// valid. Returns the number of entities loaded, or the first entity refused and why.
    #[must_use = "a refused load applies nothing"]
    pub fn load(
        &self,
        entries: Vec<(Entity, Vec<(QuotaKey, f64)>)>,
    ) -> Result<usize, (Entity, crate::error::ApiError)> {
        let _writer = self.writer.lock();
        let current = self.state.load_full();
        if current.entity_count != 0 {
            return Err((
                entries
                    .first()
                    .map(|(e, _)| e.clone())
                    .unwrap_or(Entity::ClientId(crate::entity::EntityName::Default)),
                crate::error::ApiError::invalid_request("load needs an empty engine"),
            ));
        }
        let count = entries.len();
        let mut next = State::default();
        alter::load(&mut next, entries, self.policy)?;
        self.generations.publish(&self.state, &current, next);
        Ok(count)
    }

    /// Registers `f` to hear of every later commit: one call per commit, with one notification per
    /// changed entity. Commits carry increasing `seq` numbers, so a subscriber can order deliveries that
    /// race between threads.
    pub fn subscribe(&self, f: impl Fn(&[ChangeNotification]) + Send + Sync + 'static) {
        self.subscribers.write().push(Arc::new(f));
    }

    /// The number of commits so far. It changes (after the new state is visible) whenever an alteration
    /// changes something, so a host that caches [`Resolved`] values re-resolves when it moves.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generations.published.load(Ordering::Acquire)
    }

    /// How many entities have at least one quota configured.
    pub fn entity_count(&self) -> usize {
        self.state.load().entity_count
    }

    /// Sets the live broker count that `bps` quotas divide by (values below 1 count as 1).
    pub fn set_broker_count(&self, count: u32) {
        self.broker_count.store(count.max(1), Ordering::Relaxed);
    }

    /// What the engine knows about the cluster, for unit conversion.
    pub fn broker_view(&self) -> BrokerView {
        BrokerView {
            broker_count: self.broker_count.load(Ordering::Relaxed).max(1),
            producer_capacity: self.producer_capacity,
            consumer_capacity: self.consumer_capacity,
        }
    }
}
