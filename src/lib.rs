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

mod alter;
mod cache;
mod describe;
mod engine;
mod entity;
mod error;
mod index;
mod java;
mod key;
pub mod meter;
mod notify;
mod persist;
mod policy;
mod resolve;
mod scope;
mod state;
mod text;

pub use alter::{AlterResult, Alteration, Op};
pub use describe::{
    BrokerLimit, BrokerView, ComponentMatch, DescribedQuota, ListFilter, ListedEntity, Overridden,
};
pub use engine::{Engine, EngineBuildError, EngineBuilder, EntityChange, Subscriber};
pub use entity::{
    desanitize, sanitize, Entity, EntityName, EntityPart, EntityType, Level, Name, DEFAULT_DISPLAY,
};
pub use error::{ApiError, ErrorCode, ParseError};
pub use java::{java_entity_string, java_map_order};
pub use key::{QuotaKey, QuotaType, QuotaValue, Unit, ValueKind};
pub use notify::{ChangeNotification, NotificationV1, NotificationV2};
pub use persist::{PersistError, Persistence};
pub use policy::SubQuotaPolicy;
pub use resolve::{IpQuota, Quota, Resolved};
pub use scope::{BucketId, BucketScope};
pub use text::{format_describe, format_list};
