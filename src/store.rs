//! The durable store behind `kquotad`: quota configuration in an embedded database (`redb`).
//!
//! One table maps an entity's storage path (`users/alice/clients/app`, names sanitized, `<default>` for
//! defaults) to its keys and values. Every alteration batch is one write transaction, committed with an
//! fsync before the engine publishes it, so an acknowledged alteration survives `kill -9`, and a crash
//! mid-write leaves the previous commit intact. The store is one source of configuration among several:
//! a broker that takes its quotas from a metadata log feeds the same [`Engine::alter`] instead.

use std::fmt;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableTable, TableDefinition};

use crate::engine::{Engine, EntityChange};
use crate::entity::Entity;
use crate::key::QuotaKey;

const QUOTAS: TableDefinition<&str, &[u8]> = TableDefinition::new("quotas");

/// The database file inside a data directory.
pub const DB_FILE: &str = "kquota.redb";

/// Why the store failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    Io(PathBuf, std::io::Error),
    /// The database failed.
    Db(String),
    /// A stored entry cannot be read back.
    Corrupt {
        /// The entry's key.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored entry fails today's validation (for example after switching to the `kip55` policy).
    Invalid {
        /// The entity.
        entity: String,
        /// The validation error.
        error: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(path, e) => {
                write!(f, "cannot use data directory {}: {e}", path.display())
            }
            StoreError::Db(e) => write!(f, "store error: {e}"),
            StoreError::Corrupt { path, reason } => {
                write!(f, "stored entry {path} cannot be read: {reason}")
            }
            StoreError::Invalid { entity, error } => {
                write!(f, "stored quotas of {entity} are refused on load: {error}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

fn db_err(e: impl fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

/// One stored entity and its keys and values.
pub type StoredEntity = (Entity, Vec<(QuotaKey, f64)>);

/// Quota configuration on disk.
pub struct Store {
    db: Database,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.to_owned(), e))?;
        let db = Database::create(dir.join(DB_FILE)).map_err(db_err)?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(QUOTAS).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(Store { db })
    }

    /// Every stored entity and its quotas, in storage-path order.
    pub fn entries(&self) -> Result<Vec<StoredEntity>, StoreError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(QUOTAS).map_err(db_err)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(db_err)? {
            let (k, v) = item.map_err(db_err)?;
            let path = k.value();
            let corrupt = |reason: String| StoreError::Corrupt {
                path: path.to_owned(),
                reason,
            };
            let entity = Entity::from_storage_path(path).map_err(|e| corrupt(e.to_string()))?;
            let quotas = decode(v.value()).map_err(corrupt)?;
            out.push((entity, quotas));
        }
        Ok(out)
    }

    /// Loads everything stored into an empty `engine` through the checks an alteration would make;
    /// returns how many entities were loaded. A refused entry stops the load with
    /// [`StoreError::Invalid`] and leaves the engine empty.
    pub fn load_into(&self, engine: &Engine) -> Result<usize, StoreError> {
        engine
            .load(self.entries()?)
            .map_err(|(entity, error)| StoreError::Invalid {
                entity: entity.to_string(),
                error: error.to_string(),
            })
    }

    /// Writes a batch of changes in one durable transaction (fsync before returning).
    pub fn persist(&self, changes: &[EntityChange<'_>]) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = txn.open_table(QUOTAS).map_err(db_err)?;
            for change in changes {
                let path = change.entity.storage_path();
                if change.quotas.is_empty() {
                    table.remove(path.as_str()).map_err(db_err)?;
                } else {
                    table
                        .insert(path.as_str(), encode(change.quotas).as_slice())
                        .map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }
}

/// `[len u8][key text][value f64 LE]` per key: small, fast to read, and spelled with the public key
/// names so that the layout does not depend on internal indices.
fn encode(quotas: &[(QuotaKey, f64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(quotas.len() * 32);
    for (key, value) in quotas {
        let text = key.to_string();
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Vec<(QuotaKey, f64)>, String> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = bytes.split_first() {
        let len = len as usize;
        if rest.len() < len + 8 {
            return Err("truncated entry".into());
        }
        let text = std::str::from_utf8(&rest[..len]).map_err(|e| e.to_string())?;
        let key: QuotaKey = text
            .parse()
            .map_err(|e: crate::error::ParseError| e.to_string())?;
        let value = f64::from_le_bytes(rest[len..len + 8].try_into().expect("8 bytes"));
        out.push((key, value));
        bytes = &rest[len + 8..];
    }
    if out.is_empty() {
        return Err("no quotas".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alter::Alteration;
    use crate::entity::EntityName;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let quotas = vec![
            (QuotaKey::CONSUMER_SHARES, 200.0),
            (QuotaKey::REQUEST_PERCENTAGE, 12.5),
        ];
        assert_eq!(decode(&encode(&quotas)).unwrap(), quotas);
        assert!(decode(&[]).is_err());
        assert!(decode(&[5, b'a']).is_err());
        let mut bad = encode(&quotas);
        bad[1] = b'X';
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn persisted_changes_load_back() {
        let dir = std::env::temp_dir().join(format!("kquota-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        let engine = Engine::new();
        let alice = Entity::User(EntityName::named("alice").unwrap());
        let sub = Entity::UserClient(EntityName::named("alice").unwrap(), EntityName::Default);
        let results = engine
            .alter_durably(
                &[
                    Alteration::new(&alice).set("producer_byte_rate", 100.0),
                    Alteration::new(&sub).set("producer_byte_rate", 50.0),
                ],
                false,
                |changes| store.persist(changes),
            )
            .unwrap();
        assert!(results.iter().all(|r| r.error.is_none()));
        engine
            .alter_durably(
                &[Alteration::new(&sub).remove("producer_byte_rate")],
                false,
                |changes| store.persist(changes),
            )
            .unwrap();
        drop(store);
        let reopened = Store::open(&dir).unwrap();
        let fresh = Engine::new();
        assert_eq!(reopened.load_into(&fresh).unwrap(), 1);
        assert_eq!(
            fresh.list(&crate::ListFilter::all()),
            engine.list(&crate::ListFilter::all())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
