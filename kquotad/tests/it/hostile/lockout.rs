//! Admins always get in: with `max.connections` (1024) taken by sockets that never send a byte, a
//! super user still connects and alters within a second. Before the fix the 1025th connection was
//! closed at once, for ten minutes (`connections.max.idle.ms`).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kquota_testkit::{closed_by_server, Kquotad};
use kquota_wire::ScramMechanism;

use super::client::{data_dir, open_files, sasl_server, Conn, ADMIN_PASSWORD};

const IDLE: usize = 1024;

/// Opens `IDLE` sockets that send nothing, and waits until the server holds them all.
fn flood(server: &Kquotad, addr: SocketAddr) -> Vec<TcpStream> {
    let before = open_files(server);
    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while open_files(server) < before + IDLE {
        assert!(
            Instant::now() < deadline,
            "the server accepted {} of {IDLE} sockets",
            open_files(server) - before
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    idle
}

/// The README's command: PLAINTEXT, `--super-users User:ANONYMOUS`, default limits.
#[test]
fn a_super_user_gets_in_past_1024_idle_sockets() {
    let dir = data_dir();
    let server = Kquotad::start(&dir, &[]);
    let idle = flood(&server, server.addr);
    let started = Instant::now();
    let mut admin = Conn::open(server.addr);
    assert_eq!(
        admin.alter("alice", 1024.0),
        Some(0),
        "the alteration is applied"
    );
    let took = started.elapsed();
    eprintln!("with {IDLE} idle sockets: a super user connected and altered in {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // One idle socket made room; the rest stay until their grace period ends.
    let mut closed = 0;
    for mut s in idle.into_iter().take(8) {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        closed += usize::from(closed_by_server(&mut s));
    }
    assert!(closed >= 1, "the oldest idle socket was closed");
}

/// The same on SASL: idle sockets on the SASL listener, the admin logs in with SCRAM-SHA-512.
#[test]
fn a_sasl_admin_gets_in_past_1024_idle_sockets() {
    let (server, _log, _, sasl) = sasl_server(&[]);
    let _idle = flood(&server, sasl);
    let started = Instant::now();
    let mut admin = Conn::open(sasl);
    assert!(admin.scram_login(ScramMechanism::Sha512, "admin", ADMIN_PASSWORD));
    assert_eq!(admin.alter("alice", 2048.0), Some(0));
    let took = started.elapsed();
    eprintln!("with {IDLE} idle SASL sockets: the admin logged in and altered in {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// A socket that does not authenticate (or, on PLAINTEXT, send a request) within
/// `kquota.connections.grace.ms` is closed; one that did stays.
#[test]
fn connections_that_do_not_authenticate_are_closed_after_the_grace_period() {
    let (server, _log, plaintext, sasl) =
        sasl_server(&["--override", "kquota.connections.grace.ms=300"]);
    let mut silent = TcpStream::connect(plaintext).unwrap();
    let mut unauthenticated = Conn::open(sasl);
    assert!(unauthenticated.handshake("SCRAM-SHA-256"));
    let mut proven = Conn::open(sasl);
    assert!(proven.scram_login(ScramMechanism::Sha256, "alice", "alice-secret"));
    let mut anonymous = Conn::open(plaintext);
    assert!(anonymous
        .call(&super::client::describe_users(), 1)
        .is_some());
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut silent));
    assert!(closed_by_server(&mut unauthenticated.stream));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "closed after {took:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(proven.call(&super::client::describe_users(), 1).is_some());
    assert!(anonymous
        .call(&super::client::describe_users(), 1)
        .is_some());
    drop(server);
}
