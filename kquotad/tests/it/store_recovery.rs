//! `kquotad` over a damaged store file: a clear error and exit code 1, never a panic (101).

use std::path::Path;

use kquota::{Alteration, Engine, Entity};
use kquota_store::{Store, DB_FILE};

use kquota_testkit::{kquotad_exit, n, temp_dir, Kquotad, TempDir};

/// A data directory holding a real store file written by the store (200 users); the file's bytes.
fn written_store() -> (TempDir, Vec<u8>) {
    let dir = temp_dir("store-recovery");
    let store = Store::open(&dir).expect("open the store");
    let engine = Engine::new();
    let users: Vec<Entity> = (0..200)
        .map(|i| Entity::User(n(&format!("user-{i}"))))
        .collect();
    let batch: Vec<Alteration> = users
        .iter()
        .map(|u| Alteration::new(u).set("producer_byte_rate", 100.0))
        .collect();
    let results = engine
        .alter_durably(&batch, false, |changes| store.persist(changes))
        .expect("persist");
    assert!(results.iter().all(|r| r.error.is_none()));
    drop(store);
    let bytes = std::fs::read(dir.join(DB_FILE)).expect("read the store file");
    (dir, bytes)
}

/// Starts `kquotad` over `dir`, which must refuse its store: the exit code and stderr.
fn refuse(dir: &Path) -> (Option<i32>, String) {
    kquotad_exit(&[
        "--data-dir",
        dir.to_str().expect("utf-8 path"),
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
    ])
}

/// The error names the file, says it looks corrupt and what to do, and the exit code is 1 (a panic
/// exits with 101). redb's own panic message comes first on stderr: the panic hook is left alone.
fn assert_refused(dir: &Path) {
    let file = dir.join(DB_FILE);
    let (code, err) = refuse(dir);
    assert_eq!(code, Some(1), "{err}");
    let expected = format!("kquotad: {} looks corrupt: ", file.display());
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with(&expected), "{err}");
    assert!(
        last.contains("Restore it from a backup, or move it aside to start with an empty store."),
        "{err}"
    );
}

#[test]
fn a_truncated_store_file_is_refused_with_a_message() {
    let (dir, bytes) = written_store();
    let file = dir.join(DB_FILE);
    std::fs::write(&file, &bytes[..3000]).unwrap();
    assert_refused(&dir);
    assert_eq!(std::fs::read(&file).unwrap(), &bytes[..3000]);
    // Moved aside, as the message says: kquotad starts over an empty store.
    std::fs::rename(&file, dir.join("kquota.redb.damaged")).unwrap();
    let server = Kquotad::start(&dir, &[]);
    drop(server);
}

#[test]
fn a_byte_flipped_store_file_is_refused_with_a_message() {
    let (dir, mut bytes) = written_store();
    // Every 97th byte from 512 on (the header's first bytes intact): redb panicked with "range end
    // index 584872 out of range for slice of length 532480" while opening it.
    for i in (512..bytes.len()).step_by(97) {
        bytes[i] ^= 0xFF;
    }
    std::fs::write(dir.join(DB_FILE), &bytes).unwrap();
    assert_refused(&dir);
}
