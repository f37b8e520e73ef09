//! kquota's durable store: the [redb] implementation of [`kquota::Persistence`], keeping an
//! engine's quota configuration in one file that survives `kill -9`.
//!
//! A host uses it in three steps: [`Store::open`] a data directory (the file is [`DB_FILE`] in it),
//! [`Store::load_into`] a new [`Engine`] (every stored entity goes through the checks an alteration
//! would make), then hand the `Arc<Store>` to whatever alters the engine: `kquota-wire`'s
//! `Handler::with_store`, or [`Engine::alter_durably`] with [`Store::persist`] for a host that
//! alters it itself. `kquotad` does exactly this.
//!
//! ```
//! use std::sync::Arc;
//!
//! use kquota::Engine;
//! use kquota_store::Store;
//! use kquota_wire::{Handler, ServerInfo};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("kquota-store-doc-{}", std::process::id()));
//! let store = Arc::new(Store::open(&dir)?);
//! let engine = Arc::new(Engine::new());
//! let loaded = store.load_into(&engine)?;
//! let info = ServerInfo {
//!     node_id: 1,
//!     host: "127.0.0.1".to_owned(),
//!     port: 9092,
//!     cluster_id: "kquota-cluster".to_owned(),
//! };
//! // Every alteration the handler accepts is committed (fsync) before the engine publishes it.
//! let handler = Handler::new(engine, info).with_store(store);
//! # let _ = (loaded, handler);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! ## How it stores
//!
//! One table maps an entity's storage path (`users/alice/clients/app`, names sanitized, `<default>` for
//! defaults) to its keys and values. Every alteration batch is one write transaction, committed with an
//! fsync before the engine publishes it, so an acknowledged alteration survives `kill -9`, and a crash
//! mid-write leaves the previous commit intact. The store is one source of configuration among several:
//! a broker that takes its quotas from a metadata log feeds the same [`Engine::alter`] instead.
//!
//! Two kinds of trouble are handled here rather than left to the caller:
//!
//! * redb panics, instead of returning an error, on some damaged files (a truncated file, pages with
//!   flipped bytes). Opening the store and reading it back catch such a panic and report
//!   [`StoreError::Damaged`], naming the file.
//! * After an I/O error (a full disk), redb refuses every later transaction until the database is
//!   closed and opened again. A failed write is logged, the database is closed, and it is reopened
//!   before the next read or write, so alterations work again once the disk has room, without a
//!   restart.
//!
//! [redb]: https://docs.rs/redb
//! [`Engine`]: kquota::Engine
//! [`Engine::alter_durably`]: kquota::Engine::alter_durably
//! [`Engine::alter`]: kquota::Engine::alter

// The store; the file under redb and the panic guard; one entry's encoding; the errors.
mod backend;
mod codec;
mod error;
mod store;

// The public interface: the store, what it reads back, and why it fails.
pub use crate::error::{CorruptEntry, DbError, StoreError};
pub use crate::store::{Store, StoredEntity, DB_FILE};
