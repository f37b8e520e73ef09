//! The database file under redb: a backend that notes writes and can be sealed, and the guard that
//! turns a redb panic into an error.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{Database, DatabaseError, StorageBackend};

use crate::error::StoreError;

/// What the store knows about the file under one open database.
#[derive(Debug, Default)]
pub(crate) struct FileState {
    /// Something was written to the file (or its length set) since it was opened.
    pub(crate) written: AtomicBool,
    /// The store gave up on this database after a panic inside redb: every later write, resize and
    /// sync is refused, so that dropping the database (which writes its allocator state and the
    /// clean-shutdown flag) leaves the damaged file as it is.
    pub(crate) sealed: AtomicBool,
}

/// The database file as redb sees it: a [`FileBackend`] (the one `Database::create` uses, with its
/// exclusive lock) that notes writes and can be sealed. See [`FileState`].
#[derive(Debug)]
pub(crate) struct Backend {
    pub(crate) file: FileBackend,
    pub(crate) state: Arc<FileState>,
}

impl Backend {
    fn writable(&self) -> io::Result<()> {
        if self.state.sealed.load(Ordering::Acquire) {
            return Err(io::Error::other(
                "the store gave up on this file after the database failed reading it",
            ));
        }
        Ok(())
    }
}

impl StorageBackend for Backend {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.file.read(offset, len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.writable()?;
        self.state.written.store(true, Ordering::Release);
        self.file.set_len(len)
    }

    fn sync_data(&self, eventual: bool) -> io::Result<()> {
        self.writable()?;
        self.file.sync_data(eventual)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.writable()?;
        self.state.written.store(true, Ordering::Release);
        self.file.write(offset, data)
    }
}

/// Makes a database over a backend: `Builder::new().create_with_backend` (what `Database::create`
/// does), or in tests a backend that fails on demand.
pub(crate) type Opener = dyn Fn(Backend) -> Result<Database, DatabaseError> + Send + Sync;

/// Runs `f`, turning a panic inside it into [`StoreError::Damaged`] about `file`: redb panics on some
/// damaged files instead of returning an error. After a panic the file is sealed (see
/// [`FileState::sealed`]), and the caller must not use the database `f` worked on again; it only
/// drops it. That is why asserting unwind safety is sound: nothing `f` may have left half-updated is
/// read afterwards.
///
/// `catch_unwind` does not stop the panic hook: redb's panic message (and the backtrace note) still
/// reach stderr before the error. Silencing them would mean swapping the process-wide hook
/// (`panic::take_hook`/`set_hook`) around the call, and that is not safe here: other threads run
/// meanwhile (kquotad opens the store after its tokio runtime has started its worker threads, and
/// tests and other callers open stores while other threads work), so a swap could swallow another
/// thread's panic message, or, with two opens interleaving, leave the silent hook installed for good.
pub(crate) fn guarded<T>(
    file: &Path,
    state: &FileState,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            state.sealed.store(true, Ordering::Release);
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned())
                // One line (assert_eq! spreads its message over three).
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            Err(StoreError::Damaged {
                file: file.to_owned(),
                detail: format!("redb panicked: {message}"),
                written: state.written.load(Ordering::Acquire),
            })
        }
    }
}
