//! Helpers shared by the workspace's integration tests: entity shorthands, scratch directories, and
//! the kquota binaries run as child processes. Not published; only tests depend on it.

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kquota::{Alteration, Engine, Entity, EntityName};

/// A named entity component.
pub fn n(s: &str) -> EntityName {
    EntityName::named(s).expect("non-empty name")
}

/// The default entity component.
pub fn d() -> EntityName {
    EntityName::Default
}

/// Applies a batch and panics with the first error.
pub fn alter_ok(engine: &Engine, batch: &[Alteration]) {
    for r in engine.alter(batch, false) {
        if let Some(e) = r.error {
            panic!("alteration of {:?} failed: {e}", r.entity);
        }
    }
}

/// `{user=u, client-id=c}` with named components.
pub fn uc(u: &str, c: &str) -> Entity {
    Entity::UserClient(n(u), n(c))
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// The path of one of the workspace's binaries (`kquotad`, `kafka-quotas`, `kafka-configs`), built
/// by the same cargo invocation as the running test.
///
/// Cargo tells a test only about the binaries of its own package, and the tests of one crate run the
/// binaries of another (the tools against `kquotad`). They sit beside the test executable's `deps/`
/// folder; `cargo test` of the whole workspace builds them all first. A test run of one package alone
/// builds the missing one here, once.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<()>> = OnceLock::new();
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable lives in <target>/<profile>/deps");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let _once = BUILT.get_or_init(|| Mutex::new(())).lock().unwrap();
    if !path.exists() {
        let package = match name {
            "kquotad" => "kquotad",
            "kafka-quotas" | "kafka-configs" => "kquota-cli",
            other => panic!("no workspace binary named {other}"),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--package", package, "--bin", name]);
        if dir.file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build --bin {name} failed");
        assert!(path.exists(), "{} was not built", path.display());
    }
    path
}

/// Runs `kquotad` with `args` to completion (stdin empty): its exit code and its stderr. For flags and
/// settings it must refuse at start-up.
pub fn kquotad_exit(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin("kquotad"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kquotad runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh scratch directory path for one test (see [`TempDir`]); the directory is not created.
pub fn temp_dir(what: &str) -> TempDir {
    let n = DIRS.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("kquota-it-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    TempDir(dir)
}

/// A test's scratch directory, `kquota-it-<what>-<pid>-<n>` under the system's temporary directory.
/// Dropping it removes the directory and the files the tests put beside it under its name
/// (`<dir>.log`, `<dir>.<name>.properties`), unless the test is failing: then they stay for a look.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
        let (Some(parent), Some(name)) = (self.0.parent(), self.0.file_name()) else {
            return;
        };
        let prefix = format!("{}.", name.to_string_lossy());
        for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// A running `kquotad` on a free loopback port; killed when dropped.
pub struct Kquotad {
    /// The server process.
    pub child: Child,
    /// Its first listener's bound address.
    pub addr: SocketAddr,
    /// A scratch directory removed after the server is killed, for servers that own theirs.
    scratch: Option<TempDir>,
}

impl Kquotad {
    /// Starts `kquotad` over `dir` with `extra` flags and waits until it listens. Its one
    /// PLAINTEXT listener's anonymous clients are super users (they alter quotas).
    pub fn start(dir: &Path, extra: &[&str]) -> Kquotad {
        let mut args = vec!["--super-users", "User:ANONYMOUS"];
        args.extend_from_slice(extra);
        let (server, _) = Kquotad::start_with(dir, "PLAINTEXT://127.0.0.1:0", &args);
        server
    }

    /// Starts `kquotad` over `dir` with `listeners` (Kafka's syntax, ports 0) and `extra` flags,
    /// waits until it listens, and returns it with each listener's name and bound address. Its
    /// log goes to `<dir>.log`.
    pub fn start_with(
        dir: &Path,
        listeners: &str,
        extra: &[&str],
    ) -> (Kquotad, Vec<(String, SocketAddr)>) {
        let log = std::fs::File::create(dir.with_extension("log")).expect("create the log file");
        let mut child = Command::new(bin("kquotad"))
            .args(["--listeners", listeners, "--data-dir"])
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start kquotad");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).expect("read kquotad's first line");
        let Some(first) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
            panic!("kquotad did not start: first line {line:?}, log:\n{log}");
        };
        let addr = first.parse().unwrap();
        let count = listeners
            .split(',')
            .filter(|l| !l.trim().is_empty())
            .count();
        let mut bound = Vec::with_capacity(count);
        for _ in 0..count {
            line.clear();
            out.read_line(&mut line).expect("read a listener line");
            let (name, addr) = line
                .trim()
                .strip_prefix("listener ")
                .and_then(|l| l.split_once("://"))
                .unwrap_or_else(|| panic!("unexpected listener line {line:?}"));
            bound.push((name.to_owned(), addr.parse().unwrap()));
        }
        (
            Kquotad {
                child,
                addr,
                scratch: None,
            },
            bound,
        )
    }

    /// Hands the server its data directory, to be removed once the server is gone.
    pub fn owning(mut self, dir: TempDir) -> Kquotad {
        self.scratch = Some(dir);
        self
    }

    /// The server's log so far.
    pub fn log(dir: &Path) -> String {
        std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the server to exit; the test fails if it is still running after
    /// `limit`.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill")
            .success());
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for kquotad") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "kquotad still running {limit:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server with SIGKILL and reaps it.
    pub fn kill(mut self) {
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

/// Whether the server has closed `stream` without sending anything: end of file or a reset, not a
/// read timeout (so the stream needs a read timeout).
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}
