//! [`Store`]: quota configuration in one redb file, written one durable transaction per batch.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{Builder, Database, ReadableTable, TableDefinition};
use tracing::{error, info};

use kquota::{Engine, Entity, EntityChange, PersistError, Persistence, QuotaKey};

use crate::backend::{guarded, Backend, FileState, Opener};
use crate::codec::{decode, encode};
use crate::error::{db_err, open_err, CorruptEntry, StoreError};

const QUOTAS: TableDefinition<&str, &[u8]> = TableDefinition::new("quotas");

/// The database file inside a data directory.
pub const DB_FILE: &str = "kquota.redb";

/// One stored entity and its keys and values.
pub type StoredEntity = (Entity, Vec<(QuotaKey, f64)>);

/// An open database and the state of its file.
struct Opened {
    db: Database,
    state: Arc<FileState>,
}

/// A storage path and its encoded quotas (`None`: the entity has none, no entry).
type Record = (String, Option<Vec<u8>>);

struct Inner {
    /// `None` after a failure closed the database; it is reopened before the next use.
    db: Option<Opened>,
    /// The entries a failed write may have left behind, with the values that memory has for them;
    /// written back when the database is reopened. Never empty while the database is open.
    restore: BTreeMap<String, Option<Vec<u8>>>,
}

/// Quota configuration on disk.
pub struct Store {
    file: PathBuf,
    open_db: Box<Opener>,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// Opens (creating if needed) the database in `file` and makes sure the quota table exists.
fn open_file(file: &Path, open_db: &Opener) -> Result<Opened, StoreError> {
    // What `Database::create` does: read-write, created if missing, never truncated, locked.
    let handle = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)
        .map_err(|e| open_err(file, e))?;
    let state = Arc::new(FileState::default());
    let backend = Backend {
        file: FileBackend::new(handle).map_err(|e| match e {
            // redb's words for it are "Database already open. Cannot acquire lock.".
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked(file.to_owned()),
            e => open_err(file, e),
        })?,
        state: Arc::clone(&state),
    };
    let db = guarded(file, &state, || {
        let db = open_db(backend).map_err(|e| open_err(file, e))?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(QUOTAS).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(db)
    })?;
    Ok(Opened { db, state })
}

/// Writes `records` in one durable transaction. `prior` gets, record by record, the value each one
/// replaced (what memory still has if the commit fails).
fn write<'r>(
    db: &Database,
    records: impl IntoIterator<Item = (&'r str, Option<&'r [u8]>)>,
    prior: &mut Vec<Option<Vec<u8>>>,
) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(db_err)?;
    {
        let mut table = txn.open_table(QUOTAS).map_err(db_err)?;
        for (path, value) in records {
            let old = match value {
                Some(value) => table.insert(path, value),
                None => table.remove(path),
            }
            .map_err(db_err)?;
            prior.push(old.map(|v| v.value().to_vec()));
        }
    }
    txn.commit().map_err(db_err)
}

/// Every entry of the quota table, decoded, in storage-path order.
fn read_all(db: &Database) -> Result<Vec<StoredEntity>, StoreError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = txn.open_table(QUOTAS).map_err(db_err)?;
    let mut out = Vec::new();
    for item in table.iter().map_err(db_err)? {
        let (k, v) = item.map_err(db_err)?;
        let path = k.value();
        let corrupt = |reason: CorruptEntry| StoreError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let entity = Entity::from_storage_path(path).map_err(|e| corrupt(CorruptEntry::Path(e)))?;
        let quotas = decode(v.value()).map_err(corrupt)?;
        out.push((entity, quotas));
    }
    Ok(out)
}

impl Store {
    /// Opens (creating if needed) the store in `dir`. A file the database engine cannot read, even
    /// one it panics on, is an error ([`StoreError::Damaged`] names it and says what to do).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(
            dir,
            Box::new(|backend| Builder::new().create_with_backend(backend)),
        )
    }

    fn open_with(dir: &Path, open_db: Box<Opener>) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.to_owned(), e))?;
        let file = dir.join(DB_FILE);
        let opened = open_file(&file, &*open_db)?;
        Ok(Store {
            file,
            open_db,
            inner: Mutex::new(Inner {
                db: Some(opened),
                restore: BTreeMap::new(),
            }),
        })
    }

    /// Every stored entity and its quotas, in storage-path order.
    pub fn entries(&self) -> Result<Vec<StoredEntity>, StoreError> {
        let mut inner = self.inner.lock();
        let result = {
            let opened = self.ready(&mut inner)?;
            guarded(&self.file, &opened.state, || read_all(&opened.db))
        };
        if matches!(result, Err(StoreError::Damaged { .. })) {
            // redb panicked: its state is unknown, so the database is dropped (its file sealed), and
            // the next use opens the file again.
            self.close(inner.db.take());
        }
        result
    }

    /// Loads everything stored into an empty `engine` through the checks an alteration would make;
    /// returns how many entities were loaded. A refused entry stops the load with
    /// [`StoreError::Invalid`] and leaves the engine empty.
    pub fn load_into(&self, engine: &Engine) -> Result<usize, StoreError> {
        engine
            .load(self.entries()?)
            .map_err(|(entity, error)| StoreError::Invalid { entity, error })
    }

    /// Writes a batch of changes in one durable transaction (fsync before returning).
    ///
    /// If the write fails (in practice an I/O error: a full disk, a failing device), the error is
    /// logged and returned, and the database is closed: redb refuses every transaction after an I/O
    /// error until it is reopened. It is reopened before the next write (or read); if that fails, that
    /// write fails with the reason, and the next one tries again. So once the disk has room again,
    /// alterations succeed without a restart.
    ///
    /// Why the reopened database agrees with memory: [`Engine::alter_durably`] calls this under its
    /// writer lock and publishes a batch only if this returns `Ok`, so memory holds exactly the
    /// batches whose commit succeeded. A commit that failed is normally absent from the reopened file:
    /// redb writes a commit's pages and then its header, and on opening a file that was not closed
    /// cleanly it checks the newest commit's checksums and falls back to the one before if any of its
    /// pages is missing. One case escapes that: every page written but the fsync failed. Reopened in
    /// the same process (the pages are in the OS cache), that commit reads as done, though memory
    /// does not have it and the client was told it failed. So a failed write also keeps, for each
    /// entry it touched, the value that entry had before (read in the same transaction: the last
    /// committed value, which is the one memory has), and the reopen writes those back before
    /// anything else. If the process stops before a reopen succeeds, the next start loads whatever
    /// the file holds.
    pub fn persist(&self, changes: &[EntityChange<'_>]) -> Result<(), StoreError> {
        let records: Vec<Record> = changes
            .iter()
            .map(|c| {
                let value = (!c.quotas.is_empty()).then(|| encode(c.quotas));
                (c.entity.storage_path(), value)
            })
            .collect();
        let mut inner = self.inner.lock();
        let mut prior = Vec::with_capacity(records.len());
        let result = {
            let opened = self.ready(&mut inner)?;
            let items = records.iter().map(|(p, v)| (p.as_str(), v.as_deref()));
            guarded(&self.file, &opened.state, || {
                write(&opened.db, items, &mut prior)
            })
        };
        if let Err(e) = &result {
            error!(
                file = %self.file.display(),
                "store write failed, alteration refused: {e}; the database is closed and reopened \
                 before the next write"
            );
            // The commit may have reached the file (see above): remember what memory has for every
            // entry this write got to. An entry already remembered keeps its older value, which is
            // the one memory has.
            let inner = &mut *inner;
            for ((path, _), old) in records.into_iter().zip(prior) {
                inner.restore.entry(path).or_insert(old);
            }
            self.close(inner.db.take());
            // Write those back at once if the disk lets us: the process may stop before its next
            // write. If it does not, the next use (or the drop) tries again.
            let _ = self.ready(inner);
        }
        result
    }

    /// The open database, reopened first if a failure closed it.
    fn ready<'a>(&self, inner: &'a mut Inner) -> Result<&'a Opened, StoreError> {
        let opened = match inner.db.take() {
            Some(opened) => opened,
            None => self.reopen(&mut inner.restore)?,
        };
        Ok(inner.db.insert(opened))
    }

    /// Opens the file again after a failure and writes back what the failed writes may have left
    /// (see [`Store::persist`]).
    fn reopen(
        &self,
        restore: &mut BTreeMap<String, Option<Vec<u8>>>,
    ) -> Result<Opened, StoreError> {
        let result = open_file(&self.file, &*self.open_db).and_then(|opened| {
            if restore.is_empty() {
                return Ok(opened);
            }
            let items = restore.iter().map(|(p, v)| (p.as_str(), v.as_deref()));
            match guarded(&self.file, &opened.state, || {
                write(&opened.db, items, &mut Vec::new())
            }) {
                Ok(()) => {
                    restore.clear();
                    Ok(opened)
                }
                Err(e) => {
                    self.close(Some(opened));
                    Err(e)
                }
            }
        });
        match &result {
            Ok(_) => info!(file = %self.file.display(), "store reopened after a failure"),
            Err(e) => error!(
                file = %self.file.display(),
                "store cannot be reopened: {e}; tried again at its next use"
            ),
        }
        result
    }

    /// Drops a database. Its drop writes its allocator state and the clean-shutdown flag: after an
    /// I/O error redb skips those (it refuses all I/O), after a panic the file is sealed so they are
    /// refused; a panic in the drop itself is caught like any other.
    fn close(&self, opened: Option<Opened>) {
        if let Some(opened) = opened {
            let state = Arc::clone(&opened.state);
            let _ = guarded(&self.file, &state, || {
                drop(opened);
                Ok(())
            });
        }
    }
}

impl Persistence for Store {
    fn persist(&self, changes: &[EntityChange<'_>]) -> Result<(), PersistError> {
        Store::persist(self, changes).map_err(PersistError::from)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let mut inner = self.inner.lock();
        if !inner.restore.is_empty() {
            // The last chance to undo a failed commit that reached the file (see `persist`):
            // otherwise the next start would load an alteration its client was told had failed.
            let _ = self.ready(&mut inner);
        }
        // A clean close writes the allocator state and the clean-shutdown flag; a redb panic there
        // is caught too.
        let opened = inner.db.take();
        drop(inner);
        self.close(opened);
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::ops::Range;
    use std::sync::atomic::{AtomicBool, Ordering};

    use redb::StorageBackend;

    use super::*;
    use kquota::Alteration;
    use kquota::EntityName;
    use kquota::{ListFilter, ListedEntity};

    #[test]
    fn a_store_held_by_another_opener_says_so() {
        let dir = std::env::temp_dir().join(format!("kquota-store-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = Store::open(&dir).unwrap();
        // The lock is the file's (flock): a second opener is refused even in this process.
        let Err(e) = Store::open(&dir) else {
            panic!("a second opener was let in");
        };
        assert!(
            matches!(&e, StoreError::Locked(f) if *f == dir.join(DB_FILE)),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("is in use by another process"),
            "{e}"
        );
        drop(held);
        Store::open(&dir).expect("free again once the holder is gone");
        let _ = std::fs::remove_dir_all(&dir);
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
            fresh.list(&kquota::ListFilter::all()),
            engine.list(&kquota::ListFilter::all())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A scratch directory for one test (removed first).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kquota-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn user(i: usize) -> Entity {
        Entity::User(EntityName::named(&format!("user-{i}")).unwrap())
    }

    /// Sets `producer_byte_rate` of the users in `users` through `engine`, persisted by `store`.
    fn set_users(
        engine: &Engine,
        store: &Store,
        users: Range<usize>,
        rate: f64,
    ) -> Result<(), StoreError> {
        let entities: Vec<Entity> = users.map(user).collect();
        let batch: Vec<Alteration> = entities
            .iter()
            .map(|e| Alteration::new(e).set("producer_byte_rate", rate))
            .collect();
        let results = engine.alter_durably(&batch, false, |changes| store.persist(changes))?;
        assert!(results.iter().all(|r| r.error.is_none()));
        Ok(())
    }

    /// A real store file in `dir`, written by the store (200 users); its bytes.
    fn written_file(dir: &Path) -> Vec<u8> {
        let store = Store::open(dir).unwrap();
        set_users(&Engine::new(), &store, 0..200, 100.0).unwrap();
        drop(store);
        std::fs::read(dir.join(DB_FILE)).unwrap()
    }

    /// Opens the store in `dir` and loads it into a new engine.
    fn open_and_load(dir: &Path) -> Result<usize, StoreError> {
        Store::open(dir)?.load_into(&Engine::new())
    }

    /// `e` is [`StoreError::Damaged`], says so naming `file`, and if it says that nothing was
    /// written, the file holds `bytes` still.
    fn assert_damaged(e: &StoreError, file: &Path, bytes: &[u8]) {
        let message = e.to_string();
        let StoreError::Damaged { written, .. } = e else {
            panic!("expected Damaged, got {e:?}");
        };
        assert!(
            message.starts_with(&format!("{} looks corrupt: ", file.display())),
            "{message}"
        );
        assert!(
            message.contains("Restore it from a backup, or move it aside"),
            "{message}"
        );
        if !written {
            assert!(message.ends_with("Nothing in it was changed."), "{message}");
            assert!(
                std::fs::read(file).unwrap() == bytes,
                "the file was changed"
            );
        }
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_panic() {
        let dir = scratch("truncated");
        let bytes = written_file(&dir);
        let file = dir.join(DB_FILE);
        // redb asserted that the file is as long as its header says.
        std::fs::write(&file, &bytes[..3000]).unwrap();
        let e = open_and_load(&dir).unwrap_err();
        assert!(
            matches!(e, StoreError::Damaged { written: false, .. }),
            "{e:?}"
        );
        assert_damaged(&e, &file, &bytes[..3000]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_byte_flipped_file_is_an_error_not_a_panic() {
        let dir = scratch("flipped");
        let bytes = written_file(&dir);
        let file = dir.join(DB_FILE);
        // Each pattern made redb panic, while opening or while reading the table back; the first
        // with the reviewer's "range end index 584872 out of range for slice of length 532480".
        for (start, step) in [(512, 97), (4096, 97), (512, 251), (512, 509)] {
            let mut flipped = bytes.clone();
            for i in (start..flipped.len()).step_by(step) {
                flipped[i] ^= 0xFF;
            }
            std::fs::write(&file, &flipped).unwrap();
            let e = open_and_load(&dir).unwrap_err();
            assert_damaged(&e, &file, &flipped);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Switches that make the file's writes or syncs fail, as on a full disk.
    #[derive(Debug, Default)]
    struct Faults {
        writes: AtomicBool,
        syncs: AtomicBool,
    }

    /// The store's backend, with [`Faults`].
    #[derive(Debug)]
    struct Faulty {
        inner: Backend,
        faults: Arc<Faults>,
    }

    impl Faulty {
        fn check(&self, switch: &AtomicBool) -> io::Result<()> {
            if switch.load(Ordering::SeqCst) {
                return Err(io::Error::other("No space left on device (simulated)"));
            }
            Ok(())
        }
    }

    impl StorageBackend for Faulty {
        fn len(&self) -> io::Result<u64> {
            self.inner.len()
        }

        fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
            self.inner.read(offset, len)
        }

        fn set_len(&self, len: u64) -> io::Result<()> {
            self.check(&self.faults.writes)?;
            self.inner.set_len(len)
        }

        fn sync_data(&self, eventual: bool) -> io::Result<()> {
            self.check(&self.faults.syncs)?;
            self.inner.sync_data(eventual)
        }

        fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            self.check(&self.faults.writes)?;
            self.inner.write(offset, data)
        }
    }

    /// A store in `dir` whose file fails on demand (every reopen gets the same switches).
    fn faulty_store(dir: &Path) -> (Store, Arc<Faults>) {
        let faults = Arc::new(Faults::default());
        let switches = Arc::clone(&faults);
        let store = Store::open_with(
            dir,
            Box::new(move |backend| {
                Builder::new().create_with_backend(Faulty {
                    inner: backend,
                    faults: Arc::clone(&switches),
                })
            }),
        )
        .unwrap();
        (store, faults)
    }

    /// Log lines written while the test runs (this thread's subscriber only).
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Log {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock()).into_owned()
        }
    }

    #[test]
    fn alterations_work_again_once_a_full_disk_has_room() {
        let dir = scratch("full");
        let log = Log::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let log = log.clone();
                move || log.clone()
            })
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);
        let (store, faults) = faulty_store(&dir);
        let engine = Engine::new();
        set_users(&engine, &store, 0..10, 100.0).unwrap();
        let before = engine.list(&ListFilter::all());

        faults.writes.store(true, Ordering::SeqCst);
        let e = set_users(&engine, &store, 5..20, 200.0).unwrap_err();
        assert!(e.to_string().contains("No space left on device"), "{e}");
        assert_eq!(engine.list(&ListFilter::all()), before);
        let logged = log.text();
        assert!(
            logged.contains("ERROR") && logged.contains("store write failed"),
            "{logged}"
        );
        // Still full: reopening fails too, as an error on this write (not a panic).
        let e = set_users(&engine, &store, 5..20, 200.0).unwrap_err();
        assert!(e.to_string().contains("No space left on device"), "{e}");
        assert!(
            log.text().contains("store cannot be reopened"),
            "{}",
            log.text()
        );
        assert_eq!(engine.list(&ListFilter::all()), before);

        // Room again: the same store object writes.
        faults.writes.store(false, Ordering::SeqCst);
        set_users(&engine, &store, 5..20, 300.0).unwrap();
        assert!(log.text().contains("store reopened"), "{}", log.text());
        set_users(&engine, &store, 20..25, 400.0).unwrap();
        assert_eq!(engine.list(&ListFilter::all()).len(), 25);
        drop(store);
        let fresh = Engine::new();
        assert_eq!(Store::open(&dir).unwrap().load_into(&fresh).unwrap(), 25);
        assert_eq!(
            fresh.list(&ListFilter::all()),
            engine.list(&ListFilter::all())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Ten users at 100, then a commit setting users 5..20 to 200 whose pages all reach the file
    /// but whose fsync fails, with the fsync still failing afterwards. The client is told it failed
    /// and memory does not have it, so the file must not keep it either. Returns the store, its
    /// fault switches and what memory holds.
    fn fail_a_commit_at_fsync(dir: &Path) -> (Store, Arc<Faults>, Vec<ListedEntity>) {
        let (store, faults) = faulty_store(dir);
        let engine = Engine::new();
        set_users(&engine, &store, 0..10, 100.0).unwrap();
        let before = engine.list(&ListFilter::all());
        faults.syncs.store(true, Ordering::SeqCst);
        assert!(set_users(&engine, &store, 5..20, 200.0).is_err());
        assert_eq!(engine.list(&ListFilter::all()), before);
        (store, faults, before)
    }

    /// A fresh start over `dir` loads exactly `expected`.
    fn assert_reloads(dir: &Path, expected: &[ListedEntity]) {
        let fresh = Engine::new();
        let loaded = Store::open(dir).unwrap().load_into(&fresh).unwrap();
        assert_eq!(loaded, expected.len());
        assert_eq!(fresh.list(&ListFilter::all()), expected);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_commit_whose_fsync_failed_is_undone_when_the_store_reopens() {
        let dir = scratch("fsync");
        let (store, faults, before) = fail_a_commit_at_fsync(&dir);
        faults.syncs.store(false, Ordering::SeqCst);
        // Reading reopens the store, which first writes back what memory has.
        let stored = store.entries().unwrap();
        assert_eq!(stored.len(), 10, "{stored:?}");
        assert!(
            stored
                .iter()
                .all(|(_, quotas)| quotas.iter().all(|&(_, v)| v == 100.0)),
            "{stored:?}"
        );
        drop(store);
        assert_reloads(&dir, &before);
    }

    /// The same failed commit, then a stop: the drop writes the old values back once it can, so
    /// the next start does not load the refused batch.
    #[test]
    fn a_failed_commit_is_undone_even_if_the_store_is_dropped_next() {
        let dir = scratch("fsync-drop");
        let (store, faults, before) = fail_a_commit_at_fsync(&dir);
        // Still failing: neither the write-back right after the failure nor this one can happen.
        assert!(store.entries().is_err());
        faults.syncs.store(false, Ordering::SeqCst);
        drop(store);
        assert_reloads(&dir, &before);
    }
}
