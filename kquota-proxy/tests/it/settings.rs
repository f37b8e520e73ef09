//! The `kquota-proxy` binary's settings: `--config FILE` (a Java properties file of the keys in
//! `kquota_proxy::SETTINGS`) and the flags, which win over it; a setting that cannot work stops
//! the binary with one line naming where it came from, and exit status 2.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kquota_proxy::SETTINGS;

const BIN: &str = env!("CARGO_BIN_EXE_kquota-proxy");

/// A properties file in the temporary directory, removed when dropped.
struct File(PathBuf);

impl File {
    fn new(text: &str) -> File {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "kquota-proxy-it-settings-{}-{}.properties",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        File(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the binary to its end (a setting refused ends it at once).
fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kquota-proxy")
}

/// What the binary printed on stderr, when it exited with status 2.
fn refusal(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    stderr
}

#[test]
fn a_bad_config_file_stops_the_proxy_naming_the_file_the_line_and_the_key() {
    let head = "# the proxy\nkquota.proxy.upstream=127.0.0.1:1\n";
    let mut cases = vec![
        (
            "max.connections=0\n",
            "line 3: max.connections=0: must be a whole number ≥ 1",
        ),
        (
            "kquota.proxy.listen.base = 19000\n",
            "line 3: kquota.proxy.listen.base=19000: must be an IP address and a port, IP:PORT \
             (IPv6 in brackets: [::1]:9092)",
        ),
        (
            "max.conections=5\n",
            "line 3: unknown setting 'max.conections' (did you mean max.connections?)",
        ),
        (
            "super.users User:admin\n",
            "line 3: expected key=value, got 'super.users' followed by a space; a setting \
             needs '=' or ':' between its key and its value",
        ),
        (
            "kquota.proxy.listen.base=127.0.0.1:0\nssl.client.auth=required\n",
            "line 4: ssl.client.auth (--tls-client-auth) needs \
             kquota.proxy.ssl.certificate.location (--tls-cert)",
        ),
    ];
    if !cfg!(feature = "cluster") {
        cases.push((
            "kquota.cluster.bootstrap.servers=kafka:9092\n",
            "line 3: kquota.cluster.bootstrap.servers=kafka:9092: this kquota-proxy was built \
             without the `cluster` feature (build it with `--features cluster`)",
        ));
    }
    for (tail, why) in cases {
        let file = File::new(&format!("{head}{tail}"));
        assert_eq!(
            refusal(&["--config", file.path()]),
            format!("kquota-proxy: {}: {why}\n", file.path()),
        );
    }
}

#[test]
fn a_config_file_that_cannot_be_read_is_named() {
    let file = File::new("");
    let missing = format!("{}.missing", file.path());
    let stderr = refusal(&["--config", &missing]);
    assert!(
        stderr.starts_with(&format!("kquota-proxy: cannot read {missing}: ")),
        "{stderr}"
    );
}

#[test]
fn a_bad_flag_is_named_with_its_key() {
    assert_eq!(
        refusal(&["--upstream", "127.0.0.1:1", "--max-in-flight", "0"]),
        "kquota-proxy: --max-in-flight: kquota.proxy.max.in.flight.requests=0: must be a whole \
         number between 1 and 65536\n"
    );
    assert_eq!(
        refusal(&["--listen-base", "127.0.0.1:0"]),
        "kquota-proxy: kquota.proxy.upstream (--upstream) is required\n"
    );
}

#[test]
fn a_flag_wins_over_the_file_and_the_proxy_serves() {
    // 203.0.113.0/24 is TEST-NET-3: no host has it, so the file's listener cannot be bound.
    let file = File::new(
        "kquota.proxy.upstream=127.0.0.1:1\n\
         kquota.proxy.listen=203.0.113.1:9092\n\
         kquota.proxy.listen.base=127.0.0.1:0\n\
         kquota.proxy.store.enable=false\n",
    );
    // A listener that cannot be bound is a failed start (1), as in kquotad, not a refused setting.
    let out = run(&["--config", file.path()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("kquota-proxy: cannot listen on 203.0.113.1:9092: "),
        "{stderr}"
    );

    let mut child = Command::new(BIN)
        .args(["--config", file.path(), "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kquota-proxy");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let serving = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains("kquota-proxy serving") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let serving = serving.unwrap_or_else(|| panic!("never served: {seen:?}"));
    assert!(serving.contains("listen=127.0.0.1:"), "{serving}");
}

#[test]
fn help_lists_every_setting_and_its_flag() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for s in SETTINGS.iter() {
        let flag = s.flag.unwrap();
        assert!(help.contains(s.key), "--help does not name {}", s.key);
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "--help does not list {flag}"
        );
    }
    assert!(help.contains("--config <FILE>"), "{help}");
}

/// A port held by the test: the proxy asked to listen on it finds it in use.
fn held_port() -> (std::net::TcpListener, String) {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    (held, addr)
}

/// A store directory that does not exist yet, under the temporary directory.
fn store_path(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kquota-proxy-it-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_port_in_use_exits_1_as_kquotad_does_and_leaves_no_store_behind() {
    let (_held, addr) = held_port();
    let store = store_path("port-in-use");
    let out = run(&[
        "--upstream",
        "127.0.0.1:1",
        "--listen",
        &addr,
        "--listen-base",
        "127.0.0.1:0",
        "--data-dir",
        store.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!("kquota-proxy: cannot listen on {addr}: ")),
        "{stderr}"
    );
    assert!(
        !store.exists(),
        "the failed start created {}",
        store.display()
    );
}

#[test]
fn under_log_format_json_a_failed_start_is_a_json_line_too() {
    let (_held, addr) = held_port();
    let store = store_path("json-fatal");
    let cases: [(&[&str], i32, &str); 3] = [
        // Refused by the flags' parser, before any setting is read.
        (&["--log-format", "json", "--bogus"], 2, "--bogus"),
        // Refused by the settings.
        (
            &[
                "--log-format=json",
                "--upstream",
                "127.0.0.1:1",
                "--max-connections",
                "0",
            ],
            2,
            "max.connections",
        ),
        // A failure around correct settings.
        (
            &[
                "--log-format",
                "json",
                "--upstream",
                "127.0.0.1:1",
                "--listen",
                &addr,
                "--listen-base",
                "127.0.0.1:0",
                "--data-dir",
                store.to_str().unwrap(),
            ],
            1,
            "cannot listen on",
        ),
    ];
    for (args, status, says) in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(!lines.is_empty(), "{args:?}: nothing on stderr");
        for line in &lines {
            assert!(
                line.starts_with('{')
                    && line.ends_with('}')
                    && line.contains("\"level\":\"ERROR\""),
                "{args:?}: not a JSON error line: {line}"
            );
        }
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
