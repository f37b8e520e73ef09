//! SASL PLAIN and SCRAM: wrong passwords and unknown users, the failed-authentication delay,
//! truncated, malformed and replayed exchanges, requests before authentication, and the frame
//! limit before a client has authenticated.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kquota_testkit::closed_by_server;
use kquota_wire::{ScramClient, ScramMechanism};

use super::support::*;

#[test]
fn wrong_passwords_and_unknown_users_are_refused_and_logged() {
    let s = Secured::start(&[]);
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        for (user, password) in [("admin", "wrong"), ("nobody", ADMIN_PASSWORD)] {
            let c = s.sasl("bad", "SASL_PLAINTEXT", mechanism, user, password);
            let r = list(s.sasl_plaintext, Some(&c));
            assert_refused(&r, "authentication failed: SASL_AUTHENTICATION_FAILED");
        }
    }
    let c = s.sasl("bad", "SASL_PLAINTEXT", "PLAIN", "admin", "wrong");
    assert_refused(
        &list(s.sasl_plaintext, Some(&c)),
        "Invalid username or password",
    );
    let c = s.sasl("bad", "SASL_PLAINTEXT", "SCRAM-SHA-256", "nobody", "x");
    // The same answer for an unknown user as for a wrong password.
    assert_refused(
        &list(s.sasl_plaintext, Some(&c)),
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
    );
    still_serving(&s);
    let log = s.log();
    assert!(
        log.contains("Failed authentication with /127.0.0.1"),
        "{log}"
    );
    assert!(
        log.contains("PLAIN user 'admin': invalid username or password"),
        "{log}"
    );
}

#[test]
fn a_failed_authentication_is_delayed_without_blocking_other_clients() {
    let s = Secured::start(&[
        "--override",
        "connection.failed.authentication.delay.ms=3000",
    ]);
    let addr = s.sasl_plaintext;
    let slow = std::thread::spawn(move || {
        let mut c = Conn::open(addr);
        assert_eq!(c.handshake("PLAIN").error_code, 0);
        let start = Instant::now();
        let r = c
            .authenticate(b"\0admin\0wrong".to_vec())
            .expect("an answer");
        assert_eq!(r.error_code, 58);
        assert!(c.closed());
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    still_serving(&s);
    let good = start.elapsed();
    let slow = slow.join().unwrap();
    assert!(slow >= Duration::from_millis(3000), "not delayed: {slow:?}");
    // Well under the delay, with room for a loaded machine.
    assert!(
        good < Duration::from_millis(2500),
        "a good client waited {good:?}"
    );
}

#[test]
fn truncated_and_malformed_sasl_exchanges_are_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    // The client leaves after its first SCRAM message.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-256").error_code, 0);
    let scram = ScramClient::new(ScramMechanism::Sha256, "admin", ADMIN_PASSWORD).unwrap();
    let r = c.authenticate(scram.client_first()).unwrap();
    assert_eq!(r.error_code, 0);
    drop(c);
    // A frame cut short mid-exchange.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-256").error_code, 0);
    c.stream.write_all(&[0, 0, 0, 40, 0, 36, 0, 2]).unwrap();
    drop(c);
    // Malformed tokens are answered with SASL_AUTHENTICATION_FAILED and the connection closes.
    for (mechanism, token) in [
        ("SCRAM-SHA-256", &b"n,,n=admin"[..]),
        ("SCRAM-SHA-512", b""),
        ("PLAIN", b"admin"),
        ("PLAIN", b"\0admin\0"),
    ] {
        let mut c = Conn::open(s.sasl_plaintext);
        assert_eq!(c.handshake(mechanism).error_code, 0);
        let r = c.authenticate(token.to_vec()).unwrap();
        assert_eq!(r.error_code, 58, "{mechanism} {token:?}");
        assert!(c.closed());
    }
    // A mechanism that is not enabled.
    let mut c = Conn::open(s.sasl_plaintext);
    let r = c.handshake("GSSAPI");
    assert_eq!(r.error_code, 33);
    assert_eq!(r.mechanisms.len(), 3);
    assert!(c.closed());
    still_serving(&s);
}

#[test]
fn a_replayed_scram_final_message_is_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-512").error_code, 0);
    let mut scram = ScramClient::new(ScramMechanism::Sha512, "admin", ADMIN_PASSWORD).unwrap();
    let first = scram.client_first();
    let server_first = c.authenticate(first.clone()).unwrap().auth_bytes;
    let fin = scram.client_final(&server_first).unwrap();
    let r = c.authenticate(fin.clone()).unwrap();
    assert_eq!(r.error_code, 0);
    scram.verify_server_final(&r.auth_bytes).unwrap();
    assert_eq!(c.describe(), Some(0));
    // The same messages on a new connection: the server's nonce differs, so the proof is refused.
    let mut replay = Conn::open(s.sasl_plaintext);
    assert_eq!(replay.handshake("SCRAM-SHA-512").error_code, 0);
    let again = replay.authenticate(first).unwrap();
    assert_eq!(again.error_code, 0);
    assert_ne!(again.auth_bytes, server_first);
    let r = replay.authenticate(fin).unwrap();
    assert_eq!(r.error_code, 58);
    assert!(replay.closed());
    // A second handshake on an authenticated connection is refused, and the connection lives on.
    assert_eq!(c.handshake("PLAIN").error_code, 34);
    assert_eq!(c.describe(), Some(0));
    still_serving(&s);
}

#[test]
fn requests_before_authentication_close_the_connection() {
    let s = Secured::start(&[]);
    // ApiVersions is answered and lists the SASL APIs; a describe is not.
    let mut c = Conn::open(s.sasl_plaintext);
    let v: ApiVersionsResponse = c.call(&ApiVersionsRequest::default(), 0).unwrap();
    let keys: Vec<i16> = v.api_keys.iter().map(|a| a.api_key).collect();
    assert!(keys.contains(&17) && keys.contains(&36), "{keys:?}");
    assert_eq!(c.describe(), None);
    // After the handshake, only SaslAuthenticate.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("PLAIN").error_code, 0);
    assert_eq!(c.describe(), None);
    // PLAINTEXT does not list them.
    let mut c = Conn::open(s.plaintext);
    let v: ApiVersionsResponse = c.call(&ApiVersionsRequest::default(), 0).unwrap();
    assert!(!v
        .api_keys
        .iter()
        .any(|a| a.api_key == 17 || a.api_key == 36));
    // The CLI without SASL settings against a SASL listener.
    let r = list(s.sasl_plaintext, None);
    assert_refused(&r, "the server closed the connection");
    still_serving(&s);
    assert!(
        s.log().contains("during SASL authentication"),
        "{}",
        s.log()
    );
}

/// Before a SASL client has authenticated, a frame larger than `sasl.server.max.receive.size`
/// (512 KiB, as Kafka) closes the connection at its size prefix: no unauthenticated peer makes the
/// server hold `socket.request.max.bytes`. PLAINTEXT, with no authentication step, is unaffected.
#[test]
fn unauthenticated_sasl_clients_cannot_send_large_frames() {
    let s = Secured::start(&[]);
    let mut c = TcpStream::connect(s.sasl_plaintext).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&600_000u32.to_be_bytes()).unwrap();
    assert!(
        closed_by_server(&mut c),
        "the connection is closed at once, without an answer"
    );
    assert!(
        s.log()
            .contains("Invalid receive (size = 600000 larger than 524288)"),
        "{}",
        s.log()
    );
    // The same size prefix on PLAINTEXT is read (the server waits for the body).
    let mut c = TcpStream::connect(s.plaintext).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    c.write_all(&600_000u32.to_be_bytes()).unwrap();
    let err = c
        .read(&mut [0u8; 1])
        .expect_err("still open, waiting for the body");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    still_serving(&s);
}
