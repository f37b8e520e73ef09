//! kquota: a client-quota engine for the Kafka protocol.
//!
//! A Kafka-compatible broker or proxy builds one [`Engine`], feeds it quota configuration through
//! [`Engine::alter`] (from its admin API, its metadata log or its own store), and on every request calls
//! [`Engine::resolve`] to learn which quotas apply to a (user, client-id) and which bucket each is
//! metered in.
//!
//! ```
//! use kquota::{Alteration, Engine, Entity, EntityName, Level, QuotaKey};
//!
//! let engine = Engine::new();
//! let named = |s: &str| EntityName::named(s).unwrap();
//! let results = engine.alter(
//!     &[
//!         // alice's clients share 10 MB/s between them...
//!         Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 10e6),
//!         // ...of which her batch job has 4 MB/s of its own (a KIP-55 sub-quota).
//!         Alteration::new(&Entity::UserClient(named("alice"), named("batch")))
//!             .set("producer_byte_rate", 4e6),
//!         // Every client-id without an entry gets 1 MB/s.
//!         Alteration::new(&Entity::ClientId(EntityName::Default)).set("producer_byte_rate", 1e6),
//!     ],
//!     false,
//! );
//! assert!(results.iter().all(|r| r.error.is_none()));
//!
//! let batch = engine.resolve("alice", "batch").get(QuotaKey::PRODUCER_BROKER_BPS).unwrap();
//! assert_eq!((batch.limit, batch.level), (4e6, Level::UserClient));
//!
//! // alice's other clients share what the sub-quota leaves of her total.
//! let other = engine.resolve("alice", "web").get(QuotaKey::PRODUCER_BROKER_BPS).unwrap();
//! assert_eq!((other.limit, other.level), (6e6, Level::User));
//!
//! // bob has no entry: the client-id default applies, one bucket per client-id.
//! let bob = engine.resolve("bob", "web").get(QuotaKey::PRODUCER_BROKER_BPS).unwrap();
//! assert_eq!((bob.limit, bob.level), (1e6, Level::DefaultClientId));
//! ```
//!
//! # Precedence
//!
//! Each key (a quota type plus a unit, such as `producer_byte_rate` or `producer_byte_rate:bps`) resolves
//! on its own: the first level that configures it wins, and the bucket column says who shares the rate.
//!
//! | level | entity | bucket |
//! | --- | --- | --- |
//! | 1 | `{user=u, client-id=c}` | (u, c) |
//! | 2 | `{user=u, client-id=<default>}` | (u, c) |
//! | 3 | `{user=u}` | (u, —) |
//! | 4 | `{user=<default>, client-id=c}` | (u, c) |
//! | 5 | `{user=<default>, client-id=<default>}` | (u, c) |
//! | 6 | `{user=<default>}` | (u, —) |
//! | 7 | `{client-id=c}` | (—, c) |
//! | 8 | `{client-id=<default>}` | (—, c) |
//!
//! An empty client-id matches only levels 3 and 6. IP entities (`connection_creation_rate`) resolve
//! separately with [`Engine::resolve_ip`]. Under the default [`SubQuotaPolicy::Kip55`], a user's named
//! client sub-quotas may not exceed its total, and clients that fall back to the total share the
//! remainder; [`SubQuotaPolicy::Kafka`] is Apache Kafka's behaviour exactly. `docs/semantics.md` has the
//! full contract and every deviation from Kafka.
//!
//! # Concurrency
//!
//! The configuration is an immutable snapshot behind an atomic pointer (`arc-swap`). Resolving from a
//! snapshot loads it without a lock, hashes the user and the client-id once each and probes at most
//! three flat hash tables (independent probes), so its cost does not grow with the number of entities
//! and readers never wait for writers. On top of that, [`Engine::resolve`] keeps each thread's recent
//! answers in a small table stamped with the engine's [`generation`](Engine::generation): a broker
//! resolves the same connections over and over, and a repeat costs one lookup in that table, about
//! 40 ns at any store size, where the snapshot path costs 230–330 ns once a million entities no longer
//! fit the caches. A commit makes every cached answer stale at once, and answers never go backwards.
//! [`Engine::alter`] serializes writers, builds the next snapshot by copying only the table shards a
//! batch touches (the tables are persistent: shards are shared between snapshots), and publishes it
//! with one swap: a batch becomes visible all at once, and its cost grows with what it changes, not
//! with what is stored. Change notifications are delivered after the swap, outside every lock.
//!
//! # Memory
//!
//! Measured at 1,000,000 entities with one key and short names (`docs/benchmarks.md`, resident memory
//! after building the store with alteration batches): about 100 bytes per `{user}` and 75 per
//! `{client-id}` entity (one table entry with the hash, the name inline and the value inline, plus its
//! share of the shard index), and about 195 bytes per `{user, client-id}` entity when every user has a
//! single client, because each such user also keeps an entry of its own for its sub-quota sums.
//!
//! # What linking it costs
//!
//! This crate is the engine and the meter, and nothing else: no async runtime, no TLS, no database,
//! no command line parser and no C code. Its normal dependency tree is 20 crates (21 with a crate that
//! depends on it), and a new crate that embeds [`Engine`] and [`meter::Meter`] builds from an empty
//! target directory in about 5–6 s on two cores (`scripts/broker-cost.sh`; `docs/benchmarks.md` has
//! the runs, beside the 97 crates and about 42 s the same crate took when the engine came with the
//! servers and tools). Kafka's quota admin APIs are the `kquota-wire` crate; a durable store is
//! `kquota-store`.
//!
//! # Features
//!
//! | feature | default | what it adds | cost |
//! | --- | --- | --- | --- |
//! | `serde` | off | `ChangeNotification::v1_json` and `v2_json`, and `Serialize` / `Deserialize` for [`NotificationV1`] and [`NotificationV2`] | `serde`, `serde_derive`, `serde_json` and the proc-macro crates under them |

mod alter;
mod cache;
mod describe;
mod engine;
mod entity;
mod error;
mod index;
mod java;
mod key;
mod notify;
mod persist;
mod policy;
mod resolve;
mod scope;
mod state;
mod text;

// The public interface is:

// The engine, its settings and the sub-quota policy it enforces.
pub use crate::engine::{Engine, EngineBuildError, EngineBuilder};
pub use crate::policy::SubQuotaPolicy;
// Who a quota is for: entities, their names (and Kafka's sanitized spelling of them), and the
// precedence level each one occupies.
pub use crate::entity::{
    desanitize, sanitize, Entity, EntityName, EntityPart, EntityType, Level, Name, DEFAULT_DISPLAY,
};
// What a quota limits, and in which unit.
pub use crate::key::{QuotaKey, QuotaType, QuotaValue, Unit, ValueKind};
// The hot path: the effective quotas of a connection, and who shares each rate.
pub use crate::resolve::{IpQuota, Levels, Quota, Resolved, Shapes};
pub use crate::scope::{BucketId, BucketScope};
// Changing the configuration: batches of alterations, validated as Kafka validates them.
pub use crate::alter::{AlterResult, Alteration, Op};
// Making alterations durable before they become visible.
pub use crate::alter::EntityChange;
pub use crate::persist::{PersistError, Persistence};
// Hearing of changes after they are visible.
pub use crate::engine::Subscriber;
pub use crate::notify::{ChangeNotification, NotificationV1, NotificationV2};
// Reading the configuration back: describe and list, and their text as Kafka's tools print it.
pub use crate::describe::{
    BpsView, BrokerLimit, BrokerView, ComponentMatch, DescribedQuota, ListFilter, ListedEntity,
    Overridden,
};
pub use crate::text::{describe_columns, format_describe, format_list, DescribeEntry};
// Answering as Kafka does: its error codes, and the Java map order its messages follow.
pub use crate::error::{ApiError, ErrorCode, ParseError};
pub use crate::java::{java_entity_string, java_hash_map_order, java_map_order, java_string_hash};

/// Metering and throttling on the hot path, with Kafka's rate semantics.
///
/// A broker builds one [`Meter`](meter::Meter) over its [`Engine`], opens a
/// [`ClientMeter`](meter::ClientMeter) per connection (or per request), and records every request's
/// bytes, handler time or mutations into it. Each call returns a [`Throttle`](meter::Throttle): how
/// long to throttle the client, and which key and bucket caused it.
///
/// Buckets are shared exactly as the precedence table's bucket column says: a quota from `{user=u}`
/// is one bucket for all of u's clients, one from `{client-id=c}` one bucket for every user of c, the
/// rest one per (user, client-id). A `ClientMeter` resolves once and keeps its buckets; when the
/// engine's configuration changes it re-resolves on its next request.
///
/// A request that cannot be throttled (the bucket's window holds less than `limit × (samples − 1)`
/// windows' worth) takes its bytes from its thread's allowance with one compare-and-swap, without the
/// bucket's lock; the others take the lock and run Kafka's record and measure. Both give Kafka's
/// answer (see `src/meter/allowance.rs` for why).
pub mod meter {
    mod allowance;
    mod bucket;
    mod client;
    mod clock;
    mod config;
    mod decision;
    mod rate;
    mod shared;

    // The meter, shared by every connection, and the meter of one connection.
    pub use client::ClientMeter;
    pub use shared::Meter;
    // Cluster-wide `bps` limits split by shared usage.
    pub use shared::BpsSplit;
    // Its settings.
    pub use config::{MeterConfig, MeterConfigBuilder, MeterConfigError};
    // Its clock: the real one, or one a test moves by hand.
    pub use clock::{Clock, ManualClock, SystemClock};
    // What it answers.
    pub use decision::{BucketOwner, BucketSnapshot, MutationDecision, Throttle, ThrottleCause};
}
