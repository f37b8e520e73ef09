//! `kquotad` as a process: durability under SIGKILL, bad input on the socket, graceful shutdown.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiVersionsRequest, DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest, RequestHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use kquota_testkit::{closed_by_server, kquotad_exit, temp_dir, Kquotad, TempDir};

/// A fresh data directory.
fn data_dir() -> TempDir {
    temp_dir("server")
}

/// A minimal blocking Kafka client for one connection.
struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            correlation: 0,
        }
    }

    fn send_raw(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&(frame.len() as u32).to_be_bytes())?;
        self.stream.write_all(frame)
    }

    /// Reads one response frame; `None` if the server closed the connection.
    fn read_raw(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(body)
    }

    fn frame<R: Request>(&mut self, req: &R, version: i16) -> Vec<u8> {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("it")));
        let mut buf = BytesMut::new();
        header.encode(&mut buf, R::header_version(version)).unwrap();
        req.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    fn call<R: Request>(&mut self, req: &R, version: i16) -> Option<R::Response> {
        let frame = self.frame(req, version);
        self.send_raw(&frame).ok()?;
        let mut buf = bytes::Bytes::from(self.read_raw()?);
        let header = kafka_protocol::messages::ResponseHeader::decode(
            &mut buf,
            R::Response::header_version(version),
        )
        .ok()?;
        assert_eq!(header.correlation_id, self.correlation);
        R::Response::decode(&mut buf, version).ok()
    }
}

fn set_user(name: &str, value: f64) -> EntryData {
    EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_entity_name(Some(StrBytes::from_string(name.to_owned())))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value(value)])
}

/// Every configured `{user}` entity and its producer_byte_rate, via DescribeClientQuotas.
fn users(conn: &mut Conn) -> Vec<(String, f64)> {
    let req =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_match_type(2)
            .with_match(None)]);
    let resp = conn.call(&req, 1).expect("describe answered");
    assert_eq!(resp.error_code, 0);
    let mut out: Vec<(String, f64)> = resp
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let name = e.entity[0].entity_name.as_ref().unwrap().to_string();
            (name, e.values[0].value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn no_acknowledged_alteration_is_lost_to_sigkill() {
    let dir = data_dir();
    let mut acked: Vec<(String, f64)> = Vec::new();
    let mut next = 0u64;
    // A cheap deterministic generator for kill delays: reproducible, yet varied.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..20 {
        let server = Kquotad::start(&dir, &[]);
        let mut conn = Conn::open(server.addr);
        // Everything acknowledged before is there, and nothing that was never sent.
        let present = users(&mut conn);
        let in_flight = format!("u{next:05}");
        let mut expected = acked.clone();
        if present.len() == acked.len() + 1 {
            // The alteration in flight when the server died may have become durable.
            expected.push((in_flight.clone(), next as f64 + 1.0));
            acked.push((in_flight, next as f64 + 1.0));
            next += 1;
        }
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(present, expected, "round {round}");

        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = Duration::from_millis(50 + seed % 250);
        let addr = server.addr;
        let writer = std::thread::spawn(move || {
            let mut conn = Conn::open(addr);
            let mut done = Vec::new();
            let mut n = next;
            loop {
                let name = format!("u{n:05}");
                let req = AlterClientQuotasRequest::default()
                    .with_entries(vec![set_user(&name, n as f64 + 1.0)]);
                match conn.call(&req, (n % 2) as i16) {
                    Some(resp) => {
                        assert_eq!(resp.entries[0].error_code, 0);
                        done.push((name, n as f64 + 1.0));
                        n += 1;
                    }
                    None => return done,
                }
            }
        });
        std::thread::sleep(kill_after);
        server.kill();
        let done = writer.join().unwrap();
        next += done.len() as u64;
        acked.extend(done);
    }
    eprintln!("{} acknowledged alterations survived 20 kills", acked.len());
    assert!(
        acked.len() > 12,
        "the writer made progress ({} acks)",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_frames_close_only_their_connection() {
    let dir = data_dir();
    let server = Kquotad::start(&dir, &["--max-request-bytes", "1048576"]);
    let healthy = |server: &Kquotad| {
        let mut conn = Conn::open(server.addr);
        let resp = conn
            .call(&ApiVersionsRequest::default(), 0)
            .expect("ApiVersions answered");
        assert_eq!(resp.error_code, 0);
    };
    let closed = |conn: &mut Conn| assert!(conn.read_raw().is_none(), "connection stays open");

    // A size prefix above socket.request.max.bytes, and a negative one.
    for prefix in [2_000_000u32, u32::MAX] {
        let mut conn = Conn::open(server.addr);
        conn.stream.write_all(&prefix.to_be_bytes()).unwrap();
        closed(&mut conn);
        healthy(&server);
    }
    // An unknown API key, and a served API at a version it does not serve.
    for (key, version) in [(999i16, 0i16), (48, 7), (49, -1)] {
        let mut conn = Conn::open(server.addr);
        let mut frame = Vec::new();
        frame.extend_from_slice(&key.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        conn.send_raw(&frame).unwrap();
        closed(&mut conn);
    }
    // A truncated body: an alteration whose entry count promises more than the frame holds.
    {
        let mut conn = Conn::open(server.addr);
        let req = AlterClientQuotasRequest::default().with_entries(vec![set_user("x", 1.0)]);
        let mut frame = conn.frame(&req, 0);
        frame.truncate(frame.len() - 5);
        conn.send_raw(&frame).unwrap();
        closed(&mut conn);
    }
    // A huge array count with nothing behind it.
    {
        let mut conn = Conn::open(server.addr);
        let mut frame = conn.frame(&AlterClientQuotasRequest::default(), 0);
        let n = frame.len();
        frame[n - 5..n - 1].copy_from_slice(&i32::MAX.to_be_bytes());
        conn.send_raw(&frame).unwrap();
        closed(&mut conn);
    }
    // A peer that sends half a size prefix and leaves.
    {
        let mut conn = Conn::open(server.addr);
        conn.stream.write_all(&[0, 0]).unwrap();
    }
    healthy(&server);
    // Nothing above reached the store.
    let mut conn = Conn::open(server.addr);
    assert!(users(&mut conn).is_empty());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let dir = data_dir();
    let server = Kquotad::start(&dir, &[]);
    let mut conn = Conn::open(server.addr);
    let mut frames = Vec::new();
    for i in 0..20 {
        let req = AlterClientQuotasRequest::default()
            .with_entries(vec![set_user(&format!("p{i:02}"), 1.0)]);
        frames.push(conn.frame(&req, 1));
    }
    for f in &frames {
        conn.send_raw(f).unwrap();
    }
    for i in 1..=20 {
        let mut buf = bytes::Bytes::from(conn.read_raw().expect("answered"));
        let header = kafka_protocol::messages::ResponseHeader::decode(&mut buf, 1).unwrap();
        assert_eq!(header.correlation_id, i);
    }
    assert_eq!(users(&mut conn).len(), 20);
}

#[test]
fn sigterm_stops_gracefully() {
    let dir = data_dir();
    let mut server = Kquotad::start(&dir, &[]);
    let mut conn = Conn::open(server.addr);
    let req = AlterClientQuotasRequest::default().with_entries(vec![set_user("t", 5.0)]);
    assert_eq!(conn.call(&req, 1).unwrap().entries[0].error_code, 0);
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    let server = Kquotad::start(&dir, &[]);
    let mut conn = Conn::open(server.addr);
    assert_eq!(users(&mut conn), vec![("t".to_owned(), 5.0)]);
}

#[test]
fn bad_flags_and_files_exit_with_a_message() {
    let run = kquotad_exit;
    let (code, err) = run(&["--listeners", "TLS://127.0.0.1:9093"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(
            "listener 'TLS' is not a security protocol; map it with listener.security.protocol.map"
        ),
        "{err}"
    );
    let (code, err) = run(&["--listeners", "127.0.0.1:9093"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("is not NAME://host:port"), "{err}");
    let (code, err) = run(&["--sub-quota-policy", "strict"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("unknown sub-quota policy 'strict' (expected kip55 or kafka)"),
        "{err}"
    );
    let (code, err) = run(&["--broker-count", "0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("kquota.broker.count=0: must be a whole number ≥ 1"),
        "{err}"
    );
    let scratch = data_dir();
    let file = scratch.with_extension("properties");
    std::fs::write(
        &file,
        "listeners=PLAINTEXT://127.0.0.1:0
this line is wrong
",
    )
    .unwrap();
    let (code, err) = run(&["--config", file.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 2: expected key=value"), "{err}");
    let (code, err) = run(&["--config", "/nonexistent/kquotad.properties"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("cannot read /nonexistent/kquotad.properties"),
        "{err}"
    );
}

#[test]
fn the_draft_alter_quotas_can_be_switched_on() {
    let lists_50 = |server: &Kquotad| {
        let mut conn = Conn::open(server.addr);
        let resp = conn
            .call(&ApiVersionsRequest::default(), 0)
            .expect("ApiVersions answered");
        resp.api_keys
            .iter()
            .any(|k| (k.api_key, k.min_version, k.max_version) == (50, 0, 0))
    };
    let describe_all = DescribeUserScramCredentialsRequest::default();
    // By default 50 is Kafka's DescribeUserScramCredentials: no SASL users, so none.
    let dir = data_dir();
    let default = Kquotad::start(&dir, &[]);
    assert!(lists_50(&default));
    let resp = Conn::open(default.addr)
        .call(&describe_all, 0)
        .expect("DescribeUserScramCredentials answered");
    assert_eq!((resp.error_code, resp.results.len()), (0, 0));
    drop(default);

    // With the draft on, 50 is the seeds' AlterQuotas: Kafka's request does not decode as the draft
    // and the connection closes, and the server keeps serving.
    let dir = data_dir();
    let on = Kquotad::start(&dir, &["--draft-alter-quotas", "true"]);
    assert!(lists_50(&on));
    let alice = UserName::default().with_name(StrBytes::from_static_str("alice"));
    let describe_alice = describe_all.with_users(Some(vec![alice]));
    let closed = Conn::open(on.addr).call(&describe_alice, 0).is_none();
    assert!(closed, "the connection closes");
    assert!(lists_50(&on));
    drop(on);

    // A value that is not a boolean is refused at start-up.
    let (code, stderr) = kquotad_exit(&[
        "--data-dir",
        dir.to_str().unwrap(),
        "--draft-alter-quotas",
        "maybe",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("kquota.draft.alter.quotas.enable=maybe: must be true or false"),
        "{stderr}"
    );
}

/// A peer that stops reading its answers, and one that stalls halfway through a request, hold
/// neither the server's shutdown nor their own connection forever.
#[test]
fn sigterm_is_not_held_up_by_peers_that_stall() {
    let dir = data_dir();
    let mut server = Kquotad::start(&dir, &[]);
    let mut conn = Conn::open(server.addr);
    let entries: Vec<EntryData> = (0..2000)
        .map(|i| set_user(&format!("user-{i:04}"), 1.0))
        .collect();
    let req = AlterClientQuotasRequest::default().with_entries(entries);
    let resp = conn.call(&req, 1).expect("answered");
    assert!(resp.entries.iter().all(|e| e.error_code == 0));

    // 400 pipelined describes of all 2000 users: about 40 MB of answers that are never read, far
    // more than the socket buffers hold, so the server's write blocks.
    let describe =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_match_type(2)
            .with_match(None)]);
    let mut reader_gone = Conn::open(server.addr);
    let mut frames = Vec::new();
    for _ in 0..400 {
        let frame = reader_gone.frame(&describe, 1);
        frames.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        frames.extend_from_slice(&frame);
    }
    reader_gone.stream.write_all(&frames).unwrap();
    // A size prefix for 100 bytes, then two of them.
    let mut stalled = TcpStream::connect(server.addr).unwrap();
    stalled.write_all(&[0, 0, 0, 100, 0, 1]).unwrap();
    std::thread::sleep(Duration::from_secs(1));

    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    drop((reader_gone, stalled));
    let server = Kquotad::start(&dir, &[]);
    assert_eq!(users(&mut Conn::open(server.addr)).len(), 2000);
}

/// `max.connections.per.ip` closes a client address's connections beyond the limit at once, and a
/// closed one gives its place back.
#[test]
fn max_connections_per_ip_limits_one_address() {
    let dir = data_dir();
    let server = Kquotad::start(&dir, &["--override", "max.connections.per.ip=2"]);
    let mut first = Conn::open(server.addr);
    let mut second = Conn::open(server.addr);
    assert_eq!(users(&mut first), vec![]);
    assert_eq!(users(&mut second), vec![]);
    let mut third = Conn::open(server.addr);
    assert!(
        closed_by_server(&mut third.stream),
        "the third connection is closed at once"
    );
    assert!(
        Kquotad::log(&dir).contains(
            "127.0.0.1 already has the configured maximum of 2 connections (max.connections.per.ip)"
        ),
        "{}",
        Kquotad::log(&dir)
    );
    drop(first);
    // The server notices the close when it next reads; retry until the place is free.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = Conn::open(server.addr);
        let req = DescribeClientQuotasRequest::default();
        if again.call(&req, 1).is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no place given back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(users(&mut second), vec![]);
}

#[test]
fn a_port_in_use_exits_1_and_leaves_no_store_behind() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let dir = data_dir();
    let listeners = format!("PLAINTEXT://{addr}");
    let (code, err) = kquotad_exit(&[
        "--listeners",
        &listeners,
        "--data-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!("kquotad: cannot listen on {addr}: ")),
        "{err}"
    );
    assert!(!dir.exists(), "the failed start created {}", dir.display());
    // Under --log-format json, the fatal line is JSON like every other.
    let (code, err) = kquotad_exit(&[
        "--log-format",
        "json",
        "--listeners",
        &listeners,
        "--data-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    for line in err.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["level"], "ERROR", "{line}");
    }
    assert!(err.contains("cannot listen on"), "{err}");
}

#[test]
fn under_log_format_json_refused_flags_and_settings_are_json_lines() {
    for (args, says) in [
        (&["--log-format=json", "--bogus"][..], "--bogus"),
        (
            &["--log-format", "json", "--broker-count", "0"][..],
            "kquota.broker.count=0",
        ),
    ] {
        let (code, err) = kquotad_exit(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: nothing on stderr");
        for line in err.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {line}"));
            assert_eq!(v["level"], "ERROR", "{line}");
        }
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_misspelt_settings_key_is_warned_with_the_key_meant() {
    // Warned, not refused, as Kafka's broker warns of keys it does not use; the held port ends
    // the start right after the warning.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = data_dir();
    std::fs::create_dir_all(&*dir).unwrap();
    let file = dir.join("server.properties");
    std::fs::write(&file, "max.conections=5\nlog.retention.hours=168\n").unwrap();
    let listeners = format!("PLAINTEXT://{}", held.local_addr().unwrap());
    let (code, err) = kquotad_exit(&[
        "--config",
        file.to_str().unwrap(),
        "--listeners",
        &listeners,
        "--data-dir",
        dir.join("store").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "line 1: ignoring unknown setting 'max.conections' (did you mean max.connections?)"
        ),
        "{err}"
    );
    // A Kafka broker key far from every kquotad key: no guess.
    assert!(
        err.lines()
            .any(|l| l.ends_with("line 2: ignoring unknown setting 'log.retention.hours'")),
        "{err}"
    );
}

/// The threads of process `pid` named as network threads (`kquota-network-N`, which Linux
/// truncates to 15 bytes).
fn network_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.as_ref().unwrap().path().join("comm"));
            comm.is_ok_and(|c| c.starts_with("kquota-network"))
        })
        .count()
}

/// `num.network.threads`: the server runs that many network threads and serves more
/// connections than it has threads, all open at once; a SIGTERM still finishes gracefully with
/// the connections on those threads.
#[test]
fn serves_on_one_and_on_four_network_threads() {
    for n in [1, 4] {
        let dir = data_dir();
        let threads = n.to_string();
        let mut server = Kquotad::start(&dir, &["--num-network-threads", &threads]);
        assert_eq!(
            network_threads(server.child.id()),
            n,
            "--num-network-threads {n}"
        );
        let addr = server.addr;
        let mut conns: Vec<Conn> = (0..8).map(|_| Conn::open(addr)).collect();
        // Every connection alters, then every one describes what all of them altered.
        for (i, conn) in conns.iter_mut().enumerate() {
            let req = AlterClientQuotasRequest::default()
                .with_entries(vec![set_user(&format!("n{i}"), i as f64 + 1.0)]);
            let resp = conn.call(&req, 1).expect("answered");
            assert_eq!(resp.entries[0].error_code, 0, "threads {n}, connection {i}");
        }
        let all: Vec<(String, f64)> = (0..8).map(|i| (format!("n{i}"), i as f64 + 1.0)).collect();
        for conn in &mut conns {
            assert_eq!(users(conn), all, "threads {n}");
        }
        let status = server.terminate(Duration::from_secs(30));
        assert!(status.success(), "threads {n}: exit status {status}");
    }
}

#[test]
fn num_network_threads_is_refused_outside_1_to_256() {
    for args in [
        &["--num-network-threads", "0"][..],
        &["--override", "num.network.threads=0"][..],
    ] {
        let (code, err) = kquotad_exit(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("num.network.threads=0: must be a whole number between 1 and 256"),
            "{args:?}: {err}"
        );
    }
    let (code, err) = kquotad_exit(&["--num-network-threads", "257"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("num.network.threads=257: must be a whole number between 1 and 256"),
        "{err}"
    );
}
