//! Memory a peer can make the server hold, measured on the `kquotad` process itself (`VmRSS` and
//! `VmHWM` in `/proc/<pid>/status`): frames announced but not sent, frames that wait for the
//! request budget (`queued.max.request.bytes`), refused alterations of millions of entries, and a
//! Metadata request naming a million topics. Each figure the tests check is in `docs/security.md`
//! ("Memory"), with the default settings' figures measured the same way.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kquota_testkit::{temp_dir, Kquotad};

const MIB: u64 = 1024 * 1024;

/// What the server holds besides request bytes, in every test here: tokio's workers and blocking
/// threads, the store, a connection's task and first buffer, and the allocator's slack.
const OVERHEAD: u64 = 48 * MIB;

/// The server's resident memory now and at its peak (`VmRSS`, `VmHWM`), in bytes.
fn memory(server: &Kquotad) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .expect("read the server's /proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// A server on a PLAINTEXT listener with no super users (`User:ANONYMOUS` may not alter), and
/// its request budget in bytes. With `KQUOTA_HOSTILE_DEFAULTS=1` in the environment the `extra`
/// flags (the tests' lower limits) are left out, to measure the default settings.
fn start(what: &str, extra: &[&str]) -> (Kquotad, u64) {
    let defaults = std::env::var_os("KQUOTA_HOSTILE_DEFAULTS").is_some();
    let extra = if defaults { &[][..] } else { extra };
    let budget = extra
        .iter()
        .position(|f| *f == "--queued-max-request-bytes")
        .and_then(|i| extra.get(i + 1))
        .map_or(256 * MIB, |b| b.parse().expect("a budget in bytes"));
    let dir = temp_dir(what);
    let (server, _) = Kquotad::start_with(&dir, "PLAINTEXT://127.0.0.1:0", extra);
    (server.owning(dir), budget)
}

/// A request frame (size prefix included): header v1 (client id `m`) or v2 (plus tagged fields).
fn request(api_key: i16, version: i16, header_version: i16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(body.len() + 16);
    f.extend_from_slice(&0i32.to_be_bytes());
    f.extend_from_slice(&api_key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&1i16.to_be_bytes());
    f.push(b'm');
    if header_version >= 2 {
        f.push(0);
    }
    f.extend_from_slice(body);
    let size = (f.len() - 4) as i32;
    f[..4].copy_from_slice(&size.to_be_bytes());
    f
}

fn uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads one response's size prefix and its first `head` bytes; the rest is read and dropped.
/// Returns the size and the head.
fn read_response(stream: &mut TcpStream, head: usize) -> (usize, Vec<u8>) {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("a response");
    let size = i32::from_be_bytes(size) as usize;
    let mut first = vec![0u8; head.min(size)];
    stream.read_exact(&mut first).expect("the response's head");
    let mut rest = size - first.len();
    let mut sink = vec![0u8; 1 << 16];
    while rest > 0 {
        let n = stream
            .read(&mut sink[..rest.min(1 << 16)])
            .expect("the response");
        assert!(n > 0, "the response was cut short with {rest} bytes to go");
        rest -= n;
    }
    (size, first)
}

/// An ApiVersions v0 exchange: the server still answers.
fn still_served(addr: SocketAddr) {
    let mut s = connect(addr);
    s.write_all(&request(18, 0, 1, &[])).unwrap();
    let (_, head) = read_response(&mut s, 6);
    assert_eq!(
        &head[..6],
        &[0, 0, 0, 7, 0, 0],
        "ApiVersions: correlation id, error 0"
    );
}

/// Waits until the server's resident memory stops changing (or `limit` passes); returns it.
fn settled(server: &Kquotad, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    let mut last = memory(server).0;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = memory(server).0;
        if now.abs_diff(last) < MIB || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// 1,000 PLAINTEXT connections each announce a 100 MiB frame (Kafka's default
/// `socket.request.max.bytes`) and send nothing more, against the default settings. Buffers
/// grow as bytes arrive, so the announcements cost no buffer; two frames at a time hold the
/// default budget (256 MiB) and the rest wait without reading.
#[test]
fn announced_frames_cost_what_was_sent() {
    let (server, _) = start("hostile-announce", &[]);
    still_served(server.addr);
    let (before, _) = memory(&server);
    let mut peers = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut s = connect(server.addr);
        s.write_all(&104_857_600i32.to_be_bytes()).unwrap();
        peers.push(s);
    }
    let during = settled(&server, Duration::from_secs(3));
    eprintln!(
        "1000 connections announcing 100 MiB: RSS {} before, {} with them open",
        mib(before),
        mib(during)
    );
    assert!(
        during < before + OVERHEAD,
        "RSS {} with 1000 announced frames open (before: {})",
        mib(during),
        mib(before)
    );
    drop(peers);
    still_served(server.addr);
}

/// Frames that arrive (all but their last byte) hold at most the budget: with
/// `queued.max.request.bytes` at 48 MiB, two of eight 24 MiB frames are read at a time and the
/// others wait, unread. When the peers leave, the memory goes back to the system at once.
#[test]
fn frames_wait_for_the_budget_and_their_memory_comes_back() {
    let (server, budget) = start(
        "hostile-budget",
        &[
            "--max-request-bytes",
            "25165824",
            "--queued-max-request-bytes",
            "50331648",
        ],
    );
    still_served(server.addr);
    let (before, _) = memory(&server);
    let size = 24 * MIB as usize;
    let mut frame = vec![0u8; size + 4 - 1];
    frame[..4].copy_from_slice(&(size as i32).to_be_bytes());
    let frame = std::sync::Arc::new(frame);
    let mut ends = Vec::new();
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let mut s = connect(server.addr);
            ends.push(s.try_clone().unwrap());
            let frame = std::sync::Arc::clone(&frame);
            // Blocks once the server stops reading; ends when the test shuts the socket down.
            std::thread::spawn(move || {
                let _ = s.write_all(&frame);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = settled(&server, Duration::from_secs(5));
    let (_, peak) = memory(&server);
    eprintln!(
        "8 × 24 MiB frames, budget {}: RSS {} before, {} while they wait, peak {}",
        mib(budget),
        mib(before),
        mib(during),
        mib(peak)
    );
    assert!(
        peak < before + budget + OVERHEAD,
        "peak RSS {} with a {} budget (before: {})",
        mib(peak),
        mib(budget),
        mib(before)
    );
    let closed = Instant::now();
    for end in &ends {
        let _ = end.shutdown(std::net::Shutdown::Both);
    }
    for sender in senders {
        sender.join().expect("a sender");
    }
    drop(ends);
    // A large frame is read into an anonymous map, unmapped as the frame is dropped: the memory
    // goes back to the system at once, without waiting for the allocator's next use (the server
    // is asked nothing meanwhile), down to the fixed overhead it keeps once it has read a frame.
    let returned = |after: u64| after < before + OVERHEAD / 2 && during - after > 40 * MIB;
    let mut after = memory(&server).0;
    while !returned(after) && closed.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        after = memory(&server).0;
    }
    eprintln!(
        "after the peers left: RSS {} ({} ms)",
        mib(after),
        closed.elapsed().as_millis()
    );
    assert!(
        returned(after),
        "RSS {} 2 s after the peers left (before: {}, while they waited: {})",
        mib(after),
        mib(before),
        mib(during)
    );
    still_served(server.addr);
}

/// An AlterClientQuotas v1 body of `n` empty entries (3 bytes each: no entity, no ops, no tagged
/// fields), then validate-only false.
fn empty_entries(n: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(n * 3 + 8);
    uvarint(&mut body, n as u32 + 1);
    for _ in 0..n {
        body.extend_from_slice(&[1, 1, 0]);
    }
    body.extend_from_slice(&[0, 0]);
    body
}

/// Four `User:ANONYMOUS` clients at once each send an 8 MiB AlterClientQuotas of empty entries,
/// which `User:ANONYMOUS` may not make. Kafka's answer is every entry as sent with
/// `CLUSTER_AUTHORIZATION_FAILED` (about 95 MB each); it is made from the request's bytes as it
/// is written, and the entries are never decoded. With the budget at 18 MiB, two requests are
/// read at a time; the server holds those and no more.
#[test]
fn refused_alterations_cost_their_bytes() {
    let (server, budget) = start(
        "hostile-refused",
        &[
            "--max-request-bytes",
            "9437184",
            "--queued-max-request-bytes",
            "18874368",
            // The clients waiting for the budget are unproven until their request is read; on a
            // loaded machine that can take longer than the default 10 s grace, which this test
            // is not about.
            "--override",
            "kquota.connections.grace.ms=120000",
        ],
    );
    still_served(server.addr);
    let (before, _) = memory(&server);
    let n = (8 * MIB as usize - 16) / 3;
    let frame = std::sync::Arc::new(request(49, 1, 2, &empty_entries(n)));
    let started = Instant::now();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let frame = std::sync::Arc::clone(&frame);
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut s = connect(addr);
                s.write_all(&frame).unwrap();
                read_response(&mut s, 64)
            })
        })
        .collect();
    let mut peak_during = 0;
    while clients.iter().any(|c| !c.is_finished()) {
        peak_during = peak_during.max(memory(&server).0);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, peak) = memory(&server);
    // The answer: correlation id 7, header tags, throttle 0, n entries, each error 31 with
    // Kafka's message and the empty entity as sent.
    let message = b"Cluster authorization failed.";
    let mut entry = vec![0, 31, message.len() as u8 + 1];
    entry.extend_from_slice(message);
    entry.extend_from_slice(&[1, 0]);
    let mut head = vec![0, 0, 0, 7, 0, 0, 0, 0, 0];
    uvarint(&mut head, n as u32 + 1);
    for client in clients {
        let (size, first) = client.join().expect("a client");
        assert_eq!(size, head.len() + n * entry.len() + 1, "the answer's size");
        assert_eq!(&first[..head.len()], &head[..], "the answer's head");
        assert_eq!(&first[head.len()..head.len() + entry.len()], &entry[..]);
    }
    eprintln!(
        "4 × 8 MiB refused alterations ({n} entries, {} answers each), budget {}: RSS {} \
         before, {} at most while answering, peak {}; {} ms",
        mib((head.len() + n * entry.len() + 1) as u64),
        mib(budget),
        mib(before),
        mib(peak_during),
        mib(peak),
        started.elapsed().as_millis()
    );
    assert!(
        peak < before + budget + OVERHEAD,
        "peak RSS {} for refused alterations with a {} budget (before: {})",
        mib(peak),
        mib(budget),
        mib(before)
    );
    still_served(server.addr);
}

/// A Metadata v12 request (what Kafka 4 clients send) naming a million topics, the last name
/// twice. Kafka answers each distinct name with `UNKNOWN_TOPIC_OR_PARTITION`; so does kquotad,
/// from the request's bytes as the answer is written: the topics are never decoded, and finding
/// the repeats costs 4 bytes per topic while it runs (a sort) and a bit per request byte.
#[test]
fn a_metadata_request_for_a_million_topics_costs_its_bytes() {
    let (server, budget) = start(
        "hostile-metadata",
        &[
            "--max-request-bytes",
            "33554432",
            "--queued-max-request-bytes",
            "33554432",
        ],
    );
    still_served(server.addr);
    let (before, _) = memory(&server);
    let topics = 1_000_000usize;
    let mut body = Vec::with_capacity((topics + 1) * 26 + 8);
    uvarint(&mut body, topics as u32 + 2);
    for i in (0..topics).chain([topics - 1]) {
        body.extend_from_slice(&[0; 16]); // no topic id
        body.push(9); // a compact string of 8 bytes
        body.extend_from_slice(format!("t{i:07}").as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&[0, 0, 0]); // no auto-creation, no operations, no tags
    let frame = request(3, 12, 2, &body);
    drop(body);
    let started = Instant::now();
    let mut s = connect(server.addr);
    s.write_all(&frame).unwrap();
    drop(frame);
    let (size, head) = read_response(&mut s, 4096);
    let elapsed = started.elapsed();
    let (_, peak) = memory(&server);
    // Correlation id, header tags, throttle, one broker, the cluster id, the controller; then
    // the topics' count and the first topic.
    let mut r = &head[..];
    let mut take = |n: usize| {
        let (a, b) = r.split_at(n);
        r = b;
        a.to_vec()
    };
    assert_eq!(take(9), [0, 0, 0, 7, 0, 0, 0, 0, 0]);
    assert_eq!(take(1), [2], "one broker");
    take(4); // node id
    let host = take(1)[0] as usize - 1;
    take(host + 4 + 1 + 1); // host, port, null rack, tags
    let cluster = take(1)[0] as usize - 1;
    take(cluster + 4); // cluster id, controller id
    let mut count = 0u64;
    for shift in (0..35).step_by(7) {
        let b = take(1)[0];
        count |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
    }
    assert_eq!(count - 1, topics as u64, "one answer per distinct name");
    let mut first = vec![0, 3, 9];
    first.extend_from_slice(b"t0000000");
    assert_eq!(
        take(first.len()),
        first,
        "UNKNOWN_TOPIC_OR_PARTITION for t0000000"
    );
    let topic = 2 + 9 + 16 + 1 + 1 + 4 + 1;
    assert_eq!(
        size,
        head.len() - r.len() - first.len() + topics * topic + 1
    );
    eprintln!(
        "Metadata v12 naming {topics} topics ({} request, {} answer), budget {}: RSS {} before, \
         peak {}; {} ms",
        mib(((topics + 1) * 26) as u64),
        mib(size as u64),
        mib(budget),
        mib(before),
        mib(peak),
        elapsed.as_millis()
    );
    assert!(
        peak < before + budget + OVERHEAD,
        "peak RSS {} for a million topics with a {} budget (before: {})",
        mib(peak),
        mib(budget),
        mib(before)
    );
    still_served(server.addr);
}

/// `User:ANONYMOUS` may not describe quotas: an 8 MiB DescribeClientQuotas of two million empty
/// filter components is refused at the top level, as Kafka refuses it, without being decoded.
#[test]
fn a_refused_describe_costs_its_bytes() {
    let (server, budget) = start(
        "hostile-describe",
        &[
            "--max-request-bytes",
            "9437184",
            "--queued-max-request-bytes",
            "9437184",
        ],
    );
    still_served(server.addr);
    let (before, _) = memory(&server);
    let n = (8 * MIB as usize - 16) / 4;
    let mut body = Vec::with_capacity(n * 4 + 8);
    uvarint(&mut body, n as u32 + 1);
    for _ in 0..n {
        // An empty type, MATCH_TYPE_SPECIFIED, a null match, no tagged fields.
        body.extend_from_slice(&[1, 2, 0, 0]);
    }
    body.extend_from_slice(&[0, 0]);
    let started = Instant::now();
    let mut s = connect(server.addr);
    s.write_all(&request(48, 1, 2, &body)).unwrap();
    let (_, head) = read_response(&mut s, 64);
    let elapsed = started.elapsed();
    let (_, peak) = memory(&server);
    // Correlation id, header tags, throttle 0, CLUSTER_AUTHORIZATION_FAILED.
    assert_eq!(&head[..11], &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 31]);
    eprintln!(
        "8 MiB refused DescribeClientQuotas ({n} components), budget {}: RSS {} before, peak {}; \
         {} ms",
        mib(budget),
        mib(before),
        mib(peak),
        elapsed.as_millis()
    );
    assert!(
        peak < before + budget + OVERHEAD,
        "peak RSS {} for a refused describe with a {} budget (before: {})",
        mib(peak),
        mib(budget),
        mib(before)
    );
    still_served(server.addr);
}
