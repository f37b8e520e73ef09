//! Why the store failed: [`StoreError`], with [`CorruptEntry`] for an entry that cannot be read
//! back and [`DbError`] for a failure of the database itself.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};

use kquota::{ApiError, Entity, ParseError};

/// Why the store failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    Io(PathBuf, std::io::Error),
    /// The database file is held (locked) by another process, which has the store open.
    Locked(PathBuf),
    /// The database failed.
    Db(DbError),
    /// A stored entry cannot be read back.
    Corrupt {
        /// The entry's key.
        path: String,
        /// What is wrong with it.
        reason: CorruptEntry,
    },
    /// A stored entry fails today's validation (for example after switching to the `kip55` policy).
    Invalid {
        /// The entity.
        entity: Entity,
        /// The validation error, as an alteration setting these quotas would get it.
        error: ApiError,
    },
    /// The database file looks damaged: the database engine failed (panicked) while reading it.
    Damaged {
        /// The database file.
        file: PathBuf,
        /// What the database engine reported (its panic message, on one line).
        detail: String,
        /// Whether the engine had written to the file before it failed. It writes the header of
        /// every file it opens, and repairs a file that was not closed cleanly; the store itself
        /// writes nothing once the engine has failed.
        written: bool,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(path, e) => {
                write!(f, "cannot use data directory {}: {e}", path.display())
            }
            StoreError::Locked(file) => write!(
                f,
                "{} is in use by another process (another kquotad or kquota-proxy with this data \
                 directory?): one process at a time may hold a store",
                file.display()
            ),
            // The database's own words (and its file, when opening it failed): the callers say
            // it is the store's ("Store error: …" in an alteration's answer), so this does not.
            StoreError::Db(e) => write!(f, "{e}"),
            StoreError::Corrupt { path, reason } => {
                write!(f, "stored entry {path} cannot be read: {reason}")
            }
            StoreError::Invalid { entity, error } => {
                write!(f, "stored quotas of {entity} are refused on load: {error}")
            }
            StoreError::Damaged {
                file,
                detail,
                written,
            } => {
                write!(
                    f,
                    "{} looks corrupt: the database failed while reading it ({detail}). Restore it \
                     from a backup, or move it aside to start with an empty store. ",
                    file.display()
                )?;
                if *written {
                    write!(
                        f,
                        "The file is still there, though the database had written to it (its \
                         header, or a repair) before it failed."
                    )
                } else {
                    write!(f, "Nothing in it was changed.")
                }
            }
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Io(_, e) => Some(e),
            StoreError::Db(e) => Some(e),
            StoreError::Corrupt { reason, .. } => Some(reason),
            StoreError::Invalid { error, .. } => Some(error),
            StoreError::Damaged { .. } | StoreError::Locked(_) => None,
        }
    }
}

/// A failure of the database (redb): opening its file, a transaction, a table, a commit.
#[derive(Debug)]
pub struct DbError {
    /// The file, when opening it failed.
    file: Option<PathBuf>,
    /// redb's error (or the file system's, opening the file); its type is redb's, so it is not
    /// part of this crate's interface.
    source: Box<dyn Error + Send + Sync>,
}

impl DbError {
    /// The database file, if the failure was in opening it.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}: {}", file.display(), self.source),
            None => write!(f, "{}", self.source),
        }
    }
}

impl Error for DbError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

/// A redb failure, as a [`StoreError::Db`].
pub(crate) fn db_err(e: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
    StoreError::Db(DbError {
        file: None,
        source: e.into(),
    })
}

/// A failure opening `file`, as a [`StoreError::Db`] naming it.
pub(crate) fn open_err(file: &Path, e: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
    StoreError::Db(DbError {
        file: Some(file.to_owned()),
        source: e.into(),
    })
}

/// What is wrong with a stored entry that cannot be read back.
#[derive(Debug)]
#[non_exhaustive]
pub enum CorruptEntry {
    /// Its key is not an entity's storage path.
    Path(ParseError),
    /// Its value ends inside a quota.
    Truncated,
    /// A quota key is not UTF-8.
    NotUtf8(std::str::Utf8Error),
    /// A quota key is not one kquota knows.
    Key(ParseError),
    /// Its value holds no quota (an entity without quotas has no entry).
    NoQuotas,
}

impl fmt::Display for CorruptEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptEntry::Path(e) | CorruptEntry::Key(e) => write!(f, "{e}"),
            CorruptEntry::Truncated => f.write_str("truncated entry"),
            CorruptEntry::NotUtf8(e) => write!(f, "{e}"),
            CorruptEntry::NoQuotas => f.write_str("no quotas"),
        }
    }
}

impl Error for CorruptEntry {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CorruptEntry::Path(e) | CorruptEntry::Key(e) => Some(e),
            CorruptEntry::NotUtf8(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_failure_reads_once() {
        let write = db_err("No space left on device (os error 28)");
        assert_eq!(write.to_string(), "No space left on device (os error 28)");
        // As an alteration's answer puts it.
        assert_eq!(
            format!("Store error: {write}"),
            "Store error: No space left on device (os error 28)"
        );
        let open = open_err(Path::new("/data/quotas.redb"), "Database already open");
        assert_eq!(open.to_string(), "/data/quotas.redb: Database already open");
    }
}
