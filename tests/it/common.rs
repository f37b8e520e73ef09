//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use kquota::{Alteration, Engine, Entity, EntityName};

/// A named entity component.
pub(crate) fn n(s: &str) -> EntityName {
    EntityName::named(s).expect("non-empty name")
}

/// The default entity component.
pub(crate) fn d() -> EntityName {
    EntityName::Default
}

/// Applies a batch and panics with the first error.
pub(crate) fn alter_ok(engine: &Engine, batch: &[Alteration]) {
    for r in engine.alter(batch, false) {
        if let Some(e) = r.error {
            panic!("alteration of {:?} failed: {e}", r.entity);
        }
    }
}

/// `{user=u, client-id=c}` with named components.
pub(crate) fn uc(u: &str, c: &str) -> Entity {
    Entity::UserClient(n(u), n(c))
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory under the system temp dir, unique to this process and call.
pub(crate) fn temp_dir(what: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("kquota-it-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A running `kquotad` on a free loopback port; killed when dropped.
pub(crate) struct Kquotad {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Kquotad {
    /// Starts `kquotad` over `dir` with `extra` flags and waits until it listens.
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Kquotad {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kquotad"))
            .args(["--listeners", "PLAINTEXT://127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kquotad");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read kquotad's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Kquotad { child, addr }
    }

    /// Kills the server with SIGKILL and reaps it.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

impl Drop for Kquotad {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
